"""Mixtures of transferred graphs applied to a feature sequence (GLoMo Section 2.2)."""

import keras
import numpy as np
import tensorflow as tf

from glomo_tf import hparams, ops
from glomo_tf.layers._common import transpose_rows
from glomo_tf.layers.graph_input import GraphInput

GRAPH_MODES = ("learned", "uniform")
PROPAGATIONS = ("auto", "chained", "explicit")
# The top-k form is applied by gather from T >= GATHER_MIN_RATIO * k on, as the dense graphs it
# holds below (benchmarks/sparse_mixture.py: with k = 8 the gather path catches up with the dense
# one at about T = 512 on a CPU core, forward and backward).
GATHER_MIN_RATIO = 64


def candidate_matrices(graphs, include_products=True, packed=False):
    """The distinct candidates of dense ``graphs [B, 2, L, K, T, T]`` as matrices, rows
    first: ``[B, 2, T, C, T]``, the heads of every layer then (``include_products``) the
    hierarchical products ``Lambda^2..Lambda^L`` (:func:`glomo_tf.ops.hierarchical_products`;
    ``Lambda^1`` is the first layer's heads, not repeated), ``C`` =
    :meth:`distinct_candidates`; fed as ``{"candidates": ...}``.

    ``packed=True``: both directions in one matrix per candidate, ``[B, T, C, T]``, the
    forward one below the diagonal and the backward one above, as they hold no weight
    elsewhere (forward sources ``s < t``, backward ``s > t``: the products keep it); fed as
    ``{"packed_candidates": ...}``, half the memory, mixed by one product per unit. For
    graphs that keep those sides (a :class:`~glomo_tf.GraphPredictor`'s): others raise
    ``ValueError`` (``InvalidArgumentError`` inside a ``tf.function``)."""
    graphs = tf.convert_to_tensor(graphs)
    if not packed:
        return _rows_first(_candidate_groups(graphs, include_products))
    kept = _directions_kept(graphs)
    message = ("Packed candidates need graphs with no weight on the other side of the "
               "diagonal (forward sources s < t, backward s > t, as a GraphPredictor's); "
               "these graphs have some: use packed=False.")
    if tf.executing_eagerly():
        if not bool(kept):
            raise ValueError(message)
    else:
        with tf.control_dependencies([tf.debugging.Assert(kept, [message])]):
            graphs = tf.identity(graphs)
    stacked = _stacked(_candidate_groups(graphs, include_products))  # [B, 2, C, T, X]
    return transpose_rows(stacked[:, 0] + stacked[:, 1], [0, 2, 1, 3])


def _fold(weights, layers, heads):
    """Mixture weights ``[..., 2 L K]`` onto the distinct candidates ``[..., (2 L - 1) K]``
    (:meth:`distinct_candidates`): each head of the first layer takes its own weight plus
    that of ``Lambda^1``, its duplicate."""
    # A 0/1 [2 L K, (2 L - 1) K] product: slices and their sum would cost a zero-filled
    # gradient of the whole weights per slice.
    fold = np.eye(2 * layers * heads, dtype=weights.dtype.as_numpy_dtype)
    fold[:, :heads] += fold[:, layers * heads:(layers + 1) * heads]
    fold = np.delete(fold, np.s_[layers * heads:(layers + 1) * heads], axis=1)
    shape = tf.shape(weights)
    folded = tf.matmul(tf.reshape(weights, [-1, fold.shape[0]]), fold)
    return tf.reshape(folded, tf.concat([shape[:-1], [fold.shape[1]]], 0))


def _mix_rows_first(stacked, weights, conditioned):
    """Candidates laid out ``[B, 2, T, C, X]`` mixed with ``weights``: ``[B, 2, T, m, X]``."""
    if not conditioned:
        return tf.matmul(weights[None, :, None], stacked)  # [1, 2, 1, m, C], broadcast
    return _per_unit_product(transpose_rows(weights, [0, 2, 1, 3, 4]), stacked)  # [B, 2, T, m, C]


