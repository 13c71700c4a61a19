"""Masked 2-D convolutions (PixelCNN masks) in raster order, forward and mirrored backward."""

import keras
import numpy as np
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.hparams import DIRECTIONS, MASK_TYPES
from glomo_tf.layers._common import compute_cast


def causal_kernel_mask(kernel_size, mask_type="A", direction="forward"):
    """The ``[k, k]`` float32 0/1 mask of a masked convolution's kernel taps.

    Pixels are ordered in raster order (row by row, left to right). For the forward direction a
    tap is kept when it reads a pixel *before* the centre in that order: every row above the
    centre, and the centre row left of the centre. Mask ``"A"`` (a network's first layer) drops
    the centre tap, so output ``t`` reads only pixels before ``t``; mask ``"B"`` (later layers)
    keeps it, so a stack ``A, B, B, ...`` stays strictly causal. The backward direction is the
    mirror image (the mask rotated by 180 degrees): rows below, and right of the centre.

    References:
        van den Oord et al., "Pixel Recurrent Neural Networks", ICML 2016, Section 3.4 (the
        spatial part of masks A and B; the units here are whole pixels, so there is no mask
        between colour channels).
    """
    kernel_size = int(kernel_size)
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size}.")
    hparams.check_choice("mask_type", mask_type, MASK_TYPES)
    hparams.check_choice("direction", direction, DIRECTIONS)
    centre = kernel_size // 2
    rows, cols = np.meshgrid(np.arange(kernel_size), np.arange(kernel_size), indexing="ij")
    before = (rows < centre) | ((rows == centre) & (cols < centre))
    if mask_type == "B":
        before |= (rows == centre) & (cols == centre)
    mask = before.astype("float32")
    return mask if direction == "forward" else mask[::-1, ::-1].copy()


@keras.saving.register_keras_serializable(package="glomo_tf")
class MaskedConv2D(keras.layers.Layer):
    """A 2-D convolution whose output at a pixel reads only pixels before it in raster order.

    ``y[r, c] = b + sum_{i, j} (mask * kernel)[i, j] . x[r + i - k//2, c + j - k//2]`` with zero
    padding ("same" size) and ``mask`` from :func:`causal_kernel_mask`: the forward direction
    reads rows above and the left part of the centre row (mask ``"A"``: centre excluded, ``"B"``:
    included); the backward direction reads the mirror image. Stacking one ``"A"`` layer and any
    number of ``"B"`` layers of the same direction gives features at pixel ``t`` that depend only
    on pixels strictly before ``t`` (forward) or strictly after it (backward): the key and query
    networks of :class:`~glomo_tf.GraphPredictor2D`.

    Args:
        filters: int, output channels.
        kernel_size: odd int, height and width of the kernel.
        mask_type: ``"A"`` (centre excluded: a network's first layer) or ``"B"``.
        direction: ``"forward"`` or ``"backward"`` (the mirror image).
        use_bias: bool.
        kernel_initializer: a Keras initializer.
        bias_initializer: a Keras initializer.

    Call arguments:
        images: ``[batch, H, W, channels]``.

    Returns:
        ``[batch, H, W, filters]``.

    Example:

    >>> import numpy as np
    >>> conv = MaskedConv2D(4, mask_type="A")
    >>> tuple(conv(np.zeros((1, 5, 6, 3), "float32")).shape)
    (1, 5, 6, 4)

    References:
        van den Oord et al., "Pixel Recurrent Neural Networks", ICML 2016, Section 3.4; Yang et
        al., "GLoMo", NeurIPS 2018, Section 3.5 (a PixelCNN-like graph predictor).
    """

    def __init__(self, filters, kernel_size=3, mask_type="A", direction="forward", use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(filters, (int, np.integer)) or isinstance(filters, bool) or filters < 1:
            raise ValueError(f"filters must be a positive integer, got {filters!r}.")
        self._mask = causal_kernel_mask(kernel_size, mask_type, direction)
        self.filters = int(filters)
        self.kernel_size = int(kernel_size)
        self.mask_type = mask_type
        self.direction = direction
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError("MaskedConv2D needs the number of input channels (the last axis) "
                             "to be known when it is built.")
        k = self.kernel_size
        self.kernel = self.add_weight(name="kernel", shape=(k, k, int(channels), self.filters),
                                      initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.filters,),
                                     initializer=self.bias_initializer)
                     if self.use_bias else None)
        self.built = True

    _w = compute_cast

    def masked_kernel(self):
        """The kernel with its masked taps zeroed, ``[k, k, in, filters]`` (compute dtype)."""
        mask = tf.constant(self._mask[:, :, None, None], self.compute_dtype)
        return self._w(self.kernel) * mask

    def call(self, images):
        images = tf.cast(images, self.compute_dtype)
        if images.shape.rank != 4:
            raise ValueError(f"MaskedConv2D expects images [batch, H, W, channels], got rank "
                             f"{images.shape.rank}.")
        out = tf.nn.conv2d(images, self.masked_kernel(), strides=1, padding="SAME")
        if self.bias is not None:
            out = tf.nn.bias_add(out, self._w(self.bias))
        return out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.filters,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "mask_type": self.mask_type,
            "direction": self.direction,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        })
        return config
