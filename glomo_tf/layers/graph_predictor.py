"""The GLoMo graph predictor ``g``: token embeddings, causal CNNs, and Eq. 1's multi-head graphs."""

import os

import keras
import numpy as np
import tensorflow as tf

from glomo_tf import hparams, ops, presets
from glomo_tf.hparams import COMPOSITIONS
from glomo_tf.layers._common import compute_cast, direction_rows
from glomo_tf.layers.conv_encoder import CausalConvEncoder
from glomo_tf.layers.feature_predictor import FeaturePredictor
from glomo_tf.layers.graph_scorer import LiveRowHinge, ScorerSettings
from glomo_tf.precision import with_dtype_policy

# Stacks of the decoupled predictor's convolution networks (CausalConvEncoder's outputs).
_FW_KEY, _FW_QUERY, _BW_KEY, _BW_QUERY = range(4)


@keras.saving.register_keras_serializable(package="glomo_tf")
class GraphPredictor(ScorerSettings, keras.layers.Layer):
    """Predicts latent graphs over a token sequence, in both directions (GLoMo's ``g``).

    Token ids are embedded with the predictor's own table (id 0 is padding). For each direction a
    *key* CNN and a *query* CNN (:class:`CausalConvEncoder`: causal 1-D convolutions, batch norm
    and ReLU, padded positions zeroed before every convolution) produce ``k_s`` and ``q_t``, and
    :class:`GraphScorer` turns them into graphs by Eq. 1 of the paper: for graph layer ``l`` and
    head ``h``,

        score[t, s] = (W_q^l q_t)_h . (W_k^l k_s)_h - b
        G[t, s]     = relu(score)^2 / sum_{s'} relu(score[t, s'])^2     over admissible s'

    where admissible means ``s < t`` for the forward direction, ``s > t`` for the backward direction,
    and never a padded position. Rows with no admissible source (or no positive score) are all zero.
    The backward direction is a separate network that reads the sequence in reverse time; it is
    computed directly in the original time order (anti-causal convolutions), so its graphs need no
    flipping. Both directions' convolutions and projections run as single batched matrix products.
    The paper's ``-decouple`` ablation is :class:`CoupledGraphPredictor`.

    Args:
        vocabulary_size: int, number of token ids (id 0 is padding).
        hidden_dim: int, width ``d`` of the embeddings and convolution features.
        num_layers: int, graph layers ``L`` (1 expresses the ``-hierarchical`` ablation).
        num_heads: int, heads ``K`` per graph layer.
        head_dim: int, query/key width per head; defaults to ``hidden_dim // 2`` (reference code).
        conv_layers: int, convolution layers in each key and query CNN.
        kernel_size: int, width of the causal convolutions.
        dropout: float, variational dropout rate on the CNN inputs (one mask per sequence).
        threshold: ``"query"`` (``b = w . q_t + c`` per layer, the reference code's best) or
            ``"scalar"`` (one learned ``b`` per layer, the paper's Eq. 1).
        normalization: ``"squared_relu"`` (Eq. 1), ``"entmax15"`` or ``"softmax"`` (the
            ``-sparse`` ablation). ``"entmax15"`` is Eq. 1's normalised squared ReLU with the
            threshold *solved* per row instead of learned (1.5-entmax, see
            :func:`glomo_tf.ops.entmax15`): rows stay sparse but never die, and every source in
            a row's support gets a gradient. Trained with the planted edges as targets, the
            demo-sized predictor recovers them in every head with it, and at most 0.78 (best
            head) with the learned threshold, whose rows stop learning once a source falls
            below it (``examples/planted_diagnostics.py capacity``). The threshold weights and
            the live-row loss have no effect then. ``"entmax"`` solves the threshold of
            alpha-entmax with ``entmax_alpha`` (:func:`glomo_tf.ops.entmax_bisect`): alpha
            between 1 and 1.5 gives rows between softmax's and entmax15's sparsity.
        entmax_alpha: float in (1, 2], the alpha of ``normalization="entmax"`` (1.5 by
            default, entmax15's; ignored by the other normalisations).
        embeddings_initializer: initializer of the embedding table (default uniform in
            [-0.1, 0.1]).
        kernel_initializer: initializer of the convolution, query, key and threshold kernels
            (default: uniform variance scaling over the fan-in, the reference code's).
        threshold_initializer: float or initializer of the threshold bias ``c`` (``b`` for
            ``threshold="scalar"``). The default ``-1.0`` shifts every score up by one at the
            start, so the first graphs are dense and every row gets gradients (with ``0.0`` the
            planted-corpus demo's graphs came out empty). A row whose scores all fall below the
            threshold gets no gradient and stays empty: watch the graphs during pretraining
            (``glomo pretrain --probe``, ``glomo extract``), or keep rows alive with
            ``live_row_regularizer``.
        embeddings_regularizer: regularizer of the embedding table.
        kernel_regularizer: regularizer of the convolution, query, key and threshold kernels.
        live_row_regularizer: a :class:`LiveRowHinge` (default None, off): in training, the loss
            ``weight * mean_rows relu(margin - max_s (q_t . k_s - b_t))`` over the rows that have
            an admissible source, added through ``add_loss``. A squared-ReLU row whose scores all
            fall below its threshold is all zero and gets no gradient, so it never recovers (on
            WikiText-2, 15 of 16 graphs died this way); the hinge revives it, and only the best
            source has to clear the threshold, so graphs can stay as sparse as they like.

    The networks are the sub-layers ``encoder`` (:class:`CausalConvEncoder`, whose ``momentum``
    is the batch norms') and ``scorer`` (:class:`GraphScorer`, whose ``epsilon`` is added to the
    row sums); :func:`graph_predictor` builds a predictor with those set.

    Call arguments:
        token_ids: int tensor ``[batch, T]``; 0 marks padding.
        training: bool, batch statistics and dropout when True.
        fused_normalization: normalise Eq. 1's scores in one XLA cluster
            (:func:`~glomo_tf.ops.fused_normalize_scores`: the same graphs up to float round-off,
            compiled once per batch shape); default: in training only.

    Returns:
        A dict with ``"graphs"``: ``[batch, 2, num_layers, num_heads, T, T]`` (direction 0 forward,
        1 backward), row-stochastic; and ``"padding_mask"``: bool ``[batch, T]``.

    Example:

    >>> import numpy as np
    >>> predictor = GraphPredictor(vocabulary_size=100, hidden_dim=16, num_layers=2, num_heads=4)
    >>> ids = np.array([[5, 9, 2, 7, 0, 0]], dtype="int32")
    >>> out = predictor(ids)
    >>> tuple(out["graphs"].shape)
    (1, 2, 2, 4, 6, 6)

    References:
        Yang et al., "GLoMo: Unsupervisedly Learned Relational Graphs as Transferable
        Representations", NeurIPS 2018, Section 2.1 and Eq. 1.
    """

    coupled = False
    _stacks = 4  # forward key, forward query, backward key, backward query
    #: The built-in presets, ``{name: metadata}`` (keras-hub's ``Backbone.presets``).
    presets = presets.BuiltinPresets()

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        num_layers=3,
        num_heads=8,
        head_dim=None,
        conv_layers=4,
        kernel_size=3,
        dropout=0.0,
        threshold="query",
        normalization="squared_relu",
        entmax_alpha=1.5,
        embeddings_initializer=None,
        kernel_initializer=None,
        threshold_initializer=-1.0,
        embeddings_regularizer=None,
        kernel_regularizer=None,
        live_row_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        hparams.check_positive(vocabulary_size=vocabulary_size, hidden_dim=hidden_dim,
                               num_layers=num_layers, num_heads=num_heads, kernel_size=kernel_size)
        if head_dim is not None:
            hparams.check_positive(head_dim=head_dim)
        if conv_layers < 0:
            raise ValueError(f"conv_layers must be >= 0, got {conv_layers}.")
        self.vocabulary_size = int(vocabulary_size)
        self.hidden_dim = int(hidden_dim)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomUniform(-0.1, 0.1))
        self.embeddings_regularizer = keras.regularizers.get(embeddings_regularizer)
        self.encoder = CausalConvEncoder(
            self._stacks, conv_layers, kernel_size, dropout, kernel_initializer=kernel_initializer,
            kernel_regularizer=kernel_regularizer, dtype=self.dtype_policy,
            trainable=self.trainable, name="encoder")
        self.scorer = self.make_scorer(
            hidden_dim, num_layers, num_heads, head_dim, threshold, normalization, entmax_alpha,
            kernel_initializer=kernel_initializer, threshold_initializer=threshold_initializer,
            kernel_regularizer=kernel_regularizer, live_row_regularizer=live_row_regularizer)

    # The encoder's sizes (the scorer's come from ScorerSettings).
    conv_layers = property(lambda self: self.encoder.conv_layers)
    kernel_size = property(lambda self: self.encoder.kernel_size)
    dropout = property(lambda self: self.encoder.dropout)

    def build(self, input_shape=None):
        # autocast=False: embed() casts the rows it gathers, not the whole table (which a
        # read under a mixed policy would cast on every call).
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocabulary_size, self.hidden_dim),
            initializer=self.embeddings_initializer, regularizer=self.embeddings_regularizer,
            autocast=False)
        self.encoder.build((None, None, self.hidden_dim))
        self.scorer.build((None, 2, None, self.hidden_dim))
        self.built = True

    _w = compute_cast

    def call(self, token_ids, training=False, fused_normalization=None):
        padding_mask, stacks = self._conv_stacks(token_ids, training)
        admissible = ops.admissible_sources(padding_mask)  # [B, 2, 1, 1, T, T]
        queries, keys = _queries_keys(stacks)
        graphs = self.scorer(queries, keys, admissible, training=training,
                             fused=bool(training if fused_normalization is None
                                        else fused_normalization))
        return {"graphs": graphs, "padding_mask": padding_mask}

    def embed(self, token_ids):
        """The predictor's embeddings of ``token_ids`` (``[batch, T, hidden_dim]``), in its
        compute dtype: the rows gathered, then cast."""
        return self._w(tf.gather(self.embeddings, token_ids))

    def _conv_stacks(self, token_ids, training):
        """The padding mask ``[B, T]`` and the CNNs' outputs, a list of ``[B, T, d]``."""
        token_ids = tf.convert_to_tensor(token_ids)
        if not token_ids.dtype.is_integer:
            raise TypeError(
                f"{type(self).__name__} expects integer token ids [batch, T], got dtype "
                f"{token_ids.dtype}. Tokenize the text first (see glomo_tf.data) and pass the ids.")
        padding_mask = ops.padding_mask_from_ids(token_ids)
        return padding_mask, self.encoder(self.embed(token_ids), padding_mask, training=training)

    @classmethod
    def from_preset(cls, preset, trainable=True, dtype=None):
        """The predictor of ``preset``, built, its weights read.

        As keras-hub's ``from_preset``, it is returned trainable: the freezing is the transfer
        layer's (:class:`~glomo_tf.GlomoTransfer` with ``fine_tune=False``, its default, sets
        ``trainable=False`` on it, and so do :class:`~glomo_tf.GlomoClassifier` and
        ``glomo transfer``); pass ``trainable=False`` to freeze it here.

        Args:
            preset: a built-in name (``GraphPredictor.presets``), a directory written by
                :meth:`save_to_preset`, or an ``hf://OWNER/NAME`` / ``kaggle://...`` handle
                (the ``hub`` extra; :func:`glomo_tf.presets.preset_directory`).
            trainable: bool.
            dtype: a dtype policy to run it in (``"mixed_bfloat16"``); default float32.
        Its tokenizer: :meth:`glomo_tf.GlomoTokenizer.from_preset`.

        >>> predictor = GraphPredictor.from_preset("glomo_books_en")
        """
        predictor = presets.read_layer(preset, cls, dtype=dtype)
        predictor.trainable = trainable
        return predictor

    def save_to_preset(self, preset_dir, tokenizer=None, metadata=None, weights_dtype="float32",
                       reference_ids=None, reference_texts=None):
        """Writes this predictor as a preset directory (replacing a preset there), with its model
        card (``README.md``, from the metadata); returns its path.

        ``metadata`` is merged into ``metadata.json``; ``weights_dtype="float16"`` halves the
        weights file; the graphs of ``reference_ids`` (int ``[N, T]``, read from
        ``reference_texts``) are recorded in float32, for :func:`glomo_tf.presets.check_preset`.
        With the ``tokenizer`` whose ids it reads (``reference_texts`` then need no ids), this
        is :func:`glomo_tf.save_preset`, which writes both.
        """
        if tokenizer is not None:
            return presets.save_preset(self, tokenizer, preset_dir, metadata=metadata,
                                       weights_dtype=weights_dtype, reference_ids=reference_ids,
                                       reference_texts=reference_texts)
        if not self.built:
            raise ValueError("save_to_preset needs a built GraphPredictor: call it once, or load "
                             "it with glomo_tf.load_graph_predictor.")
        if reference_texts is not None and reference_ids is None:
            raise ValueError("reference_texts need the tokenizer; pass reference_ids for a "
                             "predictor without one.")
        source = with_dtype_policy(self, "float32")  # configs and references in float32
        with presets.writing(preset_dir) as directory:
            presets.write_layer(directory, source, weights_dtype)
            reference = None
            if reference_ids is not None:
                reference_ids = np.asarray(reference_ids, np.int32)
                reference = presets.write_reference_graphs(
                    directory, reference_ids, source(reference_ids, training=False)["graphs"],
                    reference_texts or ())
            presets.write_metadata(directory, {
                "class_name": "GraphPredictor", "parameters": int(source.count_params()),
                "vocabulary_size": int(source.vocabulary_size), "tokenizer": None,
                "weights_dtype": weights_dtype, "reference_graphs": reference,
                **(metadata or {})})
        return os.fspath(preset_dir)

    def graphs_with_top_rows(self, token_ids, rows, training=False):
        """Every layer's graphs but the last, and the last layer's rows at ``rows`` only.

        ``rows``: int ``[2, S]``, the receiving positions wanted in each direction. Returns a dict
        with ``graphs`` ``[B, 2, L - 1, K, T, T]`` (``call()``'s first ``L - 1`` layers),
        ``top_rows`` ``[B, 2, K, S, T]`` (``call()``'s last layer, direction ``z`` cut to the rows
        ``rows[z]``) and ``padding_mask``. Pretraining decodes from a few sampled positions
        (:meth:`FeaturePredictor.top_features`), so the last layer's other rows (their queries,
        scores and normalisation) would be computed for nothing. In training with the live-row
        loss, which needs every row, the full graphs are computed and cut.
        """
        self._ready("graphs_with_top_rows")
        rows = tf.cast(rows, tf.int32)
        if training and self.scorer._live_row_hinge:
            out = self(token_ids, training=training)
            graphs = out["graphs"]
            return {"graphs": graphs[:, :, :-1], "padding_mask": out["padding_mask"],
                    "top_rows": direction_rows(graphs[:, :, -1], rows, axis=3)}
        padding_mask, stacks = self._conv_stacks(token_ids, training)
        queries, keys = _queries_keys(stacks)
        graphs, top_rows = self.scorer(queries, keys, ops.admissible_sources(padding_mask),
                                       training=training, top_rows=rows)
        return {"graphs": graphs, "top_rows": top_rows, "padding_mask": padding_mask}

    def graphs_from_features(self, queries, keys, padding_mask, training=False):
        """Eq. 1 on given query and key features ``[B, 2, T, d]`` (direction 0 forward):
        ``[B, 2, L, K, T, T]`` through this predictor's scorer, over the sources ``padding_mask
        [B, T]`` admits. What :meth:`call` does after its CNNs."""
        self._ready("graphs_from_features")
        return self.scorer(queries, keys, ops.admissible_sources(padding_mask), training=training)

    def _ready(self, method):
        """Refuses a coupled predictor in ``method`` (one-line error); builds an unbuilt one."""
        if self.coupled:
            raise ValueError("A CoupledGraphPredictor computes its graphs layer by layer from "
                             f"its own features; {method} needs a GraphPredictor.")
        if not self.built:
            self.build((None, None))

    # ------------------------------------------------------------------ Keras plumbing
    def compute_output_shape(self, input_shape):
        batch, length = input_shape[0], input_shape[1]
        return {"graphs": (batch, 2, self.num_layers, self.num_heads, length, length),
                "padding_mask": (batch, length)}

    def compute_output_spec(self, token_ids, training=False, fused_normalization=None):
        """Symbolic outputs with the dtypes the call returns: the padding mask is bool."""
        shapes = self.compute_output_shape(token_ids.shape)
        return {key: keras.KerasTensor(shape, dtype="bool" if key == "padding_mask"
                                       else self.compute_dtype)
                for key, shape in shapes.items()}

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "hidden_dim": self.hidden_dim,
            "conv_layers": self.conv_layers,
            "kernel_size": self.kernel_size,
            "dropout": self.dropout,
            **self.scorer_config(),
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "embeddings_regularizer": keras.regularizers.serialize(self.embeddings_regularizer),
        })
        # The encoder's momentum, kept only where it differs from its default.
        if self.encoder.momentum != 0.9:
            config["momentum"] = self.encoder.momentum
        return config

    @classmethod
    def from_config(cls, config):
        """Reads this class's configs, and those written before the predictor had sub-layers
        (with ``coupled``, ``composition``, ``live_row_weight``, ``live_row_margin``,
        ``initial_threshold``, ``momentum`` and ``epsilon``): see :func:`graph_predictor`."""
        config = cls.deserialized(config)
        # Today's coupled configs hold a composition; those of earlier versions say `coupled`.
        config.setdefault("coupled", cls is CoupledGraphPredictor or "composition" in config)
        if cls is GraphPredictor or cls is CoupledGraphPredictor:
            return graph_predictor(**config)
        return cls(**config)

    # ------------------------------------------------------------------ earlier files
    def load_own_variables(self, store):
        """Loads this layer's weights, or every weight of a file written before the predictor
        had sub-layers (all of them were the predictor's own then): see :func:`_legacy_order`."""
        own = self._trainable_variables + self._non_trainable_variables
        if len(store.keys()) == len(own):
            return super().load_own_variables(store)
        variables = _legacy_order(self)
        if len(store.keys()) != len(variables):
            raise ValueError(f"{type(self).__name__} {self.name!r} expects {len(own)} variables "
                             f"(or {len(variables)} in a file of earlier versions), the file "
                             f"has {len(store.keys())}.")
        for i, variable in enumerate(variables):
            variable.assign(store[f"{i}"])
        self.encoder._loaded_by_parent = self.scorer._loaded_by_parent = True


