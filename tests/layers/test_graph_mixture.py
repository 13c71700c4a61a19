"""GraphMixture against an explicit NumPy computation of the mixed graphs (GLoMo Section 2.2)."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GraphMixture
from layer_harness import MaskCheck, run_layer_test

B, L, K, T, D = 2, 2, 2, 6, 5


# ---------------------------------------------------------------------- NumPy reference
def random_graphs(rng, padding=None, batch=B, layers=L, heads=K, length=T):
    """Random row-stochastic graphs ``[B, 2, L, K, T, T]`` that respect the direction masks.

    Forward rows use sources ``s < t``, backward rows ``s > t``; padded sources get no weight. Some
    admissible entries are zeroed (sparse graphs, like squared ReLU gives).
    """
    g = rng.uniform(0.1, 1.0, (batch, 2, layers, heads, length, length))
    g *= rng.random(g.shape) > 0.3
    ones = np.ones((length, length))
    directions = np.stack([np.tril(ones, -1), np.triu(ones, 1)])
    g *= directions[None, :, None, None]
    if padding is not None:
        g *= padding[:, None, None, None, None, :]
    sums = g.sum(-1, keepdims=True)
    return np.where(sums > 0, g / np.where(sums > 0, sums, 1.0), 0.0).astype("float32")


def numpy_candidates(graphs, include_products):
    """``[B, 2, C, T, T]``: all (layer, head) singles, then all (layer, head) products."""
    batch, _, layers, heads = graphs.shape[:4]
    singles, products = [], []
    for layer in range(layers):
        for head in range(heads):
            singles.append(graphs[:, :, layer, head])
            prod = np.zeros(graphs.shape[:2] + graphs.shape[-2:])
            for b in range(batch):
                for z in range(2):
                    lam = graphs[b, z, 0, head].astype("float64")  # Lambda^1 = G^1
                    for l in range(1, layer + 1):
                        lam = np.matmul(graphs[b, z, l, head], lam)  # Lambda^l = G^l Lambda^{l-1}
                    prod[b, z] = lam
            products.append(prod)
    return np.stack(singles + (products if include_products else []), axis=2)


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def numpy_weights(features, logits, kernel):
    """Per receiving position ``[B, T, 2, M, C]`` (conditioned) or ``[2, M, C]`` (free)."""
    if kernel is None:
        return softmax(logits.astype("float64"))
    return softmax(np.einsum("btd,dzmc->btzmc", features, kernel) + logits)


def numpy_mixed_graphs(features, graphs, logits, kernel, scale, include_products):
    """``M[b, z, m, t, s] = scale[z, m] * sum_c w[b, t, z, m, c] A_c[b, z, t, s]``."""
    cands = numpy_candidates(graphs, include_products)
    w = numpy_weights(features, logits, kernel)
    batch, length = features.shape[:2]
    mixtures = scale.shape[1]
    out = np.zeros((batch, 2, mixtures, length, length))
    for b, z, m, t in itertools.product(range(batch), range(2), range(mixtures), range(length)):
        wt = w[z, m] if kernel is None else w[b, t, z, m]
        out[b, z, m, t] = scale[z, m] * np.tensordot(wt, cands[b, z, :, t], axes=1)
    return out


def numpy_mixture(features, graphs, logits, kernel, scale, include_products):
    """``[B, T, 2, M, d]``: ``scale * sum_c w_c (A_c H)_t`` with each ``A_c H`` a NumPy matmul."""
    cands = numpy_candidates(graphs, include_products)
    w = numpy_weights(features, logits, kernel)
    batch, length, d = features.shape
    mixtures = scale.shape[1]
    out = np.zeros((batch, length, 2, mixtures, d))
    for b, z in itertools.product(range(batch), range(2)):
        propagated = np.stack([c @ features[b] for c in cands[b, z]])  # [C, T, d]
        for m, t in itertools.product(range(mixtures), range(length)):
            wt = w[z, m] if kernel is None else w[b, t, z, m]
            out[b, t, z, m] = scale[z, m] * np.tensordot(wt, propagated[:, t], axes=1)
    return out


def numpy_uniform(padding):
    """``[B, 2, T, T]`` uniform rows over admissible sources (fw s < t, bw s > t, not padded)."""
    batch, length = padding.shape
    out = np.zeros((batch, 2, length, length))
    for b, z, t in itertools.product(range(batch), range(2), range(length)):
        sources = [s for s in range(length)
                   if padding[b, s] and ((s < t) if z == 0 else (s > t))]
        for s in sources:
            out[b, z, t, s] = 1.0 / len(sources)
    return out


def randomize(layer, rng):
    """Random non-zero values for every weight of the layer; returns them by name."""
    values = {}
    for variable in layer.weights:
        name = variable.path.split("/")[-1]
        value = rng.normal(0.0, 1.0, variable.shape).astype("float32")
        if name == "scale":
            value = rng.uniform(0.5, 2.0, variable.shape).astype("float32")
        values[name] = value
    layer.set_weights([values[v.path.split("/")[-1]] for v in layer.weights])
    return values


# ---------------------------------------------------------------------- tests
@pytest.mark.parametrize("propagation", ["chained", "explicit", "auto"])
@pytest.mark.parametrize("include_products", [True, False])
@pytest.mark.parametrize("conditioned", [True, False])
@pytest.mark.parametrize("num_mixtures", [1, 3])
def test_mixture_matches_explicit_numpy(rng, include_products, conditioned, num_mixtures,
                                        propagation):
    features = rng.normal(size=(B, T, D)).astype("float32")
    padding = np.ones((B, T), bool)
    padding[1, -2:] = False
    graphs = random_graphs(rng, padding)
    mix = GraphMixture(num_mixtures=num_mixtures, conditioned=conditioned,
                       include_products=include_products, propagation=propagation)
    mix.build(features.shape, graphs.shape)
    values = randomize(mix, rng)
    expected_candidates = L * K * (2 if include_products else 1)
    assert values["weight_logits"].shape == (2, num_mixtures, expected_candidates)
    assert ("weight_kernel" in values) == conditioned
    kernel = values.get("weight_kernel")

    out = mix(features, graphs).numpy()
    expected = numpy_mixture(features, graphs, values["weight_logits"], kernel, values["scale"],
                             include_products)
    assert out.shape == (B, T, 2, num_mixtures, D)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    unscaled = numpy_mixture(features, graphs, values["weight_logits"], kernel,
                             np.ones_like(values["scale"]), include_products)
    np.testing.assert_allclose(mix(features, graphs, scaled=False).numpy(), unscaled,
                               rtol=1e-4, atol=1e-5)

    # The explicit mixed graphs equal the NumPy M, and M @ H equals the call.
    explicit = mix.explicit_mixed_graphs(features, graphs).numpy()
    expected_graphs = numpy_mixed_graphs(features, graphs, values["weight_logits"], kernel,
                                         values["scale"], include_products)
    np.testing.assert_allclose(explicit, expected_graphs, rtol=1e-4, atol=1e-6)
    applied = np.einsum("bzmts,bsd->btzmd", explicit, features)
    np.testing.assert_allclose(out, applied, rtol=1e-4, atol=1e-5)


def test_products_differ_from_singles(rng):
    """With one candidate forced, the product Lambda^2 = G^2 G^1 (not G^2) is what is applied."""
    features = rng.normal(size=(1, T, D)).astype("float32")
    graphs = random_graphs(rng, batch=1)
    mix = GraphMixture(num_mixtures=1, conditioned=False, include_products=True)
    mix.build(features.shape, graphs.shape)
    C = 2 * L * K
    logits = np.full((2, 1, C), -1e4, "float32")
    # Candidate order: singles (l, k) row-major, then products (l, k): pick product (l=1, k=1).
    logits[:, :, L * K + 1 * K + 1] = 0.0
    mix.set_weights([logits, np.ones((2, 1), "float32")])
    out = mix(features, graphs).numpy()[:, :, :, 0]  # [1, T, 2, d]
    for z in range(2):
        product = graphs[0, z, 1, 1] @ graphs[0, z, 0, 1]
        np.testing.assert_allclose(out[0, :, z], product @ features[0], rtol=1e-4, atol=1e-5)
        assert not np.allclose(product, graphs[0, z, 1, 1])
    # Picking single (l=1, k=0) instead applies G^2_0 alone.
    logits = np.full((2, 1, C), -1e4, "float32")
    logits[:, :, 1 * K + 0] = 0.0
    mix.set_weights([logits, np.ones((2, 1), "float32")])
    out = mix(features, graphs).numpy()[:, :, :, 0]
    for z in range(2):
        np.testing.assert_allclose(out[0, :, z], graphs[0, z, 1, 0] @ features[0],
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("num_mixtures", [1, 3])
def test_uniform_mode_matches_numpy(rng, num_mixtures):
    features = rng.normal(size=(B, T, D)).astype("float32")
    padding = np.ones((B, T), bool)
    padding[0, -1] = False
    padding[1, 2] = False
    padding[1, -2:] = False
    mix = GraphMixture(num_mixtures=num_mixtures, graph_mode="uniform")
    mix.build(features.shape)
    assert [v.path.split("/")[-1] for v in mix.weights] == ["scale"]
    scale = rng.uniform(0.5, 2.0, (2, num_mixtures)).astype("float32")
    mix.set_weights([scale])

    uniform = numpy_uniform(padding)
    # Rows sum to 1 where a source is admissible; the first forward / last backward row are empty.
    assert np.all(uniform[:, 0, 0] == 0) and np.all(uniform[:, 1, -1] == 0)
    expected = np.einsum("bzts,bsd->btzd", uniform, features)[:, :, :, None] * \
        scale[None, None, :, :, None]
    out = mix(features, None, padding).numpy()
    assert out.shape == (B, T, 2, num_mixtures, D)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mix(features, None, padding, scaled=False).numpy(),
                               expected / scale[None, None, :, :, None], rtol=1e-5, atol=1e-6)

    # The keras mask is used when no padding mask is given; graphs are ignored.
    np.testing.assert_allclose(mix(features, mask=padding).numpy(), expected, rtol=1e-5, atol=1e-6)
    junk = rng.random((B, 2, L, K, T, T)).astype("float32")
    np.testing.assert_allclose(mix(features, junk, padding).numpy(), expected, rtol=1e-5,
                               atol=1e-6)

    explicit = mix.explicit_mixed_graphs(features, padding_mask=padding).numpy()
    np.testing.assert_allclose(explicit, uniform[:, :, None] * scale[None, :, :, None, None],
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.einsum("bzmts,bsd->btzmd", explicit, features), out,
                               rtol=1e-5, atol=1e-6)

    # Without any mask every position is a source.
    no_pad = numpy_uniform(np.ones((B, T), bool))
    expected = np.einsum("bzts,bsd->btzd", no_pad, features)[:, :, :, None] * \
        scale[None, None, :, :, None]
    np.testing.assert_allclose(mix(features).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_in_functional_model_with_embedding_mask(rng):
    """Uniform mixture behind Embedding(mask_zero=True): the keras mask sets the sources."""
    ids = np.array([[3, 4, 5, 6, 0, 0], [7, 0, 8, 9, 2, 0]], "int32")
    inputs = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(30, D, mask_zero=True)
    h = embedding(inputs)
    mixed = GraphMixture(num_mixtures=2, graph_mode="uniform")(h)
    model = keras.Model(inputs, mixed)
    emb = embedding.get_weights()[0][ids]
    uniform = numpy_uniform(ids != 0)
    expected = np.einsum("bzts,bsd->btzd", uniform, emb)[:, :, :, None].repeat(2, axis=3)
    np.testing.assert_allclose(model(ids).numpy(), expected, rtol=1e-5, atol=1e-6)


PADDING = np.ones((B, T), bool)
PADDING[0, -1] = PADDING[1, 2] = PADDING[1, -2:] = False


def garbage_features_at_padding(args, kwargs):
    features = np.where(PADDING[:, :, None], args[0], 5.0).astype("float32")
    return (features,) + tuple(args[1:]), kwargs


HARNESS_CONFIGS = {
    "conditioned_products": dict(num_mixtures=2, conditioned=True, include_products=True),
    "free_singles_explicit": dict(num_mixtures=1, conditioned=False, include_products=False,
                                  propagation="explicit"),
    "uniform": dict(num_mixtures=2, graph_mode="uniform"),
}


@pytest.mark.parametrize("name", list(HARNESS_CONFIGS))
def test_layer_harness(name, tmp_path, rng):
    """Config and .keras round trips (in a functional model), mixed_bfloat16, padding and XLA:
    learned mixtures of both weightings and propagations, and the uniform graphs."""
    kwargs = HARNESS_CONFIGS[name]
    features = rng.normal(size=(B, T, D)).astype("float32")
    at_real_positions = lambda outputs: outputs[PADDING]  # noqa: E731
    if kwargs.get("graph_mode") == "uniform":
        # The padding mask chooses the uniform graphs' sources.
        call_args, call_kwargs = (features,), dict(padding_mask=PADDING)
        mask_check = MaskCheck(
            perturb=garbage_features_at_padding, real=at_real_positions,
            unmasked=lambda args, kwargs: (args, {}))
    else:
        # Learned mode takes no mask: the graphs give padded sources no weight, so padded
        # features never reach a real position (no unmasked variant to compare with).
        call_args, call_kwargs = (features, random_graphs(rng, PADDING)), {}
        mask_check = MaskCheck(perturb=garbage_features_at_padding, real=at_real_positions)
    run_layer_test(GraphMixture, kwargs, call_args, call_kwargs, tmp_path=tmp_path,
                   mask_check=mask_check)


def test_errors():
    with pytest.raises(ValueError, match="graph_mode"):
        GraphMixture(graph_mode="random")
    with pytest.raises(ValueError, match="num_mixtures"):
        GraphMixture(num_mixtures=0)
    mix = GraphMixture()
    with pytest.raises(ValueError, match="graphs"):
        mix.build((B, T, D))
    mix.build((B, T, D), (B, 2, L, K, T, T))
    with pytest.raises(ValueError, match="graphs"):
        mix.call(np.zeros((B, T, D), "float32"))


def test_explicit_is_cheaper_counts_multiply_adds():
    """The choice of ``propagation="auto"`` against the two costs counted by hand."""
    for L, K, m, d, products in ((2, 4, 2, 64, True), (3, 8, 1, 128, True), (2, 4, 2, 64, False)):
        mix = GraphMixture(num_mixtures=m, include_products=products)
        C = L * K * (2 if products else 1)
        chains = (L - 1) * K if products else 0
        for steps in (8, 48, 150, 160, 400, 1024):
            chained = L * K * steps ** 2 * d + chains * steps ** 2 * d
            explicit = chains * steps ** 3 + m * C * steps ** 2 + m * steps ** 2 * d
            assert mix.explicit_is_cheaper(steps, d, L, K) == (explicit < chained), (L, steps)
    # With the transfer example's sizes the switch lies between 150 and 160 units.
    mix = GraphMixture(num_mixtures=2)
    assert mix.explicit_is_cheaper(150, 64, 2, 4) and not mix.explicit_is_cheaper(160, 64, 2, 4)


@pytest.mark.parametrize("conditioned", [True, False])
def test_auto_propagation_with_run_time_length_and_gradients(rng, conditioned):
    """``auto`` under a tf.function whose T is unknown at trace time (a tf.cond) takes the cheaper
    form per call; outputs and gradients equal the chained form's on both sides of the switch."""
    d, m, layers, heads = 4, 1, 3, 2
    # By hand: chains 4 T^3 + m (C + d) T^2 = 4 T^3 + 14 T^2 (C = 10 distinct candidates: the 6
    # heads and the products of layers 2 and 3) against (6 + 4) d T^2 = 40 T^2, so the explicit
    # form is cheaper for T < 6.5.
    auto = GraphMixture(num_mixtures=m, conditioned=conditioned)
    chained = GraphMixture(num_mixtures=m, conditioned=conditioned, propagation="chained")
    for mix in (auto, chained):
        mix.build((None, None, d), (None, 2, layers, heads, None, None))
    randomize(auto, rng)
    chained.set_weights(auto.get_weights())

    def step(mix, features, graphs):
        with tf.GradientTape() as tape:
            tape.watch(features)
            out = mix(features, graphs)
            probe = tf.reshape(tf.sin(tf.cast(tf.range(tf.size(out)), tf.float32)), tf.shape(out))
            loss = tf.reduce_sum(out * probe)
        return [out] + tape.gradient(loss, [features] + mix.trainable_weights)

    spec = [tf.TensorSpec((None, None, d)), tf.TensorSpec((None, 2, layers, heads, None, None))]
    run_auto = tf.function(lambda h, g: step(auto, h, g), input_signature=spec)
    run_chained = tf.function(lambda h, g: step(chained, h, g), input_signature=spec)
    for steps in (2, 6, 7, 9):
        assert bool(auto.explicit_is_cheaper(steps, d, layers, heads)) == (steps < 7)
        features = rng.normal(size=(2, steps, d)).astype("float32")
        graphs = rng.random((2, 2, layers, heads, steps, steps)).astype("float32")
        graphs /= graphs.sum(-1, keepdims=True)
        for a, b in zip(run_auto(features, graphs), run_chained(features, graphs)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    operations = run_auto.get_concrete_function(*spec).graph.get_operations()
    assert any(op.type in ("If", "StatelessIf") for op in operations)


def test_propagation_is_validated():
    """(Its serialization: test_layer_harness[free_singles_explicit].)"""
    with pytest.raises(ValueError, match="propagation must be one of"):
        GraphMixture(propagation="fast")


# ---------------------------------------------------------------------- top-k (sparse) form
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


@pytest.mark.parametrize("propagation", ["auto", "chained", "explicit"])
@pytest.mark.parametrize("k", [2, T])
@pytest.mark.parametrize("include_products,conditioned", [(True, True), (False, False)])
def test_top_k_form_matches_numpy_on_the_kept_sources(rng, k, include_products, conditioned,
                                                      propagation):
    """The (indices, weights) form gives the NumPy mixture of the graphs it holds: the dense
    graphs themselves when k covers every row (k = T), each row's k heaviest sources otherwise."""
    features = rng.normal(size=(B, T, D)).astype("float32")
    padding = np.ones((B, T), bool)
    padding[1, -2:] = False
    graphs = random_graphs(rng, padding)
    indices, weights, kept = numpy_top_k(graphs, k)
    if k == T:
        np.testing.assert_array_equal(kept, graphs)
    else:
        assert not np.allclose(kept, graphs)  # truncation changed something
    mix = GraphMixture(num_mixtures=2, conditioned=conditioned,
                       include_products=include_products, propagation=propagation)
    mix.build(features.shape, (indices.shape, weights.shape))
    values = randomize(mix, rng)
    kernel = values.get("weight_kernel")
    out = mix(features, (indices, weights)).numpy()
    expected = numpy_mixture(features, kept, values["weight_logits"], kernel, values["scale"],
                             include_products)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    explicit = mix.explicit_mixed_graphs(features, (indices, weights)).numpy()
    np.testing.assert_allclose(
        explicit, numpy_mixed_graphs(features, kept, values["weight_logits"], kernel,
                                     values["scale"], include_products), rtol=1e-4, atol=1e-6)


def test_top_k_form_gradients_match_the_dense_form(rng):
    features = tf.constant(rng.normal(size=(B, T, D)).astype("float32"))
    graphs = random_graphs(rng)
    indices, weights, _ = numpy_top_k(graphs, T)
    mix = GraphMixture(num_mixtures=2)
    mix.build(features.shape, graphs.shape)
    randomize(mix, rng)
    target = tf.constant(rng.normal(size=(B, T, 2, 2, D)).astype("float32"))
    grads = []
    for form in (graphs, (indices, weights)):
        with tf.GradientTape() as tape:
            tape.watch(features)
            loss = tf.reduce_sum(mix(features, form) * target)
        grads.append(tape.gradient(loss, [features] + [v.value for v in mix.weights]))
    for dense, sparse in zip(*grads):
        np.testing.assert_allclose(sparse.numpy(), dense.numpy(), rtol=1e-4, atol=1e-5)


def test_top_k_form_errors():
    mix = GraphMixture()
    features = np.zeros((1, 3, 2), "float32")
    mix.build(features.shape, (1, 2, 1, 1, 3, 2))
    with pytest.raises(ValueError, match=r"expected graphs: .*\(indices, weights\), both "
                                         r"\[batch, 2, L, K, T, k\].*got shapes \(1, 3, 2\)"):
        mix(features, (np.zeros((1, 3, 2), "int32"), np.zeros((1, 3, 2), "float32")))


def test_top_k_form_with_run_time_length_chooses_gather_or_dense_alike(rng, monkeypatch):
    """With T known at run time only, "auto" picks gather or the densified graphs by tf.cond;
    both branches give the NumPy mixture of the kept sources."""
    from glomo_tf.layers import graph_mixture

    features = rng.normal(size=(B, T, D)).astype("float32")
    graphs = random_graphs(rng)
    indices, weights, kept = numpy_top_k(graphs, 2)
    mix = GraphMixture(num_mixtures=2)
    mix.build(features.shape, (indices.shape, weights.shape))
    values = randomize(mix, rng)
    expected = numpy_mixture(features, kept, values["weight_logits"], values["weight_kernel"],
                             values["scale"], True)
    for ratio in (1, 1000):  # T >= ratio * k: gather; otherwise dense
        monkeypatch.setattr(graph_mixture, "GATHER_MIN_RATIO", ratio)
        call = tf.function(lambda h, i, w: mix(h, (i, w)), input_signature=[
            tf.TensorSpec([None, None, D]), tf.TensorSpec([None, 2, L, K, None, None], tf.int32),
            tf.TensorSpec([None, 2, L, K, None, None])])
        np.testing.assert_allclose(call(features, indices, weights).numpy(), expected,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_given_candidate_matrices_equal_the_explicit_form(num_layers):
    """Candidates formed once (GraphMixture.candidate_matrices, checked against NumPy: the heads,
    then the chains Lambda^l = G^l Lambda^{l-1} of layers 2..L, rows first) and given as
    {"candidates"} give what the layer computes from the graphs, in every propagation; so do all
    2 L K candidates of the mixture weights (Lambda^1 repeated), each with its own weight, and
    the packed form of graphs that keep their direction's side of the diagonal."""
    from glomo_tf import ops
    rng = np.random.default_rng(num_layers)
    H = rng.normal(size=(2, 5, 3)).astype("float32")
    G = rng.random((2, 2, num_layers, 2, 5, 5)).astype("float32")
    products = ops.hierarchical_products(tf.constant(G)).numpy()
    assert products.shape == (2, 2, num_layers - 1, 2, 5, 5)
    chains = [G[:, :, 0]]
    for layer in range(1, num_layers):
        chains.append(np.einsum("bzkts,bzksu->bzktu", G[:, :, layer], chains[-1]))
        np.testing.assert_allclose(products[:, :, layer - 1], chains[-1], rtol=1e-5)
    below = np.tril(np.ones((5, 5), "float32"), -1)
    sided = G * np.stack([below, below.T])[None, :, None, None]
    for include in (True, False):
        groups = [G[:, :, l, k] for l in range(num_layers) for k in range(2)]
        every = list(groups)
        if include:
            groups += [chains[l][:, :, k] for l in range(1, num_layers) for k in range(2)]
            every += [chains[l][:, :, k] for l in range(num_layers) for k in range(2)]
        expected = np.stack(groups, axis=2).transpose(0, 1, 3, 2, 4)  # [B, 2, T, C, T]
        every = np.stack(every, axis=2).transpose(0, 1, 3, 2, 4)
        given = GraphMixture.candidate_matrices(G, include).numpy()
        np.testing.assert_allclose(given, expected, rtol=1e-5, atol=1e-7)
        for propagation in ("explicit", "chained", "auto"):
            mix = GraphMixture(num_mixtures=2, include_products=include, propagation=propagation)
            for conditioned in (True, False):
                mix.conditioned = conditioned
                mix(H, G)  # built on the graphs: a weight per candidate of the paper
                randomize(mix, rng)
                online = mix(H, G).numpy()
                for candidates in (given, every):
                    np.testing.assert_allclose(mix(H, {"candidates": candidates}).numpy(),
                                               online, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(
                    mix.explicit_mixed_graphs(H, {"candidates": given}).numpy(),
                    mix.explicit_mixed_graphs(H, G).numpy(), rtol=1e-5, atol=1e-6)
                packed = {"packed_candidates": GraphMixture.candidate_matrices(
                    sided, include, packed=True)}
                np.testing.assert_allclose(mix(H, packed).numpy(), mix(H, sided).numpy(),
                                           rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(mix.explicit_mixed_graphs(H, packed).numpy(),
                                           mix.explicit_mixed_graphs(H, sided).numpy(),
                                           rtol=1e-5, atol=1e-6)
        # Packed: the two directions of graphs that keep their sides of the diagonal (forward
        # s < t, backward s > t, as the products do) in one matrix.
        unpacked = GraphMixture.candidate_matrices(sided, include).numpy()
        assert not (unpacked[:, 0] * unpacked[:, 1]).any()
        np.testing.assert_allclose(
            GraphMixture.candidate_matrices(sided, include, packed=True).numpy(),
            unpacked[:, 0] + unpacked[:, 1], rtol=1e-6, atol=1e-7)
        with pytest.raises(ValueError, match="other side of the diagonal"):
            GraphMixture.candidate_matrices(G, include, packed=True)
        pack = tf.function(lambda g: GraphMixture.candidate_matrices(g, include, packed=True))
        with pytest.raises(tf.errors.InvalidArgumentError, match="other side of the diagonal"):
            pack(tf.constant(G))
    mix = GraphMixture(num_mixtures=2)
    with pytest.raises(ValueError, match="got keys"):
        mix(H, {"graphs": G})
    mix(H, G)  # built on the graphs: 4 L weights, 4 L - 2 distinct candidates
    if num_layers > 1:  # (with one layer the heads are all the distinct candidates)
        with pytest.raises(ValueError, match=r"\[batch, 2, T, %d or %d, T\]"
                           % (4 * num_layers - 2, 4 * num_layers)):
            mix(H, {"candidates": GraphMixture.candidate_matrices(G, include_products=False)})
