"""GraphPredictor's sub-layers (CausalConvEncoder, GraphScorer, LiveRowHinge) on their own, and
the files written before the predictor had sub-layers: they load, and compute what they did.

``tests/fixtures/legacy_layers/`` holds small ``.keras`` files written by the predictor when it was one
flat layer (every weight its own: ``layers/graph_predictor/vars/0..N``), with the outputs that
code computed on fixed inputs (``expected.npz``): a decoupled predictor with the live-row loss, a
coupled one, one with the scalar threshold and entmax15, and a ``GraphPredictor2D`` (whose
scorer was a one-row ``GraphPredictor``).
"""

import io
import json
import os
import shutil
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import ops
from glomo_tf.layers import conv_encoder
from glomo_tf.layers import (CausalConvEncoder, CoupledGraphPredictor, GraphPredictor,
                             GraphPredictor2D, GraphScorer, LiveRowHinge)
from glomo_tf.saving import load_keras_file, upgrade_keras_file
from layer_harness import MaskCheck, run_layer_test
from _paths import REPO, TESTS

LEGACY = os.path.join(TESTS, "fixtures", "legacy_layers")
# The recorded outputs were computed on one CPU; oneDNN picks its kernels by CPU (AVX-512, AMX),
# which round differently: float32 round-off of a few 1e-7 on other machines.
LEGACY_TOLERANCE = dict(rtol=1e-5, atol=1e-6)
B, T, D = 2, 6, 8
RNG = np.random.default_rng(0)
FEATURES = RNG.normal(size=(B, T, D)).astype("float32")
PADDING = np.array([[True] * T, [True] * 4 + [False] * 2])


# ---------------------------------------------------------------------------- the sub-layers
def padded_features(args, kwargs):
    """Three more padded positions at the end (random features there): real outputs unchanged."""
    inputs, padding = args
    extra = np.random.default_rng(1).normal(size=(B, 3, D)).astype("float32")
    return (np.concatenate([inputs, extra], 1),
            np.concatenate([padding, np.zeros((B, 3), bool)], 1)), kwargs


def real_positions(outputs):
    return [stack[:, :T] * PADDING[:, :, None] for stack in outputs]


@pytest.mark.parametrize("kwargs", [dict(stacks=4, conv_layers=2, kernel_size=3),
                                    dict(stacks=2, conv_layers=1, kernel_size=2, momentum=0.5)])
def test_conv_encoder_harness(kwargs, tmp_path):
    run_layer_test(CausalConvEncoder, kwargs, (FEATURES, PADDING), tmp_path=tmp_path,
                   input_shapes=[(None, D), (None,)],
                   bfloat16_dtypes="bfloat16",
                   mask_check=MaskCheck(perturb=padded_features, real=real_positions))


def numpy_batch_norm_relu(x, keep, gamma, beta):
    """The batch norm and ReLU of a training step in NumPy (float64): statistics per stack and
    channel over the kept positions, the biased variance."""
    x, keep = x.astype("float64"), np.broadcast_to(keep, x.shape[:3] + (1,)).astype("float64")
    mean = (x * keep).sum((1, 2), keepdims=True) / keep.sum((1, 2), keepdims=True)
    variance = (((x - mean) * keep) ** 2).sum((1, 2), keepdims=True) / keep.sum((1, 2),
                                                                          keepdims=True)
    y = (x - mean) / np.sqrt(variance + conv_encoder.BATCH_NORM_EPSILON) * gamma + beta
    return np.maximum(y, 0), mean, variance


def test_both_batch_norm_forms_against_numpy():
    rng = np.random.default_rng(3)
    x = rng.normal(1.0, 2.0, size=(4, 3, 5, 6)).astype("float32")
    gamma = rng.uniform(0.5, 1.5, size=(4, 1, 1, 6)).astype("float32")
    beta = rng.normal(size=(4, 1, 1, 6)).astype("float32")
    keep = np.ones((1, 3, 5, 1), "float32")
    keep[0, 1, 3:] = 0  # the masked form leaves these out of the statistics
    for (y, mean, variance), kept in (
            (conv_encoder.fused_batch_norm_relu(x, gamma, beta), np.ones_like(keep)),
            (conv_encoder.batch_norm_relu(x, keep, gamma, beta), keep)):
        want = numpy_batch_norm_relu(x, kept, gamma, beta)
        for got, expected in zip((y, mean, variance), want):
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)


