"""GLoMo's graph predictor ``g`` over the pixels of an image (the paper's Section 3.5)."""

import keras
import tensorflow as tf

import random

from glomo_tf import hparams, ops
from glomo_tf.layers.conv_encoder import BATCH_NORM_EPSILON
from glomo_tf.layers.graph_predictor import flat_settings
from glomo_tf.layers.graph_scorer import ScorerSettings
from glomo_tf.layers.masked_conv_2d import MaskedConv2D

D2 = hparams.GRAPH_PREDICTOR_2D
# The four networks of a predictor, in the order of their stacks.
_STACKS = (("forward", "key"), ("forward", "query"), ("backward", "key"), ("backward", "query"))


def image_units(images):
    """``[batch, H, W, C] -> [batch, H * W, C]``: an image's pixels as units in raster order.

    Pixel ``(r, c)`` becomes unit ``t = r * W + c``, the order of
    :class:`GraphPredictor2D`'s graphs, so :class:`~glomo_tf.GraphMixture` and
    :class:`~glomo_tf.GlomoTransfer` apply them to ``image_units(features)``.
    """
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise ValueError(f"image_units expects [batch, H, W, C], got shape {tuple(images.shape)}.")
    shape = tf.shape(images)
    units = tf.reshape(images, [shape[0], shape[1] * shape[2], shape[3]])
    static = images.shape
    length = (static[1] * static[2]) if static[1] is not None and static[2] is not None else None
    units.set_shape([static[0], length, static[3]])
    return units


def units_image(units, height, width):
    """The inverse of :func:`image_units`: ``[batch, H * W, C] -> [batch, H, W, C]``."""
    units = tf.convert_to_tensor(units)
    if units.shape.rank != 3:
        raise ValueError(f"units_image expects [batch, T, C], got shape {tuple(units.shape)}.")
    shape = tf.shape(units)
    image = tf.reshape(units, [shape[0], height, width, shape[2]])
    image.set_shape([units.shape[0], height, width, units.shape[2]])
    return image


