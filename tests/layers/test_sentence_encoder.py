"""SentenceEncoder: a NumPy bidirectional GRU written from the GRU equations gives the same vector
and states; padding does not change a sentence's vector; the layer harness (serialization,
bfloat16, masks, XLA); GLoMo graphs on the embeddings; argument errors."""

import keras
import numpy as np
import pytest

from glomo_tf import GraphPredictor, SentenceEncoder
from layer_harness import MaskCheck, run_layer_test

V, E, U = 23, 5, 4


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_gru(gru, xs):
    """Keras's GRU (reset gate after the matrix product) over the rows of ``xs``: the states."""
    kernel = gru.cell.kernel.numpy().astype(np.float64)
    recurrent = gru.cell.recurrent_kernel.numpy().astype(np.float64)
    bias = gru.cell.bias.numpy().astype(np.float64)  # [2, 3U]: input and recurrent biases
    h = np.zeros(recurrent.shape[0])
    states = []
    for x in xs:
        gx = x @ kernel + bias[0]
        gh = h @ recurrent + bias[1]
        z = sigmoid(gx[:U] + gh[:U])  # Keras's gate order: update, reset, candidate
        r = sigmoid(gx[U:2 * U] + gh[U:2 * U])
        n = np.tanh(gx[2 * U:] + r * gh[2 * U:])
        h = z * h + (1 - z) * n
        states.append(h)
    return np.array(states)


def np_encode(encoder, ids):
    """``(vector, states)`` of each sentence from its real units only."""
    table = encoder.embeddings.numpy().astype(np.float64)
    vectors, all_states = [], []
    for row in ids:
        real = row[row != 0]
        x = table[real]
        fw = np_gru(encoder.forward_gru, x)
        bw = np_gru(encoder.backward_gru, x[::-1])[::-1]
        vectors.append(np.concatenate([fw[-1], bw[0]]))
        states = np.zeros((len(row), 2 * U))
        states[:len(real)] = np.concatenate([fw, bw], axis=1)
        all_states.append(states)
    return np.array(vectors), np.array(all_states)


def make_ids():
    return np.array([[3, 4, 5, 6, 0, 0], [7, 2, 9, 0, 0, 0], [11, 12, 13, 14, 15, 16]], "int32")


def randomized(encoder, seed=0):
    rng = np.random.default_rng(seed)
    for w in encoder.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))
    return encoder


def test_vector_and_states_match_a_numpy_bidirectional_gru():
    ids = make_ids()
    encoder = SentenceEncoder(V, E, U, return_sequences=True)
    encoder(ids)
    randomized(encoder)
    out = encoder(ids)
    vector, states = np_encode(encoder, ids)
    np.testing.assert_allclose(out["vector"].numpy(), vector, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["states"].numpy(), states, rtol=1e-5, atol=1e-5)
    # The vector's backward half is the backward state at the first unit, the forward half the
    # forward state at the last real unit.
    np.testing.assert_allclose(out["vector"].numpy()[0, :U], states[0, 3, :U], atol=1e-6)
    np.testing.assert_allclose(out["vector"].numpy()[0, U:], states[0, 0, U:], atol=1e-6)


def test_padding_does_not_change_the_vector():
    ids = make_ids()
    encoder = SentenceEncoder(V, E, U)
    encoder(ids)
    randomized(encoder, seed=1)
    longer = np.concatenate([ids, np.zeros((3, 5), "int32")], axis=1)
    np.testing.assert_allclose(encoder(longer).numpy(), encoder(ids).numpy(), atol=1e-6)
    alone = encoder(ids[1:2, :3]).numpy()
    np.testing.assert_allclose(alone, encoder(ids).numpy()[1:2], atol=1e-6)
    # The mask, not the data, hides the padding: a real unit in its place changes the vector.
    changed = ids.copy()
    changed[1, 3] = 4
    assert np.abs(encoder(changed).numpy()[1] - encoder(ids).numpy()[1]).max() > 1e-3


