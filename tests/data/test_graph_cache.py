"""Graphs computed once for a frozen predictor (glomo_tf.data.graph_cache) against the online path.

The independent check throughout is the online path itself: the predictor run on each sentence
alone or on each batch, and a classifier trained on token ids with the predictor inside.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GraphPredictor
from glomo_tf.data import graph_cache
from glomo_tf.data.batching import bucketed_training_batches, length_sorted_batches
from glomo_tf.models import GraphFedModel, build_classifier
from glomo_tf.models.graph_fed import _transfer_layers

V = 40


def make_predictor(seed=3):
    keras.utils.set_random_seed(seed)
    predictor = GraphPredictor(V, hidden_dim=8, num_layers=2, num_heads=2, conv_layers=1,
                               normalization="entmax15")
    predictor.build((None, None))
    return predictor


def random_ids(rng, count=37, longest=9):
    lengths = rng.integers(1, longest + 1, count)
    ids = np.zeros((count, longest), "int32")
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(1, V, n)
    return ids


def np_top_k(graphs, k):
    """Each row's ``k`` largest weights, ties to the lower position, empty slots (0, 0)."""
    shape = graphs.shape[:-1] + (k,)
    indices, weights = np.zeros(shape, "int32"), np.zeros(shape, "float32")
    for idx in np.ndindex(graphs.shape[:-1]):
        row = graphs[idx]
        for slot, s in enumerate(sorted(range(len(row)), key=lambda s: (-row[s], s))[:k]):
            if row[s] > 0:
                indices[idx + (slot,)], weights[idx + (slot,)] = s, row[s]
    return indices, weights


@pytest.mark.parametrize("top_k", [None, 2])
def test_cache_holds_each_sentences_graphs_computed_alone(rng, top_k):
    predictor = make_predictor()
    ids = random_ids(rng)
    cache = graph_cache.compute_graphs(predictor, ids, top_k=top_k, batch_size=8)
    assert len(cache) == len(ids) and cache.k == top_k
    support = 0
    for i, row in enumerate(ids):
        n = max(1, int((row != 0).sum()))
        alone = predictor(row[None, :n], training=False)["graphs"].numpy()[0]  # [2, L, K, n, n]
        support = max(support, int((alone > 0).sum(-1).max()))
        if top_k is None:
            np.testing.assert_allclose(cache.sentence(i), alone, rtol=1e-5, atol=1e-6)
        else:
            indices, weights = cache.sentence(i)
            expected_indices, expected_weights = np_top_k(alone, top_k)
            np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
            real = expected_weights > 1e-6  # (near-)ties at zero may order differently
            np.testing.assert_array_equal(indices[real], expected_indices[real])
    assert cache.support == support and cache.exact == (top_k is None or support <= top_k)
    assert support > 2  # so the top-2 cache is a real truncation


def test_cache_holds_the_sharpened_graphs(rng):
    """graph_temperature: each sentence's graphs to the power 1/temperature, renormalised per
    row (NumPy), as GlomoTransfer(graph_temperature=...) computes them online."""
    predictor = make_predictor()
    ids = random_ids(rng, count=9)
    cache = graph_cache.compute_graphs(predictor, ids, batch_size=4, graph_temperature=2.0)
    changed = 0
    for i, row in enumerate(ids):
        n = max(1, int((row != 0).sum()))
        alone = predictor(row[None, :n], training=False)["graphs"].numpy()[0].astype("float64")
        root = np.sqrt(alone)
        sums = root.sum(-1, keepdims=True)
        expected = np.where(sums > 0, root / np.where(sums > 0, sums, 1.0), 0.0)
        np.testing.assert_allclose(cache.sentence(i), expected, rtol=1e-5, atol=1e-6)
        changed += not np.allclose(expected, alone)
    assert changed  # some rows have several sources, so the check is not trivial


def np_candidates(graphs):
    """A sentence's packed candidate matrices by NumPy: the heads of every layer, then the chains
    ``Lambda^l = G^l Lambda^{l-1}`` of layers 2..L (``Lambda^1`` is the first layer's heads),
    rows first, the two directions (apart: forward below the diagonal, backward above) added:
    ``[n, C, n]`` from ``[2, L, K, n, n]``."""
    chains = [graphs[:, 0]]
    for layer in range(1, graphs.shape[1]):
        chains.append(np.einsum("zkts,zksu->zktu", graphs[:, layer], chains[-1]))
    groups = [graphs[:, l, k] for l in range(graphs.shape[1]) for k in range(graphs.shape[2])]
    groups += [c[:, k] for c in chains[1:] for k in range(graphs.shape[2])]
    both = np.stack(groups, axis=1).transpose(0, 2, 1, 3)  # [2, n, C, n]
    below = np.tril(np.ones((both.shape[1],) * 2), -1)[:, None]  # [t, 1, s]: s < t
    assert not (both[0] * (1 - below)).any()
    assert not (both[1] * (1 - below.transpose(2, 1, 0))).any()
    return both[0] + both[1]


