"""GlomoTransfer: graphs from a (frozen) predictor fused into downstream features (Sections 2.2-2.3).

Outputs are checked against a NumPy computation of the mixture and the gated fusion
``[H ; W1 x * sigmoid(W2 x)]``, ``x = [H ; M_1 H ; ...]``, written from the equations.
"""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import glomo_tf
from glomo_tf import GlomoTransfer, GraphMixture, GraphPredictor
from glomo_tf.layers import graph_predictor
from layer_harness import MaskCheck, run_layer_test

V, P, L, K, T = 30, 8, 2, 2, 7  # vocabulary, predictor width, graph layers, heads, length
IDS = np.array([[3, 4, 5, 6, 7, 8, 9], [11, 12, 13, 14, 0, 0, 0], [21, 2, 17, 0, 0, 0, 0]],
               "int32")


def make_predictor(**kwargs):
    predictor = graph_predictor(V, P, num_layers=L, num_heads=K, conv_layers=1, **kwargs)
    predictor.build((None, None))
    return predictor


# ---------------------------------------------------------------------- NumPy reference
def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def random_graphs(rng, padding):
    """Random row-stochastic graphs respecting the direction and padding masks."""
    batch, length = padding.shape
    g = rng.uniform(0.1, 1.0, (batch, 2, L, K, length, length))
    ones = np.ones((length, length))
    g *= np.stack([np.tril(ones, -1), np.triu(ones, 1)])[None, :, None, None]
    g *= padding[:, None, None, None, None, :]
    sums = g.sum(-1, keepdims=True)
    return np.where(sums > 0, g / np.where(sums > 0, sums, 1.0), 0.0).astype("float32")


def numpy_uniform(padding):
    batch, length = padding.shape
    out = np.zeros((batch, 2, length, length))
    for b, z, t in itertools.product(range(batch), range(2), range(length)):
        sources = [s for s in range(length) if padding[b, s] and ((s < t) if z == 0 else (s > t))]
        out[b, z, t, sources] = 1.0 / max(len(sources), 1)
    return out


def numpy_mixed(features, graphs, padding, transfer):
    """``(M H)`` per direction and mixture, ``[B, T, 2, M, d]``, from the mixture's weights."""
    mix = {v.path.split("/")[-1]: v.numpy().astype("float64") for v in transfer.mixture.weights}
    scale = mix["scale"]
    batch, length, d = features.shape
    mixtures = scale.shape[1]
    out = np.zeros((batch, length, 2, mixtures, d))
    if transfer.graph_mode == "uniform":
        uniform = numpy_uniform(padding)
        for b, z, m in itertools.product(range(batch), range(2), range(mixtures)):
            out[b, :, z, m] = scale[z, m] * (uniform[b, z] @ features[b])
        return out
    for b, z in itertools.product(range(batch), range(2)):
        singles, products = [], []
        for l, k in itertools.product(range(graphs.shape[2]), range(graphs.shape[3])):
            singles.append(graphs[b, z, l, k])
            lam = graphs[b, z, 0, k]
            for j in range(1, l + 1):
                lam = graphs[b, z, j, k] @ lam
            products.append(lam)
        cands = singles + (products if transfer.include_products else [])
        propagated = np.stack([c @ features[b] for c in cands])  # [C, T, d]
        for m, t in itertools.product(range(mixtures), range(length)):
            logits = mix["weight_logits"][z, m]
            if transfer.conditioned:
                logits = logits + features[b, t] @ mix["weight_kernel"][:, z, m]
            w = softmax(logits)
            out[b, t, z, m] = scale[z, m] * np.tensordot(w, propagated[:, t], axes=1)
    return out


