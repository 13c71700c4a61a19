"""GlomoPretrainer: fit/evaluate, the per-unit perplexity against NumPy, XLA, bfloat16, saving and
the ablations of the paper's Table 2 as configuration."""

import itertools
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GlomoPretrainer, GlomoTransfer

V, D_MODEL, T = 30, 8, 8
BASE = dict(vocabulary_size=V, hidden_dim=D_MODEL, num_layers=2, num_heads=2, conv_layers=1,
            context_length=2, decoder_layers=2, num_positions=None, dropout=0.0)
# One full window, one with trailing padding.
IDS = np.array([[3, 7, 1, 9, 4, 4, 12, 5], [8, 2, 6, 11, 19, 0, 0, 0]], "int32")


def make_model(**overrides):
    config = dict(BASE)
    config.update(overrides)
    return GlomoPretrainer.from_sizes(**config)


def periodic_windows(count=8, period=5, length=T):
    """Deterministic windows of the cycle 1, 2, ..., period, each from a different offset."""
    cycle = np.arange(1, period + 1)
    return np.stack([np.take(cycle, np.arange(o, o + length), mode="wrap")
                     for o in range(count)]).astype("int32")


# ---------------------------------------------------------------------- NumPy references
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def numpy_gru(inputs, state, kernel, recurrent_kernel, bias):
    """Keras GRU (reset_after=True; gate order z, r, h) over ``inputs [S, d]`` from ``state``."""
    u = state.shape[-1]
    outputs = []
    for x in inputs:
        gx = x @ kernel + bias[0]
        gh = state @ recurrent_kernel + bias[1]
        z = sigmoid(gx[:u] + gh[:u])
        r = sigmoid(gx[u:2 * u] + gh[u:2 * u])
        hh = np.tanh(gx[2 * u:] + r * gh[2 * u:])
        state = z * state + (1.0 - z) * hh
        outputs.append(state)
    return np.stack(outputs)


def numpy_context_cross_entropy(model, ids):
    """Per direction: (total cross-entropy, predicted units), decoding from every position.

    The forward decoder at ``t`` reads ``[0, e(x_{t+1}), ..]`` from state ``F^L_t`` (every GRU layer
    starts from it) and predicts ``x_{t+1..t+D}`` with the tied embedding as output projection;
    backward predicts ``x_{t-1..t-D}``. Targets outside the window or on padding are not counted.
    """
    top = model(ids, training=False)["features"].numpy()[:, :, -1]  # [B, 2, T, d]
    emb = model.graph_predictor.embeddings.numpy().astype("float64")
    context = model.context_length
    batch, length = ids.shape
    totals, units = [0.0, 0.0], [0, 0]
    for z, step in ((0, 1), (1, -1)):
        gru_weights = [[w.astype("float64") for w in rnn.get_weights()]
                       for rnn in model.decoders[z].rnns]
        for b, t in itertools.product(range(batch), range(length)):
            targets = [ids[b, t + step * j] if 0 <= t + step * j < length else 0
                       for j in range(1, context + 1)]
            inputs = np.stack([np.zeros(emb.shape[1])] + [emb[x] for x in targets[:-1]])
            hidden = inputs
            for kernel, recurrent, bias in gru_weights:
                hidden = numpy_gru(hidden, top[b, z, t].astype("float64"), kernel, recurrent,
                                   bias)
            logp = log_softmax(hidden @ emb.T)
            for j, target in enumerate(targets):
                if target != 0:
                    totals[z] -= logp[j, target]
                    units[z] += 1
    return totals, units