@keras.saving.register_keras_serializable(package="glomo_tf")
class GraphPredictor2D(ScorerSettings, keras.layers.Layer):
    """Predicts latent graphs over the pixels of images, in both raster directions.

    The units are the ``T = H * W`` pixels in raster order (:func:`image_units`). For each
    direction a *key* network and a *query* network, each a stack of masked 2-D convolutions
    (:class:`MaskedConv2D`: the first with mask ``"A"``, which excludes the centre pixel, the
    others with mask ``"B"``), batch norm and ReLU, give ``k_s`` and ``q_t``; so the forward
    direction's ``q_t`` and ``k_t`` depend only on pixels before ``t`` in raster order, and the
    backward direction's (the mirrored masks) only on pixels after it. The graphs are then Eq. 1
    exactly as :class:`~glomo_tf.GraphPredictor` computes them (the same sub-layer,
    :class:`~glomo_tf.layers.GraphScorer`: projections, threshold, normalisation, live-row loss):

        score[t, s] = (W_q^l q_t)_h . (W_k^l k_s)_h - b
        G[t, s]     = relu(score)^2 / sum_{s'} relu(score[t, s'])^2     over admissible s'

    with ``s < t`` admissible in the forward direction and ``s > t`` in the backward one. The
    output has :class:`~glomo_tf.GraphPredictor`'s contract (``[B, 2, L, K, T, T]``, rows sum to
    1 or are all zero), so :class:`~glomo_tf.GraphMixture` and :class:`~glomo_tf.GlomoTransfer`
    (given ``[image_units(H), graphs]``) work on pixel features unchanged.

    Images have no padding: every pixel is a real unit. As in the 1-D predictor, the batch norm
    uses the batch's statistics in training, which mixes every pixel of the batch into them;
    in inference (moving statistics) the networks are strictly causal.

    Args:
        hidden_dim: int, channels ``d`` of the key and query networks.
        num_layers: int, graph layers ``L``.
        num_heads: int, heads ``K`` per graph layer.
        head_dim: int, query/key width per head; defaults to ``hidden_dim // 2``.
        conv_layers: int >= 1, masked convolutions in each key and query network.
        kernel_size: odd int, height and width of the masked convolutions.
        threshold: ``"query"`` or ``"scalar"`` (see :class:`~glomo_tf.GraphPredictor`).
        normalization: ``"squared_relu"`` (Eq. 1), ``"entmax15"``, ``"entmax"`` (with
            ``entmax_alpha``) or ``"softmax"``.
        entmax_alpha: float in (1, 2], the alpha of ``"entmax"``.
        momentum: float, moving-average momentum of the batch norms.
        kernel_initializer: initializer of the query, key and threshold kernels.
        threshold_initializer: float or initializer of the threshold bias (see
            :class:`~glomo_tf.GraphPredictor`).
        kernel_regularizer: regularizer of the query, key and threshold kernels.
        live_row_regularizer: a :class:`~glomo_tf.layers.LiveRowHinge` (default None, the
            paper's form): the training-only loss that keeps squared-ReLU rows alive.

    Call arguments:
        images: float ``[batch, H, W, channels]`` (for instance pixel values scaled to
            ``[0, 1]``, as :mod:`glomo_tf.data.images` gives them).
        training: bool, batch statistics in the batch norms when True.

    Returns:
        A dict with ``"graphs"``: ``[batch, 2, num_layers, num_heads, T, T]``, ``T = H * W``,
        raster order (direction 0 forward, 1 backward); ``"padding_mask"``: bool ``[batch, T]``,
        all True.

    Example:

    >>> import numpy as np
    >>> predictor = GraphPredictor2D(hidden_dim=8, num_layers=2, num_heads=2, conv_layers=2)
    >>> out = predictor(np.random.rand(1, 4, 5, 3).astype("float32"))
    >>> tuple(out["graphs"].shape)
    (1, 2, 2, 2, 20, 20)

    References:
        Yang et al., "GLoMo: Unsupervisedly Learned Relational Graphs as Transferable
        Representations", NeurIPS 2018, Eq. 1 and Section 3.5 (a PixelCNN-like predictor over
        pixels); van den Oord et al., "Pixel Recurrent Neural Networks", ICML 2016 (the masks).
    """

    def __init__(self, hidden_dim=D2["hidden_dim"], num_layers=D2["num_layers"],
                 num_heads=D2["num_heads"], head_dim=D2["head_dim"],
                 conv_layers=D2["conv_layers"], kernel_size=D2["kernel_size"],
                 threshold=D2["threshold"], normalization=D2["normalization"],
                 entmax_alpha=D2["entmax_alpha"], momentum=0.9, kernel_initializer=None,
                 threshold_initializer=D2["initial_threshold"], kernel_regularizer=None,
                 live_row_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        hparams.check_positive(hidden_dim=hidden_dim, num_layers=num_layers, num_heads=num_heads,
                               conv_layers=conv_layers, kernel_size=kernel_size)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (a centred masked kernel), got "
                             f"{kernel_size}.")
        self.hidden_dim = int(hidden_dim)
        self.conv_layers = int(conv_layers)
        self.kernel_size = int(kernel_size)
        self.momentum = float(momentum)
        # Earlier versions built the scorer as a GraphPredictor, whose (unused) embedding
        # initializer drew a seed here: drawing it keeps a seeded model's initial weights, and
        # the recorded image runs, as they were.
        random.randint(1, int(1e9))
        self.scorer = self.make_scorer(
            hidden_dim, num_layers, num_heads, head_dim, threshold, normalization, entmax_alpha,
            kernel_initializer=kernel_initializer, threshold_initializer=threshold_initializer,
            kernel_regularizer=kernel_regularizer, live_row_regularizer=live_row_regularizer)
        self.convs, self.norms = [], []
        for direction, role in _STACKS:
            convs, norms = [], []
            for i in range(self.conv_layers):
                convs.append(MaskedConv2D(
                    self.hidden_dim, self.kernel_size, "A" if i == 0 else "B", direction,
                    use_bias=False, dtype=self.dtype_policy, trainable=self.trainable,
                    name=f"{direction}_{role}_conv{i}"))
                norms.append(keras.layers.BatchNormalization(
                    momentum=self.momentum, epsilon=BATCH_NORM_EPSILON, dtype=self.dtype_policy,
                    trainable=self.trainable, name=f"{direction}_{role}_bn{i}"))
            self.convs.append(convs)
            self.norms.append(norms)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(f"GraphPredictor2D expects images [batch, H, W, channels] with a "
                             f"known number of channels, got shape {tuple(input_shape)}.")
        for convs, norms in zip(self.convs, self.norms):
            shape = tuple(input_shape)
            for conv, norm in zip(convs, norms):
                conv.build(shape)
                shape = conv.compute_output_shape(shape)
                norm.build(shape)
        self.scorer.build((None, 2, None, self.hidden_dim))
        self.built = True

    def call(self, images, training=False):
        images = tf.convert_to_tensor(images)
        if images.shape.rank != 4:
            raise ValueError(f"GraphPredictor2D expects images [batch, H, W, channels], got "
                             f"shape {tuple(images.shape)}.")
        if not images.dtype.is_floating:
            images = tf.cast(images, self.compute_dtype)
        stacks = [image_units(self._network(images, i, training)) for i in range(4)]
        keys = tf.stack([stacks[0], stacks[2]], axis=1)  # [B, 2, T, d]
        queries = tf.stack([stacks[1], stacks[3]], axis=1)
        padding_mask = tf.ones(tf.shape(stacks[0])[:2], tf.bool)
        graphs = self.scorer(queries, keys, ops.admissible_sources(padding_mask),
                             training=training)
        return {"graphs": graphs, "padding_mask": padding_mask}

    def _network(self, images, index, training):
        """Key or query network ``index`` (see ``_STACKS``): ``[B, H, W, C] -> [B, H, W, d]``."""
        x = images
        for conv, norm in zip(self.convs[index], self.norms[index]):
            x = tf.nn.relu(norm(conv(x), training=training))
        return x

    def compute_output_shape(self, input_shape):
        batch, height, width = input_shape[0], input_shape[1], input_shape[2]
        length = height * width if height is not None and width is not None else None
        return {"graphs": (batch, 2, self.num_layers, self.num_heads, length, length),
                "padding_mask": (batch, length)}

    def compute_output_spec(self, images, training=False):
        shapes = self.compute_output_shape(images.shape)
        return {"graphs": keras.KerasTensor(shapes["graphs"], dtype=self.compute_dtype),
                "padding_mask": keras.KerasTensor(shapes["padding_mask"], dtype="bool")}

    def get_config(self):
        config = super().get_config()
        config.update({
            "hidden_dim": self.hidden_dim,
            "conv_layers": self.conv_layers,
            "kernel_size": self.kernel_size,
            "momentum": self.momentum,
            **self.scorer_config(),
        })
        return config

    @classmethod
    def from_config(cls, config):
        """Reads this class's configs and those of earlier versions (with ``epsilon``,
        ``initial_threshold``, ``live_row_weight`` and ``live_row_margin``)."""
        config = cls.deserialized(config)
        epsilon = config.pop("epsilon", None)
        layer = cls(**flat_settings(config))
        if epsilon is not None:
            layer.scorer.epsilon = float(epsilon)
        return layer
