"""A frozen graph predictor's graphs computed once, for downstream training.

A frozen :class:`~glomo_tf.GraphPredictor`'s graphs depend only on the token ids, so a downstream
``model.fit`` need not run the predictor on the same sentences every epoch. This module computes
them once per sentence, dense (``[2, L, K, n, n]``) or in the compact top-k form of
:func:`glomo_tf.ops.top_k_sources` (for every receiving unit the ``k`` heaviest sources and their
weights, ``[2, L, K, n, k]``), and feeds them to the model's :class:`~glomo_tf.GlomoTransfer`
layers in place of the online predictor:

* :func:`compute_graphs`: a :class:`GraphCache` of every sentence of an id array, each cut to
  its own length;
* :func:`cached_training_batches`: the training batches of
  :func:`glomo_tf.data.batching.bucketed_training_batches` (same shuffles, same buckets, same
  batches) with each batch's graphs, ``((ids, graphs...), labels)``, read from the cache;
* :func:`with_graphs`: a ``tf.data`` stage adding the graphs to batched ``(ids, labels)``
  (validation and test batches, whose order is fixed), then ``Dataset.cache()`` (in memory, or
  to a file), so they are computed on the first pass only;
* :class:`glomo_tf.models.GraphFedModel`: wraps a model built on token ids (for example
  :func:`glomo_tf.models.build_classifier`'s), sharing its layers and weights, and takes
  ``(ids, graphs...)``: its ``GlomoTransfer`` layers read the given graphs instead of running the
  predictor. Train it with ``fit``; the wrapped model is trained with it and keeps the online
  path (token ids in, the predictor run inside), to save and serve.

A dense cache may also hold each sentence's candidate matrices as the mixture reads them
(``candidates=True``: :meth:`glomo_tf.GraphMixture.candidate_matrices` with ``packed=True``, the
graphs and their hierarchical products laid out rows first, both directions in one matrix,
``[n, C, n]``), so a step only mixes them: no products, stacking or transposes of the graphs
every step. With the products they take ``(2 L - 1) / (2 L)`` of the graphs' memory (the graphs
themselves are among them, ``Lambda^1`` is the first layer's graphs, and the two directions share
each matrix); its batches carry ``{"packed_candidates": [b, T, C, T]}``.

A dense cache (the default) gives the online path's outputs and gradients up to float round-off,
and so does a top-k cache whose ``k`` covers every row's sources (``cache.exact``). A fine-tuned
predictor (``fine_tune=True``) changes every step: its layers refuse fed graphs and keep the
online path.

Example:

>>> import numpy as np, glomo_tf
>>> from glomo_tf.models import GraphFedModel, build_classifier
>>> predictor = glomo_tf.GraphPredictor(vocabulary_size=30, hidden_dim=8, num_layers=2,
...                                     num_heads=2)
>>> model = build_classifier(30, 2, "glomo_embeddings", graph_predictor=predictor,
...                          embedding_dim=8, rnn_units=4, attention_heads=2)
>>> ids = np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32")
>>> cache = compute_graphs(predictor, ids)
>>> fed = GraphFedModel(model)
>>> graphs = batch_of(cache, [0, 1], ids.shape[1])
>>> bool(np.allclose(fed((ids, graphs)), model(ids), atol=1e-5))
True
"""

import dataclasses
import functools

import numpy as np


