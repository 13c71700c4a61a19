"""A harness of the checks every public glomo_tf layer must pass, one call per configuration.

In the spirit of keras-hub's ``TestCase.run_layer_test``, written for plain pytest functions and
for the call signatures of this library's layers: several positional tensors, nested lists
(``GlomoTransfer([features, ids])``), tensor keyword arguments (``mask=``, ``edge_features=``),
dict and tuple outputs.

API
---

``run_layer_test(cls, init_kwargs, call_args=(), call_kwargs=None, *, tmp_path, mask_check, ...)``

* ``cls``: the layer class. ``init_kwargs``: its constructor arguments, a dict or a callable that
  returns one; a callable is called afresh for every layer the harness builds, under the dtype
  policy of the check (use it when an argument is itself a layer, e.g. ``GlomoTransfer``'s
  predictor).
* ``call_args`` / ``call_kwargs``: the layer is called as ``layer(*call_args, **call_kwargs)``.
  NumPy arrays anywhere in them (also inside lists, tuples and dicts) are the tensor inputs; every
  other value (``training=False``, ``None``, strings, numbers) is passed on as it is. The call must
  be deterministic (no active dropout, no ``training=True`` with state updates).
* ``tmp_path``: pytest's ``tmp_path``, where the ``.keras`` file is written.
* ``mask_check``: required: a :class:`MaskCheck`, or ``None`` for a layer without padding (say why
  in the call).
* ``randomize(layer, rng)``: gives a built layer non-default weights before any comparison, so a
  weight that is not copied, saved or loaded shows in the outputs. Default :func:`jitter_weights`.
* ``extra_outputs(layer, args, kwargs)``: optional, further tensors of the layer (another method, a
  score) compared like the outputs in checks 1, 2 and 5; for layers whose call output is discrete.
* ``seed``: of the NumPy generators handed to ``randomize``.

The checks. Each runs unless its argument turns it off, which a call does only where the layer
genuinely does not support it, with the reason next to the argument:

1. ``config_check=True``: every constructor argument given is in ``get_config()`` (with its value,
   for plain values); ``cls.from_config(layer.get_config())`` gives the identical config;
   ``keras.saving.serialize_keras_object`` through JSON and ``deserialize_keras_object`` give back
   the class and the config (up to JSON turning tuples into lists); after ``set_weights`` from the
   layer, the clone's outputs equal the layer's (rtol 1e-6).
2. ``saving_check="functional"``: the layer in a functional model with one ``keras.Input`` per
   tensor input, whose symbolic output specs must match the eager outputs' shapes and dtypes; or
   ``"subclassed"``: in :class:`HarnessModel`, for inputs without a batch axis. The model gets
   weights other than the reference's, its outputs must equal the layer's own call; it is saved
   to a ``.keras`` file and read back with ``keras.saving.load_model``: the outputs agree
   (allclose 1e-6), the restored layer has the same config and exactly the same weights.
   ``input_shapes``: the ``keras.Input`` shapes without the batch axis, one per tensor input in
   the order they appear in ``call_args`` then ``call_kwargs`` (default: the data's; ``None``
   marks a dynamic axis). ``symbolic_dtypes`` (given like ``bfloat16_dtypes`` below) overrides
   the dtypes expected of the symbolic outputs: only to record a known defect of the layer.
3. ``bfloat16_check=True``: under the global ``mixed_bfloat16`` policy the layer builds and runs;
   its compute dtype and every sub-layer's is bfloat16 and every floating weight stays float32;
   the outputs have the dtypes of ``bfloat16_dtypes`` (a structure like the outputs' of dtype
   names, or one name for every output; default: ``"bfloat16"`` for each floating output, the
   float32 run's dtype for the others), are finite and, with the reference's weights, are within
   ``bfloat16_rtol`` (default 0.05) of the float32 outputs, relative to their largest magnitude.
   The gradients of a fixed random projection of the floating outputs with respect to the
   trainable weights are float32 and finite, and point the way the float32 ones do (cosine
   similarity of the concatenated gradients at least ``bfloat16_gradient_cosine``, 0.95).
3b. ``layer_policy_check=True``: the same with ``dtype="mixed_bfloat16"`` given to the layer
   alone, under the float32 global policy (the layer is built from ``init_kwargs`` plus that
   ``dtype``, which ``init_kwargs`` must not set itself). The layer's and every sub-layer's
   ``dtype_policy.name`` is ``mixed_bfloat16``, every floating weight is float32 and the outputs
   pass check 3's dtype and accuracy checks (same ``bfloat16_dtypes`` and ``bfloat16_rtol``): a
   sub-layer created without ``dtype=self.dtype_policy`` computes in float32 here, where check 3
   cannot see it. With check 3 on, the outputs equal check 3's bit for bit (a difference means
   code that reads the global policy). Layers passed in as constructor arguments
   (``GlomoTransfer``'s predictor), and their sub-layers, keep the policy they were made with:
   they are not checked, nor then compared with check 3. Also
   ``cls.from_config(get_config())`` keeps the policies of the layer and of its sub-layers and,
   with the layer's weights, gives its outputs.
4. masks: the outputs at real positions, ``mask_check.real(outputs)``, do not change (1e-5) when
   ``mask_check.perturb`` changes the inputs at padded positions. The perturbation must change an
   input and the compared outputs must not all be zero. With ``mask_check.unmasked`` the same
   perturbation without the mask must change those outputs: the mask, not the data, hides it.
5. ``jit_check=True``: the call under ``tf.function(jit_compile=True)`` gives the eager outputs
   (rtol 1e-5, atol ``jit_atol`` = 1e-5).

Every check compares every output leaf (all keys of a dict output), not merely that the code
runs, and no leaf of the reference outputs may be all zero. ``run_layer_test`` returns the
reference outputs (NumPy, floating ones in float32).
"""

