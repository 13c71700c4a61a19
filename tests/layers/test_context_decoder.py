"""Tests of ContextDecoder: targets, weights, tied logits from a NumPy GRU stack, no peeking,
positions of any integer dtype, the docstring example; the layer harness (serialization,
bfloat16, XLA)."""

import doctest

import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import ContextDecoder
from glomo_tf.layers import context_decoder
from layer_harness import run_layer_test

VOCAB, D_MODEL, CONTEXT = 30, 8, 3

IDS = np.array([[5, 3, 9, 1, 7, 2, 4],
                [8, 2, 0, 11, 6, 0, 0]], np.int32)
POSITIONS = np.array([0, 2, 5, 6], np.int32)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def make_decoder(direction="forward", rng=None, **kwargs):
    decoder = ContextDecoder(D_MODEL, context_length=CONTEXT, num_layers=2, direction=direction,
                             **kwargs)
    decoder.build()
    if rng is not None:
        for w in decoder.weights:
            w.assign(rng.normal(0, 0.4, w.shape).astype("float32"))
    return decoder


def np_targets(ids, positions, direction):
    step = 1 if direction == "forward" else -1
    B, T = ids.shape
    targets = np.zeros((B, len(positions), CONTEXT), np.int64)
    for b in range(B):
        for i, p in enumerate(positions):
            for j in range(1, CONTEXT + 1):
                q = p + step * j
                if 0 <= q < T:
                    targets[b, i, j - 1] = ids[b, q]
    return targets, (targets != 0).astype(np.float32)


def np_gru(inputs, h0, kernel, recurrent, bias):
    """Keras GRU, reset_after=True, gate order (z, r, h): ``[N, D, d] -> [N, D, d]``."""
    d = h0.shape[-1]
    h, outputs = h0, []
    for step in range(inputs.shape[1]):
        mx = inputs[:, step] @ kernel + bias[0]
        mh = h @ recurrent + bias[1]
        z = sigmoid(mx[:, :d] + mh[:, :d])
        r = sigmoid(mx[:, d:2 * d] + mh[:, d:2 * d])
        candidate = np.tanh(mx[:, 2 * d:] + r * mh[:, 2 * d:])
        h = z * h + (1.0 - z) * candidate
        outputs.append(h)
    return np.stack(outputs, axis=1)


def np_decoder(decoder, states, positions, ids, embedding):
    """Eq. 3: inputs ``[0, e(y_1), .., e(y_{D-1})]``, every layer starts from the state, and the
    logits are ``hidden @ E^T``."""
    E = embedding.astype(np.float64)
    targets, _ = np_targets(ids, positions, decoder.direction)
    B, S = targets.shape[:2]
    inputs = np.zeros((B * S, CONTEXT, D_MODEL))
    for n, (b, i) in enumerate(np.ndindex(B, S)):
        for j in range(1, CONTEXT):
            inputs[n, j] = E[targets[b, i, j - 1]]
    h0 = states.reshape(B * S, D_MODEL).astype(np.float64)
    hidden = inputs
    for rnn in decoder.rnns:
        kernel, recurrent, bias = (w.astype(np.float64) for w in rnn.get_weights())
        hidden = np_gru(hidden, h0, kernel, recurrent, bias)
    return (hidden @ E.T).reshape(B, S, CONTEXT, -1)


# ---------------------------------------------------------------------------- targets
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_targets_and_weights(direction, rng):
    decoder = make_decoder(direction)
    states = rng.normal(size=(2, len(POSITIONS), D_MODEL)).astype("float32")
    embedding = rng.normal(size=(VOCAB, D_MODEL)).astype("float32")
    out = decoder(states, POSITIONS, IDS, embedding)
    targets, weights = np_targets(IDS, POSITIONS, direction)
    np.testing.assert_array_equal(out["targets"].numpy(), targets)
    np.testing.assert_array_equal(out["weights"].numpy(), weights)
    assert out["weights"].dtype == "float32"
    # Hand-checked cases: out of range and padded targets have weight 0.
    if direction == "forward":
        np.testing.assert_array_equal(out["targets"].numpy()[1, 1], [11, 6, 0])  # t=2: x3..x5
        np.testing.assert_array_equal(out["targets"].numpy()[0, 2], [4, 0, 0])  # t=5: past the end
        np.testing.assert_array_equal(out["weights"].numpy()[0, 3], [0, 0, 0])
    else:
        np.testing.assert_array_equal(out["targets"].numpy()[0, 1], [3, 5, 0])  # t=2: x1, x0
        np.testing.assert_array_equal(out["targets"].numpy()[1, 3], [0, 6, 11])  # x5 is padding
        np.testing.assert_array_equal(out["weights"].numpy()[1, 3], [0, 1, 1])
        np.testing.assert_array_equal(out["weights"].numpy()[:, 0], 0)


@pytest.mark.parametrize("dtype", ["int64", "int16", "uint8"])
def test_positions_of_any_integer_dtype(dtype, rng):
    """Positions of any integer dtype (NumPy's default int64 included) give the int32 results,
    eagerly and under XLA; floating positions are refused."""
    decoder = make_decoder(rng=rng)
    states = rng.normal(size=(2, len(POSITIONS), D_MODEL)).astype("float32")
    embedding = rng.normal(size=(VOCAB, D_MODEL)).astype("float32")
    positions = POSITIONS.astype(dtype)
    compiled = tf.function(decoder, jit_compile=True)
    for call, wrap in ((decoder, np.asarray), (compiled, tf.constant)):
        expected = call(states, wrap(POSITIONS), IDS, embedding)
        out = call(states, wrap(positions), IDS, embedding)
        for key in expected:
            np.testing.assert_array_equal(out[key].numpy(), expected[key].numpy(), err_msg=key)
    with pytest.raises(TypeError, match="integer positions"):
        decoder(states, POSITIONS.astype("float32"), IDS, embedding)


