"""Text classifiers with and without transferred GLoMo graphs (the paper's Table 1 comparison),
and two related models run in the same harness.

The GLoMo variants share one architecture, so the only difference between them is where (and
whether) the frozen graphs are fused in:

    token ids -> Embedding(mask_zero) -> [GlomoTransfer] -> Dropout -> BiGRU -> [GlomoTransfer]
              -> masked multi-head self-attention + residual + LayerNorm
              -> masked mean and max pooling -> Dropout -> Dense softmax

=====================  =======================================================================
variant                GLoMo transfer
=====================  =======================================================================
``baseline``           none
``glomo_embeddings``   the predictor's graphs mixed into the word embeddings (before the BiGRU)
``glomo_rnn``          the predictor's graphs mixed into the BiGRU states (before self-attention)
``uniform``            uniform graphs over the admissible sources at the embeddings (the paper's
                       sanity baseline: same extra parameters, no learned structure)
``uniform_rnn``        uniform graphs at the BiGRU states: ``glomo_rnn``'s sanity baseline at its
                       own place
``cn3``                none; task-specific graphs learned on the fly instead (CN3, Liu et al.
                       2019): embeddings -> Dropout -> ContextualizedNonLocal -> masked mean
                       -> Dropout -> Dense softmax
``shared_private``     none; a GRU with a shared and a private state and local auxiliary
                       losses: embeddings -> Dropout -> SharedPrivateRNN (last real state)
                       -> Dropout -> Dense softmax
``gold_embeddings``    the data's own structure (:mod:`glomo_tf.data.gold_graphs`) as the graphs
                       at the embeddings: the ceiling ``glomo_embeddings`` climbs towards; the
                       model takes ``[token_ids, graphs]``, the graphs ``[batch, 2, 1, 1, T,
                       T]`` (:func:`~glomo_tf.data.gold_graphs.tree_graphs`)
``gold_rnn``           the same at the BiGRU states
=====================  =======================================================================

``transfer_form`` says how the graphs are used where they are transferred: ``"fusion"`` (the
paper's, the default) is :class:`GlomoTransfer`'s single gated fusion ``[H ; gated(H, M H)]``;
``"propagation"`` composes the states along the graphs for ``propagation_steps`` steps
(:class:`GraphPropagation`, a GRU update per step), a deeper use of the same graphs.

The two related models keep the meaning of the shared hyper-parameters: ``embedding_dim`` is the
embedding width, ``dropout`` the rate after the embeddings and before the output layer, and their
feature width is ``2 * rnn_units``, the width of the baseline's BiGRU. ``attention_heads`` and
the mixture arguments are not used by them.

* ``cn3``: ``ContextualizedNonLocal(2 * rnn_units, num_layers=1, context="lstm")``, the paper's
  CN3_LSTM (no POS, character or dependency attributes), then its graph-level head, the mean of
  the final node states (Algorithm 1, lines 18-20). The paper grid-searches the number of graph
  layers per task and does not report it for classification (its "Additional Resources" are not
  part of the text); we use one layer, the single graph per sentence that its classification
  analyses show (Table 5, Figure 1), which also keeps the ``[batch, T, T, units]`` edge scores
  to one copy.
* ``shared_private``: ``SharedPrivateRNN(2 * rnn_units, shared_fraction=0.5)`` (the best share in
  the paper's Figure 2), reading the token ids as the targets of its auxiliary decoders:
  ``num_anchors`` anchors per sequence, each reconstructing ``reconstruct_length`` units
  backwards and predicting ``predict_length`` units forwards; ``aux_weight`` times their mean
  cross-entropy is added with ``add_loss``, so ``model.fit`` minimises it with the task loss
  (training only; evaluation and ``predict`` are unaffected). As in the paper, the class is
  predicted from the whole state at the last real position.

The downstream token ids must be the pretraining tokenizer's ids (the predictor reads the same ids
as the classifier's embedding), so the classifier's ``vocabulary_size`` must equal the predictor's.

Example:

>>> import numpy as np
>>> model = build_classifier(vocabulary_size=50, num_classes=2, variant="uniform",
...                          embedding_dim=8, rnn_units=4, attention_heads=2)
>>> model(np.array([[3, 4, 5, 0]], "int32")).shape
TensorShape([1, 2])
"""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.layers.glomo_transfer import GlomoTransfer
from glomo_tf.layers.graph_propagation import GraphPropagation
from glomo_tf.layers.graph_predictor import GraphPredictor
from glomo_tf.layers.related import ContextualizedNonLocal, SharedPrivateRNN