import dataclasses
import json
from typing import Callable, Optional

import keras
import numpy as np
import tensorflow as tf


# ---------------------------------------------------------------------------- public helpers
@dataclasses.dataclass
class MaskCheck:
    """The masking contract of a layer, for check 4 of :func:`run_layer_test`.

    Attributes:
        perturb: ``(args, kwargs) -> (args, kwargs)``: new call inputs that differ from the given
            ones at padded positions only (garbage features, extra trailing padding, ...). Must
            not modify its arguments in place.
        real: ``outputs -> structure of arrays``: the outputs at the real positions (the whole
            output where padded outputs must be zero as well). Receives the outputs as NumPy
            arrays, floating ones in float32, in the structure the layer returns.
        unmasked: optional ``(args, kwargs) -> (args, kwargs)``: the same call without its mask;
            the perturbation must then change ``real(outputs)`` by more than 1e-4.
    """

    perturb: Callable
    real: Callable
    unmasked: Optional[Callable] = None


def jitter_weights(layer, rng, scale=0.2):
    """Adds ``N(0, scale^2)`` noise to every floating weight of ``layer``, sub-layers included.

    Zero biases become non-zero, and variances (initialised at one) stay positive.
    """
    for variable in layer.weights:
        if not _is_floating(variable.dtype):
            continue  # e.g. a seed generator's state
        value = np.asarray(variable.numpy())
        variable.assign((value + rng.normal(0.0, scale, value.shape)).astype(value.dtype))