@dataclasses.dataclass
class GraphCache:
    """The graphs of ``N`` sentences, each cut to its own ``n`` units.

    Sentence ``i``'s graphs are ``weights[offsets[i]:offsets[i + 1]]`` (in the dtype the
    predictor computes them in: float32, or bfloat16 under a ``mixed_bfloat16`` policy, the values
    the online path mixes, in half the memory and with no cast per step), reshaped to
    ``[2, L, K, n, n]`` (dense: ``k`` None) or ``[2, L, K, n, k]`` (top-k, with the source
    positions in ``indices``, int16 when they fit, else int32). ``support`` is the most sources
    with weight any row has: a top-k cache is exact when ``support <= k``; a dense one always is.
    ``candidates`` (dense caches made with ``candidates=True``, else None): each sentence's
    packed candidate matrices ``[n, C, n]`` (:meth:`glomo_tf.GraphMixture.candidate_matrices`
    with ``packed=True``), concatenated, ``num_candidates`` (``C``) per unit; the graphs are the
    first ``L K`` of them (the forward ones below the diagonal, the backward ones above), so
    such a cache keeps ``weights`` empty and :meth:`sentence` reads them there.
    """

    weights: np.ndarray
    indices: object  # np.ndarray, or None for a dense cache
    offsets: np.ndarray
    lengths: np.ndarray
    shape: tuple  # (2, L, K)
    k: object  # int, or None for a dense cache
    support: int
    candidates: object = None  # np.ndarray, or None
    num_candidates: int = 0

    @property
    def exact(self):
        return self.k is None or self.support <= self.k

    def __len__(self):
        return len(self.lengths)

    @property
    def nbytes(self):
        return int(self.weights.nbytes + (0 if self.indices is None else self.indices.nbytes)
                   + (0 if self.candidates is None else self.candidates.nbytes))

    @functools.cached_property
    def _candidate_offsets(self):
        """Where each sentence's candidates start: ``n C n`` values each."""
        return np.concatenate([[0], np.cumsum(self.num_candidates * self.lengths ** 2)])

    def subset(self, rows):
        """A :class:`GraphCache` of the sentences ``rows`` (in that order)."""
        rows = np.asarray(rows, "int64")
        parts = [np.arange(self.offsets[i], self.offsets[i + 1]) for i in rows]
        take = np.concatenate(parts) if parts else np.zeros([0], "int64")
        sizes = np.diff(self.offsets)[rows]
        candidates = None
        if self.candidates is not None:
            starts = self._candidate_offsets
            parts = [np.arange(starts[i], starts[i + 1]) for i in rows]
            candidates = self.candidates[np.concatenate(parts) if parts else
                                         np.zeros([0], "int64")]
        return GraphCache(self.weights[take], None if self.indices is None else
                          self.indices[take], np.concatenate([[0], np.cumsum(sizes)]),
                          self.lengths[rows], self.shape, self.k, self.support, candidates,
                          self.num_candidates)

    def _sentence_shape(self, i):
        n = int(self.lengths[i])
        return (*self.shape, n, n if self.k is None else self.k)

    def sentence(self, i):
        """Sentence ``i``'s graphs: dense ``[2, L, K, n, n]``, or the top-k pair
        ``(indices, weights)``, ``[2, L, K, n, k]`` each."""
        if self.candidates is not None:  # the first L K candidates, rows first, packed
            _, layers, heads = self.shape
            packed = self.sentence_candidates(i)[:, :layers * heads]  # [n, L K, n]
            n = packed.shape[0]
            heads_first = packed.transpose(1, 0, 2).reshape(layers, heads, n, n)
            below = np.tril(np.ones((n, n), bool), -1)
            return np.stack([np.where(below, heads_first, 0),
                             np.where(below.T, heads_first, 0)]).astype(heads_first.dtype)
        part = slice(self.offsets[i], self.offsets[i + 1])
        weights = self.weights[part].reshape(self._sentence_shape(i))
        if self.k is None:
            return weights
        return self.indices[part].reshape(weights.shape).astype("int32"), weights

    def sentence_candidates(self, i):
        """Sentence ``i``'s packed candidate matrices, ``[n, C, n]`` (caches made with
        ``candidates=True``)."""
        if self.candidates is None:
            raise ValueError("This graph cache holds no candidate matrices: compute it with "
                             "compute_graphs(..., candidates=True).")
        starts = self._candidate_offsets
        n = int(self.lengths[i])
        return self.candidates[starts[i]:starts[i + 1]].reshape(n, self.num_candidates, n)