def _legacy_order(predictor):
    """The predictor's variables in the order earlier versions stored them, all as the
    predictor's own: the trainable ones (embedding table, each convolution's kernel and batch-norm
    scale and shift, the projections and thresholds), then the moving statistics."""
    encoder, scorer = predictor.encoder, predictor.scorer
    return ([predictor.embeddings] + encoder._trainable_variables + scorer._trainable_variables
            + encoder._non_trainable_variables)


@keras.saving.register_keras_serializable(package="glomo_tf")
class CoupledGraphPredictor(GraphPredictor):
    """The paper's ``-decouple`` ablation: graphs computed from the features they compose.

    One CNN per direction gives ``F^0``; the graphs of layer ``l`` are Eq. 1 on the features
    ``F^{l-1}`` (:meth:`GraphScorer.layer_graphs`), and the predictor composes the features itself
    with a :class:`FeaturePredictor` (``composer``), returned under ``"features"``:
    ``[batch, 2, num_layers, T, hidden_dim]``. Arguments as :class:`GraphPredictor`'s, plus
    ``composition`` (``"gru"``, ``"residual"`` or ``"projected"``: see
    :class:`FeaturePredictor`); ``hidden_dim`` must be divisible by ``num_heads``.

    Example:

    >>> import numpy as np
    >>> predictor = CoupledGraphPredictor(vocabulary_size=50, hidden_dim=8, num_layers=2,
    ...                                   num_heads=2, composition="residual")
    >>> out = predictor(np.array([[5, 9, 2, 7]], dtype="int32"))
    >>> tuple(out["features"].shape)
    (1, 2, 2, 4, 8)
    """

    coupled = True
    _stacks = 2  # one network a direction

    def __init__(self, vocabulary_size, hidden_dim, num_layers=3, num_heads=8, head_dim=None,
                 conv_layers=4, kernel_size=3, dropout=0.0, threshold="query",
                 normalization="squared_relu", entmax_alpha=1.5, composition="gru", **kwargs):
        hparams.check_choice("composition", composition, COMPOSITIONS)
        hparams.check_heads_divide(hidden_dim, num_heads,
                                   what="a coupled predictor's feature composition")
        super().__init__(vocabulary_size, hidden_dim, num_layers, num_heads, head_dim,
                         conv_layers, kernel_size, dropout, threshold, normalization,
                         entmax_alpha, **kwargs)
        self.composer = FeaturePredictor(hidden_dim, num_heads, composition=composition,
                                         dtype=self.dtype_policy, trainable=self.trainable,
                                         name="composer")

    composition = property(lambda self: self.composer.composition)

    def build(self, input_shape=None):
        super().build(input_shape)
        self.composer.build((None, 2, None, self.hidden_dim))

    def call(self, token_ids, training=False, fused_normalization=None):
        padding_mask, stacks = self._conv_stacks(token_ids, training)
        admissible = ops.admissible_sources(padding_mask)
        features = tf.stack(stacks, axis=1)  # F^0: [B, 2, T, d]
        graphs, all_features = [], []
        for layer in range(self.num_layers):
            graph = self.scorer.layer_graphs(features, layer, admissible, training)
            features = self.composer.compose(features, graph[:, :, 0])
            graphs.append(graph)
            all_features.append(features)
        return {"graphs": tf.concat(graphs, axis=2), "padding_mask": padding_mask,
                "features": tf.stack(all_features, axis=2)}

    def compute_output_shape(self, input_shape):
        shapes = super().compute_output_shape(input_shape)
        shapes["features"] = (input_shape[0], 2, self.num_layers, input_shape[1],
                              self.hidden_dim)
        return shapes

    def get_config(self):
        return {**super().get_config(), "composition": self.composition}