def run_layer_test(cls, init_kwargs, call_args=(), call_kwargs=None, *, tmp_path, mask_check,
                   randomize=jitter_weights, extra_outputs=None, config_check=True,
                   saving_check="functional", input_shapes=None, symbolic_dtypes=None,
                   bfloat16_check=True, bfloat16_dtypes=None, bfloat16_rtol=0.05,
                   bfloat16_gradient_cosine=0.95, layer_policy_check=True, jit_check=True, jit_atol=1e-5, seed=0):
    """Runs the checks of this module's docstring on one configuration of ``cls``."""
    call_kwargs = dict(call_kwargs or {})
    template, leaves = _template((tuple(call_args), call_kwargs))
    assert leaves, "run_layer_test needs at least one tensor (NumPy array) input"
    if saving_check not in ("functional", "subclassed", None):
        raise ValueError(
            f"saving_check must be 'functional', 'subclassed' or None, got {saving_check!r}")
    name = cls.__name__

    # The reference: a built layer with randomized weights, and its eager float32 outputs.
    layer = _make(cls, init_kwargs)
    _call(layer, template, leaves)
    randomize(layer, np.random.default_rng(seed))
    reference = _numpy(_call(layer, template, leaves))
    flat = _flatten(reference)
    for path, value in flat:
        assert np.all(np.isfinite(value)), f"{name} output{path} is not finite"
        assert np.any(value != 0), f"{name} output{path} is all zero: comparisons would be vacuous"

    if config_check:
        _check_config(name, cls, init_kwargs, layer, template, leaves, reference, extra_outputs)
    if saving_check:
        _check_saving(name, cls, init_kwargs, template, leaves, randomize, seed, tmp_path,
                      saving_check, extra_outputs, input_shapes, symbolic_dtypes)
    global_bfloat16 = None
    if bfloat16_check:
        global_bfloat16 = _check_bfloat16(name, cls, init_kwargs, template, leaves, layer,
                                          reference, bfloat16_dtypes, bfloat16_rtol,
                                          bfloat16_gradient_cosine)
    if layer_policy_check:
        _check_layer_policy(name, cls, init_kwargs, template, leaves, layer, reference,
                            bfloat16_dtypes, bfloat16_rtol, global_bfloat16)
    if mask_check is not None:
        _check_mask(name, layer, tuple(call_args), call_kwargs, reference, mask_check)
    if jit_check:
        _check_jit(name, layer, template, leaves, reference, extra_outputs, jit_atol)
    return reference


# ---------------------------------------------------------------------------- the checks
def _check_config(name, cls, init_kwargs, layer, template, leaves, reference, extra_outputs):
    config = layer.get_config()
    for key, value in (init_kwargs() if callable(init_kwargs) else init_kwargs).items():
        assert key in config, f"{name}: the constructor argument {key!r} is not in get_config()"
        if value is None or isinstance(value, (bool, int, float, str)):
            assert config[key] == value, f"{name}: get_config()[{key!r}] is {config[key]!r}"
    clone = cls.from_config(config)
    assert type(clone) is cls, f"from_config gave a {type(clone).__name__}"
    assert clone.get_config() == config, f"{name}: from_config(get_config()) changed the config"
    revived = keras.saving.deserialize_keras_object(
        _json(keras.saving.serialize_keras_object(layer)))
    assert type(revived) is cls, f"deserialize_keras_object gave a {type(revived).__name__}"
    assert _json(revived.get_config()) == _json(config), \
        f"{name}: the JSON round trip changed the config"
    _call(clone, template, leaves)  # builds the clone
    weights = layer.get_weights()
    assert [w.shape for w in clone.get_weights()] == [w.shape for w in weights], \
        f"{name}: the clone has other weights than the layer"
    clone.set_weights(weights)
    _assert_close(_numpy(_call(clone, template, leaves, extra_outputs)),
                  _with_extra(layer, template, leaves, reference, extra_outputs), 1e-6, 1e-7,
                  f"{name} config round trip")