def compute_graphs(predictor, token_ids, top_k=None, batch_size=256, candidates=False,
                   include_products=True, graph_temperature=None):
    """A :class:`GraphCache` of the predictor's graphs of every row of ``token_ids [N, T]``.

    The sentences go through the predictor (inference mode) in length-sorted batches, each cut
    to its longest sentence, and each sentence's graphs are kept over its own units. ``top_k``
    None (default) keeps the dense graphs (exact: the fed model computes what the online one
    does); an int keeps each row's ``top_k`` heaviest sources (:func:`glomo_tf.ops.top_k_sources`,
    exact when no row has more). ``candidates=True`` (dense caches only) keeps each sentence's
    packed candidate matrices instead (:meth:`glomo_tf.GraphMixture.candidate_matrices` with
    ``packed=True``, with the hierarchical products unless ``include_products=False``, as the
    transfer layers' own ``include_products``), so the mixtures read them instead of forming
    them every step; the predictor's graphs must hold no weight outside their direction's side
    of the diagonal (a :class:`glomo_tf.GraphPredictor`'s never do). ``graph_temperature``
    (None, or a float above 0) sharpens or flattens the graphs first
    (:func:`glomo_tf.ops.sharpen_graphs`), as ``GlomoTransfer(graph_temperature=...)`` does
    online.
    """
    import tensorflow as tf

    from glomo_tf import ops
    from glomo_tf.data.batching import sequence_lengths

    token_ids = np.asarray(token_ids, "int32")
    if top_k is not None and int(top_k) < 1:
        raise ValueError(f"top_k must be None (dense graphs) or >= 1, got {top_k}.")
    if candidates and top_k is not None:
        raise ValueError("candidates=True keeps dense candidate matrices: use it with "
                         "top_k=None (a dense cache).")
    lengths = np.maximum(sequence_lengths(token_ids), 1)
    order = np.argsort(lengths, kind="stable")
    run = tf.function(lambda ids: ops.sharpen_graphs(predictor(ids, training=False)["graphs"],
                                                     graph_temperature),
                      reduce_retracing=True)
    weights_of, indices_of, support = [None] * len(token_ids), [None] * len(token_ids), 0
    from glomo_tf.layers.graph_mixture import GraphMixture

    candidates_of = [None] * len(token_ids)
    form_candidates = tf.function(
        lambda g: GraphMixture.candidate_matrices(g, include_products, packed=True),
        reduce_retracing=True)
    for start in range(0, len(order), batch_size):
        chosen = order[start:start + batch_size]
        width = int(lengths[chosen].max())
        graphs = run(tf.constant(token_ids[chosen, :width]))  # [b, 2, L, K, w, w]
        support = max(support, int(tf.reduce_max(
            tf.reduce_sum(tf.cast(graphs > 0, tf.int32), axis=-1))))
        if candidates:
            try:  # packing checks the graphs' sides (candidate_matrices)
                formed = form_candidates(graphs).numpy()  # [b, w, C, w]
            except tf.errors.InvalidArgumentError:
                raise ValueError(
                    "candidates=True packs both directions' candidates into one matrix, which "
                    "needs graphs with no weight outside their direction's side of the "
                    "diagonal; this predictor's graphs have some: use candidates=False."
                ) from None
            for row, i in enumerate(chosen):
                candidates_of[i] = formed[row, :lengths[i], :, :lengths[i]].ravel()
            continue  # the graphs are the first L K candidates: not stored twice
        if top_k is None:
            weights = graphs.numpy()
        else:
            indices, weights = (x.numpy() for x in ops.top_k_sources(graphs, int(top_k)))
        for row, i in enumerate(chosen):
            n = lengths[i]
            if top_k is None:
                weights_of[i] = weights[row, :, :, :, :n, :n].ravel()
            else:
                weights_of[i] = weights[row, :, :, :, :n].ravel()
                indices_of[i] = indices[row, :, :, :, :n].ravel()
    shape = tuple(int(x) for x in graphs.shape[1:4]) if len(order) else (2, 0, 0)
    sizes = np.array([0 if w is None else len(w) for w in weights_of], "int64")
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype("int64")
    indices = None
    if top_k is not None:
        index_type = "int16" if token_ids.shape[1] < 2 ** 15 else "int32"
        indices = np.concatenate(indices_of).astype(index_type)
    dtype = tf.as_dtype(predictor.compute_dtype).as_numpy_dtype
    weights = (np.zeros([0], dtype) if candidates
               else np.concatenate(weights_of).astype(dtype))
    return GraphCache(weights, indices, offsets,
                      lengths.astype("int64"), shape, None if top_k is None else int(top_k),
                      support,
                      np.concatenate(candidates_of).astype(dtype) if candidates else None,
                      formed.shape[2] if candidates and len(order) else 0)


