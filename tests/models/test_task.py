"""GlomoClassifier: a classifier on raw strings, fitted, saved, loaded and exported."""

import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf.layers import GlomoTransfer, GraphPredictor
from glomo_tf.models.task import GlomoClassifier
from glomo_tf.preprocessing import GlomoTokenizer

WORDS = ["<pad>", "<unk>", "good", "bad", "film", "plot", "the", "a", "was", "very"]


def planted_texts(n, seed):
    """Label 1 when the text says "good", 0 when it says "bad"; filler words around it."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        label = int(rng.integers(2))
        words = list(rng.choice(WORDS[4:], size=int(rng.integers(2, 6))))
        words.insert(int(rng.integers(len(words) + 1)), "good" if label else "bad")
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def small(transfer_at="rnn", **kwargs):
    predictor = GraphPredictor(vocabulary_size=len(WORDS), hidden_dim=8, num_layers=2,
                               num_heads=2)
    return GlomoClassifier(GlomoTokenizer(WORDS), predictor if transfer_at else None,
                           num_classes=2, transfer_at=transfer_at, embedding_dim=8, rnn_units=8,
                           dropout=0.0, **kwargs)


@pytest.mark.parametrize("transfer_at", ["rnn", None])
def test_fits_python_strings_and_learns_a_planted_word(transfer_at):
    texts, labels = planted_texts(240, 0)
    test_texts, test_labels = planted_texts(100, 1)
    keras.utils.set_random_seed(0)
    classifier = small(transfer_at)
    transfers = [la for la in classifier.get_layer("classifier").layers
                 if isinstance(la, GlomoTransfer)]
    assert len(transfers) == (1 if transfer_at else 0)
    if transfers:
        assert not transfers[0].graph_predictor.trainable  # the predictor stays frozen
    classifier.fit(texts, labels, validation_data=(test_texts, test_labels), epochs=4,
                   batch_size=16, verbose=0)
    _, accuracy = classifier.evaluate(test_texts, test_labels, verbose=0)
    assert accuracy > 0.9, "the label is the word good or bad (chance: 0.5)"
    probabilities = classifier.predict(test_texts, verbose=0)
    assert probabilities.shape == (100, 2)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    dataset = tf.data.Dataset.from_tensor_slices((test_texts, test_labels)).batch(16)
    assert classifier.evaluate(dataset, verbose=0)[1] == pytest.approx(accuracy)


def test_a_saved_classifier_predicts_from_strings_in_a_fresh_interpreter(tmp_path):
    texts, labels = planted_texts(64, 2)
    classifier = small("embeddings")
    classifier.fit(texts, labels, epochs=1, verbose=0)
    classifier.save(tmp_path / "c.keras")
    expected = classifier.predict(texts[:5], verbose=0)
    np.save(tmp_path / "expected.npy", expected)
    script = (
        "import sys, numpy as np, keras, glomo_tf\n"
        f"model = keras.models.load_model({str(tmp_path / 'c.keras')!r})\n"
        f"texts = {texts[:5]!r}\n"
        "got = model.predict(texts, verbose=0)\n"
        f"expected = np.load({str(tmp_path / 'expected.npy')!r})\n"
        "assert type(model).__name__ == 'GlomoClassifier', type(model)\n"
        "assert np.abs(got - expected).max() < 1e-6, np.abs(got - expected).max()\n"
        "assert model.compiled and type(model.loss).__name__ == "
        "'SparseCategoricalCrossentropy'\n"  # compiled as saved
        "print('same')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert result.returncode == 0 and result.stdout.strip().endswith("same"), result.stderr[-2000:]


def test_the_exported_saved_model_serves_strings(tmp_path):
    classifier = small("rnn")
    texts = ["good film", "the plot was very bad"]
    expected = classifier.predict(texts, verbose=0)
    classifier.export(str(tmp_path / "saved"), verbose=False)
    saved = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_allclose(saved.serve(tf.constant(texts)).numpy(), expected, atol=1e-6)
    signature = saved.signatures["serving_default"]
    ((spec,),) = [tuple(signature.structured_input_signature[1].values())]
    assert spec.dtype == tf.string


def test_from_preset_reads_the_builtin_tokenizer_and_predictor():
    classifier = GlomoClassifier.from_preset("glomo_books_en", num_classes=3,
                                             sequence_length=12, embedding_dim=8, rnn_units=8)
    assert classifier.tokenizer.sequence_length == 12
    assert classifier.graph_predictor.vocabulary_size == classifier.tokenizer.vocabulary_size()
    assert classifier.predict(["A man is playing a guitar ."], verbose=0).shape == (1, 3)
    plain = GlomoClassifier.from_preset("glomo_books_en", num_classes=3, transfer_at=None,
                                        embedding_dim=8, rnn_units=8)
    assert plain.graph_predictor is None


def test_bad_arguments_say_what_to_change():
    tokenizer = GlomoTokenizer(WORDS)
    with pytest.raises(ValueError, match="transfer_at must be 'rnn', 'embeddings' or None"):
        GlomoClassifier(tokenizer, transfer_at="attention")
    with pytest.raises(ValueError, match="needs a graph_predictor"):
        GlomoClassifier(tokenizer, transfer_at="rnn")
    with pytest.raises(TypeError, match="tokenizer must be a GlomoTokenizer"):
        GlomoClassifier(WORDS, transfer_at=None)


def planted_pairs(n, seed):
    """Label 1 when the second text names a dog; the first text's animal is noise."""
    rng = np.random.default_rng(seed)
    firsts, seconds, labels = [], [], []
    for _ in range(n):
        a, b = rng.choice(["cat", "dog", "man"], size=2)
        firsts.append(f"the {a} runs")
        seconds.append(f"a {b} sat")
        labels.append(int(b == "dog"))
    return (firsts, seconds), labels