def _check_saving(name, cls, init_kwargs, template, leaves, randomize, seed, tmp_path, kind,
                  extra_outputs, input_shapes, symbolic_dtypes):
    layer = _make(cls, init_kwargs)
    if kind == "functional":
        shapes = input_shapes or [value.shape[1:] for value in leaves]
        assert len(shapes) == len(leaves), "input_shapes needs one shape per tensor input"
        inputs = [keras.Input(shape=shape, dtype=str(value.dtype), name=f"input_{i}")
                  for i, (shape, value) in enumerate(zip(shapes, leaves))]
        symbolic = _call(layer, template, inputs)
        model = keras.Model(inputs, symbolic)
    else:
        model = HarnessModel(layer, template, [[list(v.shape), str(v.dtype)] for v in leaves])
        model.build_from_config(model.get_build_config())
    randomize(layer, np.random.default_rng(seed + 1))  # other weights than the reference's
    before = _numpy(model(leaves, training=False))
    _assert_close(before, _numpy(_call(layer, template, leaves)), 1e-6, 1e-6,
                  f"{name}: the model's outputs and the layer's own")
    if kind == "functional":  # the symbolic specs describe the eager outputs
        specs, eager = _flatten(symbolic), _flatten(before)
        assert [p for p, _ in specs] == [p for p, _ in eager], f"{name}: symbolic outputs differ"
        dtypes = _dtypes(symbolic_dtypes, [str(value.dtype) for _, value in eager])
        for (path, spec), (_, value), dtype in zip(specs, eager, dtypes):
            assert len(spec.shape) == value.ndim and all(
                s is None or s == v for s, v in zip(spec.shape, value.shape)), \
                f"{name} output{path}: symbolic shape {spec.shape}, eager {value.shape}"
            assert keras.backend.standardize_dtype(spec.dtype) == dtype, \
                f"{name} output{path}: symbolic dtype {spec.dtype}, eager {value.dtype}"
    path = tmp_path / f"{name}_harness.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    _assert_close(_numpy(loaded(leaves, training=False)), before, 1e-6, 1e-6,
                  f"{name} .keras round trip")
    restored = [sub for sub in loaded._flatten_layers(include_self=False) if type(sub) is cls]
    assert len(restored) == 1, f"{len(restored)} {name} layers in the loaded model"
    restored = restored[0]
    assert _json(restored.get_config()) == _json(layer.get_config()), \
        f"{name}: the loaded layer's config differs"
    assert len(restored.weights) == len(layer.weights), f"{name}: other weights after loading"
    for original, loaded_weight in zip(layer.weights, restored.weights):
        np.testing.assert_array_equal(np.asarray(loaded_weight.numpy()),
                                      np.asarray(original.numpy()), err_msg=original.path)
    if extra_outputs is not None:
        args, kwargs = _pack(template, leaves)
        _assert_close(_numpy(extra_outputs(restored, args, kwargs)),
                      _numpy(extra_outputs(layer, args, kwargs)), 1e-6, 1e-6,
                      f"{name} .keras round trip, extra outputs")


def _check_bfloat16(name, cls, init_kwargs, template, leaves, reference_layer, reference,
                    expected, rtol, gradient_cosine):
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = _make(cls, init_kwargs)
        _call(layer, template, leaves)
        layer.set_weights(reference_layer.get_weights())  # float32 variables in both
        outputs = _call(layer, template, leaves)
        gradients = _projected_gradients(layer, template, leaves)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    _check_bfloat16_gradients(name, gradients,
                              _projected_gradients(reference_layer, template, leaves),
                              gradient_cosine)
    assert layer.compute_dtype == "bfloat16", f"{name} computes in {layer.compute_dtype}"
    for variable in layer.weights:
        if _is_floating(variable.dtype):
            assert variable.dtype == "float32", f"{name} weight {variable.path} is {variable.dtype}"
    for sub in layer._flatten_layers(include_self=False):
        assert sub.compute_dtype == "bfloat16", \
            f"{name}'s sub-layer {sub.name} computes in {sub.compute_dtype}"
    _check_bfloat16_outputs(name, "under mixed_bfloat16", outputs, reference, expected, rtol)
    return outputs


def _projected_gradients(layer, template, leaves):
    """The gradients ``{(index, variable name): float32 array}`` of ``sum_i r_i * output_i`` over the
    floating output leaves (``r``: fixed normal draws of each leaf's shape, so that outputs whose
    rows sum to one still have a gradient) with respect to ``layer``'s trainable weights; ``{}``
    when no floating output depends on them."""
    variables = [v for v in layer.trainable_weights if _is_floating(v.dtype)]
    if not variables:
        return {}
    rng = np.random.default_rng(1)
    with tf.GradientTape() as tape:
        outputs = _call(layer, template, leaves)
        terms = [tf.reduce_sum(tf.cast(value, tf.float32)
                               * rng.standard_normal(value.shape).astype("float32"))
                 for _, value in _flatten(outputs) if _is_floating(value.dtype)]
        total = tf.add_n(terms) if terms else None
    if total is None:
        return {}
    grads = tape.gradient(total, [v.value if hasattr(v, "value") else v for v in variables])
    # keyed by position and the variable's own name (the two layers' sub-layer names differ)
    return {(i, v.name): g for i, (v, g) in enumerate(zip(variables, grads)) if g is not None}


