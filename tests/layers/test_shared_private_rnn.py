"""Tests of SharedPrivateRNN: gradient isolation of the private state, anchor sampling, the GRU
against NumPy, masking; the layer harness (serialization, bfloat16, mask, XLA)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import SharedPrivateRNN
from glomo_tf.layers.related.shared_private_rnn import sample_anchors
from layer_harness import MaskCheck, run_layer_test

B, T, D, U, V = 3, 8, 4, 6, 12
IDS = np.array([[3, 4, 5, 6, 7, 8, 9, 10],
                [2, 11, 3, 5, 1, 0, 0, 0],
                [7, 7, 1, 0, 0, 0, 0, 0]], "int32")
MASK = IDS > 0


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def randomize(layer, rng, scale=0.5):
    for w in layer.weights:
        if "seed_generator" not in w.path:
            w.assign(rng.normal(0, scale, w.shape).astype(w.dtype))


def make_layer(shared_fraction=0.5, **kwargs):
    options = dict(num_anchors=2, reconstruct_length=2, predict_length=2, vocabulary_size=V,
                   seed=3)
    options.update(kwargs)
    return SharedPrivateRNN(U, shared_fraction=shared_fraction, **options)


def np_gru(layer, x, length):
    """The main GRU on the real steps of one sequence, recurrent kernel as stored but with the
    private-to-shared block written out as zero."""
    w = lambda v: v.numpy().astype(np.float64)  # noqa: E731
    r = layer.shared_units
    rk = w(layer.recurrent_kernel).copy()
    for gate in range(3):
        rk[r:, gate * U:gate * U + r] = 0.0
    h, out = np.zeros(U), []
    for t in range(length):
        gx = x[t] @ w(layer.kernel) + w(layer.input_bias)
        gh = h @ rk + w(layer.recurrent_bias)
        reset = sigmoid(gx[:U] + gh[:U])
        update = sigmoid(gx[U:2 * U] + gh[U:2 * U])
        cand = np.tanh(gx[2 * U:] + reset * gh[2 * U:])
        h = update * h + (1 - update) * cand
        out.append(h)
    return np.array(out)


def gate_columns(array, part, r):
    """Columns of every gate that produce the shared (``part="shared"``) or private units."""
    cols = [np.arange(g * U, g * U + r) if part == "shared" else np.arange(g * U + r, (g + 1) * U)
            for g in range(3)]
    return array[..., np.concatenate(cols)]


# ---------------------------------------------------------------------------- anchors
def test_anchors_fall_inside_their_regions_and_real_positions():
    lengths = np.array([10, 7, 3, 2])
    n = 3
    generator = keras.random.SeedGenerator(7)
    seen = set()
    for _ in range(40):
        anchors, valid = (a.numpy() for a in sample_anchors(lengths, n, seed=generator))
        assert anchors.shape == (4, n) and anchors.dtype == np.int32
        for b, length in enumerate(lengths):
            for i in range(n):
                start, end = i * length // n, (i + 1) * length // n
                assert valid[b, i] == (end > start)
                if valid[b, i]:
                    assert start <= anchors[b, i] < end < length + 1
                    assert anchors[b, i] < length
        seen.update(anchors[0].tolist())
    assert seen == set(range(10))  # every position of the long sequence gets drawn
    # Sequences shorter than num_anchors have empty regions; an int seed is reproducible.
    np.testing.assert_array_equal(valid[3], [False, True, True])
    np.testing.assert_array_equal(sample_anchors(lengths, n, seed=5)[0].numpy(),
                                  sample_anchors(lengths, n, seed=5)[0].numpy())


# ---------------------------------------------------------------------------- the recurrence
def test_states_match_numpy_and_padding(rng):
    layer = make_layer(return_sequences=True)
    x = rng.normal(size=(B, T, D)).astype("float32")
    layer(x, mask=MASK)
    randomize(layer, rng)
    states = layer(x, mask=MASK).numpy()
    for b in range(B):
        n = int(MASK[b].sum())
        np.testing.assert_allclose(states[b, :n], np_gru(layer, x[b], n), rtol=1e-4, atol=1e-5)
        assert np.all(states[b, n:] == 0.0)
    last = SharedPrivateRNN.from_config({**layer.get_config(), "return_sequences": False})
    last(x, mask=MASK)
    last.set_weights(layer.get_weights())
    np.testing.assert_allclose(last(x, mask=MASK).numpy(),
                               states[np.arange(B), MASK.sum(1) - 1], rtol=1e-5, atol=1e-6)
    # Padding invariance: garbage in padded steps changes nothing.
    noisy = np.where(MASK[..., None], x, 9.0).astype("float32")
    np.testing.assert_allclose(layer(noisy, mask=MASK).numpy(), states, rtol=1e-6, atol=1e-6)


def test_aux_loss_only_when_training_with_targets(rng):
    layer = make_layer()
    x = rng.normal(size=(B, T, D)).astype("float32")
    layer(x, mask=MASK, aux_targets=IDS, training=True)
    assert len(layer.losses) == 1 and float(layer.losses[0]) > 0
    layer(x, mask=MASK, aux_targets=IDS, training=False)
    assert layer.losses == []
    layer(x, mask=MASK, training=True)
    assert layer.losses == []
    # aux_weight scales the loss (same anchors: fixed int seed in sample_anchors).
    states = layer(x, mask=MASK)
    anchors, valid = sample_anchors(MASK.sum(1), 2, seed=11)
    base = layer.auxiliary_loss(x, states, IDS, MASK, anchors, valid)
    heavy = SharedPrivateRNN.from_config({**layer.get_config(), "aux_weight": 3.0})
    heavy(x, mask=MASK)
    heavy.set_weights(layer.get_weights())
    np.testing.assert_allclose(heavy.auxiliary_loss(x, states, IDS, MASK, anchors, valid),
                               3.0 * base.numpy(), rtol=1e-5)


# ---------------------------------------------------------------------------- gradient flow
def aux_and_main_gradients(layer, x):
    variables = [layer.kernel, layer.recurrent_kernel, layer.input_bias, layer.recurrent_bias]
    with tf.GradientTape(persistent=True) as tape:
        states = layer(x, mask=MASK, aux_targets=IDS, training=True)
        aux = tf.add_n(layer.losses)
        main = tf.reduce_sum(states[..., layer.shared_units:] ** 2)
    return ([g.numpy() for g in tape.gradient(aux, variables)],
            [g.numpy() for g in tape.gradient(main, variables)])


@pytest.mark.parametrize("lengths", [(2, 2), (3, 0), (0, 3)])
def test_private_part_gets_no_auxiliary_gradient(lengths, rng):
    layer = make_layer(0.5, reconstruct_length=lengths[0], predict_length=lengths[1])
    x = rng.normal(size=(B, T, D)).astype("float32")
    layer(x, mask=MASK)
    randomize(layer, rng)
    r = layer.shared_units
    assert r == 3
    aux_grads, main_grads = aux_and_main_gradients(layer, x)
    for aux_g, main_g in zip(aux_grads, main_grads):
        # Weights producing the private units get exactly nothing from the auxiliary loss ...
        assert np.all(gate_columns(aux_g, "private", r) == 0.0)
        # ... the shared ones do, and the private ones are trained by the main loss.
        assert np.abs(gate_columns(aux_g, "shared", r)).max() > 1e-6
        assert np.abs(gate_columns(main_g, "private", r)).max() > 1e-6
    # Gradients with respect to the hidden states: only shared units, only at anchors.
    states = tf.constant(layer(x, mask=MASK))
    anchors, valid = sample_anchors(MASK.sum(1), 2, seed=4)
    with tf.GradientTape() as tape:
        tape.watch(states)
        loss = layer.auxiliary_loss(x, states, IDS, MASK, anchors, valid)
    state_grads = tape.gradient(loss, states).numpy()
    assert np.all(state_grads[..., r:] == 0.0)
    touched = np.abs(state_grads[..., :r]).max(-1) > 0
    anchor_map = np.zeros((B, T), bool)
    for b in range(B):
        anchor_map[b, anchors.numpy()[b][valid.numpy()[b]]] = True
    assert np.all(touched <= anchor_map) and touched[0].any()


def test_fully_shared_state_gets_auxiliary_gradient_everywhere(rng):
    layer = make_layer(1.0)
    x = rng.normal(size=(B, T, D)).astype("float32")
    layer(x, mask=MASK)
    randomize(layer, rng)
    assert layer.shared_units == U
    aux_grads, _ = aux_and_main_gradients(layer, x)
    kernel_grad, recurrent_grad = aux_grads[0], aux_grads[1]
    assert np.all(np.abs(kernel_grad).max(0) > 0)  # every unit of every gate
    assert np.all(np.abs(recurrent_grad).max(0) > 0)


def test_per_layer_policy_reaches_the_auxiliary_decoders(rng):
    """``dtype="mixed_bfloat16"`` given to the layer alone (float32 global policy) runs the
    auxiliary GRUs and projections in bfloat16, as the global policy does: the same states and
    the same auxiliary loss, bit for bit, from the same weights and anchors."""
    x = rng.normal(size=(B, T, D)).astype("float32")
    results, weights = [], None
    for global_policy, kwargs in (("mixed_bfloat16", {}), ("float32", {"dtype": "mixed_bfloat16"})):
        keras.mixed_precision.set_global_policy(global_policy)  # conftest restores float32
        layer = make_layer(**kwargs)
        layer(x, mask=MASK)
        if weights is None:
            randomize(layer, rng)
            weights = layer.get_weights()
        else:
            layer.set_weights(weights)
        for decoder in (layer.reconstructor, layer.reconstruct_projection, layer.predictor,
                        layer.predict_projection):
            assert decoder.compute_dtype == "bfloat16", (global_policy, decoder.name)
        states = layer(x, mask=MASK, aux_targets=IDS, training=True)
        assert states.dtype == "bfloat16" and len(layer.losses) == 1
        results.append((np.asarray(tf.cast(states, tf.float32)), float(layer.losses[0])))
    (global_states, global_loss), (layer_states, layer_loss) = results
    np.testing.assert_array_equal(layer_states, global_states)
    assert layer_loss == global_loss


# ---------------------------------------------------------------------------- harness
def garbage_at_padding(args, kwargs):
    return (np.where(MASK[..., None], args[0], 9.0).astype("float32"),), kwargs


def without_mask(args, kwargs):
    return args, {k: v for k, v in kwargs.items() if k != "mask"}


@pytest.mark.parametrize("return_sequences", [False, True])
def test_layer_harness(return_sequences, tmp_path, rng):
    """Config and .keras round trips (auxiliary decoders included), mixed_bfloat16, the mask and
    XLA, returning the last real state or every state."""
    x = rng.normal(size=(B, T, D)).astype("float32")
    run_layer_test(
        SharedPrivateRNN,
        dict(units=U, shared_fraction=0.5, num_anchors=2, reconstruct_length=2, predict_length=2,
             vocabulary_size=V, seed=3, aux_weight=0.3, return_sequences=return_sequences,
             name="sp"),
        (x,), dict(mask=MASK, aux_targets=IDS), tmp_path=tmp_path,
        # Padded steps carry the last real state (and padded states are zero): garbage there
        # changes nothing; without the mask the GRU reads it.
        mask_check=MaskCheck(perturb=garbage_at_padding, real=lambda outputs: outputs,
                             unmasked=without_mask))


def classifier(**kwargs):
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(V, D, mask_zero=True)(ids)
    h = make_layer(0.5, return_sequences=False, name="sp", **kwargs)(x, aux_targets=ids)
    return keras.Model(ids, keras.layers.Dense(2, activation="softmax")(h))


def test_classifier_fits_with_auxiliary_loss(rng):
    model = classifier()
    model(IDS, training=True)
    assert len(model.losses) == 1  # the auxiliary loss reaches the model
    model.compile("adam", "sparse_categorical_crossentropy")
    labels = rng.integers(0, 2, size=B)
    history = model.fit(IDS, labels, batch_size=B, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    # The fit objective includes the auxiliary cross-entropy (about log V at the start).
    main = keras.losses.sparse_categorical_crossentropy(labels, model.predict(IDS, verbose=0))
    assert history.history["loss"][-1] > float(np.mean(main)) + 1.0


def test_compute_output_shape():
    assert make_layer().compute_output_shape((B, T, D)) == (B, T, U)
    assert make_layer(return_sequences=False).compute_output_shape((B, T, D)) == (B, U)


def test_bad_arguments():
    with pytest.raises(ValueError, match="shared_fraction must be"):
        SharedPrivateRNN(U, shared_fraction=0.0)
    with pytest.raises(ValueError, match="no shared unit"):
        SharedPrivateRNN(U, shared_fraction=0.05)
    with pytest.raises(ValueError, match="vocabulary_size is required"):
        SharedPrivateRNN(U, reconstruct_length=2)
    with pytest.raises(ValueError, match="expects inputs"):
        make_layer()(np.zeros((B, D), "float32"))