def _per_unit_product(weights, candidates):
    """``weights [..., m, C] @ candidates [..., C, X]`` over the same leading axes, as one
    product with a single batch axis: oneDNN runs these many tiny products about a quarter
    faster, forward and backward, than with several batch axes."""
    shape = tf.shape(candidates)
    m, c = weights.shape[-2], candidates.shape[-2] or shape[-2]
    mixed = tf.matmul(tf.reshape(weights, [-1, m, c]), tf.reshape(candidates, [-1, c, shape[-1]]))
    return tf.reshape(mixed, tf.concat([shape[:-2], [m], shape[-1:]], 0))


def _mix_packed(packed, weights, conditioned):
    """Packed candidates ``[B, T, C, S]`` (:meth:`candidate_matrices` with ``packed=True``)
    mixed with ``weights``: ``[B, T, 2, mixtures, S]``, each direction's mixtures cut to its
    side of the diagonal. One ``[2 m, C] @ [C, S]`` product per receiving unit reads both
    directions' candidates at once, half the data of the unpacked form."""
    shape = tf.shape(packed)
    m = weights.shape[-2]
    if conditioned:  # [B, T, 2, m, C]
        mixed = _per_unit_product(
            tf.reshape(weights, [shape[0], shape[1], 2 * m, shape[2]]), packed)
    else:  # [2, m, C], broadcast by the product
        mixed = tf.matmul(tf.reshape(weights, [1, 1, 2 * m, shape[2]]), packed)
    mixed = tf.reshape(mixed, [shape[0], shape[1], 2, m, shape[3]])
    sides = tf.transpose(ops.direction_masks(shape[1], mixed.dtype), [1, 0, 2])  # [T, 2, S]
    return mixed * sides[None, :, :, None, :]


def _apply_mixed(mixed, features):
    """``M H`` of the mixed graphs ``[B, X, Y, m, S]`` (``[B, 2, T, ...]``, or ``[B, T, 2,
    ...]`` when packed): ``[B, X, Y, m, d]`` in the same layout (unscaled)."""
    shape = tf.shape(mixed)
    # One [2 T m, S] @ [S, d] product per example (an einsum over the same axes is lowered to
    # several times slower transposes and small products on a CPU).
    out = tf.matmul(tf.reshape(mixed, [shape[0], -1, shape[4]]), features)
    return tf.reshape(out, tf.concat([shape[:4], tf.shape(features)[-1:]], 0))