def test_conv_encoder_unpadded_batches_train_as_padded_ones():
    """A batch without padding takes the fused batch norm, a padded one the masked form: the
    same real outputs, gradients and moving statistics."""
    ids_free = np.ones((B, T), bool)
    extended = np.concatenate([FEATURES, RNG.normal(size=(B, 2, D)).astype("float32")], 1)
    padded = np.concatenate([ids_free, np.zeros((B, 2), bool)], 1)
    results = []
    for inputs, padding in ((FEATURES, ids_free), (extended, padded)):
        keras.utils.set_random_seed(0)
        encoder = CausalConvEncoder(stacks=2, conv_layers=2, kernel_size=3, momentum=0.5)
        inputs = tf.constant(inputs)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = encoder(inputs, padding, training=True)
            loss = sum(tf.reduce_sum(out[:, :T] * np.arange(1, D + 1, dtype="float32"))
                       for out in outputs)
        grads = tape.gradient(loss, [inputs] + encoder.trainable_weights)
        results.append(([out[:, :T] for out in outputs], [grads[0][:, :T]] + grads[1:],
                        encoder.non_trainable_weights))
    for first, second in zip(*results):
        for a, b in zip(first, second):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_conv_encoder_is_causal_and_anti_causal():
    """A change at position 3 moves causal stacks at 3 <= t <= 5 only and anti-causal ones at
    1 <= t <= 3: two layers of width 2 see two steps away."""
    encoder = CausalConvEncoder(stacks=2, conv_layers=2, kernel_size=2)
    mask = np.ones((B, T), bool)
    forward, backward = [s.numpy() for s in encoder(FEATURES, mask)]
    changed = FEATURES.copy()
    changed[:, 3] += 1.0
    forward2, backward2 = [s.numpy() for s in encoder(changed, mask)]
    moved_fw = np.abs(forward2 - forward).max(axis=(0, 2)) > 0
    moved_bw = np.abs(backward2 - backward).max(axis=(0, 2)) > 0
    np.testing.assert_array_equal(moved_fw, (np.arange(T) >= 3) & (np.arange(T) <= 5))
    np.testing.assert_array_equal(moved_bw, (np.arange(T) >= 1) & (np.arange(T) <= 3))


def scorer_inputs():
    queries = RNG.normal(size=(B, 2, T, D)).astype("float32")
    keys = RNG.normal(size=(B, 2, T, D)).astype("float32")
    return queries, keys, ops.admissible_sources(PADDING).numpy()


def padded_scores(args, kwargs):
    queries, keys, _ = args
    extra = np.random.default_rng(2).normal(size=(B, 2, 3, D)).astype("float32")
    padding = np.concatenate([PADDING, np.zeros((B, 3), bool)], 1)
    return (np.concatenate([queries, extra], 2), np.concatenate([keys, extra], 2),
            ops.admissible_sources(padding).numpy()), kwargs


def real_rows(outputs):
    pairs = PADDING[:, None, None, None, :, None] & PADDING[:, None, None, None, None, :]
    return outputs[..., :T, :T] * pairs


@pytest.mark.parametrize("kwargs", [
    dict(num_layers=2, num_heads=2, head_dim=4),
    dict(num_layers=1, num_heads=3, head_dim=2, threshold="scalar", normalization="softmax",
         kernel_regularizer=keras.regularizers.L2(1e-3)),
    dict(num_layers=2, num_heads=2, head_dim=4, normalization="entmax", entmax_alpha=1.3),
])
def test_graph_scorer_harness(kwargs, tmp_path):
    run_layer_test(GraphScorer, kwargs, scorer_inputs(), tmp_path=tmp_path,
                   input_shapes=[(2, None, D), (2, None, D), (2, 1, 1, None, None)],
                   mask_check=MaskCheck(perturb=padded_scores, real=real_rows))


