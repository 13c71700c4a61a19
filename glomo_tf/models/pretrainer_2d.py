"""``GlomoPretrainer2D``: unsupervised GLoMo pretraining on images, a ``keras.Model`` with fit."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.hparams import COMPOSITIONS, DIRECTIONS, GRAPH_PREDICTOR_2D, PRETRAINER_2D
from glomo_tf.layers.feature_predictor import FeaturePredictor
from glomo_tf.layers.graph_predictor_2d import GraphPredictor2D, image_units
from glomo_tf.layers.masked_conv_2d import MaskedConv2D
from glomo_tf.models.pretrainer import ContextPretrainer

P2 = PRETRAINER_2D
# GraphPredictor2D's arguments that GlomoPretrainer2D.from_sizes passes on.
PREDICTOR_2D_ARGS = tuple(GRAPH_PREDICTOR_2D) + (
    "momentum", "epsilon", "kernel_initializer", "threshold_initializer", "kernel_regularizer",
    "live_row_regularizer")


def pixel_levels(images, levels):
    """Pixel values in ``[0, 1]`` as int32 levels ``0 .. levels - 1`` (nearest level)."""
    images = tf.clip_by_value(tf.cast(images, tf.float32), 0.0, 1.0)
    return tf.cast(tf.round(images * (levels - 1)), tf.int32)


def window_offsets(window, direction):
    """The ``window ** 2`` pixel offsets ``(dr, dc)`` a direction predicts, in raster order.

    Forward: ``(0, 0), (0, 1), .., (window - 1, window - 1)``, the bottom-right quarter of a
    ``(2 window - 1)``-wide window centred on the pixel (the paper's 3x3 window for ``window=2``:
    the part the mask hides from the features, centre included). Backward: the mirror image.
    """
    sign = 1 if direction == "forward" else -1
    return [(sign * dr, sign * dc) for dr in range(window) for dc in range(window)]


@keras.saving.register_keras_serializable(package="glomo_tf")
class GlomoPretrainer2D(ContextPretrainer):
    """GLoMo pretraining on unlabelled images: graph predictor, feature predictor, window heads.

    Train it with ``compile()`` + ``fit()`` on images ``[batch, H, W, C]`` with values in
    ``[0, 1]`` (a dataset may also yield ``(images, anything)``, or ``(images, targets)``
    with ``target_channels``). Per direction:

    * ``F^0``: a masked convolution network over the image (:class:`MaskedConv2D`, mask ``"A"``
      then ``"B"``, ReLU between), so ``F^0_t`` reads only pixels before ``t`` in raster order
      (after ``t`` backward); the feature predictor ``f`` (Eq. 2) then propagates it along the
      graphs of the :class:`GraphPredictor2D` ``g`` (admissible sources ``s < t``; ``s > t``).
    * At ``num_positions`` pixels sampled per step (shared across the batch), the top feature
      ``F^L_t`` predicts the ``window x window`` pixels ``t + (dr, dc)``, ``0 <= dr, dc <
      window`` (backward ``t - (dr, dc)``): the paper's 3x3 window of future pixels, of which,
      under the mask, only the bottom-right quarter is to predict (Section 3.5). Nothing the
      features read is a target: they see pixels strictly before ``t`` and the targets are at
      or after it. Pixels outside the image are not targets.
    * Each target pixel channel is a ``levels``-way categorical (256 for 8-bit images; fewer
      for coarser data such as scikit-learn's 17-level digits), predicted independently by one
      linear map from ``F^L_t`` to ``window^2 * C * levels`` logits (the paper's decoder is
      unspecified; an autoregressive decoder over the window is not used).

    The loss is the mean of the two directions' per-value cross-entropy; ``perplexity`` is per
    predicted pixel value. After pretraining, ``graph_predictor`` is the part to transfer.

    Args:
        graph_predictor: a :class:`GraphPredictor2D`; its ``hidden_dim`` and ``num_heads`` size
            the feature predictor (``num_heads`` must divide ``hidden_dim``).
        window: int >= 1, the predicted quarter's side (2: the paper's 3x3 window).
        levels: int >= 2, discrete pixel values; a value ``v`` in ``[0, 1]`` is level
            ``round(v * (levels - 1))``.
        num_positions: int or None, pixels sampled per step (None: every pixel).
        feature_layers: int >= 1, masked convolutions of the ``F^0`` networks.
        composition: the feature predictor's composition (``"gru"``, ``"residual"``,
            ``"projected"``; see :class:`~glomo_tf.FeaturePredictor`).
        target_channels: None (default: the images' own values are the targets) or the
            channels ``C'`` of explicit int targets ``[B, H, W, C']`` that a dataset yields as
            ``(images, targets)``, e.g. one-hot images (``C`` = number of levels) with their
            level ids as targets (``C' = 1``).
        seed: int or None, seed of the pixel sampling.

    Example:

    >>> import numpy as np, keras
    >>> predictor = GraphPredictor2D(hidden_dim=8, num_layers=2, num_heads=2, conv_layers=1)
    >>> model = GlomoPretrainer2D(predictor, levels=4, num_positions=5)
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> images = np.random.rand(8, 4, 4, 1).astype("float32")
    >>> sorted(model.fit(images, batch_size=4, epochs=1, verbose=0).history)
    ['loss', 'perplexity']

    References:
        Yang et al., "GLoMo", NeurIPS 2018, Eq. 2, Eq. 3 (the unit-level context objective) and
        Section 3.5 (its image form).
    """

    def __init__(self, graph_predictor, window=P2["window"], levels=P2["levels"],
                 num_positions=P2["num_positions"], feature_layers=P2["feature_layers"],
                 composition=P2["composition"], target_channels=None, seed=None, **kwargs):
        super().__init__(num_positions=num_positions, seed=seed, **kwargs)
        if not isinstance(graph_predictor, GraphPredictor2D):
            raise TypeError("graph_predictor must be a glomo_tf.GraphPredictor2D, got "
                            f"{type(graph_predictor).__name__}.")
        for name, value, low in (("window", window, 1), ("levels", levels, 2),
                                 ("feature_layers", feature_layers, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
        if target_channels is not None and (not isinstance(target_channels, int)
                                            or target_channels < 1):
            raise ValueError(f"target_channels must be None (the images' channels) or an "
                             f"integer >= 1, got {target_channels!r}.")
        hparams.check_choice("composition", composition, COMPOSITIONS)
        d = graph_predictor.hidden_dim
        hparams.check_heads_divide(d, graph_predictor.num_heads)
        self.graph_predictor = graph_predictor
        self.window = window
        self.levels = levels
        self.feature_layers = feature_layers
        self.composition = composition
        self.target_channels = target_channels
        self.feature_convs = [
            [MaskedConv2D(d, graph_predictor.kernel_size, "A" if i == 0 else "B", direction,
                          dtype=self.dtype_policy, name=f"{direction}_feature_conv{i}")
             for i in range(feature_layers)]
            for direction in DIRECTIONS]
        self.feature_predictor = FeaturePredictor(d, graph_predictor.num_heads,
                                                  composition=composition,
                                                  dtype=self.dtype_policy,
                                                  name="feature_predictor")
        self.heads = None  # built with the number of channels (build)

    @classmethod
    def from_sizes(cls, hidden_dim=GRAPH_PREDICTOR_2D["hidden_dim"], seed=None, **kwargs):
        """A pretrainer and its :class:`GraphPredictor2D` from sizes in one call: ``kwargs`` are
        the predictor's arguments and this class's; ``name`` and ``dtype`` go to the
        pretrainer, whose dtype policy the predictor shares."""
        predictor_args = {k: kwargs.pop(k) for k in list(kwargs) if k in PREDICTOR_2D_ARGS}
        predictor = GraphPredictor2D.from_config(dict(  # reads the flat settings
            hidden_dim=hidden_dim, dtype=kwargs.get("dtype"), name="graph_predictor",
            **predictor_args))
        return cls(predictor, seed=seed, **kwargs)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(f"GlomoPretrainer2D expects images [batch, H, W, channels] with a "
                             f"known number of channels, got shape {tuple(input_shape)}.")
        channels = self.target_channels or int(input_shape[-1])
        d = self.graph_predictor.hidden_dim
        if not self.graph_predictor.built:
            self.graph_predictor.build(tuple(input_shape))
        for convs in self.feature_convs:
            shape = tuple(input_shape)
            for conv in convs:
                conv.build(shape)
                shape = conv.compute_output_shape(shape)
        self.feature_predictor.build((None, 2, None, d))
        self.channels = channels
        self.heads = [keras.layers.Dense(self.window ** 2 * channels * self.levels,
                                         dtype=self.dtype_policy, name=f"{direction}_head")
                      for direction in DIRECTIONS]
        for head in self.heads:
            head.build((None, None, d))
        self.built = True

    # ------------------------------------------------------------------ forward
    def call(self, images, training=False):
        """Graphs and features: a dict with ``graphs`` ``[B, 2, L, K, T, T]``, ``features``
        ``[B, 2, L, T, d]`` (``T = H * W``, raster order) and ``padding_mask`` ``[B, T]``."""
        images = _as_images(images)
        out = self.graph_predictor(images, training=training)
        initial = tf.stack([image_units(self._initial_features(images, z)) for z in range(2)],
                           axis=1)  # F^0: [B, 2, T, d]
        out["features"] = self.feature_predictor(initial, out["graphs"])
        return out

    def _initial_features(self, images, direction):
        x = tf.cast(images, self.compute_dtype)
        for i, conv in enumerate(self.feature_convs[direction]):
            x = conv(tf.nn.relu(x) if i else x)
        return x

    def window_targets(self, levels, positions, direction):
        """Targets and weights of one direction's windows at ``positions``.

        ``levels`` is ``[B, H, W, C]`` int; returns ``(targets [B, S, D, C] int32, weights
        [S, D] float32)`` with ``D = window ** 2``; a weight is 0 where the pixel lies outside
        the image (its target is then an arbitrary level).
        """
        height, width = tf.shape(levels)[1], tf.shape(levels)[2]
        rows, cols = positions // width, positions % width
        offsets = tf.constant(window_offsets(self.window, DIRECTIONS[direction]), tf.int32)
        target_rows = rows[:, None] + offsets[None, :, 0]  # [S, D]
        target_cols = cols[:, None] + offsets[None, :, 1]
        inside = ((target_rows >= 0) & (target_rows < height)
                  & (target_cols >= 0) & (target_cols < width))
        index = (tf.clip_by_value(target_rows, 0, height - 1) * width
                 + tf.clip_by_value(target_cols, 0, width - 1))
        targets = tf.gather(image_units(levels), index, axis=1)  # [B, S, D, C]
        return targets, tf.cast(inside, tf.float32)

    def context_loss(self, images, training=False, targets=None):
        """Returns ``(loss, total cross-entropy, number of predicted values)`` for a batch.

        ``targets``: optional int ``[B, H, W, C']`` levels in ``0 .. levels - 1`` to predict
        instead of the images' own quantised values (e.g. the level ids of one-hot images);
        the heads then predict ``C'`` values per pixel (``target_channels``).
        """
        images = _as_images(images)
        out = self(images, training=training)
        top = out["features"][:, :, -1]  # [B, 2, T, d]
        if targets is None:
            if images.shape[-1] != self.channels:
                raise ValueError(
                    f"This pretrainer predicts {self.channels} target channels "
                    f"(target_channels), not the images' {images.shape[-1]}: pass targets.")
            levels = pixel_levels(images, self.levels)
        else:
            levels = tf.cast(targets, tf.int32)
            if levels.shape.rank != 4 or levels.shape[-1] != self.channels:
                raise ValueError(
                    f"targets must be int levels [batch, H, W, {self.channels}] (the heads "
                    f"predict {self.channels} values per pixel: target_channels), got shape "
                    f"{tuple(levels.shape)}.")
        shape = tf.shape(images)
        positions = self.sample_positions(shape[1] * shape[2])
        losses, total_ce, total_values = [], 0.0, 0.0
        for z, head in enumerate(self.heads):
            targets, weights = self.window_targets(levels, positions, z)
            logits = head(tf.gather(top[:, z], positions, axis=1))  # [B, S, D * C * levels]
            logits = tf.reshape(tf.cast(logits, tf.float32),
                                tf.concat([tf.shape(targets), [self.levels]], axis=0))
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
            value_weights = tf.broadcast_to(weights[None, :, :, None], tf.shape(ce))
            direction_ce = tf.reduce_sum(ce * value_weights)
            direction_values = tf.reduce_sum(value_weights)
            losses.append(direction_ce / tf.maximum(direction_values, 1.0))
            total_ce += direction_ce
            total_values += direction_values
        return 0.5 * (losses[0] + losses[1]), total_ce, total_values

    # ------------------------------------------------------------------ fit / evaluate
    def _loss_inputs(self, data):
        images, targets = _images_from_data(data)
        return (images,), {"targets": targets}

    def get_config(self):
        config = super().get_config()
        config.update(
            graph_predictor=keras.saving.serialize_keras_object(self.graph_predictor),
            window=self.window, levels=self.levels, num_positions=self.num_positions,
            feature_layers=self.feature_layers, composition=self.composition,
            target_channels=self.target_channels, seed=self.seed)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["graph_predictor"] = keras.saving.deserialize_keras_object(
            config["graph_predictor"])
        return cls(**config)


def _as_images(images):
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise ValueError(f"GlomoPretrainer2D expects images [batch, H, W, channels] with values "
                         f"in [0, 1], got shape {tuple(images.shape)}.")
    return images


def _images_from_data(data):
    """``(images, targets or None)`` of a batch: images, ``(images,)``, ``(images, targets)``
    or a dict with ``images`` (and ``targets``)."""
    if isinstance(data, dict):
        if "images" not in data:
            raise ValueError(
                f"A dict batch for GlomoPretrainer2D needs an 'images' entry; got {sorted(data)}.")
        return data["images"], data.get("targets")
    if isinstance(data, (list, tuple)):
        return data[0], (data[1] if len(data) > 1 and _is_integer(data[1]) else None)
    return data, None


def _is_integer(value):
    if value is None:  # train_on_batch(images) passes (images, None, None)
        return False
    value = tf.convert_to_tensor(value)
    return value.dtype.is_integer and value.shape.rank == 4
