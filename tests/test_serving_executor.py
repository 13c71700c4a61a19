"""Signatures run on TensorFlow's single-threaded executor with one inter-op thread, and fall back
to the default executor for graphs it cannot run (v1 control flow: loops, conditionals)."""

import numpy as np
import pytest
import tensorflow as tf

from glomo_tf.serving.errors import ServingError
from glomo_tf.serving.models import Servable, Signature, executor_for_threads, read_signature_defs

SINGLE = "SINGLE_THREADED_EXECUTOR"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A SavedModel with a straight-line signature (the single-threaded executor runs it) and a
    loop with a conditional (lowered to Switch/Merge: it cannot)."""
    spec = [tf.TensorSpec([None], tf.float32)]
    table = tf.constant([10.0, 20.0, 30.0])

    @tf.function(input_signature=spec)
    def affine(x):
        return {"y": 2.0 * x + 1.0}

    @tf.function(input_signature=spec)
    def loop(x):
        def body(i, value):
            return i + 1, tf.cond(tf.reduce_sum(value) > 0, lambda: value * 2.0,
                                  lambda: value - 1.0)
        _, y = tf.while_loop(lambda i, value: i < 3, body, (tf.constant(0), x))
        return {"y": y}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def lookup(ids):
        return {"y": tf.gather(table, ids)}

    module = tf.Module()
    module.affine, module.loop, module.lookup = affine, loop, lookup
    path = str(tmp_path_factory.mktemp("executor") / "1")
    tf.saved_model.save(module, path, signatures={"affine": affine, "loop": loop,
                                                  "lookup": lookup})
    return path


def signature(saved, name, executor_type=SINGLE):
    functions = tf.saved_model.load(saved).signatures
    return Signature(name, read_signature_defs(saved, ("serve",))[name], functions[name],
                     executor_type)


class Counting:
    """Wraps a signature's function: counts the calls and the executor each ran under."""

    def __init__(self, function):
        self.function, self.executors = function, []

    def __call__(self, **tensors):
        from tensorflow.python.eager import context
        self.executors.append(context.context().function_call_options.executor_type or None)
        return self.function(**tensors)


def test_a_straight_line_graph_stays_on_the_single_threaded_executor(saved):
    sig = signature(saved, "affine")
    sig.function = counting = Counting(sig.function)
    x = np.array([0.5, -3.0, 7.25], np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(sig.run({"x": x})["y"], 2.0 * x + 1.0)
    assert sig.executor_type == SINGLE and counting.executors == [SINGLE, SINGLE]


def test_a_graph_with_control_flow_falls_back_to_the_default_executor(saved):
    sig = signature(saved, "loop")
    sig.function = counting = Counting(sig.function)
    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_array_equal(sig.run({"x": x})["y"], x * 8.0)
    assert sig.executor_type is None
    np.testing.assert_array_equal(sig.run({"x": -x})["y"], -x - 3.0)
    # One refused call, then the default executor only.
    assert counting.executors == [SINGLE, None, None]


def test_model_errors_are_the_models_and_are_not_retried_once_the_executor_has_worked(saved):
    sig = signature(saved, "lookup")
    sig.function = counting = Counting(sig.function)
    bad = np.array([0, 7], np.int32)
    with pytest.raises(ServingError) as raised:
        sig.run({"ids": bad})  # before any success: tried on both, the model's own error
    assert raised.value.code == "INVALID_ARGUMENT" and "7" in raised.value.message
    assert sig.executor_type == SINGLE and counting.executors == [SINGLE, None]
    np.testing.assert_array_equal(sig.run({"ids": np.array([2, 0], np.int32)})["y"],
                                  [30.0, 10.0])
    with pytest.raises(ServingError):
        sig.run({"ids": bad})
    assert sig.executor_type == SINGLE and counting.executors == [SINGLE, None, SINGLE, SINGLE]


def test_the_executor_follows_the_inter_op_threads(saved, monkeypatch):
    for threads, want in ((1, SINGLE), (0, None), (2, None)):
        monkeypatch.setattr(tf.config.threading, "get_inter_op_parallelism_threads",
                            lambda threads=threads: threads)
        assert executor_for_threads() == want
        servable = Servable("m", 1, saved)
        assert {s.executor_type for s in servable.signatures.values()} == {want}
