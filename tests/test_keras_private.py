"""The private Keras/TensorFlow API under glomo_tf._keras_private still behaves as glomo_tf expects.

A failure here after a Keras or TensorFlow upgrade names the wrapper whose private API changed
(see each wrapper's docstring for the public API that would replace it).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import _keras_private, training
from _network import free_ports
from _paths import REPO



# ---------------------------------------------------------------------- get_keras_mask
def test_get_keras_mask_reads_the_mask_an_embedding_attaches():
    ids = np.array([[3, 4, 0], [5, 0, 0]], "int32")
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(ids)
    mask = _keras_private.get_keras_mask(embedded)
    assert mask is not None
    np.testing.assert_array_equal(np.asarray(mask), ids != 0)
    assert _keras_private.get_keras_mask(tf.ones((2, 3, 4))) is None


def test_layers_read_the_attached_mask_when_called_with_several_tensors():
    """SharedPrivateRNN gets its mask from the embedding even with aux_targets passed."""
    from glomo_tf import SharedPrivateRNN
    ids = np.array([[3, 4, 0, 0]], "int32")
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(ids)
    layer = SharedPrivateRNN(4, return_sequences=True)
    states = layer(embedded, aux_targets=ids)
    np.testing.assert_array_equal(np.asarray(states)[0, 2:], 0.0)  # padded steps are zeroed
    assert np.abs(np.asarray(states)[0, :2]).sum() > 0


# ---------------------------------------------------------------------- gradient clipping
def sgd_step(optimizer, grads, compiled=False):
    variable = keras.Variable(np.zeros(2, "float32"))
    apply = (tf.function(lambda g: optimizer.apply([g], [variable])) if compiled
             else (lambda g: optimizer.apply([g], [variable])))
    apply(tf.constant(grads, tf.float32))
    return variable.numpy()


@pytest.mark.parametrize("compiled", [False, True])
def test_replace_gradient_clipping_is_called_by_apply_with_keras_clip_as_fallback(compiled):
    grads = [3.0, 4.0]  # norm 5
    calls = []

    def clip(grads, keras_clip):
        calls.append(len(grads))
        return [g * 0.5 for g in keras_clip(grads)]

    optimizer = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0)
    assert _keras_private.replace_gradient_clipping(optimizer, clip) is optimizer
    np.testing.assert_allclose(sgd_step(optimizer, grads, compiled), [-0.3, -0.4], rtol=1e-6)
    assert calls == [1]  # once per step (traced once when compiled), with the list of grads
    # Keras's own clipping, untouched, for comparison: clipped to norm 1.
    plain = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0)
    np.testing.assert_allclose(sgd_step(plain, grads, compiled), [-0.6, -0.8], rtol=1e-6)


def test_clip_summed_gradient_on_one_replica_clips_as_keras():
    optimizer = training.clip_summed_gradient(
        keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0))
    np.testing.assert_allclose(sgd_step(optimizer, [3.0, 4.0]), [-0.6, -0.8], rtol=1e-6)
    unclipped = training.clip_summed_gradient(keras.optimizers.SGD(learning_rate=1.0))
    np.testing.assert_allclose(sgd_step(unclipped, [3.0, 4.0]), [-3.0, -4.0], rtol=1e-6)


# ---------------------------------------------------------------------- in_multi_worker_mode
def test_in_multi_worker_mode_is_false_on_one_machine():
    assert _keras_private.in_multi_worker_mode(tf.distribute.get_strategy()) is False
    assert _keras_private.in_multi_worker_mode(
        tf.distribute.OneDeviceStrategy("/cpu:0")) is False
    assert _keras_private.in_multi_worker_mode(
        tf.distribute.MirroredStrategy(["/cpu:0"])) is False


WORKER = """
import sys
import tensorflow as tf
from glomo_tf import _keras_private
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print("in_multi_worker_mode:", _keras_private.in_multi_worker_mode(strategy), flush=True)
"""


def run_workers(num_workers, timeout=180):
    """``MultiWorkerMirroredStrategy`` built in ``num_workers`` processes of one cluster (collective
    ops must be set up before TensorFlow initialises, so not in this process); their outputs."""
    ports = free_ports(num_workers)
    processes = []
    try:
        for index in range(num_workers):
            config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                      "task": {"type": "worker", "index": index}}
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_CONFIG=json.dumps(config))
            processes.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env, cwd=REPO,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True))
        outputs = [process.communicate(timeout=timeout)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()  # a worker waiting for its peers ignores SIGTERM
                process.wait()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    return outputs


@pytest.mark.slow
def test_in_multi_worker_mode_under_multi_worker_mirrored_strategy():
    """True with two workers in the cluster, False with one (MultiWorkerMirroredStrategy)."""
    for output in run_workers(2):
        assert "in_multi_worker_mode: True" in output, output[-3000:]
    (output,) = run_workers(1)
    assert "in_multi_worker_mode: False" in output, output[-3000:]


def test_omit_retracing_warning_silences_tensorflows_frequent_tracing_warning(caplog,
                                                                              monkeypatch):
    """TensorFlow warns when a tf.function traces many times; a function passed through
    omit_retracing_warning traces as often without the warning (the attribute it sets is read)."""
    import logging

    import tensorflow as tf

    from glomo_tf._keras_private import omit_retracing_warning

    # Without the command line's filter of this warning (a test of glomo main() may have set it).
    monkeypatch.setattr(logging.getLogger("tensorflow"), "filters", [])

    def trace_often(function):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            for n in range(1, 9):  # a new shape each call: a new trace each
                function(tf.zeros([n]))
        return [r for r in caplog.records if "retracing" in r.getMessage()]

    assert trace_often(tf.function(lambda x: x + 1))  # the warning exists
    assert not trace_often(omit_retracing_warning(tf.function(lambda x: x + 1)))


def test_keras_tuner_outside_notebooks_prints_plain_lines(capsys):
    """Outside an IPython kernel KerasTuner's "clear the output" must not write escape codes."""
    import keras_tuner.src.utils as kt_utils

    from glomo_tf._keras_private import keras_tuner_outside_notebooks

    keras_tuner_outside_notebooks()
    capsys.readouterr()
    kt_utils.try_clear()
    assert "\x1b" not in capsys.readouterr().out