def test_docstring_example():
    """The class docstring's example runs (its positions are NumPy's default int64)."""
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(context_decoder)  # run in a copy of the module's globals
    assert sum(len(t.examples) for t in tests) >= 5
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed"


def test_target_positions():
    fw = make_decoder("forward").target_positions(tf.constant([0, 4])).numpy()
    bw = make_decoder("backward").target_positions(tf.constant([0, 4])).numpy()
    np.testing.assert_array_equal(fw, [[1, 2, 3], [5, 6, 7]])
    np.testing.assert_array_equal(bw, [[-1, -2, -3], [3, 2, 1]])


# ---------------------------------------------------------------------------- logits
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_logits_match_numpy_gru_stack(direction, rng):
    decoder = make_decoder(direction, rng)
    states = rng.normal(size=(2, len(POSITIONS), D_MODEL)).astype("float32")
    embedding = rng.normal(size=(VOCAB, D_MODEL)).astype("float32")
    out = decoder(states, POSITIONS, IDS, embedding)
    logits = out["logits"].numpy()
    assert logits.shape == (2, len(POSITIONS), CONTEXT, VOCAB)
    np.testing.assert_allclose(logits, np_decoder(decoder, states, POSITIONS, IDS, embedding),
                               rtol=1e-4, atol=1e-4)


def test_dropout_only_in_training(rng):
    decoder = make_decoder("forward", rng, dropout=0.5)
    states = rng.normal(size=(2, len(POSITIONS), D_MODEL)).astype("float32")
    embedding = rng.normal(size=(VOCAB, D_MODEL)).astype("float32")
    inference = decoder(states, POSITIONS, IDS, embedding, training=False)["logits"].numpy()
    np.testing.assert_allclose(inference, np_decoder(decoder, states, POSITIONS, IDS, embedding),
                               rtol=1e-4, atol=1e-4)
    training = decoder(states, POSITIONS, IDS, embedding, training=True)["logits"].numpy()
    assert np.abs(training - inference).max() > 1e-3


# ---------------------------------------------------------------------------- no peeking
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_decoder_never_receives_the_unit_it_predicts(direction, rng):
    decoder = make_decoder(direction, rng)
    ids = np.array([[5, 3, 9, 1, 7, 2, 4, 8, 6]], np.int32)
    start = 4
    positions = np.array([start], np.int32)
    states = rng.normal(size=(1, 1, D_MODEL)).astype("float32")
    embedding = rng.normal(size=(VOCAB, D_MODEL)).astype("float32")
    base = decoder(states, positions, ids, embedding)["logits"].numpy()[0, 0]
    step = 1 if direction == "forward" else -1
    for j in range(CONTEXT):  # step j predicts x_{t + step * (j + 1)}
        changed = ids.copy()
        changed[0, start + step * (j + 1)] = 29
        logits = decoder(states, positions, changed, embedding)["logits"].numpy()[0, 0]
        np.testing.assert_array_equal(logits[:j + 1], base[:j + 1])
        if j + 1 < CONTEXT:  # the next step reads it as input: the check can fail
            assert np.abs(logits[j + 1] - base[j + 1]).max() > 1e-4
    # The start unit itself and units outside the context are never read.
    changed = ids.copy()
    changed[0, start] = 29
    changed[0, start - step * 2] = 28
    np.testing.assert_array_equal(
        decoder(states, positions, changed, embedding)["logits"].numpy()[0, 0], base)


# ---------------------------------------------------------------------------- harness
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_layer_harness(direction, tmp_path, rng):
    """Config and .keras round trips, mixed_bfloat16 and XLA, in each direction."""
    states = rng.normal(size=(2, len(POSITIONS), D_MODEL)).astype("float32")
    embedding = rng.normal(size=(VOCAB, D_MODEL)).astype("float32")
    run_layer_test(
        ContextDecoder,
        dict(hidden_dim=D_MODEL, context_length=CONTEXT, num_layers=2, direction=direction,
             dropout=0.1, name="dec"),
        (states, POSITIONS, IDS, embedding), tmp_path=tmp_path,
        saving_check="subclassed",  # positions [S] and the embedding table have no batch axis
        # The loss weights stay float32 whatever the policy; the targets are token ids.
        bfloat16_dtypes={"logits": "bfloat16", "targets": "int32", "weights": "float32"},
        # No mask: padding is token id 0, which only zeroes the targets' weights
        # (test_targets_and_weights).
        mask_check=None)


def test_compute_output_shape():
    decoder = make_decoder()
    shapes = decoder.compute_output_shape((2, 4, D_MODEL), (4,), (2, 7), (VOCAB, D_MODEL))
    assert shapes == {"logits": (2, 4, CONTEXT, VOCAB), "targets": (2, 4, CONTEXT),
                      "weights": (2, 4, CONTEXT)}


@pytest.mark.parametrize("kwargs,message", [
    (dict(direction="sideways"), "direction must be one of"),
    (dict(context_length=0), "context_length and num_layers must be >= 1"),
    (dict(num_layers=0), "context_length and num_layers must be >= 1"),
])
def test_bad_arguments(kwargs, message):
    config = dict(hidden_dim=D_MODEL)
    config.update(kwargs)
    with pytest.raises(ValueError, match=message):
        ContextDecoder(**config)