def test_live_row_hinge_against_numpy():
    """weight * mean over rows with a source (finite x) of relu(margin - x)."""
    x = np.array([[0.5, -0.2, np.inf], [0.05, np.inf, -1.0]], "float32")
    got = float(LiveRowHinge(0.7, 0.1)(x))
    finite = x[np.isfinite(x)]
    np.testing.assert_allclose(got, 0.7 * np.maximum(0.1 - finite, 0).mean(), rtol=1e-6)
    assert float(LiveRowHinge(1.0)(np.full((2, 2), np.inf, "float32"))) == 0.0
    with pytest.raises(ValueError, match="must be >= 0"):
        LiveRowHinge(-1.0)


def test_constructor_arguments_within_twelve():
    """No public layer constructor over 12 arguments besides initialisers and regularisers."""
    import inspect

    import glomo_tf.layers

    for name in glomo_tf.layers.__all__:
        cls = getattr(glomo_tf.layers, name)
        if not (isinstance(cls, type) and issubclass(cls, keras.layers.Layer)):
            continue
        args = [p for p in inspect.signature(cls.__init__).parameters
                if p not in ("self", "kwargs") and not p.endswith(("_initializer", "_regularizer"))]
        assert len(args) <= 12, f"{name} takes {len(args)} arguments: {args}"


def test_layer_classes_and_methods_stay_small():
    """No class over 350 lines and no function over 60 in glomo_tf/layers/ (the sizes at which
    a layer is better split into sub-layers)."""
    import ast
    import glob

    for path in glob.glob(os.path.join(REPO, "glomo_tf", "layers", "**", "*.py"), recursive=True):
        with open(path) as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.ClassDef):
                assert size <= 350, f"{path}: class {node.name} has {size} lines"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert size <= 60, f"{path}: {node.name} has {size} lines"


# ---------------------------------------------------------------------------- earlier files
def legacy_weights(path, group):
    """The arrays of ``group`` (``layers/<name>/vars``) in a .keras file, read with h5py."""
    with zipfile.ZipFile(path) as archive:
        with h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as h5:
            entries = h5[group]
            return [np.asarray(entries[str(i)]) for i in range(len(entries))]


@pytest.mark.parametrize("name", ["decoupled", "coupled", "scalar_entmax", "image"])
def test_files_of_the_flat_predictor_load_and_compute_as_before(name):
    expected = np.load(os.path.join(LEGACY, "expected.npz"))
    model = load_keras_file(os.path.join(LEGACY, f"{name}.keras"))
    inputs = expected["image/input"] if name == "image" else expected["ids"]
    outputs = model(inputs)
    for key, value in outputs.items():
        np.testing.assert_allclose(np.asarray(value), expected[f"{name}/{key}"],
                                   err_msg=key, **LEGACY_TOLERANCE)
    layer = model.layers[-1]
    assert type(layer) is {"coupled": CoupledGraphPredictor,
                           "image": GraphPredictor2D}.get(name, GraphPredictor)
    if name != "image":
        # Each stored array is in the variable the order of earlier versions names.
        stored = legacy_weights(os.path.join(LEGACY, f"{name}.keras"),
                                "layers/graph_predictor/vars")
        order = ([layer.embeddings] + layer.encoder.trainable_weights
                 + layer.scorer.trainable_weights + layer.encoder.non_trainable_weights)
        assert len(stored) == len(order)
        for array, variable in zip(stored, order):
            np.testing.assert_array_equal(variable.numpy(), array)


