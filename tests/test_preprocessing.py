"""GlomoTokenizer: strings to ids as a Keras layer, checked against a Python lookup."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf.preprocessing import GlomoTokenizer

UNITS = ["<pad>", "<unk>", "the", "cat", "sat", "on", "mat", "."]
TEXTS = ["the cat sat on the mat .", "a cat sat", "the"]


def python_ids(text, length=None):
    """Whitespace split and a dict lookup, unknown units -> 1."""
    index = {unit: i for i, unit in enumerate(UNITS)}
    ids = [index.get(word, 1) for word in text.split()]
    return ids if length is None else (ids + [0] * length)[:length]


def test_strings_map_to_the_ids_of_a_python_lookup_padded_or_cut():
    free = GlomoTokenizer(UNITS)(TEXTS).numpy()
    longest = max(len(t.split()) for t in TEXTS)
    assert free.shape == (3, longest) and free.dtype == np.int32
    np.testing.assert_array_equal(free, [python_ids(t, longest) for t in TEXTS])
    cut = GlomoTokenizer(UNITS, sequence_length=4)(TEXTS).numpy()
    np.testing.assert_array_equal(cut, [python_ids(t, 4) for t in TEXTS])
    tokenizer = GlomoTokenizer(UNITS)
    assert tokenizer.vocabulary_size() == len(UNITS) and tokenizer.get_vocabulary() == UNITS
    assert (tokenizer.token_to_id("mat"), tokenizer.token_to_id("dog")) == (6, 1)
    assert tokenizer.id_to_token(3) == "cat"
    assert tokenizer.detokenize(cut).numpy().tolist() == [b"the cat sat on", b"<unk> cat sat",
                                                          b"the"]


def test_in_tf_data_and_with_the_saved_settings_of_a_tokenizer(tmp_path):
    from glomo_tf.data.vocabulary import Tokenizer

    saved = Tokenizer.build(["The Cat sat", "the cat ran"], lowercase=True).save(tmp_path / "t")
    layer = GlomoTokenizer(saved, sequence_length=3)
    assert layer.tokenizer.lowercase  # tokenizer.json's settings
    dataset = tf.data.Dataset.from_tensor_slices(["THE CAT", "cat ran sat"]).batch(2).map(layer)
    (ids,) = [batch.numpy() for batch in dataset]
    units = layer.get_vocabulary()
    assert [[units[i] for i in row if i] for row in ids] == [["the", "cat"],
                                                             ["cat", "ran", "sat"]]


def _string_model(tokenizer):
    text = keras.Input((), dtype="string", name="text")
    ids = tokenizer(text)
    h = keras.layers.Embedding(tokenizer.vocabulary_size(), 4, mask_zero=True)(ids)
    return keras.Model(text, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h)))


def test_a_model_on_strings_saves_loads_and_exports_with_its_vocabulary(tmp_path):
    model = _string_model(GlomoTokenizer(UNITS, sequence_length=6))
    texts = tf.constant(TEXTS)
    expected = model.predict(texts, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    (layer,) = [la for la in loaded.layers if isinstance(la, GlomoTokenizer)]
    assert layer.get_vocabulary() == UNITS and layer.sequence_length == 6
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), expected, atol=1e-6)
    model.export(str(tmp_path / "saved"), verbose=False)
    saved = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_allclose(saved.serve(texts).numpy(), expected, atol=1e-6)


def test_bad_settings_are_refused_with_one_line():
    with pytest.raises(ValueError, match="sequence_length must be a positive int"):
        GlomoTokenizer(UNITS, sequence_length=0)
    with pytest.raises(TypeError, match="vocabulary must be strings"):
        GlomoTokenizer([1, 2, 3])
    with pytest.raises(ValueError, match="no vocabulary yet"):
        GlomoTokenizer()(["the cat"])


def test_the_builtin_preset_tokenizer_as_a_layer():
    from glomo_tf.data.vocabulary import Tokenizer

    layer = GlomoTokenizer.from_preset("glomo_books_en", sequence_length=5)
    reference = Tokenizer.from_preset("glomo_books_en").encode(["The cat sat ."], max_length=5)
    np.testing.assert_array_equal(layer(["The cat sat ."]).numpy(), reference.numpy())
    assert layer.name.startswith("glomo_tokenizer")


def test_saved_into_a_preset_beside_its_predictor_and_read_back(tmp_path):
    from glomo_tf.layers import GraphPredictor

    predictor = GraphPredictor(vocabulary_size=len(UNITS), hidden_dim=8, num_layers=1,
                               num_heads=2)
    predictor(np.array([[2, 3, 4]], "int32"))
    path = predictor.save_to_preset(tmp_path / "preset")
    GlomoTokenizer(UNITS, lowercase=True).save_to_preset(path)
    layer = GlomoTokenizer.from_preset(path, sequence_length=3)
    assert layer.get_vocabulary() == UNITS and layer.tokenizer.lowercase
    np.testing.assert_array_equal(layer(["The CAT"]).numpy(), [[2, 3, 0]])