# ---------------------------------------------------------------------- run_functional_graph
def test_run_functional_graph_reruns_the_layers_with_inputs_of_our_choosing():
    """The functional graph re-run on new inputs, the same layer objects, one of them handed an
    extra input the model does not have: the outputs of the changed call."""
    ids = keras.Input((3,))
    dense = keras.layers.Dense(2, name="dense")
    add = keras.layers.Add(name="add")
    model = keras.Model(ids, add([dense(ids), dense(ids)]))
    new_ids, extra = keras.Input((3,)), keras.Input((2,))

    def call(layer, *args, **kwargs):
        if layer is add:
            return layer([args[0][0], extra], **kwargs)
        return layer(*args, **kwargs)

    rerun = keras.Model([new_ids, extra],
                        _keras_private.run_functional_graph(model, new_ids, call))
    x, e = np.ones((1, 3), "float32"), np.full((1, 2), 5.0, "float32")
    np.testing.assert_allclose(rerun([x, e]), dense(x) + e, rtol=1e-6)
    assert rerun.get_layer("dense") is dense  # shared, not copied


# ---------------------------------------------------------------------- in_xla_context
def test_in_xla_context_is_true_only_where_xla_compiles():
    seen = []

    def probe(x):
        seen.append(_keras_private.in_xla_context())
        return x

    probe(tf.ones(1))
    tf.function(probe)(tf.ones(1))
    tf.function(probe, jit_compile=True)(tf.ones(1))
    tf.function(lambda x: tf.function(probe)(x), jit_compile=True)(tf.ones(1))  # nested
    assert seen == [False, False, True, True]


def test_the_training_cnns_agree_under_xla_and_outside():
    """Under XLA the training-form CNNs take the masked batch norm, outside it the fused one
    (nothing is padded here): the same outputs."""
    from glomo_tf.layers import CausalConvEncoder

    keras.utils.set_random_seed(0)
    encoder = CausalConvEncoder(stacks=2, conv_layers=2, kernel_size=3)
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 6, 8)), tf.float32)
    mask = tf.ones((2, 6), tf.bool)
    outputs = {jit: tf.function(lambda x, m: encoder(x, m, training=True),
                                jit_compile=jit)(x, mask) for jit in (False, True)}
    for plain, compiled in zip(outputs[False], outputs[True]):
        np.testing.assert_allclose(plain, compiled, rtol=1e-4, atol=1e-5)
