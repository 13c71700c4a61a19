"""Tests of LinearChainCRF against brute-force enumeration of all tag paths, and training."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import LinearChainCRF
from layer_harness import MaskCheck, run_layer_test

N, T = 3, 4
LENGTHS = [4, 2, 1]


def make_mask(lengths, t=T):
    return np.arange(t)[None, :] < np.asarray(lengths)[:, None]


def randomize(layer, rng):
    for w in layer.weights:
        w.assign(rng.normal(0, 1.0, w.shape).astype("float32"))


def np_path_score(layer, emissions, path):
    trans = layer.transitions.numpy().astype(np.float64)
    start = layer.start_transitions.numpy().astype(np.float64)
    end = layer.end_transitions.numpy().astype(np.float64)
    score = start[path[0]] + end[path[-1]]
    score += sum(emissions[t, y] for t, y in enumerate(path))
    score += sum(trans[a, b] for a, b in zip(path[:-1], path[1:]))
    return score


def brute_force(layer, emissions, length):
    """All N^length paths of one sequence: (log Z, best path, best score)."""
    paths = list(itertools.product(range(N), repeat=length))
    scores = np.array([np_path_score(layer, emissions[:length].astype(np.float64), p)
                       for p in paths])
    log_z = scores.max() + np.log(np.exp(scores - scores.max()).sum())
    best = int(np.argmax(scores))
    return log_z, np.array(paths[best]), scores[best]


@pytest.fixture
def case(rng):
    crf = LinearChainCRF(N)
    emissions = rng.normal(size=(len(LENGTHS), T, N)).astype("float32")
    mask = make_mask(LENGTHS)
    crf(emissions, mask=mask)
    randomize(crf, rng)
    tags = rng.integers(0, N, size=(len(LENGTHS), T)).astype("int32")
    return crf, emissions, mask, tags


def test_log_likelihood_matches_brute_force(case):
    crf, emissions, mask, tags = case
    got = crf.log_likelihood(emissions, tags, mask).numpy()
    for b, length in enumerate(LENGTHS):
        log_z, _, _ = brute_force(crf, emissions[b], length)
        expected = np_path_score(crf, emissions[b].astype(np.float64), tags[b, :length]) - log_z
        np.testing.assert_allclose(got[b], expected, rtol=1e-5, atol=1e-5)
    assert np.all(got < 0)


def test_padded_tags_and_emissions_are_ignored(case, rng):
    crf, emissions, mask, tags = case
    base = crf.log_likelihood(emissions, tags, mask).numpy()
    noisy_emissions = np.where(mask[..., None], emissions, rng.normal(size=emissions.shape) * 9)
    noisy_tags = np.where(mask, tags, (tags + 1) % N)
    np.testing.assert_allclose(
        crf.log_likelihood(noisy_emissions.astype("float32"), noisy_tags, mask).numpy(), base,
        rtol=1e-6, atol=1e-6)
    # Probabilities of all paths of the length-2 sequence sum to one.
    total = 0.0
    for path in itertools.product(range(N), repeat=2):
        padded = np.zeros((1, T), "int32")
        padded[0, :2] = path
        total += np.exp(crf.log_likelihood(emissions[1:2], padded, mask[1:2]).numpy()[0])
    np.testing.assert_allclose(total, 1.0, rtol=1e-5)


def test_decode_matches_brute_force(case):
    crf, emissions, mask, _ = case
    tags, scores = crf.decode(emissions, mask)
    tags, scores = tags.numpy(), scores.numpy()
    assert tags.dtype == np.int32 and tags.shape == (len(LENGTHS), T)
    for b, length in enumerate(LENGTHS):
        _, best_path, best_score = brute_force(crf, emissions[b], length)
        np.testing.assert_array_equal(tags[b, :length], best_path)
        np.testing.assert_array_equal(tags[b, length:], 0)
        np.testing.assert_allclose(scores[b], best_score, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(crf(emissions, mask=mask).numpy(), tags)


def test_no_mask_means_all_positions_real(case):
    crf, emissions, _, tags = case
    full = make_mask([T] * len(LENGTHS))
    np.testing.assert_allclose(crf.log_likelihood(emissions, tags).numpy(),
                               crf.log_likelihood(emissions, tags, full).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(crf(emissions).numpy(), crf(emissions, mask=full).numpy())


def test_dynamic_length_inside_tf_function(case):
    crf, emissions, mask, tags = case
    spec = tf.TensorSpec([None, None, N], tf.float32)
    decode = tf.function(lambda e, m: crf.decode(e, m)[0],
                         input_signature=[spec, tf.TensorSpec([None, None], tf.bool)])
    np.testing.assert_array_equal(decode(emissions, mask).numpy(), crf(emissions, mask=mask))
    np.testing.assert_array_equal(decode(emissions[:, :2], mask[:, :2]).numpy(),
                                  crf(emissions[:, :2], mask=mask[:, :2]))


def test_gradients_are_finite(case):
    crf, emissions, mask, tags = case
    emissions = tf.constant(emissions)
    with tf.GradientTape() as tape:
        tape.watch(emissions)
        loss = -tf.reduce_mean(crf.log_likelihood(emissions, tags, mask))
    grads = tape.gradient(loss, [emissions] + crf.trainable_variables)
    for g in grads:
        assert g is not None and np.all(np.isfinite(g.numpy()))
        assert np.abs(g.numpy()).max() > 0
    # Padded emissions get exactly zero gradient.
    assert np.all(grads[0].numpy()[~mask] == 0.0)


# ---------------------------------------------------------------------------- harness
def test_layer_harness(tmp_path, rng):
    """Config and .keras round trips, mixed_bfloat16, the mask and XLA; the tags being discrete,
    the log-likelihood of given tags and the Viterbi scores are compared too."""
    mask = make_mask(LENGTHS)
    emissions = rng.normal(size=(len(LENGTHS), T, N)).astype("float32")
    tags = rng.integers(0, N, size=(len(LENGTHS), T)).astype("int32")

    def scores(crf, args, kwargs):
        return {"log_likelihood": crf.log_likelihood(args[0], tags, kwargs["mask"]),
                "viterbi_score": crf.decode(args[0], kwargs["mask"])[1]}

    def garbage_at_padding(args, kwargs):
        noise = np.random.default_rng(1).normal(size=args[0].shape) * 9
        return (np.where(mask[..., None], args[0], noise).astype("float32"),), kwargs

    run_layer_test(
        LinearChainCRF, dict(num_tags=N), (emissions,), dict(mask=mask), tmp_path=tmp_path,
        extra_outputs=scores,
        bfloat16_dtypes="int32",  # tag ids (the CRF computes in float32 under any policy)
        # Padded tags are 0 and padded emissions never change the real ones.
        mask_check=MaskCheck(perturb=garbage_at_padding, real=lambda outputs: outputs,
                             unmasked=lambda args, kwargs: (args, {})))


def test_keras_mask_of_an_embedding_reaches_the_layer(rng):
    """Embedding(mask_zero=True) -> Dense -> CRF: the mask passes the Dense layer to the CRF."""
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(7, 4, mask_zero=True)(ids)
    emissions = keras.layers.Dense(N)(x)
    crf = LinearChainCRF(N)
    model = keras.Model(ids, crf(emissions))
    randomize(crf, rng)
    data = np.array([[1, 2, 3, 4], [5, 6, 0, 0], [3, 0, 0, 0]], "int32")
    got = model(data).numpy()
    assert np.all(got[data == 0] == 0)
    direct = crf(keras.Model(ids, emissions)(data), mask=data != 0).numpy()
    np.testing.assert_array_equal(got, direct)


def test_compute_output_shape():
    assert LinearChainCRF(N).compute_output_shape((2, 5, N)) == (2, 5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_tags must be"):
        LinearChainCRF(0)
    crf = LinearChainCRF(N)
    with pytest.raises(ValueError, match="expects emissions"):
        crf(np.zeros((2, N), "float32"))


# ---------------------------------------------------------------------------- training
def planted_tags(tokens, lengths):
    """tag = token parity, except that a tag 1 is always followed by tag 2 (a forced transition).

    The tag at ``t`` depends on the tag at ``t - 1``, so a per-token classifier cannot learn it,
    while a CRF with learned transitions can.
    """
    tags = np.zeros_like(tokens)
    for b, length in enumerate(lengths):
        for t in range(length):
            tags[b, t] = 2 if t > 0 and tags[b, t - 1] == 1 else tokens[b, t] % 2
    return tags


@pytest.mark.slow
def test_learns_planted_tagging_rule():
    rng = np.random.default_rng(1)
    vocab, batch, steps_t = 9, 64, 8
    lengths = rng.integers(3, steps_t + 1, size=batch)
    mask = make_mask(lengths, steps_t)
    tokens = np.where(mask, rng.integers(1, vocab, size=(batch, steps_t)), 0).astype("int32")
    tags = planted_tags(tokens, lengths)

    embed = keras.layers.Embedding(vocab, N)
    crf = LinearChainCRF(N)
    crf.build()
    variables = None
    optimizer = keras.optimizers.Adam(0.1)

    @tf.function
    def train_step(tok, tg, m):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(crf.log_likelihood(embed(tok), tg, m))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    embed.build((None, None))
    variables = embed.trainable_variables + crf.trainable_variables
    for _ in range(200):
        train_step(tokens, tags, mask)

    fresh_lengths = rng.integers(3, steps_t + 1, size=batch)
    fresh_mask = make_mask(fresh_lengths, steps_t)
    fresh = np.where(fresh_mask, rng.integers(1, vocab, size=(batch, steps_t)), 0).astype("int32")
    predicted = crf(embed(fresh), mask=fresh_mask).numpy()
    accuracy = (predicted == planted_tags(fresh, fresh_lengths))[fresh_mask].mean()
    assert accuracy > 0.95
    # The forced transition was learned: from tag 1, moving to tag 2 scores highest.
    assert np.argmax(crf.transitions.numpy()[1]) == 2
