"""Small helpers shared by the layers (internal): dtype cast, biases in products, float32
sigmoid, row-preserving transposes, GRU update, mask, initializer arguments; the masked softmax
is :func:`glomo_tf.ops.masked_softmax` (graph math, below the layers), named here too.
"""

import tensorflow as tf

from glomo_tf import _keras_private
from glomo_tf.ops import masked_softmax  # noqa: F401  (the layers' name for it)


def compute_cast(layer, value):
    """``value`` (typically a float32 variable) cast to ``layer``'s compute dtype.

    Layers bind it as their ``_w`` method (``_w = compute_cast``): ``self._w(self.kernel)``.
    """
    return tf.cast(value, layer.compute_dtype)


def with_ones_column(*parts):
    """``parts [..., n_i]`` side by side plus a column of ones: ``[..., sum n_i + 1]``. With
    :func:`with_bias_row` on the kernel, a bias rides in its matrix product as one more input
    row: a separate add and its gradient (a sum over every row of the product) cost more than
    the extra row (about 5% of a bfloat16 pretraining step for Eq. 1's projections)."""
    return tf.concat([*parts, tf.ones_like(parts[0][..., :1])], axis=-1)


def with_bias_row(kernel, bias):
    """``kernel [..., n, m]`` with ``bias [..., 1, m]`` as its last row: the kernel of
    :func:`with_ones_column`'s inputs."""
    return tf.concat([kernel, bias], axis=-2)


def float32_sigmoid(x):
    """``sigmoid(x)`` computed in float32, in ``x``'s dtype: a CPU computes a bfloat16 sigmoid
    and its gradient about 1.5 to 2 times as slowly as the float32 one with the casts around it
    (and rounds them worse)."""
    return tf.cast(tf.sigmoid(tf.cast(x, tf.float32)), x.dtype)