@pytest.mark.parametrize("return_sequences", [False, True])
def test_max_and_mean_pooling_match_numpy_over_the_real_units(return_sequences):
    ids = np.concatenate([make_ids(), np.zeros((1, 6), "int32")])  # and a sentence of no unit
    encoder = SentenceEncoder(V, E, U, return_sequences=return_sequences)
    encoder(ids)
    randomized(encoder, seed=2)
    _, states = np_encode(encoder, ids[:3])
    lengths = (ids[:3] != 0).sum(1)
    expected = {"max": [s[:n].max(0) for s, n in zip(states, lengths)],
                "mean": [s[:n].mean(0) for s, n in zip(states, lengths)]}
    longer = np.concatenate([ids, np.zeros((4, 3), "int32")], axis=1)
    for pooling, rows in expected.items():
        vectors = [encoder(x, pooling=pooling) for x in (ids, longer)]
        if return_sequences:
            vectors = [v["vector"] for v in vectors]
        for got in vectors:  # padding changes nothing
            np.testing.assert_allclose(got.numpy()[:3], np.array(rows), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(got.numpy()[3], 0.0)  # no unit: zeros
    # The states are negative somewhere: max pooling did not take padding's zeros.
    assert (np.array(expected["max"]) < 0).any()
    with pytest.raises(ValueError, match="unknown pooling 'last'; choose from final, max, mean"):
        encoder(ids, pooling="last")


def _mask_check():
    ids = make_ids()

    def perturb(args, kwargs):  # more padding after every sentence
        return (np.concatenate([args[0], np.zeros((3, 4), "int32")], axis=1),), dict(kwargs)

    def real(outputs):
        if isinstance(outputs, dict):
            return {"vector": outputs["vector"], "states": outputs["states"][:, :ids.shape[1]]}
        return outputs

    return MaskCheck(perturb=perturb, real=real)


@pytest.mark.parametrize("return_sequences", [False, True])
def test_layer_harness(tmp_path, return_sequences):
    run_layer_test(SentenceEncoder,
                   {"vocabulary_size": V, "embedding_dim": E, "units": U,
                    "return_sequences": return_sequences},
                   (make_ids(),), {"training": False}, tmp_path=tmp_path,
                   mask_check=_mask_check(), input_shapes=[(None,)],
                   bfloat16_rtol=0.1)


def _predictor():
    return GraphPredictor(vocabulary_size=V, hidden_dim=6, num_layers=2, num_heads=2,
                          conv_layers=1, name="predictor")


def test_glomo_graphs_on_the_embeddings(tmp_path):
    ids = make_ids()
    predictor = _predictor()
    encoder = SentenceEncoder(V, E, U, graph_predictor=predictor, num_mixtures=2,
                              return_sequences=True)
    out = encoder(ids)
    assert out["vector"].shape == (3, 2 * U)
    # The GRUs read [E ; gate(E, M E)]: wider than the embeddings.
    assert encoder.forward_gru.cell.kernel.shape[0] > E
    assert not any(w.trainable for w in predictor.weights)  # frozen by default
    trainable = {id(w) for w in encoder.trainable_weights}
    assert all(id(w) not in trainable for w in predictor.weights)
    # The graphs matter: another predictor's graphs give another vector.
    other = SentenceEncoder.from_config(encoder.get_config())
    other(ids)
    other.set_weights(encoder.get_weights())
    np.testing.assert_allclose(other(ids)["vector"].numpy(), out["vector"].numpy(), atol=1e-6)
    rng = np.random.default_rng(0)
    for w in other.graph_predictor.weights:
        if w.dtype == "float32" and "moving_variance" not in w.path:  # variances stay positive
            w.assign(w.numpy() + rng.normal(0, 0.5, w.shape).astype("float32"))
    assert np.abs(other(ids)["vector"].numpy() - out["vector"].numpy()).max() > 1e-4
    run_layer_test(SentenceEncoder,
                   lambda: {"vocabulary_size": V, "embedding_dim": E, "units": U,
                            "graph_predictor": _predictor()},
                   (ids,), {"training": False}, tmp_path=tmp_path, mask_check=_mask_check(),
                   input_shapes=[(None,)], bfloat16_rtol=0.1)


def test_ids_beyond_the_predictors_vocabulary_read_as_unk():
    """An encoder over the predictor's tokenizer plus [MASK] (id V): the predictor sees <unk>."""
    predictor = _predictor()
    encoder = SentenceEncoder(V + 1, E, U, graph_predictor=predictor)
    ids = make_ids()
    ids[0, 1] = V  # [MASK]
    got = encoder(ids).numpy()
    as_unk = ids.copy()
    as_unk[0, 1] = 1
    mask = ids != 0
    fused = encoder.transfer([encoder.embedding(ids), as_unk])  # the predictor reads <unk>
    forward = encoder.forward_gru(fused, mask=mask)[1]
    backward = encoder.backward_gru(fused, mask=mask)[1]
    np.testing.assert_allclose(got, np.concatenate([forward, backward], axis=1), atol=1e-6)
    assert np.isfinite(got).all()


def test_argument_errors():
    with pytest.raises(ValueError, match="only 22"):
        SentenceEncoder(V - 1, E, U, graph_predictor=_predictor())
    with pytest.raises(ValueError, match="units"):
        SentenceEncoder(V, E, 0)
    with pytest.raises(TypeError, match="GraphPredictor"):
        SentenceEncoder(V, E, U, graph_predictor="run/graph_predictor.keras")
    with pytest.raises(ValueError, match="token ids"):
        SentenceEncoder(V, E, U)(np.zeros((2, 3, 4), "float32"))


def test_in_a_functional_model_with_fit():
    rng = np.random.default_rng(0)
    ids = rng.integers(2, V, (64, 6)).astype("int32")
    ids[:, 4:] *= rng.integers(0, 2, (64, 1))  # some sentences shorter
    labels = (ids[:, 0] > V // 2).astype("int32")
    inputs = keras.Input((None,), dtype="int32")
    logits = keras.layers.Dense(2)(SentenceEncoder(V, 8, 8)(inputs))
    model = keras.Model(inputs, logits)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ids, labels, epochs=6, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < 0.7 * history.history["loss"][0]