@keras.saving.register_keras_serializable(package="glomo_tf")
class GraphMixture(keras.layers.Layer):
    """Computes ``M H`` for mixed graphs ``M = sum_c m_c A_c``, per direction and mixture.

    The candidates ``A_c`` of a direction are every head of every layer ``G^l_k`` and, when
    ``include_products``, the hierarchical products ``Lambda^l_k = G^l_k Lambda^{l-1}_k``
    (``Lambda^1 = G^1``). The products are never formed: ``Lambda^l H`` is computed as the chain
    ``G^l (G^{l-1} (... H))``, which costs ``O(T^2 d)`` per candidate instead of ``O(T^3)``.
    The mixture weights are a softmax over candidates, either free parameters or conditioned on the
    features of the receiving position (``softmax(W h_t + b)``); each direction and mixture has a
    learned scale. Directions are mixed separately. ``graph_mode="uniform"`` replaces the graphs with
    uniform ones over the admissible sources (the paper's sanity baseline).

    Two exact ways compute ``M H``, chosen per call by ``propagation``:

    * ``"chained"``: every candidate applied to ``H`` (``G^l_k H`` and the chains), then mixed:
      about ``(2L - 1) K T^2 d`` multiply-adds per direction, ``T^2`` growth;
    * ``"explicit"``: the products ``Lambda^l_k`` formed as ``T x T`` matrices, mixed into ``M``,
      and ``M`` applied once: about ``(L - 1) K T^3 + m (C + d) T^2`` (``C`` the distinct
      candidates, :meth:`distinct_candidates`: ``Lambda^1`` is ``G^1``, mixed once with the sum
      of its two weights).
    * ``"auto"`` (default) takes whichever of the two counts is smaller for the call's ``T``
      (``tf.cond`` when ``T`` is only known at run time). For short sentences the explicit form
      is several times faster (it applies one mixed graph to ``H`` instead of ``2 L K``
      candidates); from a few hundred units on (``T`` above about ``2 d``) the chained one is.

    A frozen predictor's candidates can also be formed once, as the ``T x T`` matrices the
    explicit form mixes, laid out rows first: ``{"candidates": [batch, 2, T, C, T]}``, or with
    the two directions in one matrix (the forward one below the diagonal, the backward one
    above: graphs keep to those sides) ``{"packed_candidates": [batch, T, C, T]}``, half the
    memory (:meth:`candidate_matrices`; :mod:`glomo_tf.data.graph_cache` stores the packed form
    with ``candidates=True``). A step then only mixes them and applies the mixed graphs (no
    products, stacking or transposes of the graphs every step), with the explicit form's result.

    The graphs may also come in the compact top-k form ``(indices, weights)``, both
    ``[batch, 2, L, K, T, k]`` (:func:`glomo_tf.ops.top_k_sources`: the ``k`` heaviest sources of
    each receiving unit). The candidates are then applied by gather and weighted sum
    (:func:`glomo_tf.ops.propagate_top_k`, ``O(T k d)`` per candidate, the chains still applied as
    chains) with ``propagation="chained"``, as the dense graphs the form holds with
    ``"explicit"``, and with ``"auto"`` by gather from ``T >= 64 k`` on (:data:`GATHER_MIN_RATIO`:
    below it the dense products are faster on a CPU); every way gives the dense result on the
    graphs the form holds (exactly the dense graphs when ``k`` covers every row's sources).

    Args:
        num_mixtures: int, mixtures per direction.
        conditioned: bool, mixture weights conditioned on the receiving features (True) or free.
        include_products: bool, add the hierarchical products ``Lambda^l`` to the candidates.
        graph_mode: ``"learned"`` or ``"uniform"``.
        propagation: ``"auto"``, ``"chained"`` or ``"explicit"`` (see above); every choice gives
            the same result up to float round-off.

    Call arguments:
        features: ``H``, ``[batch, T, d]``.
        graphs: in any form of :class:`~glomo_tf.layers.GraphInput`: ``[batch, 2, L, K, T, T]``;
            the top-k form ``(indices, weights)``, both ``[batch, 2, L, K, T, k]``;
            ``{"candidates": [batch, 2, T, C, T]}`` or ``{"packed_candidates": [batch, T, C,
            T]}`` (ignored in uniform mode, may be None there).
        padding_mask: bool ``[batch, T]``; needed in uniform mode, optional otherwise.

    Returns:
        ``[batch, T, 2, num_mixtures, d]``: the mixed features ``(M H)_t`` of each direction.

    Example:

    >>> import numpy as np
    >>> mix = GraphMixture(num_mixtures=2)
    >>> H = np.random.rand(1, 4, 6).astype("float32")
    >>> G = np.tril(np.ones((4, 4), "float32"), -1)
    >>> G = np.broadcast_to(G / np.maximum(G.sum(-1, keepdims=True), 1), (1, 2, 3, 2, 4, 4))
    >>> tuple(mix(H, G).shape)
    (1, 4, 2, 2, 6)

    References:
        Yang et al., NeurIPS 2018, Section 2.2.
    """

    def __init__(self, num_mixtures=1, conditioned=True, include_products=True,
                 graph_mode="learned", propagation="auto", **kwargs):
        super().__init__(**kwargs)
        hparams.check_choice("graph_mode", graph_mode, GRAPH_MODES)
        hparams.check_choice("propagation", propagation, PROPAGATIONS)
        self.propagation = propagation
        if num_mixtures < 1:
            raise ValueError(f"num_mixtures must be >= 1, got {num_mixtures}.")
        self.num_mixtures = int(num_mixtures)
        self.conditioned = bool(conditioned)
        self.include_products = bool(include_products)
        self.graph_mode = graph_mode
        self.supports_masking = True

    def num_candidates(self, num_layers, num_heads):
        """The paper's candidates per direction, one mixture weight each: ``L K`` heads, and
        with ``include_products`` the ``L K`` products ``Lambda^l`` too."""
        if self.graph_mode == "uniform":
            return 1
        return num_layers * num_heads * (2 if self.include_products else 1)

    def distinct_candidates(self, num_layers, num_heads):
        """The distinct candidate matrices among :meth:`num_candidates`: ``Lambda^1 = G^1``, so
        with ``include_products`` the first layer's heads count once, ``(2 L - 1) K``. The
        mixtures are formed over these, each head of the first layer weighted by the sum of its
        two weights (the same sums as mixing the duplicates, a quarter less work at 2 layers)."""
        if self.graph_mode == "uniform":
            return 1
        return num_heads * (2 * num_layers - 1 if self.include_products else num_layers)

    def build(self, features_shape, graphs_shape=None, padding_mask_shape=None):
        d = features_shape[-1]
        if self.graph_mode == "learned":
            if graphs_shape is None:
                raise ValueError("A learned GraphMixture needs the graphs' shape to build.")
            graphs = GraphInput.parse(graphs_shape)
            # Given candidates only: no duplicates known to fold (_layers_heads None).
            self._layers_heads = graphs.layers_heads
            self._candidates = (graphs.candidates if self._layers_heads is None
                                else self.num_candidates(*self._layers_heads))
            if self.conditioned:
                self.weight_kernel = self.add_weight(
                    name="weight_kernel", shape=(d, 2, self.num_mixtures, self._candidates),
                    initializer="glorot_uniform")
            self.weight_logits = self.add_weight(
                name="weight_logits", shape=(2, self.num_mixtures, self._candidates),
                initializer="zeros")
        self.scale = self.add_weight(name="scale", shape=(2, self.num_mixtures), initializer="ones")
        self.built = True

    def mixture_weights(self, features):
        """Softmax weights over candidates: ``[batch, T, 2, mixtures, C]`` (or ``[2, mixtures, C]``)."""
        logits = tf.cast(self.weight_logits, self.compute_dtype)
        if self.conditioned:
            # einsum("btd,dzmc->btzmc") as one [B T, d] @ [d, 2 m C] product (TensorFlow's einsum
            # adds reshapes and copies around it, forward and backward)
            kernel = tf.cast(self.weight_kernel, self.compute_dtype)
            shape = tf.shape(features)
            flat = tf.matmul(tf.reshape(features, [-1, kernel.shape[0]]),
                             tf.reshape(kernel, [kernel.shape[0], -1]))
            logits = tf.reshape(flat, tf.concat([shape[:2], kernel.shape[1:]], 0)) + logits
        return tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)

    def call(self, features, graphs=None, padding_mask=None, mask=None, scaled=True):
        """``scaled=False`` leaves out the learned scales (``M H`` of the unscaled mixtures),
        for a caller that applies them itself, as :class:`GlomoTransfer` does on its fusion
        kernel's rows (fewer multiplies than on every ``(M H)_t``)."""
        features = tf.cast(features, self.compute_dtype)
        if padding_mask is None:
            padding_mask = mask
        scale = tf.cast(self.scale, self.compute_dtype)
        if self.graph_mode == "uniform":
            if padding_mask is None:
                padding_mask = tf.ones(tf.shape(features)[:2], tf.bool)
            uniform = ops.uniform_graphs(padding_mask, self.compute_dtype)  # [B, 2, T, T]
            mixed = tf.einsum("bzts,bsd->btzd", uniform, features)[:, :, :, None]
            if not scaled:
                shape = tf.shape(mixed)
                return tf.broadcast_to(mixed, tf.stack(
                    [shape[0], shape[1], 2, self.num_mixtures, shape[4]]))
            return mixed * scale[None, None, :, :, None]
        if graphs is None:
            raise ValueError("A learned GraphMixture needs graphs [batch, 2, L, K, T, T].")
        graphs = GraphInput.parse(graphs)
        weights = tf.cast(self.mixture_weights(features), self.compute_dtype)
        if graphs.form == "dense":
            mixed = self._dense(features, graphs.parts[0], weights)
        elif graphs.form == "top_k":
            mixed = self._from_top_k(features, graphs.parts, weights)
        else:
            packed, mixed = self._mix_given(graphs, weights)
            mixed = _apply_mixed(mixed, features)
            if not packed:  # packed: units first already
                mixed = transpose_rows(mixed, [0, 2, 1, 3, 4])
        return mixed * scale[None, None, :, :, None] if scaled else mixed

    def _mix_given(self, graphs, weights):
        """``(packed, mixed)``: the unscaled mixed graphs of given candidate matrices, the
        distinct ones (:meth:`candidate_matrices`) or all ``C`` of the mixture weights:
        ``[B, 2, T, mixtures, T]`` from ``{"candidates"}``, ``[B, T, 2, mixtures, T]`` from
        ``{"packed_candidates"}``."""
        distinct = (self._candidates if self._layers_heads is None
                    else self.distinct_candidates(*self._layers_heads))
        if graphs.candidates not in (distinct, self._candidates, None):
            counts = " or ".join(map(str, sorted({distinct, self._candidates})))
            layout = "[batch, 2, T, {}, T]" if graphs.form == "candidates" else "[batch, T, {}, T]"
            raise ValueError(
                f"{graphs.form} must be {layout.format(counts)} (GraphMixture.candidate_matrices "
                "with this mixture's include_products, from the same predictor); got shape "
                f"{graphs.shape}.")
        if graphs.candidates != self._candidates:
            weights = self._folded(weights)
        candidates = tf.cast(tf.convert_to_tensor(graphs.parts[0]), weights.dtype)
        if graphs.form == "candidates":
            return False, _mix_rows_first(candidates, weights, self.conditioned)
        return True, _mix_packed(candidates, weights, self.conditioned)

    candidate_matrices = staticmethod(candidate_matrices)

    def _folded(self, weights):
        """``weights`` onto the distinct candidates (:func:`_fold`) where products repeat the
        first layer's heads."""
        if not self.include_products or self._layers_heads is None:
            return weights
        return _fold(weights, *self._layers_heads)

    def _from_top_k(self, features, graphs, weights):
        """``M H`` (unscaled) of the top-k form: by gather, or as the dense graphs it holds
        (:meth:`_gather_is_cheaper`)."""
        indices, values = (tf.convert_to_tensor(part) for part in graphs)
        graphs = (indices, values)

        def densified():
            dense = ops.densify_top_k(indices, tf.cast(values, self.compute_dtype),
                                      tf.shape(features)[1])
            dense.set_shape(indices.shape[:-1] + [features.shape[1]])
            return self._dense(features, dense, weights)

        sparse = self._gather_is_cheaper(graphs, features)
        if isinstance(sparse, bool):
            return self._top_k(features, graphs, weights) if sparse else densified()
        return tf.cond(sparse, lambda: self._top_k(features, graphs, weights), densified)

    def _gather_is_cheaper(self, graphs, features):
        """For the top-k form: whether to apply it by gather (True) or as the dense graphs it
        holds (False): ``propagation="chained"`` always gathers, ``"explicit"`` never; ``"auto"``
        gathers from ``T >= GATHER_MIN_RATIO * k`` on (a bool, or a scalar tensor when ``T`` or
        ``k`` is known at run time only)."""
        if self.propagation != "auto":
            return self.propagation == "chained"
        k = graphs[0].shape[-1] or tf.shape(graphs[0])[-1]
        steps = features.shape[1] or tf.shape(features)[1]
        return steps >= GATHER_MIN_RATIO * k

    def _dense(self, features, graphs, weights):
        """``M H`` (unscaled) of dense graphs, by the call's propagation."""
        graphs = tf.cast(graphs, self.compute_dtype)
        if self.propagation == "auto":
            # A Python bool when T is known at trace time, a scalar tensor (tf.cond) otherwise.
            steps = graphs.shape[-1] or features.shape[1] or tf.shape(graphs)[-1]
            explicit = self.explicit_is_cheaper(steps, features.shape[-1], graphs.shape[2],
                                                graphs.shape[3])
        else:
            explicit = self.propagation == "explicit"
        if isinstance(explicit, bool):
            return (self._explicit if explicit else self._chained)(features, graphs, weights)
        return tf.cond(explicit, lambda: self._explicit(features, graphs, weights),
                       lambda: self._chained(features, graphs, weights))

    def explicit_is_cheaper(self, steps, width, num_layers, num_heads):
        """Whether forming the mixed graphs takes fewer multiply-adds than the chains, for
        ``steps`` units (an int or a scalar tensor), features of ``width``, ``num_layers`` layers of
        ``num_heads`` heads (per direction; the shared mixture-weight cost is left out)."""
        L, K, m, d = num_layers, num_heads, self.num_mixtures, width
        chains = (L - 1) * K if self.include_products else 0
        candidates = self.distinct_candidates(L, K)
        # chained: (L K + chains) T^2 d; explicit: chains T^3 + m (C + d) T^2 (both per direction).
        return chains * steps < (L * K + chains) * d - m * (candidates + d)

    def _chained(self, features, graphs, weights):
        """``M H`` from every candidate applied to ``H`` (``[B, T, 2, mixtures, d]``, unscaled)."""
        single, chained = ops.propagate(graphs, features)  # [B, 2, L, K, T, d] each
        # Lambda^1 H = G^1 H stays among the chains: cutting it would cost more (the gradient of
        # the cut) than mixing it saves
        candidates = [single, chained] if self.include_products else [single]
        return transpose_rows(self._mix_candidates(candidates, weights), [0, 2, 1, 3, 4])

    def _top_k(self, features, graphs, weights):
        """``M H`` from the compact form ``(indices, weights)``: gather + weighted sum."""
        indices, values = graphs
        values = tf.cast(values, self.compute_dtype)
        single, chained = ops.propagate_top_k(tf.cast(indices, tf.int32), values, features)
        candidates = [single, chained] if self.include_products else [single]
        return transpose_rows(self._mix_candidates(candidates, weights), [0, 2, 1, 3, 4])

    def _explicit(self, features, graphs, weights):
        """``M H`` from the mixed graphs formed as ``T x T`` matrices (unscaled)."""
        return transpose_rows(_apply_mixed(self._mix_graphs(graphs, weights), features),
                            [0, 2, 1, 3, 4])

    def _mix_graphs(self, graphs, weights):
        """The unscaled mixed graphs of the candidates' matrices, rows first:
        ``[B, 2, T, mixtures, T]``."""
        return self._mix_candidates(_candidate_groups(graphs, self.include_products), weights)

    def _mix_candidates(self, candidates, weights):
        """Mixes candidates in groups ``[B, 2, L_g, K, T, X]`` (the heads first, then the chains:
        all ``L``, or the distinct ones of layers 2..L with ``weights`` folded, :meth:`_fold`)
        with ``weights``: ``[B, 2, T, mixtures, X]``.

        The candidates are laid out ``[B, 2, T, C, X]`` and mixed by one batched product per
        receiving unit, ``[mixtures, C] @ [C, X]``: the same sums as
        ``einsum("btzmc,bzctx->btzmx")``, which TensorFlow lowers to about twice the time on a
        CPU (forward and backward, ``GraphMixture`` at the MR sizes).
        """
        stacked = _rows_first(candidates)
        if stacked.shape[3] != self._candidates:
            weights = self._folded(weights)
        return _mix_rows_first(stacked, weights, self.conditioned)

    def explicit_mixed_graphs(self, features, graphs=None, padding_mask=None):
        """The mixed graphs ``M`` themselves, ``[batch, 2, mixtures, T, T]``, for inspection.

        Forms the products explicitly (``O(T^3)``), in float32, whatever ``propagation`` says:
        meant for plots and checks.
        """
        features = tf.cast(features, tf.float32)
        if self.graph_mode == "uniform":
            if padding_mask is None:
                padding_mask = tf.ones(tf.shape(features)[:2], tf.bool)
            uniform = ops.uniform_graphs(padding_mask)[:, :, None]
            return uniform * tf.cast(self.scale, tf.float32)[None, :, :, None, None]
        weights = self.mixture_weights(features)
        graphs = GraphInput.parse(graphs)
        if graphs.form in ("candidates", "packed_candidates"):
            packed, mixed = self._mix_given(graphs, weights)
            if packed:  # [B, T, 2, m, S]
                mixed = transpose_rows(mixed, [0, 2, 1, 3, 4])
        else:
            dense = graphs.parts[0]
            if graphs.form == "top_k":
                dense = ops.densify_top_k(dense, tf.cast(graphs.parts[1], tf.float32),
                                          tf.shape(features)[1])
            mixed = self._mix_graphs(tf.cast(dense, tf.float32), weights)
        mixed = transpose_rows(mixed, [0, 1, 3, 2, 4])  # [B, 2, m, T, T]
        return mixed * tf.cast(self.scale, tf.float32)[None, :, :, None, None]

    def compute_output_shape(self, features_shape, graphs_shape=None, padding_mask_shape=None):
        return (features_shape[0], features_shape[1], 2, self.num_mixtures, features_shape[2])

    def compute_mask(self, features, graphs=None, padding_mask=None, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_mixtures": self.num_mixtures,
            "conditioned": self.conditioned,
            "include_products": self.include_products,
            "graph_mode": self.graph_mode,
            "propagation": self.propagation,
        })
        return config


