"""``GraphPropagation``: the GRU steps against NumPy, how far information travels along a planted
chain, the layer harness, and the classifiers' ``transfer_form`` and gold variants."""

import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GraphPropagation
from glomo_tf.data import gold_graphs as gold
from glomo_tf.layers import graph_predictor
from glomo_tf.models import build_classifier
from layer_harness import MaskCheck, jitter_weights, run_layer_test

PADDING = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def chain_graphs(n, batch=1):
    """Forward graphs pointing every unit at the one before it; backward graphs empty."""
    g = gold.edge_graphs(n, [(t, t - 1) for t in range(1, n)])
    return np.repeat(g[None], batch, axis=0)


def layer_norm(x, gamma, beta, epsilon=1e-3):
    """``keras.layers.LayerNormalization`` over the last axis (its default epsilon)."""
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


@pytest.mark.parametrize("aggregation, update_form, directions, normalized", [
    ("mean", "gru", "both", False), ("sum", "gru", "both", False), ("sum", "mlp", "both", False),
    ("sum", "mlp", "backward", False), ("mean", "gru", "forward", False),
    ("sum", "mlp", "backward", True), ("sum", "gru", "both", True)])
def test_steps_are_the_updates_of_numpy(rng, aggregation, update_form, directions, normalized):
    """One graph per direction (one layer, one head), one mixture: ``M = scale * G``; summed,
    each row of ``G`` times its number of sources (a tree's rows: its 0/1 adjacency)."""
    features = rng.normal(size=(2, 5, 3)).astype("float32")
    graphs = np.stack([gold.tree_graphs([-1, 0, 0, 2, 2]), gold.tree_graphs([-1, 0, 1, 0, 0])])
    graphs *= PADDING[:, None, None, None, None, :] * PADDING[:, None, None, None, :, None]
    layer = GraphPropagation(steps=3, units=4, conditioned=False, aggregation=aggregation,
                             update=update_form, directions=directions, layer_norm=normalized)
    layer([features, graphs], mask=[PADDING, None])
    jitter_weights(layer, rng, scale=0.5)
    out = layer([features, graphs], mask=[PADDING, None]).numpy()

    w = {v.path.split("/", 1)[1]: v.numpy() for v in layer.weights}
    assert ("norm/gamma" in w) == normalized

    def norm(x):
        return layer_norm(x, w["norm/gamma"], w["norm/beta"]) if normalized else x

    keep = PADDING[:, :, None].astype("float64")
    h = features @ w["input_projection/kernel"] + w["input_projection/bias"]
    if aggregation == "sum":
        graphs = graphs * (graphs > 0).sum(-1, keepdims=True)
        assert graphs[0, 1, 0, 0, 0].tolist() == [0, 1, 1, 0, 0]  # the root's two arguments
    initial = h
    heard = {"both": (0, 1), "forward": (0,), "backward": (1,)}[directions]
    for _ in range(3):
        messages = np.concatenate([w["mixture/scale"][z, 0] * graphs[:, z, 0, 0] @ h
                                   for z in heard], -1)
        if update_form == "mlp":
            hidden = np.maximum(norm(np.concatenate([initial, messages], -1)
                                     @ w["hidden/kernel"] + w["hidden/bias"]), 0)
            h = np.maximum(hidden @ w["output/kernel"] + w["output/bias"], 0) * keep
            continue
        gates = sigmoid(np.concatenate([messages, h], -1) @ w["gates/kernel"] + w["gates/bias"])
        update, reset = gates[..., :4], gates[..., 4:]
        candidate = np.tanh(norm(np.concatenate([messages, reset * h], -1)
                                 @ w["candidate/kernel"] + w["candidate/bias"]))
        h = ((1 - update) * h + update * candidate) * keep
    np.testing.assert_allclose(out, np.concatenate([features, h], -1) * keep, atol=1e-5)
    assert out.shape == (2, 5, 3 + 4) == tuple(layer.compute_output_shape(
        [features.shape, graphs.shape]))


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_a_unit_hears_units_as_many_edges_away_as_there_are_steps(steps):
    """Along a chain ``t -> t - 1``, the state of ``t`` depends on the features of ``t - steps
    .. t`` and of no unit further back or ahead."""
    n = 7
    layer = GraphPropagation(steps=steps, conditioned=False)
    features = tf.constant(np.random.default_rng(1).normal(size=(1, n, 3)), tf.float32)
    graphs = chain_graphs(n)
    with tf.GradientTape() as tape:
        tape.watch(features)
        out = layer([features, graphs])[0, :, 3:]  # the propagated states
    jacobian = tape.jacobian(out, features).numpy()  # [n, 3, 1, n, 3]
    reach = np.abs(jacobian).sum(axis=(1, 2, 4)) > 0  # [receiver, source]
    expected = np.array([[t - steps <= s <= t for s in range(n)] for t in range(n)])
    np.testing.assert_array_equal(reach, expected)


