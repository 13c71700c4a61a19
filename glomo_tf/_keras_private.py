"""Every use of private Keras or TensorFlow API in glomo_tf, in one place.

Each function below wraps one private symbol, says why glomo_tf needs it and which public API
would replace it. ``tests/test_keras_private.py`` exercises each against the installed Keras and
TensorFlow (pinned in ``setup.py``), so an upgrade that changes the private API fails there, with
the name of the wrapper, rather than somewhere deep in a layer or a training run.
"""

from keras.src import backend as _keras_backend


def get_keras_mask(tensor):
    """The Keras mask attached to ``tensor`` (e.g. by ``Embedding(mask_zero=True)``), or None.

    Why: Keras passes a layer the mask attached to its input (as ``mask=``) only when the layer
    is called on a single tensor. ``ContextualizedNonLocal`` and ``SharedPrivateRNN`` take more
    tensors (``edge_features``, ``aux_targets``), so they read the mask off their input here.

    Private: ``keras.src.backend.get_keras_mask`` (the attribute ``_keras_mask`` underneath).
    Public replacement: none in Keras 3.15 (``keras.backend`` does not export it). Use it if
    Keras exports it; otherwise the layers could require callers to pass ``mask=``.
    """
    return _keras_backend.get_keras_mask(tensor)


def replace_gradient_clipping(optimizer, clip_gradients):
    """Makes ``optimizer.apply`` clip with ``clip_gradients(grads, keras_clip)``; returns it.

    ``keras_clip(grads)`` is the optimizer's own clipping (``clipnorm``, ``clipvalue`` or
    ``global_clipnorm``), so the replacement can fall back on it. The change lives on this
    optimizer object only: it is not saved, and a loaded copy clips the Keras way again.

    Why: Keras 3 clips inside ``optimizer.apply``, on each replica's gradient before the
    cross-replica sum, and offers no public way to change that (see
    :func:`glomo_tf.training.clip_summed_gradient`).

    Private: the method ``BaseOptimizer._clip_gradients(grads)``, which ``apply`` calls once per
    step on the list of gradients. Public replacement: clip in the model's ``train_step`` before
    ``optimizer.apply`` (with the optimizer's own clipping off), or a Keras option to clip the
    aggregated gradient, if one appears.
    """
    keras_clip = optimizer._clip_gradients
    optimizer._clip_gradients = lambda grads: clip_gradients(grads, keras_clip)
    return optimizer


def in_multi_worker_mode(strategy):
    """True when ``strategy`` (a ``tf.distribute.Strategy``) spans several workers.

    Why: Keras reduces a step's outputs along axis 0, which fails on scalars across workers
    (tensorflow/tensorflow#72388); the pretrainer gives them that axis in multi-worker mode only.

    Private: ``strategy.extended._in_multi_worker_mode()``, which Keras's own ``fit`` uses for
    the same question (``MultiWorkerMirroredStrategy``: more than one worker in the cluster;
    the default, one-device and mirrored strategies: False). Public replacement: count the
    ``"chief"`` and ``"worker"`` tasks of ``strategy.cluster_resolver.cluster_spec()`` (for the
    strategies that have a cluster resolver), or a public Keras/TF predicate, if one appears.
    """
    return bool(strategy.extended._in_multi_worker_mode())


def in_xla_context():
    """True while TensorFlow traces code that XLA will compile (a ``tf.function(jit_compile=
    True)``, Keras' ``compile(jit_compile=True)``, anything they call).

    Why: the training-form CNNs choose between TensorFlow's fused batch norm (twice as fast op by
    op, outside XLA) and the masked form made of elementwise ops, which XLA fuses better (the
    float32 XLA pretraining step ran 8-15% slower with the fused kernel inside a ``tf.cond``).

    Private: ``tensorflow.python.ops.control_flow_util.GraphOrParentsInXlaContext``.
    Public replacement: none in TensorFlow 2.21; without it the layers would take the choice as
    an argument threaded from ``compile``.
    """
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def omit_retracing_warning(function):
    """Stops TensorFlow warning that the ``tf.function`` ``function`` traces too often; returns it.

    Why: the tuner's evaluation builds new functions for every trial's new model, so each traces
    once per trial; TensorFlow counts those traces across functions and warns of "retracing",
    which here is expected and not a bug.

    Private: the attribute ``Function._omit_frequent_tracing_warning``, which TensorFlow's own
    Keras integration sets for the same reason. Public replacement: none in TensorFlow 2.21
    (``reduce_retracing`` changes the tracing, not the warning).
    """
    function._omit_frequent_tracing_warning = True
    return function


def keras_tuner_outside_notebooks():
    """Makes KerasTuner print plain lines when no IPython kernel runs this process.

    Why: KerasTuner 1.4.8 takes any process where IPython is importable for a notebook
    (``get_ipython()`` is None outside IPython, and its class name lacks "Terminal"), so after
    each trial it "clears the output" with terminal escape codes (``ESC[2K``) that end up in logs
    and pipes.

    Private: the module attribute ``keras_tuner.src.utils.IS_NOTEBOOK``, which KerasTuner reads
    at every trial. Public replacement: none; a KerasTuner release that checks for a running
    kernel would make this a no-op.
    """
    from keras_tuner.src import utils

    try:
        import IPython
    except ImportError:
        return
    if IPython.get_ipython() is None:
        utils.IS_NOTEBOOK = False


def run_functional_graph(model, inputs, call_function):
    """The outputs of the functional ``model``'s graph on ``inputs`` (structured as
    ``model.input``), each layer called as ``call_function(layer, *args, **kwargs)``: the same
    layer objects, some of them handed other inputs.

    Why: :class:`glomo_tf.models.GraphFedModel` calls a model's ``GlomoTransfer``
    layers on ``[features, graphs]`` (graphs as new ``keras.Input`` tensors) instead of
    ``[features, token_ids]``, in a functional model on ``[ids, graphs]``.

    Private: ``Functional._run_through_graph(inputs, operation_fn, call_fn)``, which
    ``keras.models.clone_model`` runs. Public replacement: ``clone_model(call_function=...)``
    runs the same walk but builds the clone on the model's own inputs only, so a layer cannot
    be handed an input the model does not have; a Keras release that allows that would do.
    """
    return model._run_through_graph(inputs, operation_fn=lambda layer: layer,
                                    call_fn=call_function)
