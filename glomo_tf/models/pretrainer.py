"""``GlomoPretrainer``: unsupervised GLoMo pretraining as a ``keras.Model`` with ``fit()``."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf._keras_private import in_multi_worker_mode
from glomo_tf.data.vocabulary import integer_ids
from glomo_tf.hparams import DIRECTIONS, GRAPH_PREDICTOR, OBJECTIVES, PRETRAINER
from glomo_tf.layers.context_decoder import ContextDecoder
from glomo_tf.layers.feature_predictor import FeaturePredictor
from glomo_tf.layers.graph_predictor import GraphPredictor, graph_predictor

# GraphPredictor's arguments that GlomoPretrainer.from_sizes passes on.
PREDICTOR_ARGS = tuple(GRAPH_PREDICTOR) + (
    "embeddings_initializer", "kernel_initializer", "threshold_initializer",
    "embeddings_regularizer", "kernel_regularizer", "live_row_regularizer", "momentum", "epsilon")


@keras.saving.register_keras_serializable(package="glomo_tf")
class Perplexity(keras.metrics.Metric):
    """Per-unit perplexity: ``exp(total cross-entropy / number of predicted units)``."""

    def __init__(self, name="perplexity", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, total_cross_entropy, num_units):
        self.total.assign_add(tf.cast(total_cross_entropy, self.dtype))
        self.count.assign_add(tf.cast(num_units, self.dtype))

    def result(self):
        return tf.exp(self.total / tf.maximum(self.count, 1.0))


class ContextPretrainer(keras.Model):
    """What :class:`GlomoPretrainer` and :class:`GlomoPretrainer2D` share: the positions decoded
    each step, the loss and perplexity trackers, and ``fit``'s and ``evaluate``'s steps around
    the subclass's ``context_loss(*args, training=..., **kwargs)``, which returns ``(loss, total
    cross-entropy, number of predicted values)``; the subclass's ``_loss_inputs(data)`` turns a
    batch into those ``(args, kwargs)``.

    Args:
        num_positions: int or None, positions decoded per step (None: every position).
        seed: int or None, seed of the position sampling.
    """

    def __init__(self, num_positions=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if num_positions is not None and num_positions < 1:
            raise ValueError(f"num_positions must be >= 1 or None (all), got {num_positions}.")
        self.num_positions = num_positions
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.perplexity_tracker = Perplexity()

    @property
    def metrics(self):
        return [self.loss_tracker, self.perplexity_tracker]

    def sample_positions(self, length):
        """The positions ``[S]`` of ``length`` whose contexts are decoded this step."""
        return sample_positions(self.num_positions, length, self.seed_generator)

    def train_step(self, data):
        """One optimizer step on the loss, scaled for the replicas (:func:`replica_loss`)."""
        args, kwargs = self._loss_inputs(data)
        with tf.GradientTape() as tape:
            loss, total_ce, total_units = self.context_loss(*args, training=True, **kwargs)
            scaled = replica_loss(self, loss)
        variables = self.trainable_variables
        self.optimizer.apply(tape.gradient(scaled, variables), variables)
        return self._update_metrics(loss, total_ce, total_units)

    def test_step(self, data):
        args, kwargs = self._loss_inputs(data)
        return self._update_metrics(*self.context_loss(*args, training=False, **kwargs))

    def _update_metrics(self, loss, total_ce, total_units):
        self.loss_tracker.update_state(loss)
        self.perplexity_tracker.update_state(total_ce, total_units)
        results = {m.name: m.result() for m in self.metrics}
        strategy = tf.distribute.get_strategy()
        if (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
                and in_multi_worker_mode(strategy)):
            # Keras reduces step outputs along axis 0, which fails on scalars across workers
            # (tensorflow/tensorflow#72388): give them that axis.
            results = {k: tf.reshape(v, [1]) for k, v in results.items()}
        return results


@keras.saving.register_keras_serializable(package="glomo_tf")
class GlomoPretrainer(ContextPretrainer):
    """The full GLoMo pretraining model: graph predictor, feature predictor and two decoders.

    Train it with ``compile()`` + ``fit()`` on a dataset of int token-id windows ``[batch, T]``
    (id 0 = padding; a dataset may also yield ``(ids,)`` or ``(ids, anything)``). Each step runs the
    graph predictor ``g`` (both directions), the feature predictor ``f`` on the embeddings, and, at
    ``num_positions`` sampled positions shared by the batch, a forward decoder predicting the next
    ``context_length`` units and a backward decoder predicting the previous ones (Eq. 3). The loss is
    the mean of the two directions' per-unit cross-entropy; ``perplexity`` is reported per unit.
    After pretraining, ``graph_predictor`` is the part to transfer.

    Args:
        graph_predictor: a :class:`GraphPredictor`, the backbone (as keras-hub's tasks take a
            backbone). Its width and heads decide the feature predictor's and the decoders'
            (a :class:`CoupledGraphPredictor` composes its own features).
        context_length: int, ``D`` units predicted per position (1 = ``-sequence`` ablation).
        decoder_layers: int, GRU layers of each decoder.
        num_positions: int or None, positions sampled per window and step (shared across the batch,
            with replacement, like the reference code); None decodes from every position.
        objective: ``"unit"`` (Eq. 3 at each sampled unit) or ``"sentence"`` (the ``-unit-level``
            ablation: a window-level objective in the style of Skip-thought, where the features of
            the first half of the window, mean-pooled, predict the first units of the second half,
            and symmetrically backward).
        composition: ``"gru"``, ``"residual"`` or ``"projected"``, the feature predictor's
            composition (see :class:`FeaturePredictor`; unused with a coupled predictor).
        dropout: float or None, the decoders' dropout; None takes the graph predictor's.
        seed: int or None, seed of the position sampling.

    :meth:`from_sizes` builds the graph predictor and the pretrainer from sizes in one call.

    Example:

    >>> import numpy as np, keras
    >>> predictor = GraphPredictor(vocabulary_size=50, hidden_dim=16, num_layers=2, num_heads=2,
    ...                            conv_layers=1)
    >>> model = GlomoPretrainer(predictor, num_positions=4)
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> ids = np.random.randint(1, 50, size=(8, 12)).astype("int32")
    >>> history = model.fit(ids, batch_size=4, epochs=1, verbose=0)
    >>> sorted(history.history)
    ['loss', 'perplexity']
    """

    def __init__(self, graph_predictor, context_length=3, decoder_layers=2, num_positions=20,
                 objective="unit", composition="gru", dropout=None, seed=None, **kwargs):
        super().__init__(num_positions=num_positions, seed=seed, **kwargs)
        if not isinstance(graph_predictor, GraphPredictor):
            raise TypeError("graph_predictor must be a glomo_tf.GraphPredictor, got "
                            f"{type(graph_predictor).__name__}; GlomoPretrainer.from_sizes("
                            "vocabulary_size, ...) builds one from sizes.")
        hparams.check_choice("objective", objective, OBJECTIVES)
        predictor = graph_predictor
        self.context_length = int(context_length)
        self.decoder_layers = int(decoder_layers)
        self.objective = objective
        self.composition = composition
        self.dropout = dropout
        self.graph_predictor = predictor
        self.feature_predictor = None if predictor.coupled else FeaturePredictor(
            predictor.hidden_dim, predictor.num_heads, composition=composition,
            dtype=self.dtype_policy, name="feature_predictor")
        decoder_dropout = predictor.dropout if dropout is None else dropout
        self.decoders = [
            ContextDecoder(predictor.hidden_dim, context_length, decoder_layers, direction,
                           decoder_dropout, dtype=self.dtype_policy, name=f"{direction}_decoder")
            for direction in DIRECTIONS]

    @classmethod
    def from_sizes(cls, vocabulary_size, hidden_dim=GRAPH_PREDICTOR["hidden_dim"], seed=None,
                   **kwargs):
        """A pretrainer and its :class:`GraphPredictor` from sizes in one call.

        ``kwargs`` are :class:`GraphPredictor`'s arguments (``num_layers``, ``num_heads``,
        ``threshold``, ``normalization``, ``composition``, ``dropout``, ...) and this class's
        (``context_length``, ``decoder_layers``, ``num_positions``, ``objective``); the decoders
        take the predictor's ``dropout``. Keras arguments (``name``, ``dtype``) go to the
        pretrainer, whose dtype policy the predictor shares.
        """
        predictor_args = {k: kwargs.pop(k) for k in list(kwargs) if k in PREDICTOR_ARGS}
        own = {k: kwargs.pop(k) for k in list(kwargs) if k in PRETRAINER}
        own["composition"] = predictor_args.get("composition", GRAPH_PREDICTOR["composition"])
        dtype = kwargs.get("dtype")
        predictor = graph_predictor(vocabulary_size=vocabulary_size, hidden_dim=hidden_dim,
                                    dtype=dtype, name="graph_predictor", **predictor_args)
        return cls(predictor, seed=seed, **own, **kwargs)

    def build(self, input_shape=None):
        if not self.graph_predictor.built:  # a predictor passed in may come built
            self.graph_predictor.build((None, None))
        if self.feature_predictor is not None:
            self.feature_predictor.build((None, None, self.graph_predictor.hidden_dim))
        for decoder in self.decoders:
            decoder.build()
        self.built = True

    def build_from_config(self, config):
        self.build()  # the sizes are in the layers' configs; no input shape is needed

    # ------------------------------------------------------------------ forward
    def call(self, token_ids, training=False):
        """Graphs and features: a dict with ``graphs`` ``[B, 2, L, K, T, T]``, ``features``
        ``[B, 2, L, T, d]`` and ``padding_mask`` ``[B, T]``."""
        token_ids = integer_ids(token_ids, "token ids [batch, T]")
        out = self.graph_predictor(token_ids, training=training)
        if self.feature_predictor is not None:
            embedded = self.graph_predictor.embed(token_ids)
            out["features"] = self.feature_predictor(embedded, out["graphs"], out["padding_mask"])
        return out

    def context_loss(self, token_ids, training=False):
        """Returns ``(loss, total cross-entropy, number of predicted units)`` for a batch."""
        token_ids = integer_ids(token_ids, "token ids [batch, T]")
        length = tf.shape(token_ids)[1]
        starts = self._decoder_states(token_ids, length, training)
        # Cast once for both decoders (each would cast the table, and its gradient back, itself).
        embedding_matrix = tf.cast(self.graph_predictor.embeddings, self.compute_dtype)
        losses, total_ce, total_units = [], 0.0, 0.0
        for z, decoder in enumerate(self.decoders):
            states, positions = starts[z]
            dec = decoder(states, positions, token_ids, embedding_matrix, training=training)
            ce = context_cross_entropy(dec["targets"], dec["logits"])
            direction_ce = tf.reduce_sum(ce * dec["weights"])
            direction_units = tf.reduce_sum(dec["weights"])
            losses.append(direction_ce / tf.maximum(direction_units, 1.0))
            total_ce += direction_ce
            total_units += direction_units
        return 0.5 * (losses[0] + losses[1]), total_ce, total_units

    def _decoder_states(self, token_ids, length, training):
        """Each direction's decoder ``(initial states [B, S, d], start positions [S])``.

        With the unit-level objective and sampled positions, a decoupled predictor computes its
        top graph layer's rows and composes its top feature layer at the sampled positions only
        (:meth:`GraphPredictor.graphs_with_top_rows`, :meth:`FeaturePredictor.top_features`):
        the same states as gathering them from every position's features, without the rest."""
        if not self.built:  # the sublayers are called directly below, not through call()
            self.build()
        if (self.objective == "unit" and self.num_positions is not None
                and self.feature_predictor is not None):
            positions = [self.sample_positions(length) for _ in self.decoders]
            rows = tf.stack(positions)  # [2, S]
            out = self.graph_predictor.graphs_with_top_rows(token_ids, rows, training=training)
            top = self.feature_predictor.top_features(
                self.graph_predictor.embed(token_ids), out["graphs"], rows, out["padding_mask"],
                top_rows=out["top_rows"])  # [B, 2, S, d]
            return list(zip(tf.unstack(top, axis=1), positions))
        out = self(token_ids, training=training)
        top = out["features"][:, :, -1]  # [B, 2, T, d]
        return [self._decoder_starts(top[:, z], out["padding_mask"], z, length)
                for z in range(len(self.decoders))]

    def _decoder_starts(self, top, padding_mask, direction, length):
        """Initial states ``[B, S, d]`` and start positions ``[S]`` of one direction's decoder."""
        if self.objective == "unit":
            positions = self.sample_positions(length)
            return tf.gather(top, positions, axis=1), positions
        # Sentence-level ablation: pool one half of the window, decode across the middle.
        half = length // 2
        in_half = tf.range(length) < half if direction == 0 else tf.range(length) >= half
        weights = tf.cast(padding_mask & in_half[None], top.dtype)[:, :, None]
        pooled = tf.reduce_sum(top * weights, 1) / tf.maximum(tf.reduce_sum(weights, 1), 1.0)
        position = half - 1 if direction == 0 else half
        return pooled[:, None], tf.reshape(position, [1])

    # ------------------------------------------------------------------ fit / evaluate
    def _loss_inputs(self, data):
        return (_ids_from_data(data),), {}

    def get_config(self):
        config = super().get_config()
        config.update(
            graph_predictor=keras.saving.serialize_keras_object(self.graph_predictor),
            context_length=self.context_length, decoder_layers=self.decoder_layers,
            num_positions=self.num_positions, objective=self.objective,
            composition=self.composition, dropout=self.dropout, seed=self.seed)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "graph_predictor" not in config:  # a file saved before the predictor was an argument
            return cls.from_sizes(**config)
        # Files of earlier versions kept the feature composition in the predictor's config.
        config.setdefault("composition", config["graph_predictor"].get("config", {}).get(
            "composition", "gru"))
        config["graph_predictor"] = keras.saving.deserialize_keras_object(
            config["graph_predictor"])
        return cls(**config)