VARIANTS = hparams.VARIANTS
PREDICTOR_VARIANTS = hparams.PREDICTOR_VARIANTS
GOLD_VARIANTS = hparams.GOLD_VARIANTS
CN3_LAYERS = 1  # graph layers of the cn3 variant (see the module docstring)
SHARED_FRACTION = 0.5  # shared part of the shared_private variant's state (paper, Figure 2)


@keras.saving.register_keras_serializable(package="glomo_tf")
class MaskedMeanMaxPooling(keras.layers.Layer):
    """``[mean ; max]`` over the non-padded positions of a sequence.

    Call arguments:
        inputs: ``[features, token_ids]``: features ``[batch, T, d]`` and int ids ``[batch, T]``
            (0 = padding, left out of both the mean and the max).

    Returns:
        ``[batch, 2 d]``; an all-padding row gives zeros.
    """

    def call(self, inputs):
        features, token_ids = inputs
        valid = tf.cast(tf.not_equal(token_ids, 0), features.dtype)[:, :, None]
        count = tf.reduce_sum(valid, axis=1)
        mean = masked_mean(features, valid, count)
        lowest = tf.cast(features.dtype.min, features.dtype)
        maximum = tf.reduce_max(tf.where(valid > 0, features, lowest), axis=1)
        maximum = tf.where(count > 0, maximum, tf.zeros_like(maximum))
        return tf.concat([mean, maximum], axis=-1)

    def compute_output_shape(self, input_shape):
        features_shape = input_shape[0]
        return (features_shape[0], 2 * features_shape[-1])

    def compute_mask(self, inputs, mask=None):
        return None


def masked_mean(features, valid, count):
    """Mean of ``features [batch, T, d]`` over the positions where ``valid [batch, T, 1]`` is 1;
    ``count [batch, 1]`` is their number (an all-padding row gives zeros)."""
    return tf.reduce_sum(features * valid, axis=1) / tf.maximum(count, 1.0)


@keras.saving.register_keras_serializable(package="glomo_tf")
class MaskedMeanPooling(keras.layers.Layer):
    """The mean over the non-padded positions of a sequence (CN3's graph-level representation,
    ``h = 1/m sum_i h_i``, Algorithm 1 line 19).

    Call arguments:
        inputs: ``[features, token_ids]``: features ``[batch, T, d]`` and int ids ``[batch, T]``
            (0 = padding, left out of the mean).

    Returns:
        ``[batch, d]``; an all-padding row gives zeros.
    """

    def call(self, inputs):
        features, token_ids = inputs
        valid = tf.cast(tf.not_equal(token_ids, 0), features.dtype)[:, :, None]
        return masked_mean(features, valid, tf.reduce_sum(valid, axis=1))

    def compute_output_shape(self, input_shape):
        features_shape = input_shape[0]
        return (features_shape[0], features_shape[-1])

    def compute_mask(self, inputs, mask=None):
        return None


@keras.saving.register_keras_serializable(package="glomo_tf")
class SelfAttentionMask(keras.layers.Layer):
    """Token ids ``[batch, T]`` -> bool ``[batch, T, T]``: ``True`` where both positions are real
    tokens (the attention mask of masked self-attention)."""

    def call(self, token_ids):
        valid = tf.not_equal(token_ids, 0)
        return tf.logical_and(valid[:, :, None], valid[:, None, :])

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], input_shape[1])

    def compute_mask(self, inputs, mask=None):
        return None


