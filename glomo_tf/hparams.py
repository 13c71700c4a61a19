"""Every choice list and default hyper-parameter of glomo_tf, in one place.

The layers, :class:`~glomo_tf.GlomoPretrainer`, the command line, the tuner and the docs read
their choices and defaults here. This module imports nothing heavy (no TensorFlow), so the command
line can build its parsers from it and stay fast. ``tests/test_hparams.py`` checks the
constructors' signatures against these defaults.
"""

DIRECTIONS = ("forward", "backward")

# GraphPredictor: how a query's scores are thresholded and normalised into a graph row (Eq. 1).
THRESHOLDS = ("query", "scalar")
NORMALIZATIONS = ("squared_relu", "softmax", "entmax15")
# FeaturePredictor: how the mixed message ``m`` is composed with the features (Eq. 2).
COMPOSITIONS = ("gru", "residual", "projected")
# GlomoPretrainer: what the decoders predict.
OBJECTIVES = ("unit", "sentence")

# GraphPredictor's defaults (the reference code's sizes and the paper's choices); ``hidden_dim`` has
# none in the layer (it is the one size a user must choose), 256 for the pretraining command.
GRAPH_PREDICTOR = dict(
    hidden_dim=256, num_layers=3, num_heads=8, head_dim=None, conv_layers=4, kernel_size=3,
    threshold="query", normalization="squared_relu", coupled=False, composition="gru",
    dropout=0.0, initial_threshold=-1.0, live_row_weight=0.0, live_row_margin=0.1)
# GlomoPretrainer's own defaults (the decoders and the objective).
PRETRAINER = dict(context_length=3, decoder_layers=2, num_positions=20, objective="unit")

# `glomo pretrain` differs from the layer in one default: on real text, rows of the squared-ReLU
# graphs die (no score above the threshold, no gradient to revive them), so the command trains
# with the live-row hinge on; the layer keeps the paper's form (no hinge).
PRETRAIN_COMMAND = dict(GRAPH_PREDICTOR, **PRETRAINER, live_row_weight=1.0)

# Downstream classifiers (glomo_tf.models.build_classifier, glomo transfer).
VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform", "cn3", "shared_private")
PREDICTOR_VARIANTS = ("glomo_embeddings", "glomo_rnn")
# Run by `glomo transfer` when no --variants are given: the GLoMo comparison.
DEFAULT_VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform")

# tf.distribute strategies of pretraining (glomo_tf.training.make_strategy).
STRATEGIES = ("default", "mirrored", "multi-worker", "tpu")

# KerasTuner searches (glomo_tf.tuning).
TUNERS = ("random", "hyperband", "bayesian")


def check_heads_divide(hidden_dim, num_heads, names=("hidden_dim", "num_heads"),
                       what="the feature predictor"):
    """Raises ``ValueError`` unless ``num_heads`` divides ``hidden_dim`` (``what`` splits the
    features into heads); ``names`` are the two settings as the caller's user knows them."""
    if hidden_dim % num_heads:
        raise ValueError(f"{names[0]} ({hidden_dim}) must be divisible by {names[1]} "
                         f"({num_heads}): {what} splits the features into heads.")