def numpy_transfer(features, graphs, padding, transfer):
    """``[H ; W1 x * sigmoid(W2 x)]`` with ``x = [H ; M_fw,1 H ; ... ; M_bw,M H]``, masked."""
    features = np.asarray(features, "float64")
    mixed = numpy_mixed(features, graphs, padding, transfer)
    parts = [features] + [mixed[:, :, z, m] for z in range(2)
                          for m in range(transfer.num_mixtures)]
    x = np.concatenate(parts, axis=-1)
    w1, b1 = transfer.value_dense.get_weights()
    w2, b2 = transfer.gate_dense.get_weights()
    gated = (x @ w1 + b1) * sigmoid(x @ w2 + b2)
    return np.concatenate([features, gated], axis=-1) * padding[:, :, None]


def randomize_transfer(transfer, rng):
    """Random non-zero mixture and fusion weights (the predictor is left alone)."""
    for layer in (transfer.mixture, transfer.value_dense, transfer.gate_dense):
        for v in layer.weights:
            v.assign(rng.normal(0.0, 0.7, v.shape).astype("float32"))


def randomize_batch_norm(predictor, rng):
    for mean, var in zip(predictor.encoder.moving_means, predictor.encoder.moving_variances):
        mean.assign(rng.normal(0.0, 0.2, mean.shape).astype("float32"))
        var.assign(rng.uniform(0.5, 2.0, var.shape).astype("float32"))