def batch_of(cache, rows, length):
    """The cached graphs of sentences ``rows`` as one batch padded (source 0, weight 0) to
    ``length`` units: dense ``[b, 2, L, K, length, length]`` (with candidates: the dict
    ``{"packed_candidates": [b, length, C, length]}``) or the top-k pair, both
    ``[b, 2, L, K, length, k]``."""
    def pad(x, dims):
        return np.pad(x, [(0, 0)] * (x.ndim - dims) + [(0, length - x.shape[d])
                                                         for d in range(x.ndim - dims, x.ndim)])

    parts = [cache.sentence(i) for i in rows]
    if cache.candidates is not None:
        def pad_candidates(x):  # [n, C, n] -> [length, C, length]
            n = x.shape[0]
            return np.pad(x, [(0, length - n), (0, 0), (0, length - n)])

        return _packed(np.stack([pad_candidates(cache.sentence_candidates(i)) for i in rows]))
    if cache.k is None:
        return np.stack([pad(x, 2) for x in parts])
    def pad_rows(x):  # [..., n, k] -> [..., length, k]: the rows padded, every row's k kept
        return np.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, length - x.shape[-2]), (0, 0)])

    return (np.stack([pad_rows(x[0]) for x in parts]), np.stack([pad_rows(x[1]) for x in parts]))


def _packed(matrices):
    """Packed candidate matrices ``[b, T, C, T]`` as the layers take them
    (:class:`~glomo_tf.layers.GraphInput`'s ``packed_candidates`` form)."""
    from glomo_tf.layers.graph_input import GraphInput
    return GraphInput("packed_candidates", (matrices,)).value()


def _elements(cache):
    """The cache as RaggedTensors ``[N, (size)]`` (weights, and indices for a top-k cache)."""
    import tensorflow as tf

    sizes = np.diff(cache.offsets)
    weights = tf.RaggedTensor.from_row_lengths(cache.weights, sizes)
    if cache.candidates is not None:
        return (tf.RaggedTensor.from_row_lengths(cache.candidates,
                                                 np.diff(cache._candidate_offsets)),)
    if cache.k is None:
        return (weights,)
    return tf.RaggedTensor.from_row_lengths(cache.indices, sizes), weights