def test_heard_from_the_arguments_alone_a_tree_composes_bottom_up():
    """``directions="backward"`` over a tree in prefix order (operators before their arguments):
    after ``n`` steps a unit's state depends on the units of its subtree ``n`` levels deep and on
    nothing above or beside it; with both directions the leaves hear their parents too."""
    parents = [-1, 0, 0, 2, 2, 4, 4]  # 0 -> {1, 2}, 2 -> {3, 4}, 4 -> {5, 6}
    graphs = gold.tree_graphs(parents)[None]
    features = tf.constant(np.random.default_rng(2).normal(size=(1, 7, 3)), tf.float32)

    def reach(directions, steps):
        layer = GraphPropagation(steps=steps, conditioned=False, directions=directions)
        with tf.GradientTape() as tape:
            tape.watch(features)
            out = layer([features, graphs])[0, :, 3:]
        return np.abs(tape.jacobian(out, features).numpy()).sum(axis=(1, 2, 4)) > 0

    def subtree(t, depth):
        below = {t}
        for _ in range(depth):
            below |= {u for u, p in enumerate(parents) if p in below}
        return below

    for steps in (1, 2, 3):
        expected = np.array([[s in subtree(t, steps) for s in range(7)] for t in range(7)])
        np.testing.assert_array_equal(reach("backward", steps), expected)
    assert reach("both", 1)[1, 0]  # a leaf hears its operator
    # forward alone: the root, with no unit before it, keeps its own features only
    assert reach("forward", 3)[0].tolist() == [True] + [False] * 6


def test_directions_are_checked_and_saved():
    with pytest.raises(ValueError, match="directions"):
        GraphPropagation(directions="up")
    layer = GraphPropagation(steps=2, directions="backward", layer_norm=True)
    restored = GraphPropagation.from_config(layer.get_config())
    assert (restored.directions, restored.layer_norm) == ("backward", True)


def garbage_at_padding(args, kwargs):
    (features, second), = args
    return ([np.where(PADDING[:, :, None], features, 5.0).astype("float32"), second],), kwargs


@pytest.mark.parametrize("mode", ["predictor", "given_graphs"])
def test_layer_harness(mode, tmp_path, rng):
    features = rng.normal(size=(2, 5, 6)).astype("float32")
    ids = np.where(PADDING, rng.integers(2, 30, PADDING.shape), 0).astype("int32")
    if mode == "predictor":
        def init_kwargs():
            predictor = graph_predictor(30, 8, num_layers=2, num_heads=2, conv_layers=1)
            predictor.build((None, None))
            return dict(graph_predictor=predictor, steps=2, num_mixtures=2)
        call_args, input_shapes, call_kwargs = ([features, ids],), [(None, 6), (None,)], {}
        unmasked = None
    else:
        graphs = np.stack([gold.tree_graphs([-1, 0, 0, 2, 2]),
                           gold.tree_graphs([-1, 0, 1, 0, 0])])
        graphs *= PADDING[:, None, None, None, None, :]
        init_kwargs = dict(steps=3, units=4, conditioned=False, aggregation="sum",
                           update="mlp")
        call_args, input_shapes = ([features, graphs],), None
        call_kwargs = dict(mask=[PADDING, None])
        unmasked = lambda args, kwargs: (args, {})  # noqa: E731
    run_layer_test(GraphPropagation, init_kwargs, call_args, call_kwargs, tmp_path=tmp_path,
                   input_shapes=input_shapes,
                   mask_check=MaskCheck(perturb=garbage_at_padding, real=lambda out: out,
                                        unmasked=unmasked))


def test_bad_steps_and_units_are_refused():
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        GraphPropagation(steps=0)
    with pytest.raises(ValueError, match="units must be a positive integer"):
        GraphPropagation(units=-2)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        GraphPropagation(aggregation="max")
    with pytest.raises(ValueError, match="update must be one of"):
        GraphPropagation(update="lstm")


def test_classifier_forms_and_gold_variants(rng):
    predictor = graph_predictor(30, 8, num_layers=2, num_heads=2, conv_layers=1)
    ids = np.where(PADDING, rng.integers(2, 30, PADDING.shape), 0).astype("int32")
    sizes = dict(embedding_dim=8, rnn_units=4, attention_heads=2)
    deep = build_classifier(30, 3, "glomo_rnn", graph_predictor=predictor,
                            transfer_form="propagation", propagation_steps=2, **sizes)
    layer = deep.get_layer("glomo_rnn")
    assert type(layer) is GraphPropagation and layer.steps == 2
    assert deep(ids).shape == (2, 3)
    assert type(build_classifier(30, 3, "uniform", **sizes).get_layer(
        "uniform_graphs")).__name__ == "GlomoTransfer"
    cache = gold.gold_graph_cache([gold.tree_graphs([-1, 0, 0, 2, 2]),
                                   gold.tree_graphs([-1, 0, 1])])
    from glomo_tf.data.graph_cache import batch_of

    indices, weights = batch_of(cache, [0, 1], 5)
    graphs = (np.eye(5)[indices] * weights[..., None]).sum(-2).astype("float32")
    for form in ("fusion", "propagation"):
        model = build_classifier(30, 3, "gold_rnn", transfer_form=form, **sizes)
        assert [tuple(i.shape) for i in model.inputs] == [(None, None),
                                                          (None, 2, 1, 1, None, None)]
        probabilities = model([ids, graphs]).numpy()
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)
        # The graphs are read: other graphs, other outputs.
        other = model([ids, np.swapaxes(graphs, -1, -2)[:, ::-1]]).numpy()
        assert np.abs(other - probabilities).max() > 1e-6
    with pytest.raises(ValueError, match="transfer_form must be one of"):
        build_classifier(30, 3, "uniform", transfer_form="stacked", **sizes)
