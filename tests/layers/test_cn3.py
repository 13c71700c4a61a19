"""Tests of ContextualizedNonLocal (CN3, Eqs. 1-6) against a NumPy implementation, masking; the
layer harness (serialization, bfloat16, mask, XLA)."""

import keras
import numpy as np
import pytest

from glomo_tf import ContextualizedNonLocal
from layer_harness import MaskCheck, run_layer_test

B, T, D, U, E, A = 2, 5, 4, 6, 2, 3


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def make_mask():
    mask = np.ones((B, T), bool)
    mask[1, 4] = False  # one padded position
    return mask


def randomize(layer, rng, scale=0.5):
    for w in layer.weights:
        w.assign(rng.normal(0, scale, w.shape).astype("float32"))


def np_lstm(x, kernel, recurrent, bias):
    """Keras LSTM (gates i, f, c, o) over ``x [T, d]``."""
    u = recurrent.shape[0]
    h, c, out = np.zeros(u), np.zeros(u), []
    for x_t in x:
        z = x_t @ kernel + h @ recurrent + bias
        i, f = sigmoid(z[:u]), sigmoid(z[u:2 * u])
        g, o = np.tanh(z[2 * u:3 * u]), sigmoid(z[3 * u:])
        c = f * c + i * g
        h = o * np.tanh(c)
        out.append(h)
    return np.array(out).reshape(len(x), u)


def np_context(layer, x):
    """Local context of the real positions ``x [n, d]`` (the padding is simply absent)."""
    enc = layer.context_encoder
    if layer.context == "cnn":
        kernel, bias = (w.numpy().astype(np.float64) for w in (enc.kernel, enc.bias))
        padded = np.pad(x, [(1, 1), (0, 0)])
        return np.tanh(sum(padded[j:j + len(x)] @ kernel[j] for j in range(3)) + bias)
    fw = [w.numpy().astype(np.float64) for w in enc.forward_layer.cell.weights]
    bw = [w.numpy().astype(np.float64) for w in enc.backward_layer.cell.weights]
    return np.concatenate([np_lstm(x, *fw), np_lstm(x[::-1], *bw)[::-1]], axis=-1)


def np_cn3(layer, inputs, mask, edge_features=None, node_features=None):
    """Eqs. 1-6 sequence by sequence, on the real positions only:
    ``s_ik = u . tanh(W_hk h_k + W_hi h_i + W_vi v_i + W_vk v_k + W_e e_ik + b)``,
    ``alpha_i = softmax_k(s_i)``, ``m_i = sum_k alpha_ik h_k``,
    ``h'_i = g * m_i + (1 - g) * h_i``, ``g = sigmoid(W_g h_i + b_g)``."""
    w = lambda v: v.numpy().astype(np.float64)  # noqa: E731
    L = layer.num_layers
    states_out = np.zeros((len(inputs), T, layer.units))
    graphs_out = np.zeros((len(inputs), L, T, T))
    for b in range(len(inputs)):
        n = int(mask[b].sum())
        x = inputs[b, :n].astype(np.float64)
        parts = [x, np_context(layer, x)]
        if node_features is not None:
            parts.append(node_features[b, :n])
        v = np.concatenate(parts, axis=-1)
        h = v @ w(layer.node_projection.kernel) + w(layer.node_projection.bias)
        for l in range(L):
            scores = np.zeros((n, n))
            for i in range(n):
                for k in range(n):
                    z = (h[k] @ w(layer.source_state_kernel)[l]
                         + h[i] @ w(layer.receiver_state_kernel)[l]
                         + v[i] @ w(layer.receiver_attribute_kernel)[l]
                         + v[k] @ w(layer.source_attribute_kernel)[l] + w(layer.score_bias)[l])
                    if edge_features is not None:
                        z = z + edge_features[b, i, k] @ w(layer.edge_kernel)[l]
                    scores[i, k] = w(layer.score_vector)[l] @ np.tanh(z)  # Eqs. 1-2
            alpha = np.exp(scores - scores.max(1, keepdims=True))
            alpha /= alpha.sum(1, keepdims=True)  # Eq. 3
            message = alpha @ h  # Eq. 4
            gate = sigmoid(h @ w(layer.gate_kernel)[l] + w(layer.gate_bias)[l])  # Eq. 6
            h = gate * message + (1 - gate) * h  # Eq. 5
            graphs_out[b, l, :n, :n] = alpha
        states_out[b, :n] = h
    return states_out, graphs_out