def _candidate_groups(graphs, include_products):
    """The distinct candidate matrices of dense ``graphs`` in groups ``[B, 2, L_g, K, T, T]``: the
    heads, then (``include_products``) the hierarchical products ``Lambda^2..Lambda^L``."""
    groups = [graphs]
    if include_products and graphs.shape[2] != 1:
        groups.append(ops.hierarchical_products(graphs))
    return groups


def _stacked(groups):
    """Groups of candidates ``[B, 2, L_g, K, T, X]`` stacked ``[B, 2, C, T, X]`` (groups first,
    then layers, then heads along ``C``)."""
    shape = tf.shape(groups[0])
    return tf.concat([tf.reshape(group, [shape[0], 2, _static_product(group.shape[2:4]),
                                         shape[4], shape[5]])
                      for group in groups if group.shape[2] != 0], axis=2)


def _static_product(dims):
    """The product of ``dims`` when all are known (a static shape for what follows), else -1."""
    return -1 if None in dims else int(np.prod(dims))


def _rows_first(groups):
    """Groups of candidates ``[B, 2, L_g, K, T, X]`` laid out ``[B, 2, T, C, X]``: the layout the
    mixture weights multiply."""
    return transpose_rows(_stacked(groups), [0, 1, 3, 2, 4])


def _directions_kept(graphs):
    """Whether ``graphs [B, 2, L, K, T, T]`` hold no weight outside their direction's side."""
    outside = tf.logical_not(ops.direction_masks(tf.shape(graphs)[-1]))[None, :, None, None]
    return tf.reduce_all(tf.equal(tf.where(outside, graphs, tf.zeros_like(graphs)), 0))