def test_the_pair_classifier_fits_pairs_of_strings_and_round_trips(tmp_path):
    from glomo_tf.models.task import GlomoPairClassifier

    words = ["<pad>", "<unk>", "the", "a", "cat", "dog", "man", "runs", "sat"]
    predictor = GraphPredictor(vocabulary_size=len(words), hidden_dim=8, num_layers=1,
                               num_heads=2)
    keras.utils.set_random_seed(0)
    pairs = GlomoPairClassifier(GlomoTokenizer(words), predictor, num_classes=2,
                                transfer_at="rnn", embedding_dim=8, rnn_units=8, dropout=0.0)
    x, y = planted_pairs(200, 0)
    test_x, test_y = planted_pairs(60, 1)
    pairs.fit(x, y, epochs=8, batch_size=16, verbose=0)
    accuracy = pairs.evaluate(test_x, test_y, verbose=0)[1]
    assert accuracy > 0.9, "the second text's animal decides (majority: 0.67)"
    pairs.save(tmp_path / "p.keras")
    loaded = keras.models.load_model(tmp_path / "p.keras")
    assert type(loaded).__name__ == "GlomoPairClassifier"
    np.testing.assert_allclose(loaded.predict(test_x, verbose=0), pairs.predict(test_x, verbose=0),
                               atol=1e-6)


def test_glomo_serve_answers_tf_servings_predict_on_strings(tmp_path):
    """The exported classifier under ``glomo serve``'s model server: REST ``predict`` with
    ``{"instances": ["text", ...]}`` gives the live model's probabilities."""
    import http.client
    import json

    from glomo_tf.serving import ServingClient
    from glomo_tf.serving.server import ModelServer

    classifier = small("rnn")
    texts = ["good film", "the plot was very bad", "a"]
    expected = classifier.predict(texts, verbose=0)
    classifier.export(str(tmp_path / "served" / "1"), verbose=False)
    with ModelServer(model_name="sentiment", model_base_path=str(tmp_path / "served"),
                     grpc_port=0, rest_port=0, file_system_poll_wait_seconds=0) as server:
        host, port = server.rest_url.split("//")[1].split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        connection.request("POST", "/v1/models/sentiment:predict",
                           body=json.dumps({"instances": texts}))
        response = connection.getresponse()
        status, doc = response.status, json.loads(response.read())
        connection.close()
        # The serving guide's client calls: the export's input is named "text".
        served = {protocol: ServingClient(url, model_name="sentiment", protocol=protocol,
                                          timeout=120).predict({"text": texts})
                  for protocol, url in (("rest", server.rest_url),
                                        ("grpc", server.grpc_target))}
    assert status == 200, doc
    np.testing.assert_allclose(np.array(doc["predictions"]), expected, atol=1e-5)
    for protocol, outputs in served.items():
        (probabilities,) = outputs.values()
        np.testing.assert_allclose(probabilities, expected, atol=1e-5, err_msg=protocol)