class MaskProbe(keras.layers.Layer):
    """Outputs the keras mask it receives as floats (-1 everywhere when it receives none)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x, mask=None):
        if mask is None:
            return -tf.ones(tf.shape(x)[:2])
        return tf.cast(mask, "float32")

    def compute_mask(self, x, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return input_shape[:2]


def functional_model(predictor, d=6, **kwargs):
    ids = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(V, d, mask_zero=True, name="embedding")
    transfer = GlomoTransfer(predictor, name="transfer", **kwargs)
    out = transfer([embedding(ids), ids])
    model = keras.Model(ids, [out, MaskProbe()(out)])
    return model, embedding, transfer


def predictor_graphs(predictor, ids=IDS):
    graphs = predictor(ids, training=False)["graphs"].numpy()
    assert np.count_nonzero(graphs) > 0  # the check below is not trivial
    return graphs


# ---------------------------------------------------------------------- forward
@pytest.mark.parametrize("num_mixtures,units,conditioned,include_products", [
    (2, None, True, True), (3, 5, False, False), (1, None, True, False)])
def test_functional_embedding_and_ids_matches_numpy(rng, num_mixtures, units, conditioned,
                                                    include_products):
    predictor = make_predictor()
    d = 6
    model, embedding, transfer = functional_model(
        predictor, d, num_mixtures=num_mixtures, units=units, conditioned=conditioned,
        include_products=include_products)
    randomize_transfer(transfer, rng)
    out, mask = (t.numpy() for t in model(IDS))
    expected_units = units or d * max(1, num_mixtures // 2)
    assert out.shape == (3, T, d + expected_units)
    assert transfer.compute_output_shape(((3, T, d), (3, T))) == (3, T, d + expected_units)
    padding = IDS != 0
    h = embedding.get_weights()[0][IDS]
    expected = numpy_transfer(h, predictor_graphs(predictor), padding, transfer)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    # Padded positions are zero and the next layer receives the mask.
    assert np.all(out[~padding] == 0) and np.all(np.abs(out[padding]).sum(-1) > 0)
    np.testing.assert_array_equal(mask, padding.astype("float32"))


def test_functional_on_bidirectional_gru_states(rng):
    predictor = make_predictor()
    ids = keras.Input((None,), dtype="int32")
    emb = keras.layers.Embedding(V, 6, mask_zero=True)(ids)
    states = keras.layers.Bidirectional(keras.layers.GRU(4, return_sequences=True))(emb)
    transfer = GlomoTransfer(predictor, num_mixtures=2)
    out = transfer([states, ids])
    model = keras.Model(ids, [out, MaskProbe()(out)])
    randomize_transfer(transfer, rng)
    h = keras.Model(ids, states)(IDS).numpy()
    got, mask = (t.numpy() for t in model(IDS))
    assert got.shape == (3, T, 8 + 8)
    expected = numpy_transfer(h, predictor_graphs(predictor), IDS != 0, transfer)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(mask, (IDS != 0).astype("float32"))


def test_sequential_on_token_ids_alone(rng):
    """In a Sequential model the features are the predictor's own embeddings; pooling is masked."""
    predictor = make_predictor()
    transfer = GlomoTransfer(predictor, num_mixtures=2)
    model = keras.Sequential([keras.Input((None,), dtype="int32"), transfer,
                              keras.layers.GlobalAveragePooling1D()])
    randomize_transfer(transfer, rng)
    padding = IDS != 0
    h = predictor.embeddings.numpy()[IDS]
    per_unit = numpy_transfer(h, predictor_graphs(predictor), padding, transfer)
    assert per_unit.shape == (3, T, P + P)
    expected = per_unit.sum(1) / padding.sum(1, keepdims=True)  # masked mean over real units
    np.testing.assert_allclose(model(IDS).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert transfer.compute_output_shape((None, T)) == (None, T, 2 * P)


class Tagger(keras.Model):
    def __init__(self, predictor, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(V, 6, mask_zero=True)
        self.transfer = GlomoTransfer(predictor, num_mixtures=2)
        self.classifier = keras.layers.Dense(3)

    def call(self, ids, training=None):
        h = self.embedding(ids)
        return self.classifier(self.transfer([h, ids], training=training))


def test_subclassed_model_matches_numpy_and_trains(rng):
    predictor = make_predictor()
    model = Tagger(predictor)
    model(IDS)
    randomize_transfer(model.transfer, rng)
    h = model.embedding.get_weights()[0][IDS]
    fused = numpy_transfer(h, predictor_graphs(predictor), IDS != 0, model.transfer)
    kernel, bias = model.classifier.get_weights()
    np.testing.assert_allclose(model(IDS).numpy(), fused @ kernel + bias, rtol=1e-4, atol=1e-5)
    before = [w.numpy().copy() for w in predictor.weights]
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    labels = rng.integers(0, 3, IDS.shape)
    history = model.fit(IDS, labels, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    for w, value in zip(predictor.weights, before):
        np.testing.assert_array_equal(w.numpy(), value)


def test_precomputed_graphs_input(rng):
    padding = IDS != 0
    graphs = random_graphs(rng, padding)
    ids = keras.Input((T,), dtype="int32")
    graphs_in = keras.Input((2, L, K, T, T))
    embedding = keras.layers.Embedding(V, 5, mask_zero=True)
    transfer = GlomoTransfer(num_mixtures=2, include_products=True)
    out = transfer([embedding(ids), graphs_in])
    model = keras.Model([ids, graphs_in], [out, MaskProbe()(out)])
    randomize_transfer(transfer, rng)
    got, mask = (t.numpy() for t in model([IDS, graphs]))
    expected = numpy_transfer(embedding.get_weights()[0][IDS], graphs, padding, transfer)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert np.all(got[~padding] == 0)
    np.testing.assert_array_equal(mask, padding.astype("float32"))


def test_uniform_graph_mode(rng):
    ids = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(V, 6, mask_zero=True)
    transfer = GlomoTransfer(graph_mode="uniform", num_mixtures=2)
    out = transfer([embedding(ids), ids])
    model = keras.Model(ids, out)
    assert [v.path.split("/")[-1] for v in transfer.mixture.weights] == ["scale"]
    randomize_transfer(transfer, rng)
    expected = numpy_transfer(embedding.get_weights()[0][IDS], None, IDS != 0, transfer)
    np.testing.assert_allclose(model(IDS).numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("graph_mode", ["learned", "uniform"])
def test_gradients_match_finite_differences_of_numpy(rng, graph_mode):
    """The gradients of the features and of every weight of the layer (the mixtures' scales,
    which the layer applies on its fusion kernel's rows, included) along random directions equal
    central differences of the NumPy transfer."""
    padding = IDS != 0
    graphs = random_graphs(rng, padding) if graph_mode == "learned" else None
    features = rng.normal(size=IDS.shape + (5,)).astype("float32")
    transfer = GlomoTransfer(num_mixtures=2, graph_mode=graph_mode)
    inputs = [tf.constant(features), tf.constant(graphs) if graphs is not None else
              tf.constant(IDS)]
    # zero at the padding, where the layer given graphs (no mask) leaves its output unmasked
    probe = rng.normal(size=transfer(inputs).shape) * padding[:, :, None]
    randomize_transfer(transfer, rng)
    with tf.GradientTape() as tape:
        tape.watch(inputs[0])
        loss = tf.reduce_sum(transfer(inputs) * tf.constant(probe, tf.float32))
    variables = transfer.trainable_weights
    assert {v.path.split("/")[-1] for v in variables} >= {"scale", "kernel", "bias"}
    grads = tape.gradient(loss, [inputs[0]] + variables)

    def numpy_loss(x):
        return float(np.sum(numpy_transfer(x, graphs, padding, transfer) * probe))

    eps = 1e-2
    direction = rng.normal(size=features.shape)
    expected = (numpy_loss(features + eps * direction)
                - numpy_loss(features - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(np.sum(grads[0].numpy() * direction), expected, rtol=2e-3)
    for variable, grad in zip(variables, grads[1:]):
        value = variable.numpy()
        direction = rng.normal(size=value.shape)
        losses = []
        for sign in (1, -1):
            variable.assign((value + sign * eps * direction).astype("float32"))
            losses.append(numpy_loss(features))
        variable.assign(value)
        np.testing.assert_allclose(np.sum(grad.numpy() * direction),
                                   (losses[0] - losses[1]) / (2 * eps), rtol=2e-3,
                                   err_msg=variable.path)


def numpy_top_k(graphs, k):
    """``(indices, weights, kept)``: each row's ``k`` largest weights (ties to the lower
    position; empty slots (0, 0)) and the dense graphs holding only those."""
    shape = graphs.shape[:-1] + (k,)
    indices, weights = np.zeros(shape, "int32"), np.zeros(shape, "float32")
    kept = np.zeros_like(graphs)
    for idx in np.ndindex(graphs.shape[:-1]):
        row = graphs[idx]
        for slot, s in enumerate(sorted(range(len(row)), key=lambda s: (-row[s], s))[:k]):
            if row[s] > 0:
                indices[idx + (slot,)], weights[idx + (slot,)] = s, row[s]
                kept[idx + (s,)] = row[s]
    return indices, weights, kept


@pytest.mark.parametrize("top_k", [2, T])
def test_top_k_layer_matches_numpy_on_the_kept_sources(rng, top_k):
    """top_k keeps each row's heaviest sources of the predictor's graphs: the NumPy transfer of
    the truncated graphs (of the graphs themselves when top_k covers the row)."""
    predictor = make_predictor()
    model, embedding, transfer = functional_model(predictor, 6, num_mixtures=2, top_k=top_k)
    randomize_transfer(transfer, rng)
    graphs = predictor_graphs(predictor)
    _, _, kept = numpy_top_k(graphs, top_k)
    if top_k == T:
        np.testing.assert_array_equal(kept, graphs)
    else:
        assert not np.allclose(kept, graphs)
    got = model(IDS)[0].numpy()
    expected = numpy_transfer(embedding.get_weights()[0][IDS], kept, IDS != 0, transfer)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert transfer.get_config()["top_k"] == top_k


@pytest.mark.parametrize("top_k", [None, 2])
def test_graph_temperature_sharpens_the_predictors_graphs_before_top_k(rng, top_k):
    """graph_temperature raises each row of the predictor's graphs to the power 1/temperature
    and renormalises it (then top_k keeps the heaviest): the NumPy transfer of those graphs."""
    predictor = make_predictor()
    model, embedding, transfer = functional_model(predictor, 6, num_mixtures=2, top_k=top_k,
                                                  graph_temperature=0.5)
    randomize_transfer(transfer, rng)
    graphs = predictor_graphs(predictor).astype("float64")
    squared = graphs ** 2  # the power 1 / 0.5 of every weight, renormalised per row
    sums = squared.sum(-1, keepdims=True)
    sharpened = np.where(sums > 0, squared / np.where(sums > 0, sums, 1.0), 0.0)
    assert not np.allclose(sharpened, graphs)
    if top_k is not None:
        sharpened = numpy_top_k(sharpened.astype("float32"), top_k)[2]
    got = model(IDS)[0].numpy()
    expected = numpy_transfer(embedding.get_weights()[0][IDS], sharpened, IDS != 0, transfer)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    config = transfer.get_config()
    assert config["graph_temperature"] == 0.5
    assert GlomoTransfer.from_config(config).graph_temperature == 0.5


def test_graph_temperature_must_be_above_zero():
    with pytest.raises(ValueError, match="graph_temperature must be a finite number above 0"):
        GlomoTransfer(make_predictor(), graph_temperature=0.0)


def test_top_k_graphs_input_form(rng):
    """[features, indices, weights]: precomputed graphs in the compact form."""
    padding = IDS != 0
    graphs = random_graphs(rng, padding)
    indices, weights, kept = numpy_top_k(graphs, 3)
    ids = keras.Input((T,), dtype="int32")
    indices_in = keras.Input((2, L, K, T, 3), dtype="int32")
    weights_in = keras.Input((2, L, K, T, 3))
    embedding = keras.layers.Embedding(V, 5, mask_zero=True)
    transfer = GlomoTransfer(num_mixtures=2)
    out = transfer([embedding(ids), indices_in, weights_in])
    model = keras.Model([ids, indices_in, weights_in], [out, MaskProbe()(out)])
    randomize_transfer(transfer, rng)
    got, mask = (t.numpy() for t in model([IDS, indices, weights]))
    expected = numpy_transfer(embedding.get_weights()[0][IDS], kept, padding, transfer)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(mask, padding.astype("float32"))


@pytest.mark.parametrize("form", ["dense", "top_k", "packed_candidates"])
def test_fed_graphs_give_the_online_outputs_and_gradients(rng, form):
    """A GraphFedModel calls the layer on ``[features, graphs]`` (computed beforehand, here by a
    separate predictor call) instead of running the predictor: the NumPy transfer of those graphs,
    and the online call's gradients for every trainable weight, which it shares."""
    from glomo_tf.models import GraphFedModel

    predictor = make_predictor()
    model, embedding, transfer = functional_model(predictor, 6, num_mixtures=2)
    randomize_transfer(transfer, rng)
    graphs = predictor_graphs(predictor)
    indices, weights, kept = numpy_top_k(graphs, T)
    fed = {"dense": (graphs,), "top_k": (indices, weights),
           "packed_candidates": ({"packed_candidates": GraphMixture.candidate_matrices(
               graphs, packed=True)},)}[form]
    if form != "top_k":
        kept = graphs  # every source
    fed_model = GraphFedModel(model)
    target = tf.constant(rng.normal(size=(3, T, 12)), "float32")

    def loss_and_grads(feed):
        with tf.GradientTape() as tape:
            if feed is None:
                loss = _objective(model, IDS, target)
            else:
                loss = _objective(lambda ids, training: fed_model((ids, *feed), training=training),
                                  IDS, target)
        return loss, tape.gradient(loss, model.trainable_weights)

    calls = []
    original = predictor.call
    predictor.call = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        fed_loss, fed_grads = loss_and_grads(fed)
        assert not calls  # the predictor did not run
        online_loss, online_grads = loss_and_grads(None)
        assert calls
    finally:
        del predictor.call
    expected = numpy_transfer(embedding.get_weights()[0][IDS], kept, IDS != 0, transfer)
    np.testing.assert_allclose(fed_model((IDS, *fed))[0].numpy(), expected, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(fed_loss.numpy(), online_loss.numpy(), rtol=1e-5)
    assert len(fed_grads) == len(model.trainable_weights) > 3
    assert {id(w) for w in fed_model.trainable_weights} == {id(w) for w in
                                                             model.trainable_weights}
    for a, b in zip(fed_grads, online_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(),
                                   tf.convert_to_tensor(b).numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="built for graphs of the"):
        fed_model((IDS, indices, weights) if form != "top_k" else (IDS, graphs))


def test_graphs_are_fed_only_to_frozen_learned_layers_in_their_form():
    from glomo_tf.models import GraphFedModel

    predictor = make_predictor()
    tuned, _, _ = functional_model(predictor, fine_tune=True)
    with pytest.raises(ValueError, match="fine_tune=True"):
        GraphFedModel(tuned)
    uniform, _, _ = functional_model(None, graph_mode="uniform")
    with pytest.raises(ValueError, match="no GlomoTransfer layer with learned graphs"):
        GraphFedModel(uniform)
    top_k, _, _ = functional_model(predictor, top_k=2)
    graphs = predictor_graphs(predictor)
    with pytest.raises(ValueError, match="feed it the top-k form"):
        GraphFedModel(top_k)((IDS, {"packed_candidates": GraphMixture.candidate_matrices(
            graphs, packed=True)}))


def _objective(model, ids, weights):
    out = model(ids, training=True)[0]
    return tf.reduce_sum(out * weights)


def test_frozen_predictor_gets_no_gradient_and_does_not_change(rng):
    predictor = make_predictor()
    model, embedding, transfer = functional_model(predictor, num_mixtures=2)
    randomize_transfer(transfer, rng)
    assert not predictor.trainable
    predictor_ids = {id(v) for v in predictor.weights}
    assert not predictor_ids & {id(v) for v in model.trainable_weights}
    weights = tf.constant(rng.normal(size=(3, T, 12)), "float32")
    with tf.GradientTape() as tape:
        tape.watch([v.value for v in predictor.weights])
        loss = _objective(model, IDS, weights)
    grads = tape.gradient(loss, [v.value for v in predictor.weights + transfer.mixture.weights])
    for g in grads[:len(predictor.weights)]:
        assert g is None or not np.any(g.numpy())
    assert all(g is not None and np.any(g.numpy()) for g in grads[len(predictor.weights):])

    before = [w.numpy().copy() for w in predictor.weights]
    emb_before = embedding.get_weights()[0].copy()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=["mse", None])
    model.fit(IDS, rng.normal(size=(3, T, 12)).astype("float32"), epochs=3, verbose=0)
    assert not np.allclose(embedding.get_weights()[0], emb_before)  # the model did train
    for w, value in zip(predictor.weights, before):  # includes batch-norm moving statistics
        np.testing.assert_array_equal(w.numpy(), value, err_msg=w.path)


def test_fine_tuned_predictor_gets_gradients_and_changes(rng):
    predictor = make_predictor()
    model, _, transfer = functional_model(predictor, num_mixtures=2, fine_tune=True)
    randomize_transfer(transfer, rng)
    assert predictor.trainable
    trainable_ids = {id(v) for v in model.trainable_weights}
    assert all(id(v) in trainable_ids for v in predictor.trainable_weights)
    weights = tf.constant(rng.normal(size=(3, T, 12)), "float32")
    with tf.GradientTape() as tape:
        loss = _objective(model, IDS, weights)
    grads = dict(zip([v.path.split("/")[-1] for v in predictor.trainable_weights],
                     tape.gradient(loss, predictor.trainable_weights)))
    for name in ("embeddings", "conv0_kernel", "query_kernel", "key_kernel"):
        assert grads[name] is not None, name
        assert np.any(tf.convert_to_tensor(grads[name]).numpy()), name

    before = {v.path: v.numpy().copy() for v in predictor.weights}
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=["mse", None])
    model.fit(IDS, rng.normal(size=(3, T, 12)).astype("float32"), epochs=3, verbose=0)
    for v in (predictor.scorer.query_kernel, predictor.encoder.kernels[0], predictor.encoder.moving_means[0],
              predictor.encoder.moving_variances[0]):
        assert not np.allclose(v.numpy(), before[v.path]), v.path


# ---------------------------------------------------------------------- harness
PADDING = IDS != 0


def garbage_features_at_padding(args, kwargs):
    (features, second), = args
    features = np.where(PADDING[:, :, None], features, 5.0).astype("float32")
    return ([features, second],), kwargs


@pytest.mark.parametrize("mode", ["predictor", "predictor_top_k", "uniform",
                                  "precomputed_graphs"])
def test_layer_harness(mode, tmp_path, rng):
    """Config and .keras round trips (a frozen predictor and its batch-norm statistics inside),
    mixed_bfloat16, padding and XLA; graphs from a predictor, uniform, or passed in."""
    features = rng.normal(size=(3, T, 6)).astype("float32")
    call_kwargs, unmasked = {}, None
    if mode == "predictor":
        init_kwargs = lambda: dict(graph_predictor=make_predictor(), num_mixtures=2,  # noqa: E731
                                   units=4)
        call_args, input_shapes = ([features, IDS],), [(None, 6), (None,)]
    elif mode == "predictor_top_k":
        init_kwargs = lambda: dict(graph_predictor=make_predictor(), num_mixtures=2,  # noqa: E731
                                   top_k=3)
        call_args, input_shapes = ([features, IDS],), [(None, 6), (None,)]
    elif mode == "uniform":
        init_kwargs = dict(graph_mode="uniform", num_mixtures=2)
        call_args, input_shapes = ([features, IDS],), [(None, 6), (None,)]
    else:
        init_kwargs = dict(num_mixtures=2, include_products=True, conditioned=False)
        call_args, input_shapes = ([features, random_graphs(rng, PADDING)],), None
        # Without token ids the padding comes from the features' mask.
        call_kwargs = dict(mask=[PADDING, None])
        unmasked = lambda args, kwargs: (args, {})  # noqa: E731
    run_layer_test(
        GlomoTransfer, init_kwargs, call_args, call_kwargs, tmp_path=tmp_path,
        input_shapes=input_shapes,
        # Top-k is a discrete choice: where two sources' weights round together in bfloat16 the
        # k-th swaps, and the outputs move by more than the dense graphs' (up to 0.09 of the
        # largest output on 1 of 6 weight draws, as before the predictor had sub-layers).
        bfloat16_rtol=0.15 if mode == "predictor_top_k" else 0.05,
        # Padded positions' outputs are zero and no real position reads a padded one.
        mask_check=MaskCheck(perturb=garbage_features_at_padding, real=lambda outputs: outputs,
                             unmasked=unmasked))


@pytest.mark.parametrize("trainable", [False, True])
def test_save_and_load_graph_predictor(rng, tmp_path, trainable):
    predictor = make_predictor()
    randomize_batch_norm(predictor, rng)
    expected = predictor_graphs(predictor)
    path = str(tmp_path / "predictor.keras")
    glomo_tf.save_graph_predictor(predictor, path)
    loaded = glomo_tf.load_graph_predictor(path, trainable=trainable)
    assert isinstance(loaded, GraphPredictor) and loaded.trainable == trainable
    assert bool(loaded.trainable_weights) == trainable
    np.testing.assert_array_equal(loaded(IDS, training=False)["graphs"].numpy(), expected)

    # Plugs into a new downstream model: same outputs as with the original predictor.
    model_a, emb_a, transfer_a = functional_model(predictor, num_mixtures=2, fine_tune=trainable)
    model_b, emb_b, transfer_b = functional_model(loaded, num_mixtures=2, fine_tune=trainable)
    randomize_transfer(transfer_a, rng)
    for a, b in ((emb_a, emb_b), (transfer_a.mixture, transfer_b.mixture),
                 (transfer_a.value_dense, transfer_b.value_dense),
                 (transfer_a.gate_dense, transfer_b.gate_dense)):
        b.set_weights(a.get_weights())
    np.testing.assert_allclose(model_b(IDS)[0].numpy(), model_a(IDS)[0].numpy(), rtol=1e-6,
                               atol=1e-6)
    trainable_ids = {id(v) for v in model_b.trainable_weights}
    assert (id(loaded.scorer.query_kernel) in trainable_ids) == trainable


def test_save_graph_predictor_errors(tmp_path):
    with pytest.raises(TypeError, match="GraphPredictor"):
        glomo_tf.save_graph_predictor(keras.layers.Dense(2), str(tmp_path / "x.keras"))
    with pytest.raises(ValueError, match=".keras"):
        glomo_tf.save_graph_predictor(make_predictor(), str(tmp_path / "x.h5"))


# ---------------------------------------------------------------------- errors
def test_clear_errors_for_wrong_inputs():
    h = np.zeros((3, T, 6), "float32")
    with pytest.raises(ValueError, match="second input"):
        GlomoTransfer(make_predictor())([h, np.zeros((3, T, 4), "float32")])
    with pytest.raises(ValueError, match="needs a graph_predictor"):
        GlomoTransfer()(IDS)
    with pytest.raises(ValueError, match=r"second input \(third with top-k graphs\) to be token "
                                         r"ids \[batch, T\] or graphs: .*got shapes"):
        GlomoTransfer(make_predictor())([h, IDS, IDS])
    with pytest.raises(ValueError, match="list of 4"):
        GlomoTransfer(make_predictor())([h, IDS, IDS, IDS])
    with pytest.raises(ValueError, match="top_k must be None"):
        GlomoTransfer(make_predictor(), top_k=0)
    with pytest.raises(ValueError, match="token ids"):
        GlomoTransfer(make_predictor())(h)
    with pytest.raises(ValueError, match="graph_predictor or graphs"):
        GlomoTransfer()([h, IDS])
    with pytest.raises(TypeError, match="GraphPredictor"):
        GlomoTransfer(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="graph_mode"):
        GlomoTransfer(make_predictor(), graph_mode="random")


def test_load_graph_predictor_from_run_directory_and_bad_paths(tmp_path):
    predictor = make_predictor()
    expected = predictor_graphs(predictor)
    run = tmp_path / "run"
    run.mkdir()
    glomo_tf.save_graph_predictor(predictor, str(run / "graph_predictor.keras"))
    loaded = glomo_tf.load_graph_predictor(run)  # a `glomo pretrain` output directory
    np.testing.assert_array_equal(loaded(IDS, training=False)["graphs"].numpy(), expected)

    with pytest.raises(FileNotFoundError, match="directory without graph_predictor.keras"):
        glomo_tf.load_graph_predictor(tmp_path)
    with pytest.raises(FileNotFoundError, match="No graph predictor at"):
        glomo_tf.load_graph_predictor(tmp_path / "missing.keras")
    (tmp_path / "weights.h5").write_bytes(b"")
    with pytest.raises(ValueError, match="not a .keras file"):
        glomo_tf.load_graph_predictor(tmp_path / "weights.h5")



def test_fused_normalization_option_gives_the_same_outputs_and_round_trips():
    """``fused_normalization=True`` (the predictor's Eq. 1 normalisation in one XLA cluster):
    the layer's outputs equal the default path's up to float round-off; the option survives
    get_config / from_config."""
    predictor = glomo_tf.GraphPredictor(vocabulary_size=40, hidden_dim=8, num_layers=2,
                                        num_heads=2, conv_layers=1)
    ids = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]], "int32")
    features = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")
    keras.utils.set_random_seed(0)
    plain = glomo_tf.GlomoTransfer(predictor, num_mixtures=2)
    keras.utils.set_random_seed(0)
    fused = glomo_tf.GlomoTransfer(predictor, num_mixtures=2, fused_normalization=True)
    plain([features, ids]), fused([features, ids])  # built
    fused.set_weights(plain.get_weights())
    np.testing.assert_allclose(fused([features, ids]).numpy(), plain([features, ids]).numpy(),
                               atol=1e-5)
    again = glomo_tf.GlomoTransfer.from_config(fused.get_config())
    assert again.fused_normalization is True and plain.get_config()["fused_normalization"] is False