def analytic_units(ids, context, objective="unit"):
    """Predicted units per direction, counted from the window itself."""
    batch, length = ids.shape
    count = [0, 0]
    for z, step in ((0, 1), (1, -1)):
        if objective == "unit":
            starts = range(length)
        else:  # sentence: across the middle of the window
            starts = [length // 2 - 1] if z == 0 else [length // 2]
        for b, t in itertools.product(range(batch), starts):
            for j in range(1, context + 1):
                s = t + step * j
                count[z] += int(0 <= s < length and ids[b, s] != 0)
    return count


def assert_row_stochastic(graphs, ids, atol, require_weight=True):
    """Rows sum to 1 or 0; no weight on the wrong side of the receiver or on padding."""
    graphs = np.asarray(graphs, "float32")
    length = ids.shape[1]
    ones = np.ones((length, length))
    allowed = np.stack([np.tril(ones, -1), np.triu(ones, 1)])[None, :, None, None]
    allowed = np.broadcast_to(allowed * (ids != 0)[:, None, None, None, None, :], graphs.shape)
    assert np.all(graphs >= 0)
    assert np.all(graphs[allowed == 0] == 0)
    sums = graphs.sum(-1)
    assert np.all(sums <= 1 + atol)
    # Rows sum to 1 or 0. A row whose squared scores are tiny (~1e-13, against the normalisation's
    # epsilon 1e-16) sums to slightly less than 1, and one at the order of epsilon to anything
    # between: rows above 0.01 must be normalised to 1e-3.
    assert np.all((np.abs(sums - 1) < max(atol, 1e-3)) | (sums < 0.01))
    if require_weight:
        assert np.any(np.abs(sums - 1) < atol)  # not all rows are empty


# ---------------------------------------------------------------------- training
@pytest.mark.slow
def test_fit_decreases_loss_on_periodic_sequences():
    windows = periodic_windows()
    dataset = tf.data.Dataset.from_tensor_slices(windows).batch(4)
    model = make_model(num_positions=4, seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(dataset, epochs=15, shuffle=False, verbose=0).history
    assert sorted(history) == ["loss", "perplexity"]
    loss, ppl = np.array(history["loss"]), np.array(history["perplexity"])
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(ppl))
    assert loss[0] > 0.8 * np.log(V)  # starts near chance
    assert loss[-1] < 0.5 * loss[0], loss
    assert ppl[-1] < 0.25 * ppl[0], ppl


def test_evaluate_perplexity_matches_numpy_cross_entropy():
    model = make_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    # A training step first, so batch-norm statistics and weights are not at their initial values.
    model.train_step(periodic_windows(4))
    # Embeddings of unit scale (they are also the output projection): the logits are far from
    # uniform, so the cross-entropy depends on every detail of the decoding.
    embeddings = np.random.default_rng(3).normal(0.0, 1.0, (V, D_MODEL)).astype("float32")
    model.graph_predictor.embeddings.assign(embeddings)
    result = model.evaluate(IDS, batch_size=len(IDS), verbose=0, return_dict=True)
    assert abs(np.log(result["perplexity"]) - np.log(V)) > 0.1
    totals, units = numpy_context_cross_entropy(model, IDS)
    assert units == analytic_units(IDS, BASE["context_length"])
    np.testing.assert_allclose(result["perplexity"], np.exp(sum(totals) / sum(units)), rtol=1e-4)
    np.testing.assert_allclose(
        result["loss"], 0.5 * (totals[0] / units[0] + totals[1] / units[1]), rtol=1e-4)
    loss, total_ce, total_units = model.context_loss(IDS)
    np.testing.assert_allclose(float(total_ce), sum(totals), rtol=1e-4)
    assert float(total_units) == sum(units)

    # A dataset of dict batches gives the same numbers.
    dict_ds = tf.data.Dataset.from_tensor_slices({"token_ids": IDS}).batch(len(IDS))
    again = model.evaluate(dict_ds, verbose=0, return_dict=True)
    np.testing.assert_allclose(again["perplexity"], result["perplexity"], rtol=1e-6)

    # Analytic case: a zero embedding gives zero logits, hence chance: perplexity = V exactly.
    model.graph_predictor.embeddings.assign(np.zeros((V, D_MODEL), "float32"))
    chance = model.evaluate(IDS, batch_size=len(IDS), verbose=0, return_dict=True)
    np.testing.assert_allclose(chance["perplexity"], V, rtol=1e-5)
    np.testing.assert_allclose(chance["loss"], np.log(V), rtol=1e-5)


def test_sampled_positions_loss_equals_decoding_from_every_positions_features():
    """With sampled positions the pretrainer composes its top layer at those positions only
    (FeaturePredictor.top_features); the loss equals decoding from the full features gathered at
    the same positions (a twin model with the same seed draws the same positions)."""
    model, twin = make_model(num_positions=3, seed=4), make_model(num_positions=3, seed=4)
    model(IDS), twin(IDS)
    weights = [np.random.default_rng(5).normal(0, 0.3, w.shape).astype("float32")
               for w in model.weights]
    model.set_weights(weights)
    twin.set_weights(weights)
    loss, total_ce, total_units = model.context_loss(IDS)

    out = twin(IDS)
    top = out["features"][:, :, -1].numpy()  # [B, 2, T, d]: every position composed
    expected_ce, losses = 0.0, []
    for z, decoder in enumerate(twin.decoders):
        positions = twin.sample_positions(IDS.shape[1])
        dec = decoder(top[:, z][:, positions.numpy()], positions, IDS,
                      twin.graph_predictor.embeddings)
        ce = keras.losses.sparse_categorical_crossentropy(dec["targets"], dec["logits"],
                                                          from_logits=True).numpy()
        weights_z = dec["weights"].numpy()
        expected_ce += (ce * weights_z).sum()
        losses.append((ce * weights_z).sum() / max(weights_z.sum(), 1.0))
    np.testing.assert_allclose(float(total_ce), expected_ce, rtol=1e-5)
    np.testing.assert_allclose(float(loss), 0.5 * sum(losses), rtol=1e-5)


@pytest.mark.slow
def test_jit_compile():
    model = make_model(num_positions=3, seed=1, num_layers=1, decoder_layers=1)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=True)
    assert model.jit_compile
    history = model.fit(periodic_windows(4), batch_size=2, epochs=2, verbose=0).history
    assert np.all(np.isfinite(history["loss"])) and np.all(np.isfinite(history["perplexity"]))


