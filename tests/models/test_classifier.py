"""The downstream classifier variants: shapes, masking, one fit step, a frozen predictor."""

import keras
import numpy as np
import pytest

from glomo_tf import GlomoTransfer, GraphPredictor, load_graph_predictor, save_graph_predictor
from glomo_tf.models.classifier import GOLD_VARIANTS, VARIANTS, build_classifier

VOCAB, CLASSES = 30, 3
SMALL = dict(embedding_dim=8, rnn_units=4, attention_heads=2, num_mixtures=2)


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    """A tiny GraphPredictor, saved and loaded back as a downstream user would."""
    keras.utils.set_random_seed(3)
    fresh = GraphPredictor(VOCAB, hidden_dim=8, num_layers=2, num_heads=2, conv_layers=1)
    fresh.build((None, None))
    path = str(tmp_path_factory.mktemp("pred") / "graph_predictor.keras")
    save_graph_predictor(fresh, path)
    return load_graph_predictor(path)


def _data(rng, batch=6, length=7):
    ids = rng.integers(2, VOCAB, size=(batch, length)).astype("int32")
    for row, n in enumerate(rng.integers(2, length + 1, size=batch)):
        ids[row, n:] = 0
    return ids, (np.arange(batch) % CLASSES).astype("int32")


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_builds_fits_and_keeps_the_predictor_frozen(variant, predictor, rng):
    model = build_classifier(VOCAB, CLASSES, variant, graph_predictor=predictor, **SMALL)
    ids, labels = _data(rng)
    inputs = ids
    if variant in GOLD_VARIANTS:  # each text a chain: every unit's parent the one before it
        from glomo_tf.data.gold_graphs import gold_graph_cache, tree_graphs
        from glomo_tf.data.graph_cache import batch_of

        lengths = (ids != 0).sum(1)
        cache = gold_graph_cache([tree_graphs(np.arange(n) - 1) for n in lengths])
        indices, weights = batch_of(cache, range(len(ids)), ids.shape[1])
        inputs = [ids, (np.eye(ids.shape[1])[indices] * weights[..., None]).sum(-2)]
    probabilities = np.asarray(model(inputs, training=False))
    assert probabilities.shape == (6, CLASSES)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    transfers = [layer for layer in model.layers if isinstance(layer, GlomoTransfer)]
    glomo = ("glomo_embeddings", "glomo_rnn", "uniform", "uniform_rnn", *GOLD_VARIANTS)
    assert len(transfers) == (1 if variant in glomo else 0)
    if variant in ("uniform", "uniform_rnn"):
        assert transfers[0].graph_mode == "uniform" and transfers[0].graph_predictor is None
    if variant in ("glomo_embeddings", "glomo_rnn"):
        assert transfers[0].graph_predictor is predictor
        predictor_ids = {id(w) for w in predictor.weights}
        assert not predictor_ids & {id(w) for w in model.trainable_weights}
    before = [np.array(w) for w in predictor.weights]
    trainable_before = [np.array(w) for w in model.trainable_weights]
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(inputs, labels, batch_size=6, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for old, new in zip(before, predictor.weights):  # frozen: batch-norm statistics included
        np.testing.assert_array_equal(old, np.array(new))
    changed = [not np.array_equal(old, np.array(new))
               for old, new in zip(trainable_before, model.trainable_weights)]
    assert all(changed), "every trainable weight of the classifier gets a gradient"


@pytest.mark.parametrize("variant", ["baseline", "glomo_rnn"])
def test_trailing_padding_does_not_change_the_prediction(variant, predictor, rng):
    model = build_classifier(VOCAB, CLASSES, variant, graph_predictor=predictor, **SMALL)
    ids, _ = _data(rng, batch=4, length=6)
    padded = np.concatenate([ids, np.zeros((4, 5), "int32")], axis=1)
    np.testing.assert_allclose(np.asarray(model(ids, training=False)),
                               np.asarray(model(padded, training=False)), atol=1e-5)


def test_glomo_transfer_widens_the_features_where_it_is_placed(predictor):
    embeddings = build_classifier(VOCAB, 2, "glomo_embeddings", graph_predictor=predictor, **SMALL)
    rnn = build_classifier(VOCAB, 2, "glomo_rnn", graph_predictor=predictor, **SMALL)
    # d + d * max(1, mixtures // 2): 8 -> 16 at the embeddings, 2 * 4 -> 16 at the BiGRU states.
    assert embeddings.get_layer("glomo_embeddings").output.shape[-1] == 16
    assert embeddings.get_layer("bigru").output.shape[-1] == 8
    assert rnn.get_layer("glomo_rnn").output.shape[-1] == 16
    # The uniform graphs at each place: width 6 -> 12 at embeddings of 6, 8 -> 16 at the states.
    narrow = dict(SMALL, embedding_dim=6)
    assert build_classifier(VOCAB, 2, "uniform", **narrow).get_layer(
        "uniform_graphs").output.shape[-1] == 12
    assert build_classifier(VOCAB, 2, "uniform_rnn", **narrow).get_layer(
        "uniform_graphs").output.shape[-1] == 16


def test_bad_arguments(predictor):
    with pytest.raises(ValueError, match="variant must be one of"):
        build_classifier(VOCAB, 2, "cnn")
    with pytest.raises(ValueError, match="needs a pretrained GraphPredictor"):
        build_classifier(VOCAB, 2, "glomo_rnn")
    with pytest.raises(ValueError, match="vocabulary_size=31 differs"):
        build_classifier(VOCAB + 1, 2, "glomo_embeddings", graph_predictor=predictor)
    with pytest.raises(ValueError, match="num_classes"):
        build_classifier(VOCAB, 1, "baseline")


@pytest.mark.parametrize("variant", ["glomo_embeddings", "glomo_rnn", "uniform"])
def test_transfer_dropout_reaches_the_fused_input_only_in_training(variant, predictor, rng):
    ids, _ = _data(rng, batch=4, length=6)
    settings = dict(SMALL, dropout=0.0)  # the model's other dropout layers off
    quiet = build_classifier(VOCAB, CLASSES, variant, graph_predictor=predictor, **settings)
    noisy = build_classifier(VOCAB, CLASSES, variant, graph_predictor=predictor,
                             transfer_dropout=0.5, **settings)
    transfer = [layer for layer in noisy.layers if isinstance(layer, GlomoTransfer)]
    assert [layer.dropout for layer in transfer] == [0.5]
    noisy.set_weights(quiet.get_weights())
    np.testing.assert_allclose(np.asarray(quiet(ids, training=True)),
                               np.asarray(quiet(ids, training=True)), atol=1e-6)
    np.testing.assert_allclose(np.asarray(noisy(ids, training=False)),
                               np.asarray(quiet(ids, training=False)), atol=1e-6)
    assert not np.allclose(np.asarray(noisy(ids, training=True)),
                           np.asarray(noisy(ids, training=True)), atol=1e-6)
