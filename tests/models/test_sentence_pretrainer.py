"""SentencePretrainer: each objective (Eqs. 3.3, 3.4, 3.5) against a NumPy computation on a tiny
batch, the both-neighbours variant, the objective sampling, gradients reaching both encoders,
the .keras round trip, fit on planted pairs, GLoMo graphs in both encoders, argument errors."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GraphPredictor, SentencePretrainer

V, MASK, E, U = 30, 29, 6, 5


def make_model(**kwargs):
    args = dict(vocabulary_size=V, mask_token_id=MASK, embedding_dim=E, units=U, seed=0)
    args.update(kwargs)
    model = SentencePretrainer(**args)
    model.build()
    rng = np.random.default_rng(1)
    for w in model.weights:
        if np.issubdtype(np.dtype(w.dtype), np.floating):
            w.assign(rng.normal(0, 0.4, w.shape).astype("float32"))
    return model


def make_batch(with_previous=False):
    rng = np.random.default_rng(2)
    ids = rng.integers(2, MASK, (5, 7)).astype("int32")
    lengths = [7, 5, 3, 6, 2]
    for row, n in zip(ids, lengths):
        row[n:] = 0
    batch = {"source": ids[:4], "target": ids[1:]}
    if with_previous:
        batch = {"previous": ids[:3], "source": ids[1:4], "target": ids[2:]}
    return batch


def np_log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def np_nce(queries, candidates):
    """-mean_i log softmax_j(q_i . c_j) at j = i (Eqs. 3.3 and 3.4)."""
    logp = np_log_softmax(queries @ candidates.T)
    return -np.mean(np.diag(logp))


def np_conv_same(x, kernel, bias):
    """A 'same' 1-D convolution: ``x [T, C]``, ``kernel [K, C, F]``."""
    k = kernel.shape[0]
    pad = (k - 1) // 2
    padded = np.concatenate([np.zeros((pad, x.shape[1])), x,
                             np.zeros((k - 1 - pad, x.shape[1]))])
    return np.array([sum(padded[t + j] @ kernel[j] for j in range(k)) + bias
                     for t in range(x.shape[0])])


def vectors(model, ids):
    source = model.source_encoder(ids).numpy().astype(np.float64)
    out = model.target_encoder(ids)
    return source, out["vector"].numpy().astype(np.float64), out["states"].numpy().astype(
        np.float64)


def test_quick_thoughts_loss_against_numpy():
    model = make_model(objectives=("qt",))
    batch = make_batch()
    h_src = vectors(model, batch["source"])[0]
    h_trg = vectors(model, batch["target"])[1]
    got = model.objective_losses(batch)["qt"].numpy()
    np.testing.assert_allclose(got, np_nce(h_src, h_trg), rtol=1e-5)
    assert got > 0.01  # not a trivial batch


def test_quick_thoughts_both_neighbours_against_numpy():
    model = make_model(objectives=("qt",), neighbours="both")
    batch = make_batch(with_previous=True)
    h_src = vectors(model, batch["source"])[0]
    prev = vectors(model, batch["previous"])[1]
    nxt = vectors(model, batch["target"])[1]
    logp = np_log_softmax(h_src @ np.concatenate([prev, nxt]).T)
    b = len(h_src)
    want = -np.mean([0.5 * (logp[i, i] + logp[i, b + i]) for i in range(b)])
    np.testing.assert_allclose(model.objective_losses(batch)["qt"].numpy(), want, rtol=1e-5)
    with pytest.raises(ValueError, match="previous"):
        model.objective_losses(make_batch())


def test_self_prediction_loss_against_numpy_and_corruption_is_used():
    batch = make_batch()
    # Without corruption (nothing chosen, no shuffle) both views are the source sentence itself.
    model = make_model(objectives=("sp",), select_rate=0.0, shuffle_window=0)
    h_src, h_trg, _ = vectors(model, batch["source"])
    np.testing.assert_allclose(model.objective_losses(batch)["sp"].numpy(),
                               np_nce(h_src, h_trg), rtol=1e-5)
    # With the thesis' corruption the two views differ from the source and from each other.
    model = make_model(objectives=("sp",))
    first, second = model.corrupt(batch["source"]).numpy(), model.corrupt(batch["source"]).numpy()
    assert (first != batch["source"]).any() and (first != second).any()
    assert np.array_equal(first == 0, batch["source"] == 0)
    loss = model.objective_losses(batch)["sp"].numpy()
    assert np.isfinite(loss) and abs(loss - np_nce(h_src, h_trg)) > 1e-4


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_global_to_local_loss_against_numpy(reduction):
    model = make_model(objectives=("g2l",), l2_weight=1e-2, g2l_reduction=reduction)
    batch = make_batch()
    h_src = vectors(model, batch["source"])[0]
    states = vectors(model, batch["target"])[2]
    valid = batch["target"] != 0
    c1, c2 = model.g2l_cnn
    w = lambda v: v.numpy().astype(np.float64)  # noqa: E731
    z = []
    for b in range(len(states)):  # two convolutions, ReLU between, padding zeroed before each
        x = states[b] * valid[b][:, None]
        x = np.maximum(np_conv_same(x, w(c1.kernel), w(c1.bias)), 0) * valid[b][:, None]
        z.append(np_conv_same(x, w(c2.kernel), w(c2.bias)) * valid[b][:, None])
    z = np.array(z)
    total = 0.0
    for b in range(len(h_src)):
        negatives = [h_src[b] @ z[c, t] for c in range(len(z)) if c != b
                     for t in range(z.shape[1]) if valid[c, t]]
        positions = np.flatnonzero(valid[b])
        own = -sum(np_log_softmax(np.array([h_src[b] @ z[b, i]] + negatives))[0]
                   for i in positions)
        total += own / len(positions) if reduction == "mean" else own
    want = total / len(h_src)
    l2 = np.mean((h_src ** 2).sum(-1)) + np.mean((z[valid] ** 2).sum(-1))
    np.testing.assert_allclose(model.objective_losses(batch)["g2l"].numpy(), want + 1e-2 * l2,
                               rtol=1e-5)


def test_two_objectives_are_sampled_per_batch_uniformly():
    model = make_model()
    counts = {o: 0 for o in model.objectives}
    for _ in range(600):
        active = {o: bool(v) for o, v in model.sample_objectives().items()}
        assert sum(active.values()) == 2
        for o, on in active.items():
            counts[o] += on
    for o in counts:
        assert abs(counts[o] / 600 - 2 / 3) < 0.07
    everything = make_model(objectives_per_batch=None).sample_objectives()
    assert all(bool(v) for v in everything.values())


@pytest.mark.parametrize("objective", ["qt", "sp", "g2l"])
def test_gradients_reach_both_encoders(objective):
    model = make_model(objectives=(objective,))
    batch = make_batch()
    with tf.GradientTape() as tape:
        loss = model.objective_losses(batch, training=True)[objective]
    sources = model.source_encoder.trainable_weights
    targets = model.target_encoder.trainable_weights
    cnn = [w for conv in model.g2l_cnn or [] for w in conv.trainable_weights]
    grads = tape.gradient(loss, sources + targets + cnn)
    norm = lambda gs: sum(float(tf.reduce_sum(tf.abs(g))) for g in gs if g is not None)  # noqa
    assert norm(grads[:len(sources)]) > 1e-6
    assert norm(grads[len(sources):len(sources) + len(targets)]) > 1e-6
    if cnn:
        assert norm(grads[len(sources) + len(targets):]) > 1e-6


def test_a_training_step_updates_both_encoders_and_only_active_objectives_count():
    model = make_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    batch = make_batch()
    before = [w.numpy().copy() for w in model.trainable_weights]
    logs = model.train_step(batch)
    after = model.trainable_weights
    changed = {part for w, b in zip(after, before) if np.abs(w.numpy() - b).max() > 0
               for part in w.path.split("/")}
    assert {"source_encoder", "target_encoder"} <= changed
    losses = {o: float(logs[f"{o}_loss"]) for o in model.objectives}
    active = [o for o, v in losses.items() if v != 0]
    assert len(active) == 2  # the inactive objective's mean saw no batch (0 so far)
    np.testing.assert_allclose(float(logs["loss"]), sum(losses[o] for o in active), rtol=1e-5)


def test_keras_round_trip_and_encode(tmp_path):
    model = make_model(neighbours="both", objectives=("qt", "g2l"))
    ids = make_batch()["source"]
    encoded = model.encode(ids).numpy()
    assert encoded.shape == (4, 4 * U)
    np.testing.assert_allclose(encoded[:, :2 * U], model.source_encoder(ids).numpy(), atol=1e-6)
    np.testing.assert_allclose(model.predict(ids, verbose=0), encoded, atol=1e-5)
    path = str(tmp_path / "sentences.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, SentencePretrainer)
    assert restored.get_config() == model.get_config()
    np.testing.assert_allclose(restored.encode(ids).numpy(), encoded, atol=1e-6)
    batch = make_batch(with_previous=True)
    np.testing.assert_allclose(restored.objective_losses(batch)["g2l"].numpy(),
                               model.objective_losses(batch)["g2l"].numpy(), rtol=1e-5)


def test_a_model_only_fitted_round_trips(tmp_path):
    """Built by fit alone (never by build()): loading must still build it and read weights."""
    batch = make_batch()
    model = SentencePretrainer(V, MASK, embedding_dim=E, units=U, objectives=("qt", "sp"),
                               seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.fit(batch, batch_size=4, epochs=2, verbose=0)
    path = str(tmp_path / "fitted.keras")
    model.save(path)
    restored = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(restored.encode(batch["source"]).numpy(),
                               model.encode(batch["source"]).numpy(), atol=1e-6)
    np.testing.assert_array_equal(restored.source_encoder.embeddings.numpy(),
                                  model.source_encoder.embeddings.numpy())


@pytest.mark.slow  # about 30 s on 2 shared cores
def test_fit_learns_planted_pairs():
    """The target of sentence s is s with every id mapped by a fixed permutation: learnable."""
    rng = np.random.default_rng(0)
    n, length = 240, 6
    source = rng.integers(2, MASK, (n, length)).astype("int32")
    mapping = np.concatenate([[0, 1], rng.permutation(np.arange(2, MASK)), [MASK]])
    target = mapping[source].astype("int32")
    model = SentencePretrainer(V, MASK, embedding_dim=12, units=12, objectives=("qt", "sp"),
                               seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    data = {"source": source, "target": target}
    history = model.fit(data, batch_size=40, epochs=6, verbose=0)
    assert history.history["qt_loss"][-1] < 0.5 * history.history["qt_loss"][0]
    h_src = model.source_encoder(source[:40]).numpy()
    h_trg = model.target_encoder(target[:40])["vector"].numpy()
    retrieved = np.argmax(h_src @ h_trg.T, axis=1)
    assert np.mean(retrieved == np.arange(40)) > 0.5  # chance: 1/40
    assert set(model.evaluate(data, batch_size=40, verbose=0, return_dict=True)) == {
        "loss", "qt_loss", "sp_loss"}


def test_glomo_graphs_feed_both_encoders(tmp_path):
    predictor = GraphPredictor(vocabulary_size=V, hidden_dim=6, num_layers=1, num_heads=2,
                               conv_layers=1)
    predictor.build((None, None))
    model = SentencePretrainer(V, MASK, embedding_dim=E, units=U, graph_predictor=predictor,
                               seed=0)
    model.build()
    assert model.source_encoder.transfer is not None and model.target_encoder.transfer is not None
    copy = model.target_encoder.graph_predictor
    assert copy is not predictor
    for a, b in zip(copy.get_weights(), predictor.get_weights()):
        np.testing.assert_array_equal(a, b)
    trainable = {id(w) for w in model.trainable_weights}
    assert not any(id(w) in trainable for w in predictor.weights + copy.weights)
    ids = make_batch()["source"]
    path = str(tmp_path / "with_graphs.keras")
    model.save(path)
    np.testing.assert_allclose(keras.saving.load_model(path).encode(ids).numpy(),
                               model.encode(ids).numpy(), atol=1e-6)


def test_argument_errors():
    with pytest.raises(ValueError, match="objectives"):
        SentencePretrainer(V, MASK, objectives=("qt", "mlm"))
    with pytest.raises(ValueError, match="objectives"):
        SentencePretrainer(V, MASK, objectives=())
    with pytest.raises(ValueError, match="mask_token_id"):
        SentencePretrainer(V, V)
    with pytest.raises(ValueError, match="neighbours"):
        SentencePretrainer(V, MASK, neighbours="previous")
    with pytest.raises(ValueError, match="objectives_per_batch"):
        SentencePretrainer(V, MASK, objectives_per_batch=0)
    model = make_model(objectives=("qt",))
    with pytest.raises(ValueError, match="dict batches"):
        model.objective_losses(make_batch()["source"])


@pytest.mark.slow  # XLA compiles two GRU loops per encoder: about 90 s on 2 shared cores
def test_a_jit_compiled_step_gives_the_same_losses():
    """XLA draws other random numbers than the CPU kernels, so the step is made deterministic:
    every objective on every batch and no corruption."""
    batch = make_batch()
    logs = []
    for jit in (False, True):
        model = make_model(objectives_per_batch=None, select_rate=0.0, shuffle_window=0)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=jit)
        history = model.fit(batch, batch_size=4, epochs=1, verbose=0, shuffle=False)
        logs.append({k: v[0] for k, v in history.history.items()})
    assert logs[0].keys() == logs[1].keys()
    for key in logs[0]:
        np.testing.assert_allclose(logs[1][key], logs[0][key], rtol=1e-4, err_msg=key)
    assert logs[0]["loss"] > 0


def test_signatures_and_the_command_hold_the_hparams_defaults():
    import argparse
    import inspect

    from glomo_tf import SentenceEncoder, hparams
    from glomo_tf.cli import sentence_pretrain

    subparsers = argparse.ArgumentParser().add_subparsers()
    command = sentence_pretrain.register(subparsers) or subparsers.choices["sentence-pretrain"]

    def defaults(f):
        return {k: p.default for k, p in inspect.signature(f).parameters.items()
                if p.default is not inspect.Parameter.empty}

    model = defaults(SentencePretrainer.__init__)
    assert {k: model[k] for k in hparams.SENTENCE_PRETRAINER} == hparams.SENTENCE_PRETRAINER
    for f in (SentencePretrainer.__init__, SentenceEncoder.__init__):
        assert {k: defaults(f)[k] for k in hparams.SENTENCE_ENCODER} == hparams.SENTENCE_ENCODER
    for k, v in {**hparams.SENTENCE_PRETRAIN_COMMAND, **hparams.SENTENCE_ENCODER}.items():
        assert command.get_default(k) == v, k  # the flags' defaults, from the config's fields
    assert tuple(command.get_default("objectives")) == hparams.SENTENCE_OBJECTIVES
