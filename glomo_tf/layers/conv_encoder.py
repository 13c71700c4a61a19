"""The graph predictor's feature networks: stacks of causal 1-D convolutions with batch norm."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf._keras_private import in_xla_context
from glomo_tf.layers._common import (compute_cast, fresh_initializer, loaded_by_parent,
                                      serialize_initializer, time_slice, transpose_rows)

# Added to the variance in the batch norm (the reference code's, PyTorch's default).
BATCH_NORM_EPSILON = 1e-5


def batch_norm_affine(mean, variance, gamma, beta):
    """Batch normalisation as the affine map ``x * scale + shift``; returns ``(scale, shift)``.

    ``(x - mean) / sqrt(variance + BATCH_NORM_EPSILON) * gamma + beta`` is ``x * scale + shift``
    with ``scale = gamma / sqrt(variance + BATCH_NORM_EPSILON)`` and ``shift = beta - mean *
    scale``. The arguments broadcast together and ``scale`` and ``shift`` have their dtype. In
    training, :class:`CausalConvEncoder` applies the map to a convolution's output, with the
    batch's statistics; in inference it folds the map into the convolution's kernel and bias, with
    the moving statistics.
    """
    scale = gamma * tf.math.rsqrt(variance + BATCH_NORM_EPSILON)
    return scale, beta - mean * scale


def masked_moments(x, mask):
    """Mean and (biased) variance of ``x [S, B, T, d]`` per stack and channel over the positions
    ``mask [1 or S, B, T, 1]`` keeps: ``[S, 1, 1, d]`` each, float32 whatever ``x``'s dtype."""
    x32 = tf.cast(x, tf.float32)
    m = tf.cast(mask, tf.float32)
    count = tf.maximum(tf.reduce_sum(m), 1.0)
    mean = tf.reduce_sum(x32 * m, axis=[1, 2], keepdims=True) / count
    variance = tf.reduce_sum(tf.square((x32 - mean) * m), axis=[1, 2], keepdims=True) / count
    return mean, variance


def batch_norm_relu(x, mask, gamma, beta):
    """A training-mode CNN layer's batch norm (the batch's statistics over the kept positions)
    and ReLU: ``(relu(x * scale + shift), mean, variance)`` for ``x [S, B, T, d]``, ``mask [1,
    B, T, 1]`` and the float32 ``gamma`` and ``beta [S, 1, 1, d]``; the statistics (biased
    variance) float32, the affine map in ``x``'s dtype. A batch without padding takes the faster
    :func:`fused_batch_norm_relu`."""
    mean, variance = masked_moments(x, mask)
    scale, shift = batch_norm_affine(tf.cast(mean, x.dtype), tf.cast(variance, x.dtype),
                                     tf.cast(gamma, x.dtype), tf.cast(beta, x.dtype))
    return tf.nn.relu(x * scale + shift), mean, variance


def fused_batch_norm_relu(x, gamma, beta):
    """:func:`batch_norm_relu` of a batch without padding ``x [S, B, T, d]``, as one
    ``FusedBatchNormV3`` over the ``S d`` channels (oneDNN's kernel on a CPU) and its fused
    gradient. Against the masked form's separate ops it is twice as fast in bfloat16 (6.3 against
    13.9 ms forward and backward at ``[4, 16, 128, 256]``, one thread) and computes its
    statistics and gradients in float32 whatever ``x``'s dtype (its bfloat16 input gradient is
    within 0.2% of a float64 reference, the separate ops' within 3.5%)."""
    S, d = x.shape[0], x.shape[-1]
    shape = tf.shape(x)
    channels_last = tf.reshape(transpose_rows(x, [1, 2, 0, 3]), [shape[1], shape[2], 1, S * d])
    y, mean, variance, *_ = tf.compat.v1.nn.fused_batch_norm(
        channels_last, tf.reshape(gamma, [S * d]), tf.reshape(beta, [S * d]),
        epsilon=BATCH_NORM_EPSILON, is_training=True)
    y = transpose_rows(tf.reshape(tf.nn.relu(y), [shape[1], shape[2], S, d]), [2, 0, 1, 3])
    count = tf.cast(shape[1] * shape[2], tf.float32)
    # The op returns the unbiased variance (for moving averages); the masked form's is biased.
    variance = variance * tf.maximum(count - 1.0, 0.0) / count
    return y, tf.reshape(mean, [S, 1, 1, d]), tf.reshape(variance, [S, 1, 1, d])