def test_a_coupled_file_is_upgraded_once_and_then_loads_with_keras(tmp_path):
    source = os.path.join(LEGACY, "coupled.keras")
    upgraded = str(tmp_path / "coupled.keras")
    assert upgrade_keras_file(source, upgraded)
    model = keras.saving.load_model(upgraded)  # plain Keras, no conversion on the way
    expected = np.load(os.path.join(LEGACY, "expected.npz"))
    np.testing.assert_allclose(model(expected["ids"])["features"], expected["coupled/features"],
                               **LEGACY_TOLERANCE)
    assert not upgrade_keras_file(upgraded, str(tmp_path / "again.keras"))
    assert not os.path.exists(tmp_path / "again.keras")
    with zipfile.ZipFile(upgraded) as archive:
        (layer,) = [entry for entry in json.loads(archive.read("config.json"))["config"]["layers"]
                    if "GraphPredictor" in entry["class_name"]]
    assert layer["class_name"] == "CoupledGraphPredictor"
    assert "coupled" not in layer["config"] and layer["config"]["composition"] == "projected"


def test_todays_files_keep_the_sub_layers_weights_apart(tmp_path):
    """A predictor saved today stores the embeddings as its own and its sub-layers' weights under
    their attribute names; it loads back with the same outputs."""
    predictor = CoupledGraphPredictor(16, 8, num_layers=2, num_heads=2, conv_layers=1)
    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, predictor(inputs))
    path = str(tmp_path / "today.keras")
    model.save(path)
    assert len(legacy_weights(path, "layers/coupled_graph_predictor/vars")) == 1
    assert len(legacy_weights(path, "layers/coupled_graph_predictor/encoder/vars")) == 5
    ids = np.array([[3, 4, 5, 0]], "int32")
    np.testing.assert_array_equal(keras.saving.load_model(path)(ids)["graphs"],
                                  model(ids)["graphs"])


def test_committed_models_and_presets_load():
    """Every .keras file under examples/outputs and every built-in preset reads."""
    from glomo_tf.presets import list_presets

    files = [os.path.join(root, f) for root, _, names in os.walk(os.path.join(REPO, "examples"))
             for f in names if f.endswith(".keras")]
    assert files
    for path in files:
        model = load_keras_file(path)
        assert model.count_params() > 0
    for preset in list_presets():
        predictor = GraphPredictor.from_preset(preset)
        assert isinstance(predictor, GraphPredictor) and predictor.built


def test_copy_of_a_legacy_run_directory_loads(tmp_path):
    """load_graph_predictor reads a run directory's graph_predictor.keras of earlier versions
    (a coupled one: the file that needs the upgrade)."""
    from glomo_tf.saving import load_graph_predictor

    shutil.copy(os.path.join(LEGACY, "coupled.keras"), tmp_path / "graph_predictor.keras")
    predictor = load_graph_predictor(str(tmp_path))
    assert isinstance(predictor, CoupledGraphPredictor) and predictor.composition == "projected"


# ---------------------------------------------------------------------------- earlier run directories
RUNS = os.path.join(TESTS, "fixtures", "legacy_runs")


@pytest.mark.parametrize("name", ["decoupled", "coupled"])
def test_run_directories_of_the_flat_predictor_load_and_resume(name, tmp_path, capsys):
    """``glomo pretrain`` run directories written before the predictor had sub-layers (two
    epochs of ``tests/experiments/test_pretrain_cli.py``'s tiny setting; ``coupled``: ``--coupled
    --composition projected``): their predictor, preset and pretrainer files load with the
    graphs that code computed, and the run resumes from its checkpoint for a third epoch."""
    from glomo_tf import load_graph_predictor
    from _tiny_runs import PRETRAIN_TINY as TINY, glomo_pretrain

    expected = np.load(os.path.join(RUNS, "expected.npz"))
    ids = expected["ids"]
    run = str(tmp_path / name)
    shutil.copytree(os.path.join(RUNS, name), run)
    for predictor in (load_graph_predictor(run),
                      GraphPredictor.from_preset(os.path.join(run, "preset")),
                      load_keras_file(os.path.join(run, "pretrainer.keras")).graph_predictor):
        assert predictor.coupled == (name == "coupled")
        np.testing.assert_allclose(predictor(ids)["graphs"], expected[f"{name}/graphs"],
                                   **LEGACY_TOLERANCE)
    extra = ["--coupled", "--composition", "projected"] if name == "coupled" else []
    corpus = shutil.copy(os.path.join(RUNS, "corpus.txt"), tmp_path / "corpus.txt")
    with open(os.path.join(run, "config.json")) as handle:
        settings = json.load(handle)
    settings["train"] = [str(corpus)]  # where the corpus is now (the settings must match)
    with open(os.path.join(run, "config.json"), "w") as handle:
        json.dump(settings, handle)
    assert glomo_pretrain("--train", str(corpus), "--output-dir", run, "--epochs", "3",
                          "--verbose", "2", *TINY, *extra) == 0
    assert "Resuming from" in capsys.readouterr().out
    with open(os.path.join(run, "metrics.json")) as handle:
        assert json.load(handle)["steps"] == 69  # 23 steps an epoch, two of them before


