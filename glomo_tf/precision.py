"""The numeric precision of a run: ``float32`` or ``mixed_bfloat16``, as a Keras dtype policy.

Python users set it as any Keras user does, ``keras.config.set_dtype_policy("mixed_bfloat16")``
(or ``dtype="mixed_bfloat16"`` on one layer); every glomo_tf layer honours it, computing in bfloat16
and keeping its variables in float32, with Eq. 1's normalisation, batch-norm statistics, softmaxes
and losses in float32. The ``glomo`` commands and the run configs take ``precision`` (the
``--precision`` flag) and apply it for the duration of the run with :func:`precision_scope`; a
built predictor moves to another policy with :func:`with_dtype_policy`.

Where bfloat16 pays: on CPUs with bfloat16 matrix instructions (``avx512_bf16``, AMX), TensorFlow's
oneDNN kernels multiply bfloat16 matrices at two (AVX-512) to four (AMX) times the float32 rate,
but only outside XLA: XLA's CPU backend computes bfloat16 dots at the float32 rate or below. So a
``mixed_bfloat16`` step runs as a plain ``tf.function`` (no ``jit_compile``), and XLA stays the
float32 path. ``benchmarks/pretrain_throughput.py`` measures both.
"""

import contextlib

from glomo_tf.hparams import PRECISIONS


def check_precision(precision):
    """Returns ``precision`` if it is one of :data:`~glomo_tf.hparams.PRECISIONS`; raises a
    one-line ``ValueError`` naming the choices otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {', '.join(PRECISIONS)}; got "
                         f"{precision!r}.")
    return precision


@contextlib.contextmanager
def precision_scope(precision):
    """Within the block, layers made without an explicit ``dtype`` use ``precision``'s policy;
    the global policy in force before is restored after it (also on an error)."""
    import keras

    check_precision(precision)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def cpu_description(cpuinfo="/proc/cpuinfo"):
    """``{"cpu": model name, "bfloat16_units": [...]}`` of this machine, read from ``cpuinfo``:
    the bfloat16 matrix instructions among its flags (``avx512_bf16``, ``amx_bf16``) decide what
    ``mixed_bfloat16`` gains, so every recorded timing names them; ``{}`` where the file cannot be
    read."""
    fields = {}
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    if fields:  # the first processor's block has ended
                        break
                    continue
                fields.setdefault(key.strip(), value.strip())
                if "flags" in fields and "model name" in fields:
                    break
    except OSError:
        return {}
    flags = set(fields.get("flags", "").split())
    return {"cpu": fields.get("model name", "?"),
            "bfloat16_units": sorted(flags & {"avx512_bf16", "amx_bf16"})}


def cpu_has_bfloat16_units(cpuinfo="/proc/cpuinfo"):
    """True when this machine's CPU has bfloat16 matrix instructions (``avx512_bf16`` or
    ``amx_bf16`` among the ``flags`` of ``cpuinfo``); False elsewhere (and where the file cannot
    be read). Without them ``mixed_bfloat16`` still computes correctly, emulated, and slower than
    float32."""
    return bool(cpu_description(cpuinfo).get("bfloat16_units"))


def with_dtype_policy(predictor, dtype):
    """``predictor`` computing under the dtype policy ``dtype``: the same layer when it already
    does, else a copy made from its config with that policy and given its weights (which stay
    float32 under ``mixed_bfloat16``). A saved layer keeps the policy it was saved with, whatever
    the global policy, so this is how a float32 predictor runs in bfloat16 (and how a preset is
    written in float32 from a predictor of any policy)."""
    import keras

    policy = keras.dtype_policies.get(dtype)
    if predictor.dtype_policy.name == policy.name:
        return predictor
    if not predictor.built:
        raise ValueError("with_dtype_policy needs a built GraphPredictor (call it once, or load "
                         "it with load_graph_predictor).")
    clone = type(predictor).from_config({**predictor.get_config(), "dtype": policy.name})
    clone.build((None, None))
    clone.set_weights(predictor.get_weights())
    clone.trainable = predictor.trainable
    return clone
