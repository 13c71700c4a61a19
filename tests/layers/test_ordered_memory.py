"""Tests of OrderedMemory (Eqs. 4.1-4.13, Algorithm 1) against a NumPy implementation written
step by step, the attention's invariants, padding, the dynamic computation option, a larger
memory at inference; the layer harness (serialization, bfloat16, masks, XLA); fit."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import OrderedMemory
from layer_harness import MaskCheck, run_layer_test

B, T, DIN, D, N = 2, 6, 3, 4, 3


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def randomize(layer, rng, scale=0.6):
    for w in layer.weights:
        if "seed" in w.path or not np.issubdtype(np.dtype(w.dtype), np.floating):
            continue
        w.assign(rng.normal(0, scale, w.shape).astype("float32"))


def np_weights(layer):
    w = lambda v: v.numpy().astype(np.float64)  # noqa: E731
    return {
        "W": w(layer.input_projection.kernel), "b": w(layer.input_projection.bias),
        "gamma": w(layer.layer_norm.gamma), "beta": w(layer.layer_norm.beta),
        "eps": layer.layer_norm.epsilon,
        # Eq. 4.8: W1^Att acts on [M^ ; x~].
        "A1": np.concatenate([w(layer.attention_memory.kernel),
                              w(layer.attention_query.kernel)], axis=0),
        "a1": w(layer.attention_memory.bias),
        "a2": w(layer.attention_score.kernel)[:, 0], "a2b": 0.0,  # b2 cancels in Eq. 4.9
        # Eq. 4.12: W1^Cell acts on [M^^{i-1} ; M^i].
        "C1": np.concatenate([w(layer.cell_candidate.kernel), w(layer.cell_memory.kernel)],
                             axis=0),
        "c1": w(layer.cell_candidate.bias),
        "C2": w(layer.cell_output.kernel), "c2": w(layer.cell_output.bias),
        **({} if layer.scorer == "tanh" else {  # the released code's scorer
            "Wk": w(layer.attention_memory.kernel), "bk": w(layer.attention_memory.bias),
            "Wq": w(layer.attention_query.kernel), "bq": w(layer.attention_query.bias),
            "norm_k": (w(layer.attention_memory_norm.gamma),
                       w(layer.attention_memory_norm.beta)),
            "norm_q": (w(layer.attention_query_norm.gamma),
                       w(layer.attention_query_norm.beta))}),
    }


def np_ordered_memory(layer, x, n_slots=None):
    """Algorithm 1 for one sequence ``x [n, d]`` of real steps, written from the paper: returns
    the per-step outputs ``M^_t^N [n, D]`` and attentions ``p_t [n, N]``. Slots are 1..N here."""
    P = np_weights(layer)
    Dm = layer.units
    Ns = n_slots or layer.num_slots

    def ln(v, gamma_beta=None):
        gamma, beta = gamma_beta or (P["gamma"], P["beta"])
        mu, var = v.mean(), v.var()
        return (v - mu) / np.sqrt(var + P["eps"]) * gamma + beta

    def score(m_hat, xt):
        if layer.scorer == "tanh":  # Eq. 4.8
            return P["a2"] @ np.tanh(P["A1"].T @ np.concatenate([m_hat, xt]) + P["a1"]) + P["a2b"]
        query = ln(P["Wq"].T @ xt + P["bq"], P["norm_q"])
        key = ln(P["Wk"].T @ m_hat + P["bk"], P["norm_k"])
        return P["a2"] @ np.maximum(query + key, 0) / np.sqrt(Dm)

    def cell(cand, mem):  # Eqs. 4.12-4.13
        z = P["C2"].T @ np.maximum(P["C1"].T @ np.concatenate([cand, mem]) + P["c1"], 0) + P["c2"]
        v, h, c, u = z[:Dm], z[Dm:2 * Dm], z[2 * Dm:3 * Dm], z[3 * Dm:]
        return ln(sigmoid(v) * cand + sigmoid(h) * mem + sigmoid(c) * u)

    M = np.zeros((Ns + 1, Dm))  # index 0 unused
    M_hat = np.zeros((Ns + 1, Dm))
    pi = np.zeros(Ns + 2)
    pi[Ns + 1] = 1.0  # pi^{N+1} = 1, pi_0^{<=N} = 0
    outs, ps = [], []
    for x_t in x:
        xt = ln(P["W"].T @ x_t + P["b"])  # Eq. 4.1
        alpha = np.array([score(M_hat[i], xt) for i in range(1, Ns + 1)])
        # The released code counts pi^{i+1} < 1e-5 as an empty slot.
        allowed = pi * (pi >= 1e-5) if layer.attention == "softmax" else pi
        admissible = [i for i in range(1, Ns + 1) if allowed[i + 1] > 0]
        beta = np.exp(alpha - max(alpha[i - 1] for i in admissible))  # Eq. 4.9
        beta_hat = [None] + [min(beta[i - 1], 1.0) * allowed[i + 1] for i in range(1, Ns + 1)]
        p = np.zeros(Ns + 1)
        if layer.attention == "softmax":  # the released code: normalised beta_hat
            p[1:] = np.array(beta_hat[1:]) / sum(beta_hat[1:])
        else:
            stick = 1.0
            for i in range(1, Ns + 1):  # Eq. 4.11, the last slot takes what remains
                p[i] = stick if i == Ns else beta_hat[i] * stick
                stick *= 1.0 - beta_hat[i]
        cum = np.array([p[1:i + 1].sum() for i in range(Ns + 1)])  # Eq. 4.3
        rev = np.array([p[i:].sum() for i in range(Ns + 1)])  # Eq. 4.4
        new_M = M.copy()
        new_hat = np.zeros_like(M_hat)
        new_hat[0] = xt
        for i in range(1, Ns + 1):
            new_M[i] = M[i] * (1 - rev[i]) + M_hat[i] * rev[i]  # Eq. 4.5
            o = cell(new_hat[i - 1], new_M[i])  # Eq. 4.6
            new_hat[i] = xt * (1 - cum[i]) + o * cum[i]  # Eq. 4.7 (Algorithm 1)
        M, M_hat = new_M, new_hat
        pi = np.concatenate([cum, [1.0]])
        outs.append(M_hat[Ns].copy())
        ps.append(p[1:].copy())
    return np.array(outs), np.array(ps)


def make_inputs(seed=0, steps=T):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, steps, DIN)).astype("float32")
    mask = np.ones((B, steps), bool)
    mask[1, steps - 2:] = False
    return x, mask


def built_layer(seed=1, **kwargs):
    layer = OrderedMemory(D, num_slots=N, return_sequences=True, return_attention=True, **kwargs)
    x, mask = make_inputs()
    layer(x, mask=mask)
    randomize(layer, np.random.default_rng(seed))
    return layer


@pytest.mark.parametrize("attention, scorer", [("stick_breaking", "tanh"), ("softmax", "tanh"),
                                               ("softmax", "layer_norm")])
def test_recurrence_matches_numpy_algorithm_1(attention, scorer):
    layer = built_layer(attention=attention, scorer=scorer)
    x, mask = make_inputs()
    outputs, probs = (v.numpy() for v in layer(x, mask=mask))
    last = OrderedMemory.from_config({**layer.get_config(), "return_sequences": False,
                                      "return_attention": False})
    last(x, mask=mask)
    last.set_weights(layer.get_weights())
    final = last(x, mask=mask).numpy()
    for b in range(B):
        n = int(mask[b].sum())
        ref_out, ref_p = np_ordered_memory(layer, x[b, :n].astype(np.float64))
        np.testing.assert_allclose(outputs[b, :n], ref_out, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(probs[b, :n], ref_p, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(final[b], ref_out[-1], rtol=1e-4, atol=1e-5)
        assert np.all(outputs[b, n:] == 0) and np.all(probs[b, n:] == 0)
    # The attention is not trivially one-hot on this case: the comparison covers the soft path.
    assert 0.05 < probs[0, 2:].max(axis=-1).min() < 0.95


@pytest.mark.parametrize("attention", ["stick_breaking", "softmax"])
def test_attention_sums_to_one_and_never_points_at_an_empty_slot(attention):
    layer = built_layer(seed=4, attention=attention)
    x, mask = make_inputs(seed=3, steps=12)
    _, probs = layer(x, mask=mask)
    probs = probs.numpy().astype(np.float64)
    for b in range(B):
        n = int(mask[b].sum())
        p = probs[b, :n]
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-6)
        assert np.all(p >= 0)
        np.testing.assert_array_equal(p[0], np.eye(N)[N - 1])  # empty memory: slot N only
        # p_t^i <= pi_{t-1}^{i+1}: no mass above the free slot just over the stack.
        cum = np.cumsum(p, axis=1)
        admissible = np.concatenate([cum[:-1, 1:], np.ones((n - 1, 1))], axis=1)
        assert np.all(p[1:] <= admissible + 1e-6)
        # ... and the stack can grow by one slot a step at most: p_2 lives on slots N-1, N.
        assert p[1, :N - 2].sum() < 1e-6


def test_hard_attention_on_an_empty_slot_is_impossible():
    """With a previous distribution pointing at slot N (stack of one item), slots 1..N-2 get
    exactly zero whatever the scores."""
    from glomo_tf.layers.related.ordered_memory import stick_breaking
    scores = tf.constant([[9.0, 5.0, -3.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    previous_cum = tf.constant([[0.0, 0.0, 0.0, 1.0]] * 2)
    admissible = tf.concat([previous_cum[:, 1:], tf.ones((2, 1))], axis=1)
    p = stick_breaking(scores, admissible).numpy()
    np.testing.assert_array_equal(p[:, :2], 0.0)
    # Row 1: admissible slots 3 and 4, maximum score 0 (slot 4): beta_3 = e^-3, slot 4 the rest.
    np.testing.assert_allclose(p[0], [0, 0, np.exp(-3.0), 1.0 - np.exp(-3.0)], rtol=1e-6)
    # Row 2: equal scores, beta = 1 on slot 3 (the first admissible), so p = e_3.
    np.testing.assert_allclose(p[1], [0, 0, 1.0, 0])


def test_padding_anywhere_leaves_the_memory_unchanged():
    layer = built_layer(seed=2)
    x, _ = make_inputs(seed=5)
    mask = np.ones((B, T), bool)
    mask[0, [1, 3]] = False  # interior padding
    outputs, probs = (v.numpy() for v in layer(x, mask=mask))
    kept = x[0:1, mask[0]]
    short, short_p = (v.numpy() for v in layer(kept))
    np.testing.assert_allclose(outputs[0, mask[0]], short[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probs[0, mask[0]], short_p[0], rtol=1e-5, atol=1e-6)
    garbage = x.copy()
    garbage[0, [1, 3]] = 100.0
    again = layer(garbage, mask=mask)[0].numpy()
    np.testing.assert_allclose(again, outputs, rtol=1e-6, atol=1e-6)


def test_more_slots_at_inference_use_the_same_weights():
    layer = built_layer(seed=6)
    x, mask = make_inputs(seed=7, steps=10)
    outputs, probs = (v.numpy() for v in layer(x, mask=mask, num_slots=2 * N))
    assert probs.shape == (B, 10, 2 * N)
    n = int(mask[1].sum())
    ref_out, ref_p = np_ordered_memory(layer, x[1, :n].astype(np.float64), n_slots=2 * N)
    np.testing.assert_allclose(outputs[1, :n], ref_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(probs[1, :n], ref_p, rtol=1e-4, atol=1e-6)


def test_dynamic_threshold_skips_cells_and_barely_changes_the_outputs():
    layer = built_layer(seed=8)
    x, mask = make_inputs(seed=9, steps=10)
    full = layer(x, mask=mask)[0].numpy()
    config = layer.get_config()
    fast = OrderedMemory.from_config({**config, "dynamic_threshold": 1e-5})
    coarse = OrderedMemory.from_config({**config, "dynamic_threshold": 0.99})
    for other in (fast, coarse):
        other(x, mask=mask)
        other.set_weights(layer.get_weights())
    np.testing.assert_allclose(fast(x, mask=mask)[0].numpy(), full, atol=1e-4)
    # A large threshold drops cells that matter: the option is live.
    assert np.abs(coarse(x, mask=mask)[0].numpy() - full).max() > 1e-3
    # Training ignores the threshold.
    np.testing.assert_allclose(coarse(x, mask=mask, training=True)[0].numpy(), full, atol=1e-5)
    # Under XLA too.
    jit = tf.function(lambda v: fast(v, mask=mask)[0], jit_compile=True)
    np.testing.assert_allclose(jit(x).numpy(), full, atol=1e-4)


def test_dropout_only_in_training():
    layer = built_layer(seed=10, input_dropout=0.3, hidden_dropout=0.3, attention_dropout=0.3,
                        output_dropout=0.3)
    x, mask = make_inputs()
    a = layer(x, mask=mask)[0].numpy()
    np.testing.assert_array_equal(a, layer(x, mask=mask)[0].numpy())
    b = layer(x, mask=mask, training=True)[0].numpy()
    assert np.abs(a - b).max() > 1e-3
    for name in ("input_dropout", "hidden_dropout", "attention_dropout", "output_dropout"):
        only = OrderedMemory.from_config({**layer.get_config(), "input_dropout": 0.0,
                                          "hidden_dropout": 0.0, "attention_dropout": 0.0,
                                          "output_dropout": 0.0, name: 0.5})
        only(x, mask=mask)
        only.set_weights(layer.get_weights())
        diff = np.abs(only(x, mask=mask, training=True)[0].numpy() - a)
        assert diff.max() > 1e-3, name


@pytest.mark.parametrize("kwargs,message", [
    ({"units": 0, "num_slots": 3}, "positive"),
    ({"units": 4, "num_slots": 0}, "positive"),
    ({"units": 4, "num_slots": 3, "hidden_dropout": 1.0}, "hidden_dropout"),
    ({"units": 4, "num_slots": 3, "dynamic_threshold": 0.0}, "dynamic_threshold"),
    ({"units": 4, "num_slots": 3, "attention": "sparsemax"}, "attention must be"),
    ({"units": 4, "num_slots": 3, "scorer": "dot"}, "scorer must be"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OrderedMemory(**kwargs)


def test_released_optimizer_is_the_released_codes_adam():
    from glomo_tf.layers.related.ordered_memory import released_optimizer

    config = released_optimizer(2e-3).get_config()
    assert (config["beta_1"], config["epsilon"], config["global_clipnorm"]) == (0.0, 1e-9, 1.0)
    assert config["learning_rate"] == pytest.approx(2e-3) and config["clipnorm"] is None


def test_rank_is_checked():
    with pytest.raises(ValueError, match="inputs"):
        OrderedMemory(4, 3)(np.zeros((2, 3), "float32"))


def harness_inputs():
    x, mask = make_inputs()
    mask[1, 2] = False  # interior padding too: later real steps would see it without the mask
    return x, mask


def _mask_check():
    def perturb(args, kwargs):
        x = args[0].copy()
        x[~kwargs["mask"]] = 7.0
        return (x,), dict(kwargs)

    def real(outputs):
        mask = harness_inputs()[1]
        if isinstance(outputs, (list, tuple)):
            return [o[mask] if o.ndim == 3 else o for o in outputs]
        return outputs[mask] if outputs.ndim == 3 else outputs

    def unmasked(args, kwargs):
        return args, {k: v for k, v in kwargs.items() if k != "mask"}

    return MaskCheck(perturb=perturb, real=real, unmasked=unmasked)


@pytest.mark.parametrize("options", [
    {"return_attention": True},
    {"return_sequences": True, "hidden_dropout": 0.1, "dynamic_threshold": 1e-5,
     "attention": "softmax", "scorer": "layer_norm"},
])
def test_layer_harness(tmp_path, options):
    x, mask = harness_inputs()
    kwargs = {"units": D, "num_slots": N, **options}
    run_layer_test(OrderedMemory, kwargs, (x,), {"mask": mask, "training": False},
                   tmp_path=tmp_path, mask_check=_mask_check(),
                   bfloat16_dtypes=("bfloat16", "float32") if options.get("return_attention")
                   else None, bfloat16_rtol=0.1)


def test_fit_in_a_functional_model(tmp_path):
    """Classify whether a planted token appears before the other one: learnable from the order."""
    rng = np.random.default_rng(0)
    n, steps = 256, 8
    ids = rng.integers(3, 8, size=(n, steps))
    labels = rng.integers(0, 2, size=n)
    for i in range(n):
        a, b = sorted(rng.choice(steps, 2, replace=False))
        ids[i, a], ids[i, b] = (1, 2) if labels[i] else (2, 1)
    inputs = keras.Input((steps,), dtype="int32")
    emb = keras.layers.Embedding(8, 8, mask_zero=True)(inputs)
    h = OrderedMemory(8, num_slots=3, hidden_dropout=0.1)(emb)
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(ids, labels, epochs=8, batch_size=32, verbose=0)
    assert history.history["loss"][-1] < 0.8 * history.history["loss"][0]
    path = str(tmp_path / "om.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(restored.predict(ids[:16], verbose=0),
                               model.predict(ids[:16], verbose=0), rtol=1e-5, atol=1e-5)


def test_gradients_compile_with_xla():
    layer = built_layer(seed=11, hidden_dropout=0.1, attention_dropout=0.1)
    x, mask = make_inputs()

    def loss_and_grads(v, training):
        with tf.GradientTape() as tape:
            out, p = layer(v, mask=mask, training=training)
            loss = tf.reduce_sum(out ** 2) + tf.reduce_sum(p[:, :, 0])
        return loss, tape.gradient(loss, layer.trainable_weights)

    eager_loss, eager_grads = loss_and_grads(x, False)
    jit_loss, jit_grads = tf.function(lambda v: loss_and_grads(v, False), jit_compile=True)(x)
    np.testing.assert_allclose(jit_loss.numpy(), eager_loss.numpy(), rtol=1e-5)
    for a, b in zip(jit_grads, eager_grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    assert all(np.abs(g.numpy()).max() > 0 for g in eager_grads)
    train_grads = tf.function(lambda v: loss_and_grads(v, True), jit_compile=True)(x)[1]
    assert all(np.all(np.isfinite(g.numpy())) for g in train_grads)


def test_docstring_example():
    import doctest

    from glomo_tf.layers.related import ordered_memory
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = doctest.DocTestFinder().find(ordered_memory)
    assert sum(len(t.examples) for t in tests) >= 6
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed"