@tf.function(jit_compile=True)
def context_cross_entropy(targets, logits):
    """Each decoded unit's cross-entropy, ``[...]`` float32, from ``logits [..., V]`` in any
    float dtype: computed in float32, as one XLA cluster even inside a step that is not
    compiled (the ``mixed_bfloat16`` step on a CPU), where it fuses the cast and the softmax into
    passes over the logits: half the time of TensorFlow's kernel and the cast on the pretraining
    step's ``[B S D, V]`` logits."""
    return keras.losses.sparse_categorical_crossentropy(
        targets, tf.cast(logits, tf.float32), from_logits=True)


def sample_positions(num_positions, length, seed_generator):
    """Every position of ``length`` (``num_positions`` None) or ``num_positions`` of them drawn
    uniformly with ``seed_generator``, ``[S]`` int32: the positions a pretrainer decodes."""
    if num_positions is None:
        return tf.range(length)
    return keras.random.randint((num_positions,), 0, length, dtype="int32", seed=seed_generator)


def _ids_from_data(data):
    if isinstance(data, dict):
        if "token_ids" not in data:
            raise ValueError(
                f"A dict batch for GlomoPretrainer needs a 'token_ids' entry; got {sorted(data)}.")
        return data["token_ids"]
    if isinstance(data, (list, tuple)):
        return data[0]
    return data


def replica_loss(model, loss):
    """What a custom ``train_step`` differentiates: ``loss`` plus the model's added losses
    (``add_loss``: the live-row hinge, regularisers), divided by the replicas in sync, so that
    the gradients summed over replicas by ``tf.distribute`` are those of the global batch."""
    if model.losses:
        loss = loss + tf.add_n(model.losses)
    return loss / tf.distribute.get_strategy().num_replicas_in_sync