def test_mixed_bfloat16_policy():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = make_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    for _ in range(2):  # eager steps: the same train_step that fit() runs
        logs = model.train_step(periodic_windows(4))
        assert np.isfinite(float(logs["loss"])) and np.isfinite(float(logs["perplexity"]))
    assert model.graph_predictor.encoder.moving_means[0].dtype == "float32"
    assert np.any(model.graph_predictor.encoder.moving_means[0].numpy() != 0)  # statistics were updated
    assert model.graph_predictor.compute_dtype == "bfloat16"
    assert model.graph_predictor.embeddings.dtype == "float32"  # variables stay float32
    out = model(IDS)
    assert out["graphs"].dtype == tf.bfloat16
    assert_row_stochastic(tf.cast(out["graphs"], tf.float32).numpy(), IDS, atol=2e-2)
    assert np.all(np.isfinite(tf.cast(out["features"], tf.float32).numpy()))
    graphs = model(IDS, training=True)["graphs"]  # batch statistics
    assert_row_stochastic(tf.cast(graphs, tf.float32).numpy(), IDS, atol=2e-2)


def test_keras_round_trip_gives_identical_graphs(tmp_path):
    model = make_model(num_positions=3, seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.train_step(periodic_windows(4))  # moves weights and batch-norm statistics
    path = str(tmp_path / "pretrainer.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, GlomoPretrainer)
    # (through JSON, as the file holds it: the nested build shape comes back as a list)
    assert json.loads(json.dumps(loaded.get_config())) == json.loads(json.dumps(model.get_config()))
    original, restored = model(IDS), loaded(IDS)
    assert np.count_nonzero(original["graphs"].numpy()) > 0
    np.testing.assert_array_equal(restored["graphs"].numpy(), original["graphs"].numpy())
    np.testing.assert_array_equal(restored["features"].numpy(), original["features"].numpy())
    for a, b in zip(model.graph_predictor.weights, loaded.graph_predictor.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# ---------------------------------------------------------------------- ablations (Table 2)
ABLATIONS = {
    "-sparse": dict(normalization="softmax"),
    "-hierarchical": dict(num_layers=1),
    "-sequence": dict(context_length=1),
    "-decouple": dict(coupled=True),
    "-unit-level": dict(objective="sentence"),
    "residual": dict(composition="residual"),
    "scalar-threshold": dict(threshold="scalar"),
    "all-positions": dict(num_positions=None),
    "sampled-positions": dict(num_positions=3, seed=0),
}


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_ablation_builds_and_trains_one_step(name):
    """One (eager) training step per configuration; fit() itself is covered above."""
    overrides = ABLATIONS[name]
    model = make_model(**overrides)
    # The settings as the model holds them: its own and its graph predictor's.
    config = {**model.graph_predictor.get_config(), **model.get_config(),
              "coupled": model.graph_predictor.coupled}
    assert all(config[key] == value for key, value in overrides.items())
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    out = model(IDS)
    L = config["num_layers"]
    assert tuple(out["graphs"].shape) == (2, 2, L, 2, T, T)
    assert tuple(out["features"].shape) == (2, 2, L, T, D_MODEL)
    assert_row_stochastic(out["graphs"].numpy(), IDS, atol=1e-5)
    if config["normalization"] == "softmax":  # dense: every row with a real source sums to 1
        sums = out["graphs"].numpy().sum(-1)
        np.testing.assert_allclose(sums[0, 0, :, :, 1:], 1.0, atol=1e-5)
        np.testing.assert_allclose(sums[0, 1, :, :, :-1], 1.0, atol=1e-5)
    assert (model.feature_predictor is None) == config["coupled"]

    before = [v.numpy().copy() for v in model.trainable_variables]
    logs = model.train_step(IDS)
    assert np.isfinite(float(logs["loss"])) and np.isfinite(float(logs["perplexity"]))
    changed = [not np.array_equal(v.numpy(), b) for v, b in zip(model.trainable_variables, before)]
    assert np.mean(changed) > 0.5  # the step updated the model
    # Still row-stochastic after the step (after one Adam step, squared-ReLU rows may all be empty).
    assert_row_stochastic(model(IDS)["graphs"].numpy(), IDS, atol=1e-5, require_weight=False)

    loss, _, total_units = model.context_loss(IDS)
    assert np.isfinite(float(loss))
    if config["num_positions"] is None:
        expected = analytic_units(IDS, config["context_length"], config["objective"])
        assert float(total_units) == sum(expected)
    else:
        assert 0 < float(total_units) <= 2 * len(IDS) * 3 * config["context_length"]


def test_uniform_graph_transfer_baseline(rng):
    """After pretraining, GlomoTransfer(graph_mode="uniform") trains and ignores the predictor."""
    pretrainer = make_model()
    pretrainer.compile(optimizer=keras.optimizers.Adam(1e-2))
    pretrainer.train_step(IDS)
    predictor = pretrainer.graph_predictor
    ids = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(V, 6, mask_zero=True)(ids)
    transfer = GlomoTransfer(predictor, graph_mode="uniform", num_mixtures=2)
    pooled = keras.layers.GlobalAveragePooling1D()(transfer([h, ids]))
    model = keras.Model(ids, keras.layers.Dense(2)(pooled))
    before = model(IDS).numpy()
    predictor.embeddings.assign(rng.normal(size=(V, D_MODEL)).astype("float32"))
    predictor.scorer.query_kernel.assign(rng.normal(size=predictor.scorer.query_kernel.shape))
    np.testing.assert_array_equal(model(IDS).numpy(), before)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(IDS, np.array([0, 1]), epochs=1, verbose=0).history
    assert np.isfinite(history["loss"][0])


# ---------------------------------------------------------------------- errors
def test_clear_errors():
    model = make_model()
    with pytest.raises(TypeError, match="integer token ids"):
        model(IDS.astype("float32"))
    with pytest.raises(ValueError, match="objective"):
        make_model(objective="document")
    with pytest.raises(ValueError, match="divisible"):
        make_model(hidden_dim=10, num_heads=4)
    with pytest.raises(ValueError, match="num_positions"):
        make_model(num_positions=0)
    model.compile(optimizer="adam")
    with pytest.raises(ValueError, match="token_ids"):
        model.test_step({"ids": IDS})


def test_takes_a_built_graph_predictor_and_loads_configs_of_the_sizes_form():
    """``GlomoPretrainer(graph_predictor, ...)`` takes a predictor as it is (built, trained
    weights kept); a config of the older form (sizes, no nested predictor) still deserializes."""
    from glomo_tf import GraphPredictor

    predictor = GraphPredictor(V, D_MODEL, num_layers=2, num_heads=2, conv_layers=1)
    graphs = predictor(IDS)["graphs"].numpy()
    model = GlomoPretrainer(predictor, context_length=2, num_positions=None,
                            composition="projected")
    assert model.graph_predictor is predictor
    assert model.feature_predictor.composition == "projected"
    assert model.decoders[0].context_length == 2
    np.testing.assert_array_equal(model(IDS)["graphs"].numpy(), graphs)
    with pytest.raises(TypeError, match="from_sizes"):
        GlomoPretrainer(V)

    sizes_form = dict(BASE, num_positions=3, name="old", trainable=True)
    old = GlomoPretrainer.from_config(sizes_form)
    assert old.graph_predictor.num_layers == 2 and old.num_positions == 3
    assert old.graph_predictor.vocabulary_size == V