def cached_training_batches(ids, labels, batch_size, seed, cache, dense=False):
    """:func:`glomo_tf.data.batching.bucketed_training_batches` with the cached graphs.

    The same per-epoch shuffles (same seed), length buckets and batches; each element is
    ``((ids [b, T], graphs...), labels)`` with the graphs of the batch's sentences read from
    ``cache`` (a :class:`GraphCache` of ``ids``): dense ``[b, 2, L, K, T, T]``, or top-k
    ``indices, weights``, both ``[b, 2, L, K, T, k]``; a cache with candidates gives
    ``((ids, {"packed_candidates": [b, T, C, T]}), labels)``. ``dense=True`` turns a top-k
    cache's graphs dense on the way (``((ids, graphs [b, 2, L, K, T, T]), labels)``): the
    compact form in memory, the dense one in the step (for short texts, where a dense step
    costs less than a gather).
    """
    import tensorflow as tf

    from glomo_tf import ops
    from glomo_tf.data.batching import sequence_lengths

    ids = np.asarray(ids)
    if len(cache) != len(ids):
        raise ValueError(f"The graph cache holds {len(cache)} sentences, the ids {len(ids)}: "
                         "compute the cache from the same ids.")
    lengths = sequence_lengths(ids)
    boundaries = sorted({int(b) for b in np.percentile(lengths, [20, 40, 60, 80]) if b > 1})
    dataset = tf.data.Dataset.from_tensor_slices(
        (ids.astype("int32"), np.asarray(labels, "int64"), lengths.astype("int32"),
         _elements(cache)))
    dataset = dataset.shuffle(len(ids), seed=seed, reshuffle_each_iteration=True)
    head = list(cache.shape)

    def cut(x, y, n, graphs):
        n = tf.maximum(n, 1)
        if cache.candidates is not None:
            return x[:n], _packed(tf.reshape(graphs[0], [n, cache.num_candidates, n])), y
        last = [n] if cache.k is None else [cache.k]
        graphs = tuple(tf.reshape(g, head + [n] + last) for g in graphs)
        if cache.k is not None:
            graphs = (tf.cast(graphs[0], tf.int32), graphs[1])
            if dense:
                graphs = (ops.densify_top_k(*graphs, n),)
        return x[:n], graphs, y

    dataset = dataset.map(cut)
    edges = [b + 1 for b in boundaries]
    dataset = dataset.bucket_by_sequence_length(
        lambda x, g, y: tf.shape(x)[0], bucket_boundaries=edges,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1))
    if cache.candidates is not None:
        dataset = dataset.map(lambda x, g, y: ((x, g), y))
    else:
        dataset = dataset.map(lambda x, g, y: ((x, *g), y))
    per_bucket = np.bincount(np.searchsorted(edges, np.maximum(lengths, 1), side="right"),
                             minlength=len(edges) + 1)
    batches = int(sum(-(-n // batch_size) for n in per_bucket))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(2)


def cached_inference_batches(ids, labels, batch_size, cache, dense=False):
    """:func:`glomo_tf.data.batching.length_sorted_batches` with the cached graphs: ``(dataset,
    order)``, the examples sorted by length and batched, each batch cut to its longest text,
    its elements ``((ids, graphs...), labels)`` as :func:`cached_training_batches`' (``order``
    maps the dataset's example order back to the input order; ``dense`` as theirs). For graphs
    that no predictor computes on the fly (:mod:`glomo_tf.data.gold_graphs`)."""
    import tensorflow as tf

    from glomo_tf.data.batching import sequence_lengths

    ids = np.asarray(ids)
    if len(cache) != len(ids):
        raise ValueError(f"The graph cache holds {len(cache)} sentences, the ids {len(ids)}: "
                         "compute the cache from the same ids.")
    lengths = np.maximum(sequence_lengths(ids), 1)
    order = np.argsort(lengths, kind="stable")
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = int(lengths[rows].max())
        graphs = batch_of(cache, rows, width)
        graphs = graphs if isinstance(graphs, tuple) else (graphs,)
        if dense and cache.k is not None:
            indices, weights = graphs
            graphs = ((np.eye(width, dtype=weights.dtype)[indices]
                       * weights[..., None]).sum(-2),)
        batches.append(((ids[rows, :width].astype("int32"), *graphs),
                        np.asarray(labels, "int64")[rows]))
    head = tuple(cache.shape)
    last = [None] if cache.k is None else [cache.k]
    if dense:
        last = [None]
    specs = ((tf.TensorSpec([None, None], tf.int32),
              *([tf.TensorSpec([None, *head, None, *last], tf.int32)]
                if cache.k and not dense else []),
              tf.TensorSpec([None, *head, None, *last], tf.as_dtype(cache.weights.dtype))),
             tf.TensorSpec([None], tf.int64))
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=specs)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))), order


def with_graphs(dataset, predictor, top_k=None, cache="", candidates=False,
                include_products=True, graph_temperature=None):
    """A ``tf.data`` stage: batched ``(ids, labels)`` -> ``((ids, graphs...), labels)``, the
    predictor's graphs of each batch in inference mode (dense, with ``candidates`` the dict
    ``{"packed_candidates": ...}`` of :meth:`glomo_tf.GraphMixture.candidate_matrices`, or with
    ``top_k`` the pair ``indices, weights``), then ``Dataset.cache(cache)`` (``""``: in memory;
    a path: files there), so the predictor runs on the first pass only. For datasets whose
    batches come in the same order every pass (validation, test); ``cache=None`` leaves the
    caching out. ``graph_temperature``: as :func:`compute_graphs`'."""
    import tensorflow as tf

    from glomo_tf import ops

    from glomo_tf.layers.graph_mixture import GraphMixture

    if candidates and top_k is not None:
        raise ValueError("candidates=True adds dense candidate matrices: use it with "
                         "top_k=None.")
    cardinality = int(dataset.cardinality())

    def add(ids, labels):
        graphs = ops.sharpen_graphs(predictor(ids, training=False)["graphs"], graph_temperature)
        if candidates:
            return (ids, _packed(GraphMixture.candidate_matrices(
                graphs, include_products, packed=True))), labels
        if top_k is None:
            return (ids, graphs), labels
        return (ids, *ops.top_k_sources(graphs, int(top_k))), labels

    dataset = dataset.map(add)
    if cache is not None:
        dataset = dataset.cache(cache)
    if cardinality >= 0:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(cardinality))
    return dataset