def _check_bfloat16_gradients(name, got, want, min_cosine):
    """Check 3's gradient checks: float32, finite, the direction of the float32 gradients."""
    assert sorted(got) == sorted(want), \
        f"{name}: other weights get gradients under mixed_bfloat16 ({sorted(got)} vs {sorted(want)})"
    if not got:
        return
    for path, grad in got.items():
        grad = tf.convert_to_tensor(grad)
        assert grad.dtype == tf.float32, f"{name}: the gradient of {path} is {grad.dtype.name}"
        assert np.all(np.isfinite(grad.numpy())), \
            f"{name}: the gradient of {path} is not finite under mixed_bfloat16"
    a = np.concatenate([np.ravel(tf.convert_to_tensor(got[p]).numpy()) for p in sorted(got)])
    b = np.concatenate([np.ravel(tf.convert_to_tensor(want[p]).numpy()) for p in sorted(want)])
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    if norms > 0:
        cosine = float(a @ b / norms)
        assert cosine >= min_cosine, (
            f"{name}: gradients under mixed_bfloat16 point elsewhere than in float32 (cosine "
            f"{cosine:.3f} < {min_cosine})")


def _check_layer_policy(name, cls, init_kwargs, template, leaves, reference_layer, reference,
                        expected, rtol, global_outputs):
    policy = "mixed_bfloat16"
    what = f"with dtype={policy!r} (float32 global policy)"

    def check_policies(layer):
        assert layer.dtype_policy.name == policy, \
            f"{name} {what} has the policy {layer.dtype_policy.name}"
        for sub in layer._flatten_layers(include_self=False):
            if id(sub) not in given:
                assert sub.dtype_policy.name == policy, \
                    f"{name} {what}: sub-layer {sub.name} has the policy " \
                    f"{sub.dtype_policy.name} (create it with dtype=self.dtype_policy)"

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        kwargs = dict(init_kwargs() if callable(init_kwargs) else init_kwargs)
        assert "dtype" not in kwargs, \
            f"{name}: init_kwargs sets dtype; the per-layer policy check sets it itself"
        # Layers passed in (and their sub-layers) keep the policy they were made with.
        given = {id(sub) for value in kwargs.values() if isinstance(value, keras.layers.Layer)
                 for sub in value._flatten_layers(include_self=True)}
        layer = cls(**kwargs, dtype=policy)
        try:
            _call(layer, template, leaves)  # builds the layer and its sub-layers
        except Exception:
            check_policies(layer)  # a float32 sub-layer is the likely cause: say so
            raise
        check_policies(layer)
        layer.set_weights(reference_layer.get_weights())  # float32 variables in both
        outputs = _call(layer, template, leaves)
        clone = cls.from_config(layer.get_config())
        _call(clone, template, leaves)
        clone.set_weights(layer.get_weights())
        cloned_outputs = _call(clone, template, leaves)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    for variable in layer.weights:
        if _is_floating(variable.dtype):
            assert variable.dtype == "float32", \
                f"{name} {what}: weight {variable.path} is {variable.dtype}"
    _check_bfloat16_outputs(name, what, outputs, reference, expected, rtol)
    if global_outputs is not None and not given:
        # The same weights and the same policy, only given differently: the same computation.
        _assert_close(_numpy(outputs), _numpy(global_outputs), 0.0, 0.0,
                      f"{name} {what} and under the global mixed_bfloat16 policy")
    policies = [sub.dtype_policy.name for sub in layer._flatten_layers(include_self=True)]
    assert [sub.dtype_policy.name for sub in clone._flatten_layers(include_self=True)] \
        == policies, f"{name} {what}: from_config(get_config()) changed the dtype policies"
    _assert_close(_numpy(cloned_outputs), _numpy(outputs), 1e-6, 1e-7,
                  f"{name} {what}: config round trip")


