"""``GlomoTransfer``: pretrained latent graphs fused into any feature sequence."""

import keras
import tensorflow as tf

from glomo_tf import hparams, ops, presets
from glomo_tf.layers._common import float32_sigmoid
from glomo_tf.layers.graph_input import GraphInput, shape_of
from glomo_tf.layers.graph_mixture import GRAPH_MODES, GraphMixture
from glomo_tf.layers.graph_predictor import GraphPredictor, optional_graph_predictor


@keras.saving.register_keras_serializable(package="glomo_tf")
class GlomoTransfer(keras.layers.Layer):
    """Transfers graphs from a (frozen) graph predictor into a feature sequence ``H``.

    The graph predictor turns the token ids into graphs ``G = g(x)``; a :class:`GraphMixture` mixes
    each direction's candidates into ``M`` and computes ``M H``; the output is the paper's gated
    fusion

        [H ; W1 [H ; M_1 H ; ...] * sigmoid(W2 [H ; M_1 H ; ...])]

    over all mixtures of both directions (Section 2.3). ``H`` can be any sequence aligned with the
    tokens: embeddings, RNN states, another layer's output.

    Args:
        graph_predictor: a :class:`GraphPredictor` (usually pretrained), or None when the graphs are
            passed in directly or ``graph_mode="uniform"``.
        num_mixtures: int, mixtures per direction.
        conditioned: bool, mixture weights conditioned on ``h_t`` (True) or free parameters.
        include_products: bool, include the hierarchical products ``Lambda^l`` as candidates.
        graph_mode: ``"learned"`` (the predictor's graphs) or ``"uniform"`` (the sanity baseline:
            uniform weights over the admissible sources).
        units: int, width of the gated output; defaults to ``d * max(1, num_mixtures // 2)``
            (reference code).
        fine_tune: bool. False (default) freezes the graph predictor and runs it in inference
            mode; True trains it with the downstream model.
        dropout: float, dropout on the fused input ``[H ; MH ...]``.
        propagation: how ``M H`` is computed, ``"auto"`` (default), ``"chained"`` or
            ``"explicit"`` (see :class:`GraphMixture`; same result, different cost).
        top_k: None (default: the dense graphs) or int: keep the ``top_k`` heaviest sources of
            every receiving unit (:func:`glomo_tf.ops.top_k_sources`) and apply the mixture on
            that compact form by gather and weighted sum, ``O(T k d)`` per candidate instead of
            ``O(T^2 d)`` (with ``propagation="auto"`` from ``T >= 64 top_k`` on, as the dense
            graphs it holds below: see :class:`GraphMixture`). Exact when ``top_k`` is at least
            every row's number of sources. It saves time at long sequences only
            (``benchmarks/outputs/sparse_mixture.json``).
        graph_temperature: None (default: the graphs as the predictor gives them) or a float
            above 0: each row of the dense graphs raised to the power ``1 / graph_temperature``
            and renormalised (:func:`glomo_tf.ops.sharpen_graphs`; below 1 sharper, above 1
            flatter; with a softmax predictor exactly a softmax temperature), before ``top_k``.
            Applies to graphs the layer gets dense (from its predictor or as a dense input);
            graphs fed in the top-k or candidate form are used as given, so compute them with
            the same temperature (``graph_cache.compute_graphs(..., graph_temperature=...)``).
        fused_normalization: bool (default False): the frozen predictor normalises Eq. 1's scores
            in one XLA cluster (:meth:`GraphPredictor.call`'s option; the same graphs up to float
            round-off). It pays where batches keep their shapes (fixed windows, a fixed padded
            length): the cluster compiles once per batch shape, which costs more than it saves
            over a few epochs of length-bucketed batches.

    Call arguments:
        inputs: one of
            * ``[features, token_ids]``: ``H`` ``[batch, T, d]`` and int ids ``[batch, T]``;
            * ``[features, graphs]``: ``H`` and precomputed graphs, ``[batch, 2, L, K, T, T]`` or
              their candidate matrices ``{"candidates": ...}`` / ``{"packed_candidates": ...}``
              (:class:`~glomo_tf.layers.GraphInput`);
            * ``[features, indices, weights]``: ``H`` and precomputed graphs in the compact top-k
              form, both ``[batch, 2, L, K, T, k]`` (what :mod:`glomo_tf.data.graph_cache`
              computes once per sentence for a frozen predictor);
            * ``token_ids`` alone: ``H`` is then the predictor's own (frozen) embeddings, which makes
              the layer usable first in a ``keras.Sequential`` model.
        training: bool.
        mask: optional padding mask of ``H``; by default taken from ``token_ids != 0``.

    Graphs computed once: a frozen predictor's graphs depend only on the token ids, so a
    downstream ``fit`` need not recompute them every epoch:
    :class:`glomo_tf.models.GraphFedModel` trains a model built on token ids from
    cached graphs, by calling its layers with ``[features, graphs]`` (``fine_tune=True`` keeps
    the online path).

    Returns:
        ``[batch, T, d + units]``, masked like the tokens.

    Example:

    >>> import keras, numpy as np
    >>> predictor = GraphPredictor(vocabulary_size=50, hidden_dim=8, num_layers=2, num_heads=2)
    >>> ids = keras.Input((None,), dtype="int32")
    >>> h = keras.layers.Embedding(50, 6, mask_zero=True)(ids)
    >>> h = GlomoTransfer(predictor, num_mixtures=2)([h, ids])
    >>> logits = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h))
    >>> model = keras.Model(ids, logits)
    >>> model(np.array([[3, 4, 5, 0]], "int32")).shape
    TensorShape([1, 2])

    References:
        Yang et al., NeurIPS 2018, Sections 2.2 and 2.3.
    """

    #: The built-in presets whose predictor it loads, ``{name: metadata}``.
    presets = presets.BuiltinPresets()

    def __init__(self, graph_predictor=None, num_mixtures=1, conditioned=True,
                 include_products=True, graph_mode="learned", units=None, fine_tune=False,
                 dropout=0.0, propagation="auto", top_k=None, graph_temperature=None,
                 fused_normalization=False, **kwargs):
        super().__init__(**kwargs)
        hparams.check_choice("graph_mode", graph_mode, GRAPH_MODES)
        graph_predictor = optional_graph_predictor(graph_predictor)
        self.graph_predictor = graph_predictor
        self.fine_tune = bool(fine_tune)
        if graph_predictor is not None and not self.fine_tune:
            graph_predictor.trainable = False
        self.num_mixtures = int(num_mixtures)
        self.conditioned = bool(conditioned)
        self.include_products = bool(include_products)
        self.graph_mode = graph_mode
        self.units = units
        self.dropout = float(dropout)
        self.propagation = propagation
        if top_k is not None and int(top_k) < 1:
            raise ValueError(f"top_k must be None (dense graphs) or >= 1, got {top_k}.")
        self.top_k = None if top_k is None else int(top_k)
        self.graph_temperature = hparams.check_graph_temperature(graph_temperature)
        self.fused_normalization = bool(fused_normalization)
        self.mixture = GraphMixture(num_mixtures, conditioned, include_products, graph_mode,
                                    propagation=propagation, dtype=self.dtype_policy,
                                    name="mixture")
        self.fusion_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.supports_masking = True

    # ------------------------------------------------------------------ inputs
    def _split_inputs(self, inputs):
        """Returns ``(features, token_ids, graphs)``, ``graphs`` a :class:`GraphInput`; exactly
        one of the last two is None. Works on shapes too (``build``)."""
        if not isinstance(inputs, (list, tuple)) or not isinstance(inputs[0], (list, tuple)) \
                and not hasattr(inputs[0], "shape"):
            shape = shape_of(inputs)
            if len(shape) != 2:
                raise ValueError(
                    "A single input to GlomoTransfer must be token ids [batch, T] (features are "
                    f"then the predictor's embeddings); got shape {shape}. Pass "
                    "[features, token_ids] to transfer graphs onto your own features.")
            if self.graph_predictor is None:
                raise ValueError("GlomoTransfer called on token ids alone needs a "
                                 "graph_predictor.")
            return None, inputs, None
        if len(inputs) not in (2, 3):
            raise ValueError(
                "GlomoTransfer takes [features, token_ids], [features, graphs], "
                "[features, indices, weights] or token_ids; "
                f"got a list of {len(inputs)} tensors.")
        features, *rest = inputs
        if len(rest) == 1 and not isinstance(rest[0], dict) and len(shape_of(rest[0])) == 2:
            return features, rest[0], None
        return features, None, GraphInput.parse(
            rest[0] if len(rest) == 1 else tuple(rest),
            expected="GlomoTransfer's second input (third with top-k graphs) to be token ids "
                     "[batch, T] or graphs")

    @classmethod
    def from_preset(cls, preset, dtype=None, fine_tune=False, **kwargs):
        """A ``GlomoTransfer`` on the predictor of ``preset`` (a built-in name, see
        ``GlomoTransfer.presets``, a directory written by :meth:`save_to_preset`, or an
        ``hf://`` / ``kaggle://`` handle), read by :meth:`GraphPredictor.from_preset`; frozen
        unless ``fine_tune``. ``kwargs`` are the layer's other arguments. Feed it the preset's token
        ids (:meth:`glomo_tf.GlomoTokenizer.from_preset`).

        >>> transfer = GlomoTransfer.from_preset("glomo_books_en", num_mixtures=2)
        """
        predictor = GraphPredictor.from_preset(preset, trainable=fine_tune, dtype=dtype)
        return cls(graph_predictor=predictor, fine_tune=fine_tune, **kwargs)

    def save_to_preset(self, preset_dir, tokenizer=None, metadata=None, weights_dtype="float32"):
        """Writes the layer's graph predictor (fine-tuned or not) as a preset, with its
        ``tokenizer`` when given (:meth:`GraphPredictor.save_to_preset`); returns its path. The
        mixture's own weights are the downstream model's, saved with it (``model.save``)."""
        if self.graph_predictor is None:
            raise ValueError(f"{self.name} has no graph predictor to save (it reads given "
                             "graphs): save the predictor that made them.")
        return self.graph_predictor.save_to_preset(preset_dir, tokenizer=tokenizer,
                                                   metadata=metadata, weights_dtype=weights_dtype)

    def build(self, input_shape):
        features_shape, graphs_shape = self._build_graphs(input_shape)
        d = features_shape[-1]
        self._features_dim = d
        self.mixture.build(tuple(features_shape), graphs_shape)
        units = self.units or self._default_units(d)
        self._units = units
        fused_dim = d * (1 + 2 * self.num_mixtures)
        self.value_dense = keras.layers.Dense(units, dtype=self.dtype_policy, name="value")
        self.gate_dense = keras.layers.Dense(units, dtype=self.dtype_policy, name="gate")
        self.value_dense.build((None, None, fused_dim))
        self.gate_dense.build((None, None, fused_dim))
        self.built = True

    def _build_graphs(self, input_shape):
        """``(features_shape, graphs_shape)`` of the call's input shapes, the predictor built;
        raises ``ValueError`` when learned graphs have no source."""
        features_shape, ids_shape, graphs_shape = self._split_inputs(input_shape)
        if ids_shape is not None:
            graphs_shape = self._predictor_graphs_shape(ids_shape)
        if features_shape is None:
            features_shape = (ids_shape[0], ids_shape[1], self.graph_predictor.hidden_dim)
        if self.graph_mode == "learned" and graphs_shape is None:
            raise ValueError(
                "GlomoTransfer in 'learned' graph mode needs a graph_predictor or graphs as input.")
        if self.graph_predictor is not None and not self.graph_predictor.built:
            self.graph_predictor.build((None, None))
        return features_shape, graphs_shape

    def _predictor_graphs_shape(self, ids_shape):
        if self.graph_predictor is None:
            return None
        p = self.graph_predictor
        return (ids_shape[0], 2, p.num_layers, p.num_heads, ids_shape[1], ids_shape[1])

    # ------------------------------------------------------------------ call
    def call(self, inputs, training=None, mask=None):
        features, graphs, padding_mask = self._features_and_graphs(inputs, training, mask)
        features = tf.cast(features, self.compute_dtype)
        # [B, T, 2, mixtures, d], the mixtures' scales left to the fusion kernel (_gated)
        mixed = self.mixture(features, graphs=graphs, padding_mask=padding_mask, scaled=False)
        shape = tf.shape(features)
        mixed = tf.reshape(mixed, [shape[0], shape[1], 2 * self.num_mixtures * self._features_dim])
        fused = self.fusion_dropout(tf.concat([features, mixed], axis=-1), training=training)
        gated = self._gated(fused)
        output = tf.concat([features, gated], axis=-1)
        if padding_mask is not None:
            output = output * tf.cast(padding_mask, output.dtype)[:, :, None]
        return output

    def _features_and_graphs(self, inputs, training, mask):
        """``(features, graphs, padding_mask)`` of the call's inputs: ``H`` (the predictor's
        frozen embeddings when only token ids are given), the graphs as the mixture reads them
        (a :class:`GraphInput`: the predictor's, sharpened and cut to ``top_k`` as set, or the
        ones given; None in uniform mode), and the padding mask (None when neither the ids nor
        a mask say)."""
        features, token_ids, graphs = self._split_inputs(inputs)
        padding_mask = None
        if token_ids is not None:
            padding_mask = tf.not_equal(token_ids, 0)
        elif isinstance(mask, (list, tuple)) and mask[0] is not None:
            padding_mask = mask[0]
        if features is None:
            features = tf.stop_gradient(self.graph_predictor.embed(token_ids))
        if graphs is not None and graphs.form.endswith("candidates") and self.top_k is not None:
            raise ValueError(
                f"{self.name} keeps the top {self.top_k} sources of each unit (top_k): feed it "
                "the top-k form (graph_cache.compute_graphs(..., top_k=...)), not dense "
                "candidate matrices.")
        if self.graph_mode == "learned" and graphs is None:
            if self.graph_predictor is None:
                raise ValueError("GlomoTransfer needs a graph_predictor to turn token ids into "
                                 "graphs, or graphs as its second input.")
            predictor_training = training if self.fine_tune else False
            graphs = self.graph_predictor(
                token_ids, training=predictor_training,
                fused_normalization=self.fused_normalization or None)["graphs"]
            if not self.fine_tune:
                graphs = tf.stop_gradient(graphs)
            graphs = GraphInput("dense", (graphs,))
        if graphs is not None and graphs.form == "dense":
            dense = graphs.parts[0]
            if self.graph_temperature is not None:
                dense = ops.sharpen_graphs(dense, self.graph_temperature)
            graphs = (GraphInput("dense", (dense,)) if self.top_k is None
                      else GraphInput("top_k", ops.top_k_sources(dense, self.top_k)))
        return features, graphs, padding_mask

    def _gated(self, fused):
        """``value(fused) * sigmoid(gate(fused))`` of ``fused = [H ; M_1 H ; ...]`` with the
        mixtures unscaled, by one product with the two layers' kernels side by side and each
        mixture's rows times its scale: ``[N, f] @ [f, 2 units]`` forward and backward instead of
        two products of ``[f, units]`` and a multiply of every ``(M H)_t`` (the same sums; the
        two ``Dense`` layers and the mixture keep their weights)."""
        dtype = self.compute_dtype
        d = self._features_dim
        rows = tf.concat([tf.ones([d], dtype), tf.repeat(
            tf.reshape(tf.cast(self.mixture.scale, dtype), [-1]), d)], axis=0)
        kernel = tf.concat([tf.cast(self.value_dense.kernel, dtype),
                            tf.cast(self.gate_dense.kernel, dtype)], axis=1) * rows[:, None]
        bias = tf.concat([tf.cast(self.value_dense.bias, dtype),
                          tf.cast(self.gate_dense.bias, dtype)], axis=0)
        shape = tf.shape(fused)
        both = tf.matmul(tf.reshape(fused, [-1, kernel.shape[0]]), kernel) + bias
        value, gate = tf.split(both, 2, axis=-1)
        return tf.reshape(value * float32_sigmoid(gate),
                          tf.concat([shape[:-1], [self._units]], 0))

    def compute_mask(self, inputs, mask=None):
        features, token_ids, _ = self._split_inputs(inputs)
        if token_ids is not None:
            return keras.ops.not_equal(token_ids, 0)
        if isinstance(mask, (list, tuple)):
            return mask[0]
        return mask

    def compute_output_shape(self, input_shape):
        features_shape, ids_shape, _ = self._split_inputs(input_shape)
        if features_shape is None:
            features_shape = (ids_shape[0], ids_shape[1], self.graph_predictor.hidden_dim)
        d = features_shape[-1]
        return (features_shape[0], features_shape[1], d + (self.units or self._default_units(d)))

    def _default_units(self, features_dim):
        """The output's added width when ``units`` is None: ``d * max(1, num_mixtures // 2)``
        (reference code)."""
        return features_dim * max(1, self.num_mixtures // 2)

    def get_config(self):
        config = super().get_config()
        config.update({
            "graph_predictor": (keras.saving.serialize_keras_object(self.graph_predictor)
                                if self.graph_predictor is not None else None),
            "num_mixtures": self.num_mixtures,
            "conditioned": self.conditioned,
            "include_products": self.include_products,
            "graph_mode": self.graph_mode,
            "units": self.units,
            "fine_tune": self.fine_tune,
            "dropout": self.dropout,
            "propagation": self.propagation,
            "top_k": self.top_k,
            "graph_temperature": self.graph_temperature,
            "fused_normalization": self.fused_normalization,
        })
        return config