def graph_predictor(*args, coupled=False, composition="gru", momentum=None, epsilon=None,
                    **kwargs):
    """A :class:`GraphPredictor` (or, with ``coupled``, a :class:`CoupledGraphPredictor`) from
    flat settings, as the pretraining settings and the configs of earlier versions hold them:
    :func:`flat_settings` reads ``live_row_weight``, ``live_row_margin`` and
    ``initial_threshold``; ``momentum`` is the encoder's batch-norm momentum and ``epsilon`` the
    scorer's; ``args`` and the other ``kwargs`` are the layer's arguments.

    Example:

    >>> predictor = graph_predictor(vocabulary_size=50, hidden_dim=8, num_layers=1, num_heads=2,
    ...                             coupled=True, live_row_weight=0.5)
    >>> type(predictor).__name__, predictor.scorer.live_row_regularizer.weight
    ('CoupledGraphPredictor', 0.5)
    """
    # Only a coupled predictor takes the composition; it is checked for either kind.
    hparams.check_choice("composition", composition, COMPOSITIONS)
    kwargs = flat_settings(kwargs)
    if coupled:
        predictor = CoupledGraphPredictor(*args, composition=composition, **kwargs)
    else:
        predictor = GraphPredictor(*args, **kwargs)
    if momentum is not None:
        predictor.encoder.momentum = float(momentum)
    if epsilon is not None:
        predictor.scorer.epsilon = float(epsilon)
    return predictor


