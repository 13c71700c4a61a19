"""The preset format's own parts (``glomo_tf.presets``), below the classes that save themselves
with it: the predictor's and the tokenizer's savers one at a time, the atomic write, the class
check of ``read_layer``, and ``save_preset``'s arguments in the wrong order. The whole round trip
and the built-in presets: ``tests/test_presets.py``."""

import json
import os

import keras
import numpy as np
import pytest

import glomo_tf
from glomo_tf import presets
from glomo_tf.data import Tokenizer

CORPUS = ["the cat sat on the mat", "a dog ran"]


@pytest.fixture(scope="module")
def parts():
    tokenizer = Tokenizer.build(CORPUS)
    keras.utils.set_random_seed(5)
    predictor = glomo_tf.GraphPredictor(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=8,
                                        num_layers=1, num_heads=2, conv_layers=1)
    ids = tokenizer.encode(CORPUS).to_tensor().numpy()
    predictor(ids)
    return predictor, tokenizer, ids


def test_the_predictor_and_the_tokenizer_save_themselves_one_after_the_other(parts, tmp_path):
    predictor, tokenizer, ids = parts
    path = predictor.save_to_preset(tmp_path / "preset", reference_ids=ids,
                                    metadata={"corpus": ["two lines"]})
    assert not presets.has_tokenizer(path) and sorted(os.listdir(path)) == [
        "README.md", "config.json", "metadata.json", "model.weights.h5", "reference_graphs.npz"]
    assert "GlomoTokenizer" not in (tmp_path / "preset" / "README.md").read_text()
    assert tokenizer.save_to_preset(path) == path
    # The card follows the metadata: the tokenizer saved, it says how to load it.
    assert "GlomoTokenizer.from_preset(" in (tmp_path / "preset" / "README.md").read_text()
    info = presets.preset_metadata(path)
    assert info["tokenizer"] == tokenizer.get_config() and info["corpus"] == ["two lines"]
    assert info["reference_graphs"] == {"sequences": len(CORPUS)}
    loaded, loaded_tokenizer = glomo_tf.load_preset(path)
    np.testing.assert_array_equal(loaded_tokenizer.encode(CORPUS).to_tensor().numpy(), ids)
    assert presets.check_preset(path) < 1e-6 and presets.check_preset(path, loaded) < 1e-6
    with pytest.raises(ValueError, match="save the tokenizer the predictor was trained with"):
        Tokenizer.build(["one"]).save_to_preset(path)


def test_a_failed_write_leaves_the_previous_preset_and_no_partial_directory(parts, tmp_path):
    predictor, _, _ = parts
    path = predictor.save_to_preset(tmp_path / "preset")
    before = json.loads((tmp_path / "preset" / "metadata.json").read_text())
    with pytest.raises(RuntimeError, match="interrupted"):
        with presets.writing(path) as partial:
            presets.write_metadata(partial, {"corpus": ["new"]})
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == ["preset"]
    assert json.loads((tmp_path / "preset" / "metadata.json").read_text()) == before


def test_read_layer_checks_the_class(parts, tmp_path):
    predictor, _, _ = parts
    path = predictor.save_to_preset(tmp_path / "preset")
    assert isinstance(presets.read_layer(path), glomo_tf.GraphPredictor)
    with pytest.raises(presets.PresetError, match="describes a GraphPredictor, not a "
                                                  "CoupledGraphPredictor"):
        glomo_tf.CoupledGraphPredictor.from_preset(path)


def test_save_preset_says_which_argument_comes_first(parts, tmp_path):
    predictor, tokenizer, _ = parts
    with pytest.raises(TypeError, match="the predictor comes first and the tokenizer second; "
                                        "got a Tokenizer first and a GraphPredictor second"):
        glomo_tf.save_preset(tokenizer, predictor, tmp_path / "swapped")
    with pytest.raises(TypeError, match="the tokenizer comes second"):
        glomo_tf.save_preset(predictor, tmp_path / "swapped", tokenizer)
    with pytest.raises(TypeError, match="needs a GraphPredictor"):
        glomo_tf.save_preset(keras.layers.Dense(2), None, tmp_path / "dense")
    with pytest.raises(ValueError, match="reference_texts need the tokenizer"):
        glomo_tf.save_preset(predictor, None, tmp_path / "texts", reference_texts=CORPUS)
    assert not os.listdir(tmp_path)