def test_candidates_cache_holds_each_sentences_candidates_and_a_subset_keeps_them(rng):
    predictor = make_predictor()
    ids = random_ids(rng)
    cache = graph_cache.compute_graphs(predictor, ids, batch_size=8, candidates=True)
    plain = graph_cache.compute_graphs(predictor, ids, batch_size=8)
    assert cache.num_candidates == 6  # 2 layers x 2 heads, and the products of layer 2
    assert cache.nbytes == cache.candidates.nbytes  # the graphs are not stored twice
    assert 4 * cache.candidates.size == 3 * plain.weights.size  # both directions in one matrix
    for i in range(len(ids)):
        np.testing.assert_array_equal(cache.sentence(i), plain.sentence(i))
        np.testing.assert_allclose(cache.sentence_candidates(i), np_candidates(cache.sentence(i)),
                                   rtol=1e-5, atol=1e-7)
    part = cache.subset([5, 2, 30])
    for j, i in enumerate([5, 2, 30]):
        np.testing.assert_array_equal(part.sentence_candidates(j), cache.sentence_candidates(i))
    batch = graph_cache.batch_of(cache, [5, 2], ids.shape[1])
    assert set(batch) == {"packed_candidates"}
    packed = batch["packed_candidates"]
    n = cache.lengths[2]
    np.testing.assert_array_equal(packed[1, :n, :, :n], cache.sentence_candidates(2))
    assert not packed[1, n:].any() and not packed[1, ..., n:].any()
    singles = graph_cache.compute_graphs(predictor, ids[:3], candidates=True,
                                         include_products=False)
    assert singles.num_candidates == 4
    np.testing.assert_allclose(singles.sentence_candidates(1),
                               np_candidates(plain.sentence(1))[:, :4], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="holds no candidate matrices"):
        plain.sentence_candidates(0)
    with pytest.raises(ValueError, match="top_k=None"):
        graph_cache.compute_graphs(predictor, ids, top_k=2, candidates=True)


@pytest.mark.parametrize("variant", ["glomo_embeddings", "glomo_rnn"])
@pytest.mark.parametrize("propagation", ["explicit", "chained"])
def test_fed_candidates_give_the_online_outputs_and_gradients(rng, variant, propagation):
    predictor = make_predictor()
    model = build_classifier(V, 3, variant, graph_predictor=predictor, embedding_dim=8,
                             rnn_units=4, attention_heads=2, dropout=0.0)
    for layer in _transfer_layers(model):
        layer.mixture.propagation = propagation
    ids = random_ids(rng, count=6)
    fed = GraphFedModel(model)
    cache = graph_cache.compute_graphs(predictor, ids, candidates=True)
    graphs = graph_cache.batch_of(cache, range(6), ids.shape[1])
    labels = tf.constant(rng.integers(0, 3, 6))

    def loss_and_grads(call):
        with tf.GradientTape() as tape:
            loss = keras.losses.sparse_categorical_crossentropy(labels, call())
        return loss, tape.gradient(loss, model.trainable_weights)

    online, online_grads = loss_and_grads(lambda: model(ids, training=True))
    cached, cached_grads = loss_and_grads(lambda: fed((ids, graphs), training=True))
    np.testing.assert_allclose(cached.numpy(), online.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(cached_grads, online_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(),
                                   tf.convert_to_tensor(b).numpy(), rtol=1e-4, atol=1e-6)


def test_training_batches_are_the_online_batches_with_their_graphs(rng):
    """Same shuffles, buckets and batches as bucketed_training_batches, two epochs running, and
    each batch's graphs equal the predictor's graphs of that batch."""
    predictor = make_predictor()
    ids = random_ids(rng)
    labels = rng.integers(0, 2, len(ids))
    dense = graph_cache.compute_graphs(predictor, ids)
    top = graph_cache.compute_graphs(predictor, ids, top_k=3)
    with_candidates = graph_cache.compute_graphs(predictor, ids, candidates=True)
    online = bucketed_training_batches(ids, labels, 6, seed=4)
    cached, cached_top, cached_candidates = (
        graph_cache.cached_training_batches(ids, labels, 6, 4, c)
        for c in (dense, top, with_candidates))
    assert int(cached.cardinality()) == int(online.cardinality())
    for _ in range(2):  # the second epoch reshuffles alike
        for (x, y), ((cx, graphs), cy), ((tx, indices, weights), _), ((px, fed), _) in zip(
                online, cached, cached_top, cached_candidates):
            np.testing.assert_array_equal(px.numpy(), x.numpy())
            for row in range(len(x)):
                n = max(1, int((x[row].numpy() != 0).sum()))
                np.testing.assert_allclose(fed["packed_candidates"][row, :n, :, :n].numpy(),
                                           np_candidates(graphs[row, ..., :n, :n].numpy()),
                                           rtol=1e-5, atol=1e-7)
            np.testing.assert_array_equal(cx.numpy(), x.numpy())
            np.testing.assert_array_equal(tx.numpy(), x.numpy())
            np.testing.assert_array_equal(cy.numpy(), y.numpy())
            expected = predictor(x, training=False)["graphs"].numpy()
            # Padded receivers are cut from the cache (the layers zero their outputs anyway);
            # the online graphs give them weights over the real sources.
            expected *= (x.numpy() != 0)[:, None, None, None, :, None]
            np.testing.assert_allclose(graphs.numpy(), expected, rtol=1e-5, atol=1e-6)
            expected_indices, expected_weights = np_top_k(expected, 3)
            np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-5, atol=1e-6)
            assert indices.dtype == tf.int32


