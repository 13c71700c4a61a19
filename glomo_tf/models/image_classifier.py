"""A small ResNet for image classification with GLoMo's graphs on the stem's pixel features."""

import keras

from glomo_tf import hparams
from glomo_tf.hparams import IMAGE_VARIANTS
from glomo_tf.layers.glomo_transfer import GlomoTransfer
from glomo_tf.layers.graph_predictor_2d import GraphPredictor2D

# ResNet-18's residual stages: two basic blocks in each of four stages.
RESNET18_BLOCKS = (2, 2, 2, 2)


def build_image_classifier(input_shape, num_classes, variant="baseline", graph_predictor=None,
                           width=16, blocks=RESNET18_BLOCKS, num_mixtures=1, dropout=0.0,
                           name=None):
    """A ResNet-18-like classifier (He et al. 2016, its CIFAR form), optionally with GLoMo.

    Stem: 3x3 convolution (``width`` channels), batch norm, ReLU: the pixel features ``H``.
    Then, for ``variant="glomo"`` and ``"uniform"``, the paper's transfer on the pixels
    (Section 3.5): ``H -> [H ; gate(H, M H)]`` by :class:`~glomo_tf.GlomoTransfer` on
    ``H`` as ``T = height * width`` units in raster order, with ``M`` mixed from the graphs of a
    frozen :class:`~glomo_tf.GraphPredictor2D` run on the input image (``"glomo"``) or uniform
    over the admissible pixels (``"uniform"``, the sanity baseline); ``"baseline"`` has no
    transfer. Then ``len(blocks)`` residual stages of basic blocks (two 3x3 convolutions with
    batch norm; the first block of every stage after the first halves the resolution and a 1x1
    convolution matches the shortcut), ``width * 2**i`` channels in stage ``i``, global average
    pooling and a dense softmax layer.

    Args:
        input_shape: ``(height, width, channels)`` of the images (values in ``[0, 1]``, as the
            graph predictor was pretrained on).
        num_classes: int.
        variant: ``"baseline"``, ``"glomo"`` or ``"uniform"``.
        graph_predictor: the pretrained :class:`~glomo_tf.GraphPredictor2D` (``"glomo"`` only);
            it is frozen and runs in inference mode.
        width: int, channels of the stem and of the first stage.
        blocks: basic blocks per stage (ResNet-18: ``(2, 2, 2, 2)``).
        num_mixtures: int, GlomoTransfer's mixtures per direction.
        dropout: float, dropout before the classifier.
        name: the model's name.

    Returns:
        An uncompiled ``keras.Model`` from images to class probabilities.
    """
    hparams.check_choice("variant", variant, IMAGE_VARIANTS)
    if len(input_shape) != 3 or any(size is None for size in input_shape):
        raise ValueError(f"input_shape must be a known (height, width, channels), got "
                         f"{input_shape!r}: GlomoTransfer reshapes the pixels to units.")
    if variant == "glomo" and not isinstance(graph_predictor, GraphPredictor2D):
        raise ValueError("variant 'glomo' needs a pretrained glomo_tf.GraphPredictor2D as "
                         "graph_predictor (GlomoPretrainer2D(...).graph_predictor).")
    if width < 1 or not blocks or min(blocks) < 1:
        raise ValueError(f"width and every stage's block count must be >= 1, got width={width}, "
                         f"blocks={tuple(blocks)}.")
    height, image_width, _ = input_shape
    images = keras.Input(tuple(input_shape), name="images")
    x = _conv_bn(images, width, 3, 1, "stem")
    x = keras.layers.ReLU(name="stem_relu")(x)
    if variant != "baseline":
        units = keras.layers.Reshape((height * image_width, width), name="pixel_units")(x)
        transfer = GlomoTransfer(None, num_mixtures=num_mixtures,
                                 graph_mode="learned" if variant == "glomo" else "uniform",
                                 name="glomo_transfer")
        if variant == "glomo":
            graph_predictor.trainable = False
            graphs = graph_predictor(images, training=False)["graphs"]
            units = transfer([units, graphs])
        else:  # uniform graphs need only the units' padding mask: every pixel is real
            every_pixel = keras.ops.cast(keras.ops.ones_like(units[:, :, 0]), "int32")
            units = transfer([units, every_pixel])
        # Back to an image (an op, not a Reshape layer: the units' all-True mask ends here).
        x = keras.ops.reshape(units, (-1, height, image_width, units.shape[-1]))
    for stage, count in enumerate(blocks):
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _basic_block(x, width * 2 ** stage, stride, f"stage{stage + 1}_block{block + 1}")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="classes")(x)
    return keras.Model(images, outputs, name=name or f"resnet_{variant}")


def _conv_bn(x, filters, kernel_size, stride, name):
    x = keras.layers.Conv2D(filters, kernel_size, strides=stride, padding="same", use_bias=False,
                            name=f"{name}_conv")(x)
    return keras.layers.BatchNormalization(name=f"{name}_bn")(x)


def _basic_block(x, filters, stride, name):
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _conv_bn(x, filters, 1, stride, f"{name}_shortcut")
    y = keras.layers.ReLU(name=f"{name}_relu1")(_conv_bn(x, filters, 3, stride, f"{name}_a"))
    y = _conv_bn(y, filters, 3, 1, f"{name}_b")
    return keras.layers.ReLU(name=f"{name}_out")(keras.layers.Add(name=f"{name}_add")(
        [shortcut, y]))