def _check_bfloat16_outputs(name, what, outputs, reference, expected, rtol):
    """Check 3's output checks: dtypes, finite, within ``rtol`` of the float32 ``reference``."""
    got, want = _flatten(outputs), _flatten(reference)
    assert [p for p, _ in got] == [p for p, _ in want], f"{name}: other outputs {what}"
    dtypes = _dtypes(expected, ["bfloat16" if _is_floating(value.dtype) else str(value.dtype)
                                for _, value in want])
    for (path, tensor), (_, ref), dtype in zip(got, want, dtypes):
        actual = keras.backend.standardize_dtype(tensor.dtype)
        assert actual == dtype, f"{name} output{path} is {actual} {what}, not {dtype}"
        if not _is_floating(tensor.dtype):
            continue
        value = np.asarray(tf.cast(tensor, tf.float32))
        assert np.all(np.isfinite(value)), f"{name} output{path} is not finite {what}"
        error, scale = np.abs(value - ref).max(), np.abs(ref).max()
        assert error <= rtol * scale, \
            f"{name} output{path} {what} differs from float32 by {error} (largest |x| {scale})"


def _check_mask(name, layer, args, kwargs, reference, check):
    new_args, new_kwargs = check.perturb(args, kwargs)
    _, before = _template((tuple(args), kwargs))
    _, after = _template((tuple(new_args), dict(new_kwargs)))
    assert len(before) != len(after) or any(
        a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(before, after)), \
        f"{name}: the mask check's perturbation changed no input"
    real = check.real(reference)
    assert any(np.any(value != 0) for _, value in _flatten(real)), \
        f"{name}: the outputs at real positions are all zero, the mask check would be vacuous"
    _assert_close(check.real(_numpy(layer(*new_args, **new_kwargs))), real, 1e-5, 1e-6,
                  f"{name}: outputs at real positions after a change at padded positions")
    if check.unmasked is not None:
        plain_args, plain_kwargs = check.unmasked(args, kwargs)
        changed_args, changed_kwargs = check.unmasked(new_args, new_kwargs)
        plain = _flatten(check.real(_numpy(layer(*plain_args, **plain_kwargs))))
        changed = _flatten(check.real(_numpy(layer(*changed_args, **changed_kwargs))))
        largest = max(np.abs(a.astype(np.float64) - b).max(initial=0.0)
                      for (_, a), (_, b) in zip(plain, changed))
        assert largest > 1e-4, \
            f"{name}: without the mask the perturbation changes nothing either: a vacuous check"


def _check_jit(name, layer, template, leaves, reference, extra_outputs, atol):
    compiled = tf.function(lambda *flat: _call(layer, template, list(flat), extra_outputs),
                           jit_compile=True)
    _assert_close(_numpy(compiled(*[tf.constant(value) for value in leaves])),
                  _with_extra(layer, template, leaves, reference, extra_outputs), 1e-5, atol,
                  f"{name} under tf.function(jit_compile=True)")


# ---------------------------------------------------------------------------- the saved model
@keras.saving.register_keras_serializable(package="glomo_tf_tests")
class HarnessModel(keras.Model):
    """A subclassed model around one layer, for layers with inputs that have no batch axis.

    ``template`` (JSON) says how the model's flat list of input tensors becomes the layer's
    ``(args, kwargs)``; ``specs`` are the inputs' ``[shape, dtype]``, used to build the model on
    zeros when it is loaded.
    """

    def __init__(self, layer, template, specs, **kwargs):
        super().__init__(**kwargs)
        if isinstance(layer, dict):
            layer = keras.saving.deserialize_keras_object(layer)
        self.layer = layer
        self.template = template
        self.specs = specs

    def call(self, inputs, training=None):
        return _call(self.layer, self.template, list(inputs))

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "layer": keras.saving.serialize_keras_object(self.layer),
                "template": self.template, "specs": self.specs}

    def get_build_config(self):
        return {"specs": self.specs}

    def build_from_config(self, config):
        self([np.zeros(shape, dtype) for shape, dtype in config["specs"]])
        self.built = True


