"""Every choice list and default hyper-parameter of glomo_tf, in one place.

The layers, :class:`~glomo_tf.GlomoPretrainer`, the command line, the tuner and the docs read
their choices and defaults here. This module imports nothing heavy (no TensorFlow), so the command
line can build its parsers from it and stay fast. ``tests/layers/test_hparams.py`` checks the
constructors' signatures against these defaults.
"""

import numbers

DIRECTIONS = ("forward", "backward")

# GraphPredictor: how a query's scores are thresholded and normalised into a graph row (Eq. 1).
THRESHOLDS = ("query", "scalar")
NORMALIZATIONS = ("squared_relu", "softmax", "entmax15", "entmax")
# alpha-entmax ("entmax"): 1 is softmax, 1.5 entmax15, 2 sparsemax; in between, sparser as it grows.
ENTMAX_ALPHA_RANGE = (1.0, 2.0)
# FeaturePredictor: how the mixed message ``m`` is composed with the features (Eq. 2).
COMPOSITIONS = ("gru", "residual", "projected")
# GlomoPretrainer: what the decoders predict.
OBJECTIVES = ("unit", "sentence")

# GraphPredictor's defaults as flat settings (the reference code's sizes and the paper's choices),
# read by glomo_tf.layers.graph_predictor: the layer's arguments, the coupled ablation and the
# feature composition, the live-row hinge's weight (0: none) and margin, the threshold's initial
# value. ``hidden_dim`` has none in the layer (it is the one size a user must choose), 256 for the
# pretraining command.
GRAPH_PREDICTOR = dict(
    hidden_dim=256, num_layers=3, num_heads=8, head_dim=None, conv_layers=4, kernel_size=3,
    threshold="query", normalization="squared_relu", entmax_alpha=1.5, coupled=False,
    composition="gru", dropout=0.0, initial_threshold=-1.0, live_row_weight=0.0,
    live_row_margin=0.1)
# GlomoPretrainer's own defaults (the decoders and the objective).
PRETRAINER = dict(context_length=3, decoder_layers=2, num_positions=20, objective="unit")

# `glomo pretrain` differs from the layer in one default: on real text, rows of the squared-ReLU
# graphs die (no score above the threshold, no gradient to revive them), so the command trains
# with the live-row hinge on; the layer keeps the paper's form (no hinge).
PRETRAIN_COMMAND = dict(GRAPH_PREDICTOR, **PRETRAINER, live_row_weight=1.0)

# Downstream classifiers (glomo_tf.models.build_classifier, glomo transfer).
VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform", "uniform_rnn", "cn3",
            "shared_private", "gold_embeddings", "gold_rnn")
PREDICTOR_VARIANTS = ("glomo_embeddings", "glomo_rnn")
# The data's own structure as the graphs (glomo_tf.data.gold_graphs): the ceiling of a variant.
GOLD_VARIANTS = ("gold_embeddings", "gold_rnn")
# How a classifier uses the graphs: the paper's one gated fusion (GlomoTransfer), or states
# composed along them over several steps (GraphPropagation).
TRANSFER_FORMS = ("fusion", "propagation")
# The gold variants' graphs (glomo_tf.data.gold_graphs) and their heads: a unit to its tree
# neighbours (tree_graphs), or ListOps' left-to-right composition (listops_chain_graphs).
GOLD_FORMS = {"tree": 1, "chain": 2}
# Run by `glomo transfer` when no --variants are given: the GLoMo comparison.
DEFAULT_VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform")

# tf.distribute strategies of pretraining (glomo_tf.training.make_strategy).
STRATEGIES = ("default", "mirrored", "multi-worker", "tpu")

# Numeric precision of training and graph extraction: a Keras dtype policy (glomo_tf.precision).
PRECISIONS = ("float32", "mixed_bfloat16")

# KerasTuner searches (glomo_tf.tuning).
TUNERS = ("random", "hyperband", "bayesian")


def check_choice(name, value, choices):
    """Raises ``ValueError`` naming the argument ``name`` unless ``value`` is one of
    ``choices`` (one of the tuples above).

    >>> check_choice("threshold", "vector", THRESHOLDS)
    Traceback (most recent call last):
    ...
    ValueError: threshold must be one of ('query', 'scalar'), got 'vector'.
    """
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}.")


def check_positive(**values):
    """The values as ints, in the order given; ``ValueError`` naming the first argument that is
    not a positive integer (a bool is not one).

    >>> check_positive(units=128, num_slots=12)
    (128, 12)
    >>> check_positive(units=0)
    Traceback (most recent call last):
    ...
    ValueError: units must be a positive integer, got 0.
    """
    for name, value in values.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return tuple(int(value) for value in values.values())


def check_rates(**values):
    """The values as floats, in the order given; ``ValueError`` naming the first argument that
    is not a rate in ``[0, 1)`` (a dropout rate).

    >>> check_rates(input_dropout=0.1, output_dropout=1.0)
    Traceback (most recent call last):
    ...
    ValueError: output_dropout must be in [0, 1), got 1.0.
    """
    for name, value in values.items():
        if not 0.0 <= float(value) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}.")
    return tuple(float(value) for value in values.values())