def masked_if_padded(layers, conv_mask):
    """``layers(conv_mask)`` where the batch holds padding, else ``layers(None)`` (no masking to
    do), chosen by ``tf.cond`` on the mask. Code that XLA compiles always takes the masked form,
    whose elementwise ops it fuses (with TensorFlow's fused batch norm inside a ``tf.cond`` the
    float32 XLA pretraining step ran 8-15% slower)."""
    if in_xla_context():
        return layers(conv_mask)
    return tf.cond(tf.reduce_all(conv_mask > 0), lambda: layers(None), lambda: layers(conv_mask))


@keras.saving.register_keras_serializable(package="glomo_tf")
class CausalConvEncoder(keras.layers.Layer):
    """``stacks`` convolution networks over one sequence, half causal and half anti-causal.

    Each network is ``conv_layers`` x [zero the padded positions -> 1-D convolution of width
    ``kernel_size`` -> batch norm -> ReLU]. The first ``stacks // 2`` networks are causal (position
    ``t`` reads ``x_{t-k+1..t}``), the others anti-causal (``x_{t..t+k-1}``): the causal network of
    the time-reversed sequence, computed in the original order. :class:`~glomo_tf.GraphPredictor`
    uses four (forward key, forward query, backward key, backward query), its coupled ablation two.

    The networks have two forms, one per mode. In training they run as one computation over every
    stack: each layer is one batched matrix product of every stack's windows, the batch norm
    normalises with the batch's statistics over the real positions and moves the moving
    statistics towards them (momentum ``momentum``); dropout (one mask per stack and sequence,
    shared along time) is applied to the inputs. In inference the batch norm (moving statistics)
    is folded into each convolution's kernel and bias, and each stack is one convolution over its
    own padded input. The forms round differently (merging them would change the outputs of one
    mode by up to 2e-6 in float32, by bfloat16 rounding under a mixed policy), so both are kept;
    ``tests/layers/test_graph_predictor_forms.py`` checks that they agree.

    Args:
        stacks: int, number of networks (even).
        conv_layers: int, convolution layers in each network (0: the inputs pass through).
        kernel_size: int, width of the convolutions.
        dropout: float, dropout rate on the inputs in training.
        momentum: float, moving-average momentum of the batch-norm statistics.
        kernel_initializer: initializer of the convolution kernels (default: uniform variance
            scaling over the fan-in, the reference code's).
        kernel_regularizer: regularizer of the convolution kernels.

    Call arguments:
        inputs: float ``[batch, T, d]``.
        padding_mask: bool ``[batch, T]``, True at real positions.
        training: bool, batch statistics and dropout when True.

    Returns:
        A list of ``stacks`` tensors ``[batch, T, d]``.

    Example:

    >>> import numpy as np
    >>> encoder = CausalConvEncoder(stacks=2, conv_layers=1, kernel_size=3)
    >>> x = np.random.rand(1, 5, 4).astype("float32")
    >>> forward, backward = encoder(x, np.array([[True] * 4 + [False]]))
    >>> tuple(forward.shape)
    (1, 5, 4)
    """

    def __init__(self, stacks=4, conv_layers=4, kernel_size=3, dropout=0.0, momentum=0.9,
                 kernel_initializer=None, kernel_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        if stacks < 2 or stacks % 2:
            raise ValueError(f"stacks must be a positive even number, got {stacks}.")
        if conv_layers < 0 or kernel_size < 1:
            raise ValueError(f"conv_layers must be >= 0 and kernel_size >= 1, got {conv_layers} "
                             f"and {kernel_size}.")
        hparams.check_rates(dropout=dropout)
        self.stacks = int(stacks)
        self.conv_layers = int(conv_layers)
        self.kernel_size = int(kernel_size)
        self.dropout = float(dropout)
        self.momentum = float(momentum)
        self.kernel_initializer = (None if kernel_initializer is None
                                   else keras.initializers.get(kernel_initializer))
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

    def build(self, inputs_shape, padding_mask_shape=None):
        d, S = inputs_shape[-1], self.stacks
        self.kernels, self.gammas, self.betas = [], [], []
        self.moving_means, self.moving_variances = [], []
        for i in range(self.conv_layers):
            # autocast=False: read in float32 (batch-norm folding, moving-average updates); every
            # other use casts explicitly with self._w, so mixed precision keeps them float32.
            self.kernels.append(self.add_weight(
                name=f"conv{i}_kernel", shape=(S, self.kernel_size * d, d),
                initializer=fresh_initializer(self.kernel_initializer),
                regularizer=self.kernel_regularizer, autocast=False))
            self.gammas.append(self.add_weight(name=f"conv{i}_bn_gamma", shape=(S, 1, 1, d),
                                               initializer="ones", autocast=False))
            self.betas.append(self.add_weight(name=f"conv{i}_bn_beta", shape=(S, 1, 1, d),
                                              initializer="zeros", autocast=False))
            self.moving_means.append(self.add_weight(
                name=f"conv{i}_bn_moving_mean", shape=(S, 1, 1, d), initializer="zeros",
                trainable=False, autocast=False))
            self.moving_variances.append(self.add_weight(
                name=f"conv{i}_bn_moving_variance", shape=(S, 1, 1, d), initializer="ones",
                trainable=False, autocast=False))
        self.built = True

    _w = compute_cast

    def call(self, inputs, padding_mask, training=False):
        inputs = tf.convert_to_tensor(inputs)
        conv_mask = tf.cast(padding_mask, self.compute_dtype)[:, :, None]  # [B, T, 1]
        if not training:
            return self._inference_stacks(inputs, conv_mask)
        stacks = tf.tile(inputs[None], [self.stacks, 1, 1, 1])  # [S, B, T, d]
        if self.dropout > 0:
            stacks = self._locked_dropout(stacks)
        return tf.unstack(self._training_stacks(stacks, conv_mask[None]))

    def _locked_dropout(self, stacks):
        """One dropout mask per stack and sequence, shared along time (reference LockedDropout)."""
        shape = tf.concat([tf.shape(stacks)[:2], [1, stacks.shape[-1]]], axis=0)
        keep = tf.cast(tf.random.uniform(shape) >= self.dropout, stacks.dtype)
        return stacks * keep / (1.0 - self.dropout)

    def _shifted_windows(self, x):
        """``[S, B, T, d] -> [S, B, T, k*d]``: each position's convolution window.

        Stacks of the forward direction (first half) see ``x_{t-k+1..t}``; stacks of the backward
        direction see ``x_{t+k-1..t}``, i.e. the causal convolution of the time-reversed sequence.
        """
        k, T = self.kernel_size, tf.shape(x)[2]
        fw, bw = tf.split(x, 2, axis=0)
        fw = tf.pad(fw, [[0, 0], [0, 0], [k - 1, 0], [0, 0]])
        bw = tf.pad(bw, [[0, 0], [0, 0], [0, k - 1], [0, 0]])
        fw_cols = [time_slice(fw, j, T, axis=2) for j in range(k)]
        bw_cols = [time_slice(bw, k - 1 - j, T, axis=2) for j in range(k)]
        return tf.concat([tf.concat(fw_cols, -1), tf.concat(bw_cols, -1)], axis=0)

    def _training_stacks(self, x, conv_mask):
        """Training form, ``[S, B, T, d] -> [S, B, T, d]``: each layer one batched matrix product
        of every stack's windows, then the batch norm with the batch's statistics, which move
        the moving statistics. A batch without padding (every pretraining window) skips the
        masking and takes the fused batch norm (:func:`fused_batch_norm_relu`), a padded one the
        masked form (:func:`batch_norm_relu`; :func:`masked_if_padded`)."""
        x, statistics = masked_if_padded(lambda mask: self._conv_layers(x, mask), conv_mask)
        for i, (mean, variance) in enumerate(statistics):
            self.moving_means[i].assign(self.momentum * self.moving_means[i]
                                        + (1 - self.momentum) * mean)
            self.moving_variances[i].assign(self.momentum * self.moving_variances[i]
                                            + (1 - self.momentum) * variance)
        return x

    def _conv_layers(self, x, conv_mask):
        """The training form's layers over ``x [S, B, T, d]`` with ``conv_mask [1, B, T, 1]`` (None:
        nothing is padded): the output and each layer's batch ``(mean, variance)``."""
        S, d = self.stacks, x.shape[-1]
        batch, T = tf.shape(x)[1], tf.shape(x)[2]
        statistics = []
        for i in range(self.conv_layers):
            if conv_mask is not None:
                x = x * conv_mask  # padded positions never feed a convolution
            windows = tf.reshape(self._shifted_windows(x), [S, -1, self.kernel_size * d])
            x = tf.reshape(tf.matmul(windows, self._w(self.kernels[i])), [S, batch, T, d])
            if conv_mask is None:
                x, mean, variance = fused_batch_norm_relu(x, self.gammas[i], self.betas[i])
            else:
                x, mean, variance = batch_norm_relu(x, conv_mask, self.gammas[i], self.betas[i])
            statistics.append((mean, variance))
        return x, statistics

    def _inference_stacks(self, inputs, conv_mask):
        """Inference form, a list of ``S`` tensors ``[B, T, d]``: the batch norm folded into each
        convolution's kernel and bias, one ``conv2d`` a stack (oneDNN fuses the bias and the ReLU
        into it) over its own padded input, nothing tiled or windowed. Backward stacks pad on the
        right and read the kernel's taps in reverse order. A batch without padding skips the
        masking (:func:`masked_if_padded`, as the training form)."""
        if self.conv_layers == 0:
            return [inputs] * self.stacks
        return masked_if_padded(lambda mask: self._inference_convs(inputs, mask), conv_mask)

    def _inference_convs(self, inputs, conv_mask):
        """The inference form's layers, ``conv_mask [B, T, 1]`` zeroing the padded positions
        before every convolution (None: nothing is padded)."""
        S, k, d = self.stacks, self.kernel_size, inputs.shape[-1]
        half = S // 2

        def padded(x, backward):  # x_{t-k+1..t} forward, x_{t..t+k-1} backward
            x = x if conv_mask is None else x * conv_mask  # padding never feeds a convolution
            return tf.pad(x, [[0, 0], [0, k - 1] if backward else [k - 1, 0], [0, 0]])

        # Every stack reads the inputs at the first layer: masked and padded once a direction.
        stacks = [padded(inputs, False)] * half + [padded(inputs, True)] * half
        for i in range(self.conv_layers):
            # Fold in the variables' dtype (float32), then cast: no extra rounding under bf16.
            scale, shift = batch_norm_affine(self.moving_means[i], self.moving_variances[i],
                                             self.gammas[i], self.betas[i])  # [S, 1, 1, d]
            shift = self._w(tf.reshape(shift, [S, d]))
            kernels = self._w(tf.reshape(self.kernels[i] * scale[:, 0], [S, k, d, d]))
            outputs = []
            for s in range(S):
                # backward: tap j reads x_{t+k-1-j}
                kernel = kernels[s] if s < half else tf.reverse(kernels[s], [0])
                y = tf.nn.conv2d(stacks[s][:, None], kernel[None], strides=1, padding="VALID")
                outputs.append(tf.nn.relu(tf.nn.bias_add(y, shift[s]))[:, 0])
            if i + 1 < self.conv_layers:
                stacks = [padded(x, s >= half) for s, x in enumerate(outputs)]
        return outputs

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        return [tuple(inputs_shape)] * self.stacks

    def load_own_variables(self, store):
        if not loaded_by_parent(self, store):
            super().load_own_variables(store)

    def get_config(self):
        config = super().get_config()
        config.update({
            "stacks": self.stacks,
            "conv_layers": self.conv_layers,
            "kernel_size": self.kernel_size,
            "dropout": self.dropout,
            "momentum": self.momentum,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
        })
        return config
