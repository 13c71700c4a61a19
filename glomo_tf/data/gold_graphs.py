"""Gold graphs: the structure a dataset carries, as the graphs a transfer layer reads.

Where the data know their structure (ListOps' trees, the planted corpus' edges, a treebank's
dependency heads), the graphs a predictor should find are known too. Fed in place of a
predictor's graphs, through the same cache and the same fusion, they give the ceiling a learned
graph is climbing towards (``glomo transfer --variants gold_rnn``).

The graphs have one layer and one head, row-stochastic like a predictor's (``G[z, 0, 0, t, s]``
is the weight unit ``t`` puts on source ``s``; forward sources ``s < t``, backward ``s > t``):

* :func:`tree_graphs`: from each unit's parent, every unit's row spread evenly over its tree
  neighbours (its parent and its children) on that direction's side. For ListOps, whose
  parents come first, the forward graph points each unit at its parent operator and the
  backward graph each operator at its arguments;
* :func:`listops_chain_graphs`: a ListOps tree as its left-to-right composition (each argument
  takes the one before it, each ``]`` its list's last argument), for a composition that folds
  one argument per step (``glomo transfer --gold-form chain``);
* :func:`edge_graphs`: from given ``(receiver, source)`` edges per direction (the planted
  corpus' :meth:`~glomo_tf.data.PlantedCorpus.edges_of`);
* :func:`listops_parents`, :func:`dependency_parents`: the parents of a ListOps text's units and
  of a CoNLL-U sentence's units;
* :func:`gold_graph_cache`: a :class:`~glomo_tf.data.graph_cache.GraphCache` of such graphs in the
  compact top-k form (exact: ``k`` is the most sources any row has), for
  :func:`~glomo_tf.data.graph_cache.cached_training_batches` and
  :func:`~glomo_tf.data.graph_cache.cached_inference_batches`.

Example:

>>> tree_graphs([-1, 0, 0, 2])[:, 0, 0]  # [MAX 1 [MIN 2 ...: forward, then backward
array([[[0. , 0. , 0. , 0. ],
        [1. , 0. , 0. , 0. ],
        [1. , 0. , 0. , 0. ],
        [0. , 0. , 1. , 0. ]],
<BLANKLINE>
       [[0. , 0.5, 0.5, 0. ],
        [0. , 0. , 0. , 0. ],
        [0. , 0. , 0. , 1. ],
        [0. , 0. , 0. , 0. ]]], dtype=float32)
"""

import numpy as np

from glomo_tf.data.graph_cache import GraphCache


def tree_graphs(parents):
    """``[2, 1, 1, n, n]`` float32 graphs of a tree over ``n`` units given each unit's parent
    (``-1``: none): row ``t`` of the forward graph spreads its weight evenly over ``t``'s
    neighbours (parent and children) before ``t``, the backward graph over those after; a unit
    with none there has an all-zero row."""
    parents = np.asarray(parents, np.int64)
    n = len(parents)
    if np.any((parents < -1) | (parents >= n)) or np.any(parents == np.arange(n)):
        raise ValueError(f"parents must be -1 or the position of another of the {n} units, got "
                         f"{parents.tolist()[:20]}.")
    adjacent = np.zeros((n, n), bool)
    child = np.nonzero(parents >= 0)[0]
    adjacent[child, parents[child]] = adjacent[parents[child], child] = True
    return _spread(adjacent)


def listops_chain_graphs(parents):
    """``[2, 1, 2, n, n]`` float32 graphs of a ListOps tree read as its left-to-right
    composition, one source per row and head, every source before its receiver (the backward
    graphs are empty):

    * head 0, the *chain*: an operator's first argument takes the operator; each next argument
      takes the one before it, where an argument that is a nested list stands for its ``]``;
    * head 1, the *close*: each ``]`` takes its list's last argument (as above).

    So a list's running value moves along its arguments from its operator, and its ``]`` holds
    the list's value folded into the enclosing list's running value (the root's ``]``, the last
    unit, holds the expression's value): the composition of a tree model over the data's own
    binary trees, ``((([SM 4) 3) 9)``, one argument per step, where :func:`tree_graphs` hands
    an operator all of its arguments at once. A unit's value needs as many propagation steps as
    the longest chain of sources behind it (:func:`chain_depth`).

    Args:
        parents: each unit's parent (:func:`glomo_tf.data.listops.parents`): an argument's is
            its list's operator, a ``]``'s its own list's (a list's last child), -1 the root's.
    """
    parents = np.asarray(parents, np.int64)
    n = len(parents)
    if np.any((parents < -1) | (parents >= np.arange(n))):
        raise ValueError(f"a ListOps unit's parent is -1 or a unit before it; got "
                         f"{parents.tolist()[:20]}.")
    children = [[] for _ in range(n)]
    for unit, parent in enumerate(parents):
        if parent >= 0:
            children[parent].append(unit)
    graphs = np.zeros((2, 1, 2, n, n), np.float32)
    for operator in range(n):
        if not children[operator]:
            continue
        *arguments, closer = children[operator]
        previous = operator
        for argument in arguments:  # a nested list stands for its ']'
            standing = children[argument][-1] if children[argument] else argument
            graphs[0, 0, 0, standing, previous] = 1.0
            previous = standing
        graphs[0, 0, 1, closer, previous] = 1.0
    return graphs