def transpose_rows(x, perm):
    """``tf.transpose(x, perm)`` for a ``perm`` that keeps the last axis in place, moving each
    row's elements in 8-byte words: ``x`` bitcast to float64 in groups of four bfloat16 (two
    float32) entries, transposed, and cast back. TensorFlow's CPU transpose copies one element at
    a time, so moving a quarter as many words is about twice as fast (a ``[2, 16, 128, 24, 128]``
    bfloat16 ``[1, 0, 3, 2, 4]``: 12.9 -> 6.0 ms, float32 20.0 -> 8.4 ms, one thread). Bits move
    unchanged, so the result is exactly the transpose's; its gradient is the inverse transpose,
    in words too. Inside XLA (which fuses transposes), or when the rows' bytes are not a multiple
    of 8, it is the plain transpose."""
    x, perm = tf.convert_to_tensor(x), list(perm)
    if perm[-1] != len(perm) - 1:
        raise ValueError(f"transpose_rows keeps the last axis; got the permutation {perm}.")
    width = x.shape[-1]
    if (_keras_private.in_xla_context() or width is None or x.dtype.size not in (2, 4)
            or (width * x.dtype.size) % 8):
        return tf.transpose(x, perm)
    inverse = [perm.index(axis) for axis in range(len(perm))]

    def move(rows, order):
        shape = tf.shape(rows)
        group = 8 // rows.dtype.size
        words = tf.bitcast(tf.reshape(rows, tf.concat([shape[:-1], [width // group, group]], 0)),
                           tf.float64)
        moved = tf.bitcast(tf.transpose(words, order), rows.dtype)
        moved = tf.reshape(moved, tf.concat([tf.gather(shape, order[:-1]), [width]], 0))
        moved.set_shape([rows.shape[axis] for axis in order])  # the static sizes known
        return moved

    @tf.custom_gradient
    def transposed(rows):
        return move(rows, perm), lambda upstream: move(upstream, inverse)

    return transposed(x)


def time_slice(x, start, length, axis):
    """``x`` cut to ``length`` entries from ``start`` along ``axis``, every other axis whole.

    ``x[:, :, start:start + length]`` as a ``Slice`` op, whose gradient is a pad: the
    ``StridedSlice`` that Python indexing makes has a gradient about ten times slower on CPU
    outside XLA when the shapes are dynamic (``tf.function`` steps, the bfloat16 path).
    """
    begin = [0] * x.shape.rank
    size = [-1] * x.shape.rank
    begin[axis], size[axis] = start, length
    return tf.slice(x, tf.stack(begin), tf.stack(size))


def gru_update(gates_x, gates_h, state, keras_order=False):
    """The GRU cell's new state from its gate pre-activations.

    ``gates_x`` (from the input) and ``gates_h`` (from ``state``, biases included) are
    ``[..., 3 * units]``, the reset, update and candidate gates in that order (with
    ``keras_order``, Keras' ``GRUCell`` order: update, reset, candidate). The reset gate
    multiplies the recurrent part of the candidate after its matrix product (Keras's and cuDNN's
    ``reset_after=True``)::

        r = sigmoid(x_r + h_r),  z = sigmoid(x_z + h_z),  n = tanh(x_n + r * h_n)
        state' = z * state + (1 - z) * n

    The two sigmoids are one, computed in float32 whatever the gates' dtype
    (:func:`float32_sigmoid`).
    """
    units = gates_x.shape[-1] // 3
    x_gates, x_n = tf.split(gates_x, [2 * units, units], axis=-1)
    h_gates, h_n = tf.split(gates_h, [2 * units, units], axis=-1)
    gates = float32_sigmoid(x_gates + h_gates)
    reset, update = tf.split(gates, 2, axis=-1)
    if keras_order:
        reset, update = update, reset
    candidate = tf.tanh(x_n + reset * h_n)
    return update * state + (1.0 - update) * candidate


def attached_mask(tensor):
    """The Keras mask attached to ``tensor`` (e.g. by ``Embedding(mask_zero=True)``), or None.

    For layers called with several tensors, to which Keras does not pass the mask itself.
    """
    return _keras_private.get_keras_mask(tensor)


def sequence_inputs(layer, inputs, mask):
    """``(inputs, mask)`` of a layer taking features ``[batch, T, d]`` beside other tensors: the
    features in the layer's compute dtype (rank checked) and their mask, the attached one when
    Keras passed none."""
    if mask is None:  # Keras fills `mask` itself only for single-tensor calls
        mask = attached_mask(inputs)
    inputs = tf.cast(inputs, layer.compute_dtype)
    if inputs.shape.rank != 3:
        raise ValueError(f"{type(layer).__name__} expects inputs [batch, T, d]; got rank "
                         f"{inputs.shape.rank}.")
    return inputs, mask


def direction_rows(x, rows, axis):
    """``x [B, 2, ...]`` cut to each direction's ``rows[z]`` along ``axis`` (``rows``: int
    ``[2, S]``)."""
    swap = [1, 0] + list(range(2, x.shape.rank))
    return tf.transpose(tf.gather(tf.transpose(x, swap), rows, axis=axis, batch_dims=1), swap)


def fresh_initializer(initializer):
    """A new initializer object for one weight: a copy of ``initializer`` (so two weights never
    share an unseeded initializer's seed, as Keras' ``MultiHeadAttention`` does for its
    sub-layers), or, when it is None, the reference code's uniform variance scaling."""
    import keras  # here: glomo_tf.ops imports this module without Keras

    if initializer is None:
        return keras.initializers.VarianceScaling(1.0, "fan_in", "uniform")
    return initializer.__class__.from_config(initializer.get_config())


def serialize_initializer(initializer):
    """An initializer argument's config entry (None stays None)."""
    import keras

    return None if initializer is None else keras.initializers.serialize(initializer)


def loaded_by_parent(layer, store):
    """Whether ``layer``'s variables were already loaded by the :class:`~glomo_tf.GraphPredictor`
    that owns it: a file of earlier versions kept every weight in the predictor (see its
    ``load_own_variables``) and leaves this layer's own entry empty."""
    return getattr(layer, "_loaded_by_parent", False) and not len(store.keys())