# ---------------------------------------------------------------------------- plumbing
def _make(cls, init_kwargs):
    return cls(**(init_kwargs() if callable(init_kwargs) else init_kwargs))


def _template(structure):
    """``(JSON template, [arrays])``: each array is replaced by ``{"input": its index}``."""
    leaves = []

    def walk(x):
        if isinstance(x, (np.ndarray, tf.Tensor)):
            leaves.append(np.asarray(x))
            return {"input": len(leaves) - 1}
        if isinstance(x, (list, tuple)):
            return {"sequence": [walk(v) for v in x], "tuple": isinstance(x, tuple)}
        if isinstance(x, dict):
            return {"dict": {k: walk(v) for k, v in x.items()}}
        json.dumps(x)  # a static value must fit in the model's config
        return {"static": x}

    return walk(structure), leaves


def _pack(template, tensors):
    """The inverse of :func:`_template`, with ``tensors`` in place of the arrays."""
    if "input" in template:
        return tensors[template["input"]]
    if "sequence" in template:
        values = [_pack(t, tensors) for t in template["sequence"]]
        return tuple(values) if template["tuple"] else values
    if "dict" in template:
        return {k: _pack(t, tensors) for k, t in template["dict"].items()}
    return template["static"]


def _call(layer, template, tensors, extra_outputs=None):
    args, kwargs = _pack(template, tensors)
    outputs = layer(*args, **kwargs)
    if extra_outputs is None:
        return outputs
    return {"outputs": outputs, "extra": extra_outputs(layer, args, kwargs)}


def _dtypes(expected, default):
    """Per output leaf, the dtype names of ``expected`` (None: ``default``; one name: all)."""
    if expected is None:
        return default
    if isinstance(expected, str):
        return [expected] * len(default)
    dtypes = [dtype for _, dtype in _flatten(expected)]
    assert len(dtypes) == len(default), f"{expected} does not match the outputs' structure"
    return dtypes


def _with_extra(layer, template, leaves, reference, extra_outputs):
    """The reference outputs, with the extra outputs of ``layer`` when there are any."""
    if extra_outputs is None:
        return reference
    args, kwargs = _pack(template, leaves)
    return {"outputs": reference, "extra": _numpy(extra_outputs(layer, args, kwargs))}


def _json(value):
    return json.loads(json.dumps(value))


def _is_floating(dtype):
    return keras.backend.is_float_dtype(keras.backend.standardize_dtype(dtype))


def _numpy(outputs):
    """Outputs as NumPy arrays, floating ones in float32, in the outputs' structure."""
    if isinstance(outputs, dict):
        return {k: _numpy(v) for k, v in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_numpy(v) for v in outputs)
    if _is_floating(outputs.dtype):
        return np.asarray(tf.cast(outputs, tf.float32))
    return np.asarray(outputs)


def _flatten(structure, path=""):
    """``[(path, leaf)]`` of a nested dict / list / tuple, dict keys sorted; a lone leaf's path is
    ``""`` (messages print ``output{path}``)."""
    if isinstance(structure, dict):
        return [item for key in sorted(structure)
                for item in _flatten(structure[key], f"{path}[{key!r}]")]
    if isinstance(structure, (list, tuple)):
        return [item for i, value in enumerate(structure)
                for item in _flatten(value, f"{path}[{i}]")]
    return [(path, structure)]


def _assert_close(got, want, rtol, atol, what):
    got, want = _flatten(got), _flatten(want)
    assert [p for p, _ in got] == [p for p, _ in want], f"{what}: other outputs"
    for (path, a), (_, b) in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, \
            f"{what}: output{path} is {a.dtype}{a.shape}, expected {b.dtype}{b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{what}: output{path}")