@pytest.mark.parametrize("variant", ["glomo_embeddings", "glomo_rnn"])
def test_fed_classifier_gives_the_online_outputs_and_gradients(rng, variant):
    predictor = make_predictor()
    model = build_classifier(V, 3, variant, graph_predictor=predictor, embedding_dim=8,
                             rnn_units=4, attention_heads=2, dropout=0.0)
    ids = random_ids(rng, count=6)
    fed = GraphFedModel(model)
    graphs = graph_cache.batch_of(graph_cache.compute_graphs(predictor, ids), range(6),
                                  ids.shape[1])
    labels = tf.constant(rng.integers(0, 3, 6))

    def loss_and_grads(call):
        with tf.GradientTape() as tape:
            probabilities = call()
            loss = keras.losses.sparse_categorical_crossentropy(labels, probabilities)
        return probabilities, tape.gradient(loss, model.trainable_weights)

    online, online_grads = loss_and_grads(lambda: model(ids, training=True))
    cached, cached_grads = loss_and_grads(lambda: fed((ids, graphs), training=True))
    np.testing.assert_allclose(cached.numpy(), online.numpy(), rtol=1e-5, atol=1e-6)
    assert {id(w) for w in fed.trainable_weights} == {id(w) for w in model.trainable_weights}
    for a, b in zip(cached_grads, online_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(),
                                   tf.convert_to_tensor(b).numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("candidates", [False, True])
def test_a_bfloat16_cache_holds_the_predictors_own_graphs_and_feeds_them_uncast(rng, candidates):
    from glomo_tf.precision import precision_scope

    with precision_scope("mixed_bfloat16"):
        predictor = make_predictor()
        model = build_classifier(V, 3, "glomo_embeddings", graph_predictor=predictor,
                                 embedding_dim=8, rnn_units=4, attention_heads=2, dropout=0.0)
    ids = random_ids(rng, count=6)
    cache = graph_cache.compute_graphs(predictor, ids, candidates=candidates)
    stored = cache.candidates if candidates else cache.weights
    assert stored.dtype == tf.bfloat16.as_numpy_dtype  # the predictor's compute dtype
    for i in range(len(ids)):  # bit for bit the graphs it computes for each sentence alone
        alone = predictor(ids[i:i + 1, :cache.lengths[i]], training=False)["graphs"][0]
        assert alone.dtype == tf.bfloat16
        np.testing.assert_array_equal(np.float32(cache.sentence(i)), np.float32(alone))
    fed = GraphFedModel(model)
    graphs = graph_cache.batch_of(cache, range(6), ids.shape[1])
    cached = fed((ids, graphs), training=False)
    assert [x.dtype for x in fed.fed_model.inputs[1:]] == ["bfloat16"]  # no cast on the way
    np.testing.assert_allclose(np.float32(cached), np.float32(model(ids, training=False)),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("candidates,temperature", [(False, None), (True, None), (True, 0.5)])
def test_fit_from_the_cache_trains_the_weights_the_online_fit_trains(rng, candidates,
                                                                    temperature):
    """Two epochs of fit with validation, from the same initial weights: the cached path ends
    with the online path's weights and history (float round-off apart), from cached graphs or
    cached candidate matrices, with the graphs sharpened (graph_temperature) on both paths."""
    predictor = make_predictor()
    ids = random_ids(rng, count=30)
    labels = rng.integers(0, 2, len(ids))
    validation = length_sorted_batches(ids[:10], labels[:10], 5)[0]

    def fit(cached):
        keras.utils.set_random_seed(0)
        model = build_classifier(V, 2, "glomo_embeddings", graph_predictor=predictor,
                                 embedding_dim=8, rnn_units=4, attention_heads=2, dropout=0.2,
                                 graph_temperature=temperature)
        trained = GraphFedModel(model) if cached else model
        trained.compile(optimizer=keras.optimizers.Adam(0.01),
                        loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        if cached:
            data = graph_cache.cached_training_batches(
                ids, labels, 8, 1,
                graph_cache.compute_graphs(predictor, ids, candidates=candidates,
                                           graph_temperature=temperature))
            val = graph_cache.with_graphs(validation, predictor, candidates=candidates,
                                          graph_temperature=temperature)
        else:
            data, val = bucketed_training_batches(ids, labels, 8, 1), validation
        history = trained.fit(data, validation_data=val, epochs=2, verbose=0)
        return [w.numpy() for w in model.weights], history.history

    online_weights, online_history = fit(False)
    cached_weights, cached_history = fit(True)
    for key in ("loss", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(cached_history[key], online_history[key], rtol=1e-4)
    for a, b in zip(cached_weights, online_weights):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_with_graphs_runs_the_predictor_on_the_first_pass_only(rng):
    predictor = make_predictor()
    ids = random_ids(rng, count=12)
    data = length_sorted_batches(ids, np.zeros(12, "int64"), 5)[0]
    calls = []
    original = predictor.call
    predictor.call = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        staged = graph_cache.with_graphs(data, predictor, top_k=2)
        first = list(staged)
        traced = len(calls)
        second = list(staged)
    finally:
        del predictor.call
    assert len(calls) == traced  # the second pass read the cache
    assert int(staged.cardinality()) == 3
    for (x, fed), _ in graph_cache.with_graphs(data, predictor, candidates=True):
        graphs = predictor(x, training=False)["graphs"].numpy()
        for row in range(len(x)):
            np.testing.assert_allclose(fed["packed_candidates"][row].numpy(),
                                       np_candidates(graphs[row]), rtol=1e-5, atol=1e-7)
    for ((x, indices, weights), _), ((x2, _, weights2), _) in zip(first, second):
        expected_indices, expected_weights = np_top_k(
            predictor(x, training=False)["graphs"].numpy(), 2)
        np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(weights2.numpy(), weights.numpy())


def test_errors(rng):
    predictor = make_predictor()
    ids = random_ids(rng, count=5)
    with pytest.raises(ValueError, match="top_k must be None"):
        graph_cache.compute_graphs(predictor, ids, top_k=0)
    cache = graph_cache.compute_graphs(predictor, ids)
    with pytest.raises(ValueError, match="holds 5 sentences, the ids 4"):
        graph_cache.cached_training_batches(ids[:4], np.zeros(4), 2, 0, cache)
    baseline = build_classifier(V, 2, "baseline", embedding_dim=8, rnn_units=4,
                                attention_heads=2)
    with pytest.raises(ValueError, match="no GlomoTransfer layer"):
        GraphFedModel(baseline)
    tuned = build_classifier(V, 2, "glomo_embeddings", graph_predictor=predictor,
                             embedding_dim=8, rnn_units=4, attention_heads=2)
    tuned.get_layer("glomo_embeddings").fine_tune = True
    with pytest.raises(ValueError, match="fine_tune=True"):
        GraphFedModel(tuned)
    original = predictor.call  # graphs with weight on both sides cannot be packed
    predictor.call = lambda ids, training=False: {
        **original(ids, training=training),
        "graphs": tf.ones_like(original(ids, training=training)["graphs"])}
    try:
        with pytest.raises(ValueError, match="use candidates=False"):
            graph_cache.compute_graphs(predictor, ids, candidates=True)
    finally:
        del predictor.call


def test_module_example_runs():
    import doctest

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(graph_cache) if t.examples]
    assert tests
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 8 and result.failed == 0