def check_entmax_alpha(alpha, name="entmax_alpha", softmax="softmax (normalization='softmax')"):
    """``alpha`` as a float; ``ValueError`` naming the setting ``name`` unless it lies in
    :data:`ENTMAX_ALPHA_RANGE` (1 is softmax, spelled ``softmax`` as the caller's user knows it;
    above 2 the rows are sparser than sparsemax's and rarely wanted)."""
    low, high = ENTMAX_ALPHA_RANGE
    alpha = float(alpha)
    if not low < alpha <= high:
        raise ValueError(f"{name} must be in ({low:g}, {high:g}], got {alpha:g}; alpha 1 is "
                         f"{softmax}.")
    return alpha


def check_graph_temperature(temperature, name="graph_temperature"):
    """``temperature`` as a float, or None (the graphs as the predictor gives them);
    ``ValueError`` naming the setting ``name`` unless it is a finite number above 0."""
    if temperature is None:
        return None
    try:
        temperature = float(temperature)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number above 0 or None, got {temperature!r}.") from None
    if not 0.0 < temperature < float("inf"):
        raise ValueError(f"{name} must be a finite number above 0 (below 1 sharpens the graphs, "
                         f"above 1 flattens them), got {temperature:g}.")
    return temperature


def check_heads_divide(hidden_dim, num_heads, names=("hidden_dim", "num_heads"),
                       what="the feature predictor"):
    """Raises ``ValueError`` unless ``num_heads`` divides ``hidden_dim`` (``what`` splits the
    features into heads); ``names`` are the two settings as the caller's user knows them."""
    if hidden_dim % num_heads:
        raise ValueError(f"{names[0]} ({hidden_dim}) must be divisible by {names[1]} "
                         f"({num_heads}): {what} splits the features into heads.")


# ---------------------------------------------------------------------------------------------
# GLoMo on images: glomo_tf.layers.MaskedConv2D, GraphPredictor2D, GlomoPretrainer2D,
# glomo_tf.models.build_image_classifier.
# Masked 2-D convolutions: "A" excludes the centre pixel (a network's first layer), "B" includes it.
MASK_TYPES = ("A", "B")
# GraphPredictor2D's defaults (the 1-D predictor's where they mean the same thing).
GRAPH_PREDICTOR_2D = dict(
    hidden_dim=64, num_layers=3, num_heads=8, head_dim=None, conv_layers=4, kernel_size=3,
    threshold="query", normalization="squared_relu", entmax_alpha=1.5, initial_threshold=-1.0,
    live_row_weight=0.0, live_row_margin=0.1)
# GlomoPretrainer2D's own defaults: the paper's 3x3 window of which the mask leaves the 2x2
# bottom-right quarter to predict, 256 pixel levels, 20 sampled pixels per step.
PRETRAINER_2D = dict(window=2, levels=256, num_positions=20, feature_layers=2, composition="gru")
# Downstream image classifiers (glomo_tf.models.build_image_classifier).
IMAGE_VARIANTS = ("baseline", "glomo", "uniform")


# ---------------------------------------------------------------------------------------------
# Self-supervised sentence encoders (the thesis' chapter 3): SentenceEncoder,
# SentencePretrainer, `glomo sentence-pretrain` and `glomo probe`.
# The objectives: Quick Thoughts (Eq. 3.3), Self Prediction (Eq. 3.4), Global-to-Local (Eq. 3.5).
SENTENCE_OBJECTIVES = ("qt", "sp", "g2l")
# Quick Thoughts' targets: the next sentence (Eq. 3.3), or both neighbours (Logeswaran & Lee).
SENTENCE_NEIGHBOURS = ("next", "both")
# SentenceEncoder: 300-wide embeddings (GloVe's) and 1,200 GRU units per direction, so that
# [Enc_src; Enc_trg] has the thesis' 4,800 dimensions (Section 3.4).
SENTENCE_ENCODER = dict(embedding_dim=300, units=1200)
# SentencePretrainer: two objectives sampled per batch, L2 1e-5 on the representations (Section
# 3.3.2), G2L's two-layer CNN of kernel 3 (Section 3.2.4), Self Prediction's corruption (3.2.3).
SENTENCE_PRETRAINER = dict(objectives=SENTENCE_OBJECTIVES, objectives_per_batch=2,
                           neighbours="next", l2_weight=1e-5, g2l_reduction="sum",
                           cnn_kernel_size=3,
                           select_rate=0.5, mask_rate=0.8, random_rate=0.1, shuffle_window=3)
# `glomo sentence-pretrain`: Adam 5e-4, batches of 400 pairs (Section 3.3.2), sentences of at
# most 40 units (95% of WikiText-2's sentences are shorter than 50).
SENTENCE_PRETRAIN_COMMAND = dict(learning_rate=5e-4, batch_size=400, max_length=40)
# `glomo probe`: the encoders besides a trained one, and SentEval's L2 strengths (C = 2^-2..2^3).
PROBE_BASELINES = ("bow", "random")
# Global-to-Local's loss over a target's positions: Eq. 3.5's sum, or their mean.
G2L_REDUCTIONS = ("sum", "mean")
PROBE_TASKS = ("mr", "subj", "sst2")
PROBE_C_VALUES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
# How a SentenceEncoder's states become the sentence vector: "final", the thesis' last states
# (Section 3.2.2); "max" and "mean" pool each position's [h_fw^i ; h_bw^i] over the real units
# (InferSent's max pooling, Conneau et al. 2017): a test-time option of `glomo probe --pooling`.
SENTENCE_POOLINGS = ("final", "max", "mean")