@pytest.mark.parametrize("cls", [GraphPredictor, CoupledGraphPredictor])
def test_a_frozen_config_freezes_the_sub_layers(cls):
    """A predictor made with trainable=False (a frozen predictor's config) has no trainable
    weight in any sub-layer."""
    predictor = cls(16, 8, num_layers=1, num_heads=2, conv_layers=1, trainable=False)
    predictor.build((None, None))
    assert predictor.trainable_weights == [] and len(predictor.weights) > 5
    clone = GraphPredictor.from_config(predictor.get_config())
    clone.build((None, None))
    assert type(clone) is cls and clone.trainable_weights == []
    image = GraphPredictor2D(hidden_dim=4, num_layers=1, num_heads=2, conv_layers=1,
                             trainable=False)
    image.build((None, 3, 3, 1))
    assert image.trainable_weights == []


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_transpose_rows_is_the_transpose_with_its_gradient(dtype, mode):
    """The 8-byte-word transpose against NumPy's, forward and backward (the gradient of
    ``sum(y * w)`` is ``w`` moved back by the inverse permutation), with run-time shapes."""
    from glomo_tf.layers._common import transpose_rows
    perm = [2, 0, 3, 1, 4]  # not its own inverse
    x_np = RNG.normal(size=(3, 2, 5, 4, 8)).astype("float32")
    w_np = RNG.normal(size=(5, 3, 4, 2, 8)).astype("float32")
    x, w = tf.cast(x_np, dtype), tf.cast(w_np, dtype)

    def forward_backward(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = transpose_rows(x, perm)
            assert y.shape.as_list() == [x.shape[axis] for axis in perm]  # static sizes kept
            loss = tf.reduce_sum(tf.cast(y * w, tf.float32))
        return y, tape.gradient(loss, x)

    if mode != "eager":
        forward_backward = tf.function(
            forward_backward, jit_compile=mode == "xla",
            input_signature=[tf.TensorSpec([None, 2, None, 4, 8], x.dtype)])
    y, grad = forward_backward(x)
    assert y.dtype == x.dtype and grad.dtype == x.dtype
    np.testing.assert_array_equal(tf.cast(y, tf.float32).numpy(),
                                  np.transpose(tf.cast(x, tf.float32).numpy(), perm))
    np.testing.assert_array_equal(tf.cast(grad, tf.float32).numpy(),
                                  np.transpose(tf.cast(w, tf.float32).numpy(), np.argsort(perm)))


def test_transpose_rows_falls_back_and_refuses_a_moved_last_axis():
    from glomo_tf.layers._common import transpose_rows
    x = RNG.normal(size=(2, 3, 5)).astype("float32")  # 20-byte rows: not whole 8-byte words
    np.testing.assert_array_equal(transpose_rows(x, [1, 0, 2]).numpy(), x.transpose(1, 0, 2))
    with pytest.raises(ValueError, match="keeps the last axis"):
        transpose_rows(x, [0, 2, 1])