def chain_depth(graphs):
    """The longest path of sources behind any unit of ``[2, L, K, n, n]`` forward graphs
    (:func:`listops_chain_graphs`): the propagation steps after which every unit has heard all
    of its sources' sources."""
    sources = np.asarray(graphs)[0].reshape(-1, *np.shape(graphs)[-2:]).max(0) > 0
    depth = np.zeros(sources.shape[0], np.int64)
    for unit in range(sources.shape[0]):  # forward sources come first: one pass in order
        behind = np.nonzero(sources[unit, :unit])[0]
        depth[unit] = 1 + depth[behind].max() if len(behind) else 0
    return int(depth.max(initial=0))


def edge_graphs(n, forward_edges=(), backward_edges=()):
    """``[2, 1, 1, n, n]`` float32 graphs of given ``(receiver, source)`` edges: each
    receiver's row spread evenly over its sources (forward edges need ``source < receiver``,
    backward ``source > receiver``)."""
    adjacent = np.zeros((2, n, n), bool)
    for z, edges in enumerate((forward_edges, backward_edges)):
        for receiver, source in np.asarray(edges, np.int64).reshape(-1, 2):
            if not (0 <= receiver < n and 0 <= source < n) or \
                    (source >= receiver if z == 0 else source <= receiver):
                raise ValueError(f"a {('forward', 'backward')[z]} edge ({receiver}, {source}) "
                                 f"must join two of the {n} units with its source "
                                 f"{('before', 'after')[z]} its receiver.")
            adjacent[z, receiver, source] = True
    graphs = np.stack([_spread(adjacent[z])[z] for z in range(2)])
    return graphs


def _spread(adjacent):
    """``[2, 1, 1, n, n]``: the rows of a bool ``[n, n]`` adjacency cut to each direction's side
    and normalised to sum to one (all-zero rows stay zero)."""
    n = adjacent.shape[-1]
    sides = np.stack([np.tril(adjacent, -1), np.triu(adjacent, 1)]).astype(np.float32)
    totals = sides.sum(-1, keepdims=True)
    graphs = np.divide(sides, totals, out=np.zeros_like(sides), where=totals > 0)
    return graphs.reshape(2, 1, 1, n, n)


def listops_parents(text):
    """The parents of a ListOps text's units (its tokens joined by spaces, as ``glomo transfer
    --dataset listops`` reads them): :func:`glomo_tf.data.listops.parents`."""
    from glomo_tf.data.listops import parents

    return parents(text.split())


def dependency_parents(sentence, spans=None):
    """The parents of a CoNLL-U sentence's units: each surface token's parent is the token
    writing the head of its first word whose head is written elsewhere (-1 for the root's
    token). ``spans`` (``[(start, end)]`` per token: its units) expands this to units: a token's
    first unit takes the token's parent (that token's first unit), its other units the first
    unit of their own token. Without ``spans`` a token is one unit."""
    parent_token = [-1] * len(sentence.tokens)
    for word, head in enumerate(sentence.heads):
        token = sentence.token_of[word]
        if head >= 0 and parent_token[token] < 0 and sentence.token_of[head] != token:
            parent_token[token] = sentence.token_of[head]
    if spans is None:
        return np.array(parent_token, np.int64)
    units = max((end for _, end in spans), default=0)
    parents = np.full(units, -1, np.int64)
    for token, (start, end) in enumerate(spans):
        if end <= start:
            continue
        head = parent_token[token]
        if head >= 0 and head < len(spans) and spans[head][1] > spans[head][0]:
            parents[start] = spans[head][0]
        parents[start + 1:end] = start
    return parents


def gold_graph_cache(graphs):
    """A :class:`~glomo_tf.data.graph_cache.GraphCache` of per-sentence graphs ``[2, L, K, n,
    n]`` (:func:`tree_graphs`, :func:`edge_graphs`) in the top-k form, ``k`` the most sources any
    row has (so it is exact), float32."""
    if not len(graphs):
        raise ValueError("gold_graph_cache needs the graphs of at least one sentence.")
    shape = tuple(int(x) for x in np.shape(graphs[0])[:3])
    k = max(1, max(int((np.asarray(g) > 0).sum(-1).max(initial=0)) for g in graphs))
    weights, indices, lengths = [], [], []
    for g in graphs:
        g = np.asarray(g, np.float32)
        if g.ndim != 5 or g.shape[:3] != shape or g.shape[-1] != g.shape[-2]:
            raise ValueError(f"gold_graph_cache expects graphs [2, L, K, n, n] of one [2, L, "
                             f"K] shape {shape}, got {g.shape}.")
        n = g.shape[-1]
        width = max(n, k)
        padded = np.pad(g, [(0, 0)] * 4 + [(0, width - n)])
        top = np.argsort(-padded, axis=-1, kind="stable")[..., :k]  # [2, L, K, n, k]
        weights.append(np.take_along_axis(padded, top, -1).ravel())
        indices.append(np.where(np.take_along_axis(padded, top, -1) > 0, top, 0).ravel())
        lengths.append(n)
    sizes = [len(w) for w in weights]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype("int64")
    index_type = "int16" if max(lengths) < 2 ** 15 else "int32"
    return GraphCache(np.concatenate(weights), np.concatenate(indices).astype(index_type),
                      offsets, np.array(lengths, "int64"), shape, k, k)