def optional_graph_predictor(value):
    """A layer's ``graph_predictor`` argument checked: None, a :class:`GraphPredictor`, or the
    serialized predictor that the layer's ``get_config`` wrote (deserialized here)."""
    if isinstance(value, dict):
        value = keras.saving.deserialize_keras_object(value)
    if value is not None and not isinstance(value, GraphPredictor):
        raise TypeError(
            "graph_predictor must be a glomo_tf.GraphPredictor (for example "
            "`pretrainer.graph_predictor` or `glomo_tf.load_graph_predictor(path)`) or None, got "
            f"{type(value).__name__}.")
    return value


def flat_settings(settings):
    """Layer arguments from flat settings: ``live_row_weight`` (0: none) and ``live_row_margin``
    become a :class:`LiveRowHinge` ``live_row_regularizer``, ``initial_threshold`` the
    ``threshold_initializer``; other settings pass unchanged."""
    settings = dict(settings)
    weight = settings.pop("live_row_weight", 0.0)
    margin = settings.pop("live_row_margin", 0.1)
    if weight < 0 or margin < 0:
        raise ValueError(f"live_row_weight and live_row_margin must be >= 0, got {weight} and "
                         f"{margin}.")
    if weight > 0:
        settings["live_row_regularizer"] = LiveRowHinge(weight, margin)
    if "initial_threshold" in settings:
        settings["threshold_initializer"] = float(settings.pop("initial_threshold"))
    return settings


def _queries_keys(stacks):
    """A decoupled predictor's queries and keys, each ``[B, 2, T, d]``."""
    keys = tf.stack([stacks[_FW_KEY], stacks[_BW_KEY]], axis=1)
    queries = tf.stack([stacks[_FW_QUERY], stacks[_BW_QUERY]], axis=1)
    return queries, keys

