"""``SentencePretrainer``: self-supervised sentence encoders trained with noise-contrastive
estimation over in-batch negatives (the thesis' chapter 3): Quick Thoughts, Self Prediction and
Global-to-Local, as a ``keras.Model`` with ``fit()``."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.data.sentences import corrupt
from glomo_tf.hparams import (G2L_REDUCTIONS, SENTENCE_ENCODER, SENTENCE_NEIGHBOURS,
                              SENTENCE_OBJECTIVES, SENTENCE_PRETRAINER)
from glomo_tf.layers.graph_predictor import optional_graph_predictor
from glomo_tf.layers.related.sentence_encoder import SentenceEncoder
from glomo_tf.models.pretrainer import replica_loss

_P = SENTENCE_PRETRAINER
# More than the random draws of one training step (1 for the objectives, 4 per corruption).
DRAWS_PER_STEP = 64


@keras.saving.register_keras_serializable(package="glomo_tf")
class SentencePretrainer(keras.Model):
    """A source and a target :class:`SentenceEncoder` trained to pick out a sentence's views among
    the other sentences of the batch (Section 3.2 of the thesis).

    The similarity is the inner product ``sim(i, j) = i^T j``; the negatives of an example are the
    other examples of its batch (Section 3.3.2). The objectives:

    * ``"qt"``, Quick Thoughts (Eq. 3.3): ``h_src = Enc_src(S_src)`` must pick ``Enc_trg(S_trg)``
      of the sentence that follows it among the batch's targets: the cross-entropy of
      ``softmax_j(h_src,i . h_trg,j)`` at ``j = i``. With ``neighbours="both"`` the candidates are
      the batch's previous and next sentences and the target distribution is uniform over the
      source's own two neighbours (Logeswaran and Lee 2018's form); the data then holds
      ``previous`` too.
    * ``"sp"``, Self Prediction (Eq. 3.4): the source sentence corrupted twice, independently
      (:func:`glomo_tf.data.sentences.corrupt`: half the units chosen, of those 80% ``[MASK]``,
      10% a random unit, 10% kept; then each unit moved within the next ``shuffle_window = 3``);
      ``Enc_src`` of one corruption must pick ``Enc_trg`` of the other among the batch's.
    * ``"g2l"``, Global-to-Local (Eq. 3.5): the target encoder's per-position states go through
      a two-layer CNN (kernel 3, stride 1, ReLU between; padded positions zeroed before each
      convolution) to ``z_trg^i``; for every real position ``i`` of the next sentence,
      ``h_src`` must pick ``z_trg^i`` against every position of the batch's other targets. The
      loss sums over the positions (Eq. 3.5's ``sum_i``) and averages over the batch, plus
      ``l2_weight`` (1e-5, Section 3.3.2) times the mean squared norms of ``h_src`` and of the
      ``z_trg^i`` ("an L2-norm of both representations").

    With several objectives, each training batch samples ``objectives_per_batch`` of them
    (default two, the thesis' protocol) uniformly without replacement and minimises the sum of
    their losses; ``objectives_per_batch=None`` trains all on every batch. Evaluation computes
    every objective. ``loss`` is the summed loss; ``qt_loss``, ``sp_loss``, ``g2l_loss`` are the
    objectives' means over the batches that trained them.

    At test time a sentence is ``[Enc_src(s) ; Enc_trg(s)]`` (:meth:`encode`, and ``call``).

    Args:
        vocabulary_size: int, number of ids (0 is padding).
        mask_token_id: int, the id of ``[MASK]`` (:func:`glomo_tf.data.sentences.mask_id`).
        embedding_dim: the encoders' embedding size.
        units: the encoders' GRU size (each vector has ``2 * units``).
        objectives: some of ``("qt", "sp", "g2l")``.
        objectives_per_batch: int or None (all).
        neighbours: ``"next"`` or ``"both"``, Quick Thoughts' targets.
        l2_weight: float, G2L's penalty on the representations.
        g2l_reduction: ``"sum"`` (Eq. 3.5) or ``"mean"`` of G2L's loss over a target's positions.
        cnn_kernel_size: int, width of G2L's convolutions.
        select_rate: Self Prediction's corruption.
        mask_rate: Self Prediction's corruption.
        random_rate: Self Prediction's corruption.
        shuffle_window: Self Prediction's corruption.
        graph_predictor: None, or a frozen :class:`GraphPredictor` over the same vocabulary whose
            graphs feed both encoders through :class:`GlomoTransfer` (the target encoder gets
            a copy with the same weights).
        num_mixtures: int, the transfers' mixtures per direction.
        seed: int or None, seed of the objective sampling and the corruptions.

    Defaults: :data:`glomo_tf.hparams.SENTENCE_ENCODER` and
    :data:`glomo_tf.hparams.SENTENCE_PRETRAINER`. The thesis trains with Adam, learning rate 5e-4
    (``glomo sentence-pretrain``'s default).

    Example:

    >>> import numpy as np, keras
    >>> model = SentencePretrainer(vocabulary_size=40, mask_token_id=39, embedding_dim=8,
    ...                            units=8, seed=0)
    >>> model.compile(optimizer=keras.optimizers.Adam(5e-4))
    >>> ids = np.random.default_rng(0).integers(2, 39, size=(16, 7)).astype("int32")
    >>> history = model.fit({"source": ids[:-1], "target": ids[1:]}, batch_size=5, verbose=0)
    >>> model.encode(ids[:2]).shape
    TensorShape([2, 32])

    References:
        The thesis in ``papers/self-supervised-sentence-representation-thesis.txt``, Sections
        3.2-3.3; Logeswaran and Lee, ICLR 2018 (Quick Thoughts).
    """

    def __init__(self, vocabulary_size, mask_token_id, embedding_dim=SENTENCE_ENCODER[
                 "embedding_dim"], units=SENTENCE_ENCODER["units"],
                 objectives=_P["objectives"], objectives_per_batch=_P["objectives_per_batch"],
                 neighbours=_P["neighbours"], l2_weight=_P["l2_weight"],
                 g2l_reduction=_P["g2l_reduction"], cnn_kernel_size=_P["cnn_kernel_size"], select_rate=_P["select_rate"],
                 mask_rate=_P["mask_rate"], random_rate=_P["random_rate"],
                 shuffle_window=_P["shuffle_window"], graph_predictor=None, num_mixtures=1,
                 seed=None, **kwargs):
        super().__init__(**kwargs)
        objectives = tuple(objectives)
        unknown = [o for o in objectives if o not in SENTENCE_OBJECTIVES]
        if not objectives or unknown or len(set(objectives)) != len(objectives):
            raise ValueError(f"objectives must be distinct names among {SENTENCE_OBJECTIVES}, "
                             f"got {objectives}.")
        if objectives_per_batch is not None and not 1 <= objectives_per_batch:
            raise ValueError(f"objectives_per_batch must be >= 1 or None (all), got "
                             f"{objectives_per_batch}.")
        hparams.check_choice("neighbours", neighbours, SENTENCE_NEIGHBOURS)
        if not 2 <= mask_token_id < vocabulary_size:
            raise ValueError(f"mask_token_id must be an id of the vocabulary other than <pad> and "
                             f"<unk> (2..{vocabulary_size - 1}), got {mask_token_id}.")
        if not (0 <= select_rate <= 1 and 0 <= mask_rate and 0 <= random_rate
                and mask_rate + random_rate <= 1):
            raise ValueError("select_rate must be in [0, 1] and mask_rate + random_rate <= 1.")
        if l2_weight < 0 or shuffle_window < 0 or cnn_kernel_size < 1:
            raise ValueError("l2_weight and shuffle_window must be >= 0, cnn_kernel_size >= 1.")
        hparams.check_choice("g2l_reduction", g2l_reduction, G2L_REDUCTIONS)
        graph_predictor = optional_graph_predictor(graph_predictor)
        self.vocabulary_size = int(vocabulary_size)
        self.mask_token_id = int(mask_token_id)
        self.embedding_dim = int(embedding_dim)
        self.units = int(units)
        self.objectives = objectives
        self.objectives_per_batch = (None if objectives_per_batch is None
                                     or objectives_per_batch >= len(objectives)
                                     else int(objectives_per_batch))
        self._objectives_per_batch_arg = objectives_per_batch
        self.neighbours = neighbours
        self.l2_weight = float(l2_weight)
        self.g2l_reduction = g2l_reduction
        self.cnn_kernel_size = int(cnn_kernel_size)
        self.select_rate, self.mask_rate = float(select_rate), float(mask_rate)
        self.random_rate, self.shuffle_window = float(random_rate), int(shuffle_window)
        self.graph_predictor = graph_predictor
        self.num_mixtures = int(num_mixtures)
        self.seed = seed
        encoder_args = dict(vocabulary_size=vocabulary_size, embedding_dim=embedding_dim,
                            units=units, num_mixtures=num_mixtures, dtype=self.dtype_policy)
        self.source_encoder = SentenceEncoder(graph_predictor=graph_predictor,
                                              name="source_encoder", **encoder_args)
        self.target_encoder = SentenceEncoder(graph_predictor=_copy(graph_predictor),
                                              return_sequences=True, name="target_encoder",
                                              **encoder_args)
        width = 2 * self.units
        self.g2l_cnn = None
        if "g2l" in objectives:
            self.g2l_cnn = [
                keras.layers.Conv1D(width, self.cnn_kernel_size, padding="same",
                                    activation="relu", dtype=self.dtype_policy, name="g2l_conv1"),
                keras.layers.Conv1D(width, self.cnn_kernel_size, padding="same",
                                    dtype=self.dtype_policy, name="g2l_conv2")]
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.objective_trackers = {o: keras.metrics.Mean(name=f"{o}_loss") for o in objectives}

    # ------------------------------------------------------------------ building
    def build(self, input_shape=None):
        self.source_encoder.build((None, None))
        self.target_encoder.build((None, None))
        for conv in self.g2l_cnn or []:
            conv.build((None, None, 2 * self.units))
        self.built = True

    def get_build_config(self):
        # Always present, also for a model built by its first call rather than by build(), so
        # that loading builds every sub-layer before reading the weights.
        return {"input_shape": None}

    def build_from_config(self, config):
        self.build()

    @property
    def metrics(self):
        return [self.loss_tracker] + [self.objective_trackers[o] for o in self.objectives]

    # ------------------------------------------------------------------ encoding
    def call(self, token_ids, training=False):
        """``[Enc_src(s) ; Enc_trg(s)]`` ``[batch, 4 * units]`` of token ids ``[batch, T]``."""
        return self.encode(token_ids, training=training)

    def encode(self, token_ids, training=False, pooling="final"):
        """The test-time sentence vector ``[Enc_src(s) ; Enc_trg(s)]`` (Section 3.2.4); each
        encoder's vector pooled by ``pooling`` (:class:`~glomo_tf.layers.SentenceEncoder`'s:
        ``"final"``, the thesis', ``"max"`` or ``"mean"`` over the states)."""
        source = self.source_encoder(token_ids, training=training, pooling=pooling)
        target = self.target_encoder(token_ids, training=training, pooling=pooling)["vector"]
        return tf.concat([source, target], axis=-1)

    # ------------------------------------------------------------------ objectives
    def corrupt(self, token_ids):
        """One Self Prediction corruption of a batch (new randomness at every call)."""
        return corrupt(token_ids, self.mask_token_id, self.vocabulary_size, self.seed_generator,
                       self.select_rate, self.mask_rate, self.random_rate, self.shuffle_window)

    def quick_thoughts_loss(self, source_vectors, target_vectors, previous_vectors=None):
        """Eq. 3.3 over in-batch negatives: ``[B, 2u]`` sources and next-sentence targets (and
        previous-sentence targets for ``neighbours="both"``); the batch mean."""
        if previous_vectors is None:
            return nce_loss(source_vectors, target_vectors)
        candidates = tf.concat([previous_vectors, target_vectors], axis=0)  # [2B, 2u]
        logits = _scores(source_vectors, candidates)  # [B, 2B]
        log_p = tf.nn.log_softmax(logits, axis=-1)
        batch = tf.shape(source_vectors)[0]
        rows = tf.range(batch)
        own = tf.stack([tf.gather(log_p, rows, axis=1, batch_dims=1),
                        tf.gather(log_p, rows + batch, axis=1, batch_dims=1)], axis=1)
        return -tf.reduce_mean(0.5 * tf.reduce_sum(own, axis=1))

    def self_prediction_loss(self, source_ids, training=False):
        """Eq. 3.4: two independent corruptions of each source sentence, encoded by ``Enc_src``
        and ``Enc_trg``; the batch mean."""
        first, second = self.corrupt(source_ids), self.corrupt(source_ids)
        return nce_loss(self.source_encoder(first, training=training),
                        self.target_encoder(second, training=training)["vector"])

    def local_features(self, target_states, target_ids):
        """G2L's ``z_trg^i``: the two-layer CNN over the target's states ``[B, T, 2u]``."""
        mask = tf.cast(tf.not_equal(target_ids, 0), target_states.dtype)[:, :, None]
        z = target_states * mask
        for conv in self.g2l_cnn:
            z = conv(z) * tf.cast(mask, self.compute_dtype)
        return z

    def global_to_local_loss(self, source_vectors, target_states, target_ids):
        """Eq. 3.5 plus the L2 penalty: ``h_src`` ``[B, 2u]`` against every position of the
        batch's targets; summed over the real positions, averaged over the batch."""
        z = self.local_features(target_states, target_ids)
        return global_to_local_nce(source_vectors, z, tf.not_equal(target_ids, 0),
                                   self.l2_weight, self.g2l_reduction)

    def objective_losses(self, data, training=False, active=None):
        """A dict ``objective -> loss`` for a batch ``{"source", "target"[, "previous"]}``.

        ``active``: optional dict ``objective -> bool tensor``; an inactive objective's loss is
        0 and, when neither ``qt`` nor ``g2l`` is active, the pair's encoders do not run."""
        data = _batch_columns(data, self.neighbours, self.objectives)
        source, target = data["source"], data.get("target")
        losses = {}
        pair_objectives = [o for o in ("qt", "g2l") if o in self.objectives]

        def pair_losses():
            h_src = self.source_encoder(source, training=training)
            out = self.target_encoder(target, training=training)
            found = []
            if "qt" in pair_objectives:
                previous = None
                if self.neighbours == "both":
                    previous = self.target_encoder(data["previous"], training=training)["vector"]
                found.append(self.quick_thoughts_loss(h_src, out["vector"], previous))
            if "g2l" in pair_objectives:
                found.append(self.global_to_local_loss(h_src, out["states"], target))
            return tuple(tf.cast(x, tf.float32) for x in found)

        if pair_objectives:
            if active is None:
                values = pair_losses()
            else:
                run = tf.reduce_any(tf.stack([active[o] for o in pair_objectives]))
                values = tf.cond(run, pair_losses,
                                 lambda: tuple(tf.zeros([]) for _ in pair_objectives))
            losses.update(zip(pair_objectives, values))
        if "sp" in self.objectives:
            if active is None:
                losses["sp"] = tf.cast(self.self_prediction_loss(source, training), tf.float32)
            else:
                losses["sp"] = tf.cond(
                    active["sp"],
                    lambda: tf.cast(self.self_prediction_loss(source, training), tf.float32),
                    lambda: tf.zeros([]))
        return losses

    def sample_objectives(self):
        """``objective -> bool tensor``: ``objectives_per_batch`` of them, uniformly without
        replacement (all when it is None)."""
        count = len(self.objectives)
        if self.objectives_per_batch is None:
            return {o: tf.constant(True) for o in self.objectives}
        keys = keras.random.uniform((count,), seed=self.seed_generator)
        ranks = tf.argsort(tf.argsort(keys))
        return {o: ranks[i] < self.objectives_per_batch for i, o in enumerate(self.objectives)}

    # ------------------------------------------------------------------ fit / evaluate
    def train_step(self, data):
        self._seed_from_step()
        active = self.sample_objectives()
        # Objectives not drawn are skipped with tf.cond; XLA cannot compile the GRUs' loops
        # inside a cond, so a jit-compiled step computes them all and zeroes those not drawn.
        skip = None if getattr(self, "jit_compile", False) else active
        with tf.GradientTape() as tape:
            losses = self.objective_losses(data, training=True, active=skip)
            loss = tf.add_n([losses[o] * tf.cast(active[o], tf.float32)
                             for o in self.objectives])
            scaled = replica_loss(self, loss)
        variables = self.trainable_variables
        grads = tape.gradient(scaled, variables)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        self.optimizer.apply(grads, variables)
        return self._update_metrics(loss, losses, active)

    def _seed_from_step(self):
        """Makes the step's random draws (objectives, corruptions) a function of the seed and the
        optimizer's step alone, so a run resumed from a checkpoint draws what an uninterrupted
        run draws: the generator's counter is set to ``DRAWS_PER_STEP * step``."""
        state = self.seed_generator.state
        step = tf.cast(self.optimizer.iterations, state.dtype) * DRAWS_PER_STEP
        state.assign(tf.stack([state[0], step]))

    def test_step(self, data):
        losses = self.objective_losses(data, training=False)
        loss = tf.add_n([losses[o] for o in self.objectives])
        return self._update_metrics(loss, losses, None)

    def _update_metrics(self, loss, losses, active):
        self.loss_tracker.update_state(loss)
        for o in self.objectives:  # an objective's mean over the batches that trained it
            weight = 1.0 if active is None else tf.cast(active[o], tf.float32)
            self.objective_trackers[o].update_state(losses[o], sample_weight=weight)
        return {m.name: m.result() for m in self.metrics}

    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size, mask_token_id=self.mask_token_id,
            embedding_dim=self.embedding_dim, units=self.units, objectives=list(self.objectives),
            objectives_per_batch=self._objectives_per_batch_arg, neighbours=self.neighbours,
            l2_weight=self.l2_weight, g2l_reduction=self.g2l_reduction,
            cnn_kernel_size=self.cnn_kernel_size,
            select_rate=self.select_rate, mask_rate=self.mask_rate,
            random_rate=self.random_rate, shuffle_window=self.shuffle_window,
            graph_predictor=(None if self.graph_predictor is None
                             else keras.saving.serialize_keras_object(self.graph_predictor)),
            num_mixtures=self.num_mixtures, seed=self.seed)
        return config


# ---------------------------------------------------------------------------------- the losses
def _scores(queries, candidates):
    """Inner products ``[B, C]`` in float32."""
    return tf.matmul(tf.cast(queries, tf.float32), tf.cast(candidates, tf.float32),
                     transpose_b=True)


def nce_loss(queries, positives):
    """Eqs. 3.3-3.4 with in-batch negatives: row ``i`` of ``queries`` ``[B, d]`` must pick row
    ``i`` of ``positives`` ``[B, d]`` among all of them; the mean cross-entropy."""
    logits = _scores(queries, positives)
    labels = tf.range(tf.shape(logits)[0])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


def global_to_local_nce(queries, local, valid, l2_weight=0.0, reduction="sum"):
    """Eq. 3.5 with in-batch negatives, plus the L2 penalty.

    Args:
        queries: ``h_src`` ``[B, d]``.
        local: ``z_trg`` ``[B, T, d]``.
        valid: bool ``[B, T]``, the real positions of the targets.
        l2_weight: the coefficient of ``mean_b |h_src,b|^2 + mean_{real (b, i)} |z_b^i|^2``.
        reduction: ``"sum"`` over a target's real positions (Eq. 3.5), or their ``"mean"``
            (the loss then weighs as much as one Quick Thoughts choice, whatever the length).

    For source ``b`` and each real position ``i`` of its target, the candidates are
    ``z_b^i`` and every real position of the other targets of the batch (the other positions of
    its own target are neither positive nor negative). Returns the batch mean of the sum (or
    mean) over positions of ``-log softmax``.
    """
    queries = tf.cast(queries, tf.float32)
    local = tf.cast(local, tf.float32)
    valid_f = tf.cast(valid, tf.float32)
    scores = tf.einsum("bd,ctd->bct", queries, local)  # [B (source), B (target), T]
    batch = tf.shape(scores)[0]
    own = tf.eye(batch, dtype=tf.bool)[:, :, None]
    negative = tf.logical_and(tf.logical_not(own), valid[None, :, :])
    very_low = tf.fill(tf.shape(scores), -1e9)
    negatives = tf.reshape(tf.where(negative, scores, very_low), [batch, -1])
    negative_lse = tf.reduce_logsumexp(negatives, axis=1)  # [B]
    positive = tf.linalg.diag_part(tf.transpose(scores, [2, 0, 1]))  # [T, B]
    positive = tf.transpose(positive)  # [B, T]: scores[b, b, i]
    log_denominator = tf.reduce_logsumexp(
        tf.stack([positive, tf.broadcast_to(negative_lse[:, None], tf.shape(positive))]), axis=0)
    per_position = (log_denominator - positive) * valid_f
    per_target = tf.reduce_sum(per_position, axis=1)
    if reduction == "mean":
        per_target = per_target / tf.maximum(tf.reduce_sum(valid_f, axis=1), 1.0)
    loss = tf.reduce_mean(per_target)
    if l2_weight:
        source_norm = tf.reduce_mean(tf.reduce_sum(tf.square(queries), axis=-1))
        local_norm = tf.reduce_sum(tf.reduce_sum(tf.square(local), axis=-1) * valid_f) / \
            tf.maximum(tf.reduce_sum(valid_f), 1.0)
        loss = loss + l2_weight * (source_norm + local_norm)
    return loss


def _batch_columns(data, neighbours, objectives):
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], dict):
        data = data[0]  # (x,) or (x, None, None) from Keras's data adapters
    if not isinstance(data, dict) or "source" not in data:
        raise ValueError("SentencePretrainer trains on dict batches {'source': ids, 'target': "
                         "ids} of consecutive sentences (glomo_tf.data.sentences); got "
                         f"{type(data).__name__}.")
    needs_target = any(o in objectives for o in ("qt", "g2l"))
    if needs_target and "target" not in data:
        raise ValueError("the objectives qt and g2l need the next sentence: a 'target' entry.")
    if "qt" in objectives and neighbours == "both" and "previous" not in data:
        raise ValueError("neighbours='both' needs the previous sentence too: a 'previous' "
                         "entry (glomo_tf.data.sentences.consecutive_sentences(..., 'both')).")
    return data


def _copy(predictor):
    """A GraphPredictor with the same config and weights (or None)."""
    if predictor is None:
        return None
    if not predictor.built:
        predictor.build((None, None))
    clone = type(predictor).from_config(predictor.get_config())
    clone.build((None, None))
    clone.set_weights(predictor.get_weights())
    return clone