def build_classifier(vocabulary_size, num_classes, variant="baseline", graph_predictor=None,
                     embedding_dim=128, rnn_units=128, attention_heads=4, dropout=0.3,
                     num_mixtures=2, conditioned=True, include_products=True,
                     transfer_dropout=0.0, num_anchors=2,
                     reconstruct_length=4, predict_length=4, aux_weight=0.5, top_k=None,
                     graph_temperature=None, transfer_form="fusion", propagation_steps=3,
                     propagation_aggregation="mean", propagation_update="gru",
                     propagation_directions="both", propagation_hidden_units=None,
                     propagation_layer_norm=False, gold_form="tree", name=None):
    """A classifier ``token ids [batch, T] (0 = padding) -> class probabilities [batch, classes]``.

    Args:
        vocabulary_size: int, ids of the tokenizer (``<pad>`` and ``<unk>`` included); must be the
            graph predictor's ``vocabulary_size`` when one is given.
        num_classes: int >= 2.
        variant: one of ``"baseline"``, ``"glomo_embeddings"``, ``"glomo_rnn"``, ``"uniform"``,
            ``"uniform_rnn"``, ``"cn3"``, ``"shared_private"`` (see the module docstring).
        graph_predictor: a :class:`GraphPredictor` (from ``glomo_tf.load_graph_predictor``);
            required by ``glomo_embeddings`` and ``glomo_rnn``, unused otherwise. It stays frozen
            (``GlomoTransfer``'s default).
        embedding_dim: int, word-embedding width.
        rnn_units: int, GRU units per direction; ``cn3`` and ``shared_private`` use
            ``2 * rnn_units`` units (the width of the BiGRU's output).
        attention_heads: int, heads of the self-attention (its key width is the feature width
            divided by the heads).
        dropout: float, dropout after the embeddings, on the attention output and before the
            output layer.
        num_mixtures: the transferred graphs' mixtures (see :class:`GlomoTransfer`).
        conditioned: the transferred graphs' mixtures (see :class:`GlomoTransfer`).
        include_products: the transferred graphs' mixtures (see :class:`GlomoTransfer`).
        transfer_dropout: float, ``GlomoTransfer``'s dropout on its fused input
            ``[H ; M H ...]`` (GLoMo and uniform variants).
        num_anchors: the ``shared_private`` variant's auxiliary tasks (see
            :class:`SharedPrivateRNN`); unused otherwise.
        reconstruct_length: the ``shared_private`` variant's auxiliary tasks (see
            :class:`SharedPrivateRNN`); unused otherwise.
        predict_length: the ``shared_private`` variant's auxiliary tasks (see
            :class:`SharedPrivateRNN`); unused otherwise.
        aux_weight: the ``shared_private`` variant's auxiliary tasks (see
            :class:`SharedPrivateRNN`); unused otherwise.
        top_k: None, or the sources per receiving unit the learned graphs keep
            (``GlomoTransfer``'s ``top_k``; GLoMo variants).
        graph_temperature: None, or the temperature the learned graphs are sharpened (below 1)
            or flattened (above 1) by (``GlomoTransfer``'s ``graph_temperature``; GLoMo variants).
        transfer_form: ``"fusion"`` (default, the paper's) or ``"propagation"`` (see the module
            docstring), for every variant that transfers graphs.
        propagation_steps: int, the steps of ``transfer_form="propagation"``.
        propagation_aggregation: ``"mean"`` or ``"sum"``, how ``transfer_form="propagation"``
            gathers a unit's sources (:class:`GraphPropagation`'s ``aggregation``).
        propagation_update: ``"gru"`` or ``"mlp"``, how it updates a unit each step
            (:class:`GraphPropagation`'s ``update``).
        propagation_directions: ``"both"``, ``"forward"`` or ``"backward"``, the graphs'
            directions a unit hears (:class:`GraphPropagation`'s ``directions``).
        propagation_hidden_units: None or an int, the width of the update's hidden layer
            (:class:`GraphPropagation`'s ``hidden_units``).
        propagation_layer_norm: bool, layer normalisation in the update
            (:class:`GraphPropagation`'s ``layer_norm``).
        gold_form: the gold variants' graphs: ``"tree"`` (one head,
            :func:`~glomo_tf.data.gold_graphs.tree_graphs`) or ``"chain"`` (two heads,
            :func:`~glomo_tf.data.gold_graphs.listops_chain_graphs`).
        name: model name; default ``"classifier_<variant>"``.

    Returns:
        An uncompiled ``keras.Model`` on ``token_ids`` (the gold variants: on ``[token_ids,
        graphs]``); compile it with a sparse categorical cross-entropy.
    """
    hparams.check_choice("variant", variant, VARIANTS)
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}.")
    hparams.check_choice("transfer_form", transfer_form, hparams.TRANSFER_FORMS)
    hparams.check_choice("gold_form", gold_form, tuple(hparams.GOLD_FORMS))
    if variant in PREDICTOR_VARIANTS:
        check_graph_predictor(variant, graph_predictor, vocabulary_size)
    gold = variant in GOLD_VARIANTS
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    # The gold variants read the data's graphs (one layer; one head, or two for chains), dense.
    gold_graphs = ([keras.Input((2, 1, hparams.GOLD_FORMS[gold_form], None, None),
                                name="graphs")] if gold else [])

    def transfer(features, graph_mode, layer_name):
        learned = graph_mode == "learned" and not gold
        layer = transfer_layer(graph_predictor if learned else None, transfer_form,
                               propagation_steps, propagation_aggregation, propagation_update,
                               propagation_directions, propagation_hidden_units,
                               propagation_layer_norm, num_mixtures=num_mixtures,
                               conditioned=conditioned, include_products=include_products, graph_mode=graph_mode,
                               dropout=transfer_dropout, top_k=top_k if learned else None,
                               graph_temperature=graph_temperature if learned else None,
                               name=layer_name)
        return layer([features, *(gold_graphs or [token_ids])])

    h = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True,
                               name="embedding")(token_ids)
    if variant in ("cn3", "shared_private"):
        h = keras.layers.Dropout(dropout, name="embedding_dropout")(h)
        if variant == "cn3":
            h = ContextualizedNonLocal(2 * rnn_units, num_layers=CN3_LAYERS, context="lstm",
                                       name="cn3")(h)
            pooled = MaskedMeanPooling(name="mean_pooling")([h, token_ids])
        else:
            # The token ids are the targets of the auxiliary reconstruction and prediction.
            pooled = SharedPrivateRNN(
                2 * rnn_units, shared_fraction=SHARED_FRACTION, num_anchors=num_anchors,
                reconstruct_length=reconstruct_length, predict_length=predict_length,
                aux_weight=aux_weight, vocabulary_size=vocabulary_size, return_sequences=False,
                name="shared_private_rnn")(h, aux_targets=token_ids)
        return _classification_head(pooled, num_classes, dropout, token_ids,
                                    name or f"classifier_{variant}")
    if variant in ("glomo_embeddings", "gold_embeddings"):
        h = transfer(h, "learned", variant)
    elif variant == "uniform":
        h = transfer(h, "uniform", "uniform_graphs")
    h = keras.layers.Dropout(dropout, name="embedding_dropout")(h)
    h = keras.layers.Bidirectional(keras.layers.GRU(rnn_units, return_sequences=True),
                                   name="bigru")(h)
    if variant in ("glomo_rnn", "gold_rnn"):
        h = transfer(h, "learned", variant)
    elif variant == "uniform_rnn":
        h = transfer(h, "uniform", "uniform_graphs")
    width = h.shape[-1]
    attention_mask = SelfAttentionMask(name="attention_mask")(token_ids)
    attended = keras.layers.MultiHeadAttention(
        attention_heads, key_dim=max(1, width // attention_heads), name="self_attention")(
            h, h, attention_mask=attention_mask)
    attended = keras.layers.Dropout(dropout, name="attention_dropout")(attended)
    h = keras.layers.LayerNormalization(name="attention_norm")(
        keras.layers.Add(name="residual")([h, attended]))
    pooled = MaskedMeanMaxPooling(name="mean_max_pooling")([h, token_ids])
    return _classification_head(pooled, num_classes, dropout, [token_ids, *gold_graphs],
                                name or f"classifier_{variant}")


def transfer_layer(graph_predictor, transfer_form="fusion", propagation_steps=3,
                   propagation_aggregation="mean", propagation_update="gru",
                   propagation_directions="both", propagation_hidden_units=None,
                   propagation_layer_norm=False, **options):
    """The layer a classifier transfers graphs with: :class:`GlomoTransfer` (``transfer_form=
    "fusion"``, the paper's one gated fusion) or :class:`GraphPropagation` (``"propagation"``,
    with its steps, aggregation, update, directions, hidden width and layer normalisation);
    ``options`` are
    :class:`GlomoTransfer`'s."""
    hparams.check_choice("transfer_form", transfer_form, hparams.TRANSFER_FORMS)
    if transfer_form == "fusion":
        return GlomoTransfer(graph_predictor, **options)
    return GraphPropagation(graph_predictor, steps=propagation_steps,
                            aggregation=propagation_aggregation, update=propagation_update,
                            directions=propagation_directions,
                            hidden_units=propagation_hidden_units,
                            layer_norm=propagation_layer_norm, **options)


def check_graph_predictor(variant, graph_predictor, vocabulary_size):
    """Raises ``ValueError`` unless ``graph_predictor`` is a :class:`GraphPredictor` reading
    ``vocabulary_size`` ids (what a variant that transfers learned graphs needs)."""
    if not isinstance(graph_predictor, GraphPredictor):
        raise ValueError(f"The {variant!r} variant needs a pretrained GraphPredictor "
                         "(glomo_tf.load_graph_predictor(path)); got "
                         f"{type(graph_predictor).__name__}.")
    if graph_predictor.vocabulary_size != vocabulary_size:
        raise ValueError(
            f"vocabulary_size={vocabulary_size} differs from the graph predictor's "
            f"{graph_predictor.vocabulary_size}: tokenize with the pretraining tokenizer and "
            "pass its vocabulary_size, so both read the same ids.")


def _classification_head(pooled, num_classes, dropout, inputs, name):
    """Dropout -> Dense softmax on the pooled features; the model ``inputs -> probabilities``
    (``token_ids``, or a list of inputs)."""
    pooled = keras.layers.Dropout(dropout, name="output_dropout")(pooled)
    probabilities = keras.layers.Dense(num_classes, activation="softmax", dtype="float32",
                                       name="probabilities")(pooled)
    if isinstance(inputs, list) and len(inputs) == 1:
        inputs = inputs[0]
    return keras.Model(inputs, probabilities, name=name)