@pytest.mark.parametrize("context", ["cnn", "lstm"])
def test_one_layer_matches_numpy(context, rng):
    layer = ContextualizedNonLocal(U, context=context, return_graphs=True)
    x = rng.normal(size=(B, T, D)).astype("float32")
    mask = make_mask()
    layer(x, mask=mask)
    randomize(layer, rng)
    states, graphs = (t.numpy() for t in layer(x, mask=mask))
    assert states.shape == (B, T, U) and graphs.shape == (B, 1, T, T)
    expected_states, expected_graphs = np_cn3(layer, x, mask)
    np.testing.assert_allclose(graphs, expected_graphs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(states, expected_states, rtol=1e-4, atol=1e-5)
    # Real receivers' rows sum to one, padded sources get no weight, padded rows are zero.
    np.testing.assert_allclose(graphs[0, 0].sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(graphs[1, 0, :4].sum(-1), 1.0, rtol=1e-5)
    assert np.all(graphs[1, :, :, 4] == 0.0) and np.all(graphs[1, :, 4] == 0.0)
    assert np.all(states[1, 4] == 0.0)
    # The graphs are not trivially uniform.
    assert graphs[0, 0].max() - graphs[0, 0].min() > 0.05


def test_layers_edges_and_node_features_match_numpy(rng):
    layer = ContextualizedNonLocal(U, num_layers=2, context="cnn", edge_dim=E, return_graphs=True)
    x = rng.normal(size=(B, T, D)).astype("float32")
    edges = rng.normal(size=(B, T, T, E)).astype("float32")
    tags = rng.normal(size=(B, T, A)).astype("float32")
    mask = make_mask()
    layer(x, mask=mask, edge_features=edges, node_features=tags)
    randomize(layer, rng)
    states, graphs = (t.numpy() for t in layer(x, mask=mask, edge_features=edges,
                                                 node_features=tags))
    expected_states, expected_graphs = np_cn3(layer, x, mask, edges, tags)
    np.testing.assert_allclose(graphs, expected_graphs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(states, expected_states, rtol=1e-4, atol=1e-5)
    # Edge features change the graphs.
    _, other = layer(x, mask=mask, edge_features=edges[:, :, ::-1], node_features=tags)
    assert np.abs(other.numpy() - graphs).max() > 1e-3


@pytest.mark.parametrize("context", ["cnn", "lstm"])
def test_padding_invariance(context, rng):
    layer = ContextualizedNonLocal(U, num_layers=2, context=context, return_graphs=True)
    x = rng.normal(size=(B, T, D)).astype("float32")
    mask = make_mask()
    layer(x, mask=mask)
    randomize(layer, rng)
    states, graphs = (t.numpy() for t in layer(x, mask=mask))
    extra = 3
    x_long = np.concatenate([x, rng.normal(size=(B, extra, D)).astype("float32") * 5], axis=1)
    x_long[1, 4] = 7.0  # garbage at the already padded position too
    mask_long = np.concatenate([mask, np.zeros((B, extra), bool)], axis=1)
    states_long, graphs_long = (t.numpy() for t in layer(x_long, mask=mask_long))
    np.testing.assert_allclose(states_long[:, :T], states, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(graphs_long[..., :T, :T], graphs, rtol=1e-5, atol=1e-6)
    assert np.all(states_long[:, T:] == 0.0) and np.all(graphs_long[..., T:] == 0.0)


def test_no_mask_means_all_real(rng):
    layer = ContextualizedNonLocal(U, context="cnn", return_graphs=True)
    x = rng.normal(size=(B, T, D)).astype("float32")
    a = layer(x)
    b = layer(x, mask=np.ones((B, T), bool))
    np.testing.assert_allclose(a[0].numpy(), b[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(a[1].numpy().sum(-1), 1.0, rtol=1e-5)


def test_dropout_only_in_training(rng):
    layer = ContextualizedNonLocal(U, context="cnn", dropout=0.5)
    x = rng.normal(size=(B, T, D)).astype("float32")
    mask = make_mask()
    inference = layer(x, mask=mask).numpy()
    np.testing.assert_array_equal(layer(x, mask=mask, training=False).numpy(), inference)
    clone = ContextualizedNonLocal(U, context="cnn")
    clone(x, mask=mask)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x, mask=mask).numpy(), inference, rtol=1e-6)
    assert np.abs(layer(x, mask=mask, training=True).numpy() - inference).max() > 1e-3


# ---------------------------------------------------------------------------- harness
def garbage_at_padding(args, kwargs):
    """New inputs, edge features and node features wherever a padded position is involved."""
    mask = kwargs["mask"]
    kwargs = dict(kwargs)
    if "edge_features" in kwargs:
        pairs = (mask[:, :, None] & mask[:, None, :])[..., None]
        kwargs["edge_features"] = np.where(pairs, kwargs["edge_features"], 3.0).astype("float32")
    if "node_features" in kwargs:
        kwargs["node_features"] = np.where(mask[..., None], kwargs["node_features"],
                                           -4.0).astype("float32")
    return (np.where(mask[..., None], args[0], 5.0).astype("float32"),), kwargs


def without_mask(args, kwargs):
    return args, {k: v for k, v in kwargs.items() if k != "mask"}


@pytest.mark.parametrize("context", ["lstm", "cnn"])
def test_layer_harness(context, tmp_path, rng):
    """Config and .keras round trips, mixed_bfloat16, the mask and XLA: two layers with an LSTM
    context, edge features and the graphs returned; one layer with a CNN context and node
    features."""
    x = rng.normal(size=(B, T, D)).astype("float32")
    if context == "lstm":
        init_kwargs = dict(units=U, num_layers=2, context="lstm", edge_dim=E, dropout=0.1,
                           return_graphs=True, name="cn3")
        call_kwargs = dict(mask=make_mask(),
                           edge_features=rng.normal(size=(B, T, T, E)).astype("float32"))
    else:
        init_kwargs = dict(units=U, num_layers=1, context="cnn")
        call_kwargs = dict(mask=make_mask(),
                           node_features=rng.normal(size=(B, T, A)).astype("float32"))
    run_layer_test(
        ContextualizedNonLocal, init_kwargs, (x,), call_kwargs, tmp_path=tmp_path,
        # Padded states and graph rows and columns are zero, real ones never read padding.
        mask_check=MaskCheck(perturb=garbage_at_padding, real=lambda outputs: outputs,
                             unmasked=without_mask))


def test_keras_mask_of_an_embedding_reaches_the_layer(rng):
    """In a functional model the Embedding's mask is the layer's mask (also with edge features
    passed as a second tensor)."""
    ids = keras.Input((T,), dtype="int32")
    edges_in = keras.Input((T, T, E))
    embedding = keras.layers.Embedding(11, D, mask_zero=True)
    layer = ContextualizedNonLocal(U, num_layers=2, context="cnn", edge_dim=E,
                                   return_graphs=True)
    model = keras.Model([ids, edges_in], layer(embedding(ids), edge_features=edges_in))
    data = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 0, 0]], "int32")
    edges = rng.normal(size=(B, T, T, E)).astype("float32")
    states, graphs = (t.numpy() for t in model([data, edges]))
    assert np.all(graphs[1, :, :, 3:] == 0.0) and np.all(states[1, 3:] == 0.0)
    direct = layer(embedding(data), mask=data != 0, edge_features=edges)
    np.testing.assert_allclose(states, direct[0].numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(graphs, direct[1].numpy(), rtol=1e-6, atol=1e-7)


def test_graph_level_classifier_fits(rng):
    """Algorithm 1, graph level: mean of the node states, then a softmax layer."""
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(20, D, mask_zero=True)(ids)
    h = ContextualizedNonLocal(U, num_layers=2, context="lstm", dropout=0.1)(x)
    pooled = keras.layers.GlobalAveragePooling1D()(h)  # masked mean over the real nodes
    model = keras.Model(ids, keras.layers.Dense(3, activation="softmax")(pooled))
    model.compile("adam", "sparse_categorical_crossentropy")
    lengths = rng.integers(2, 7, size=8)
    data = np.where(np.arange(6)[None] < lengths[:, None], rng.integers(1, 20, size=(8, 6)), 0)
    labels = rng.integers(0, 3, size=8)
    history = model.fit(data, labels, batch_size=4, epochs=1, steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"][-1])


def test_compute_output_shape():
    assert ContextualizedNonLocal(U).compute_output_shape((B, T, D)) == (B, T, U)
    layer = ContextualizedNonLocal(U, num_layers=3, return_graphs=True)
    assert layer.compute_output_shape((B, T, D)) == ((B, T, U), (B, 3, T, T))


def test_bad_arguments(rng):
    with pytest.raises(ValueError, match="context must be one of"):
        ContextualizedNonLocal(U, context="gru")
    with pytest.raises(ValueError, match="dropout"):
        ContextualizedNonLocal(U, dropout=1.0)
    x = rng.normal(size=(B, T, D)).astype("float32")
    with pytest.raises(ValueError, match="edge_features must be passed"):
        ContextualizedNonLocal(U, context="cnn", edge_dim=E)(x)
    layer = ContextualizedNonLocal(U, context="cnn")
    layer(x, node_features=np.zeros((B, T, A), "float32"))
    with pytest.raises(ValueError, match="built with node_features"):
        layer(x)
