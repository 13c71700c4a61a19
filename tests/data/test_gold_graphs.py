"""Gold graphs (the data's own structure) and the batches that feed them: against loops over the
edges, the ListOps parents and a planted corpus' edges."""

import numpy as np
import pytest

from glomo_tf.data import gold_graphs as gold
from glomo_tf.data.conllu import DependencySentence
from glomo_tf.data.graph_cache import cached_inference_batches, cached_training_batches
from glomo_tf.data.planted import generate_planted_corpus


def loop_tree_graphs(parents):
    """Reference: each row over the unit's parent and children on that side, by loops."""
    n = len(parents)
    g = np.zeros((2, n, n))
    for t in range(n):
        neighbours = {int(parents[t])} - {-1} | {c for c in range(n) if parents[c] == t}
        for z, side in enumerate((lambda s: s < t, lambda s: s > t)):
            chosen = sorted(s for s in neighbours if side(s))
            for s in chosen:
                g[z, t, s] = 1.0 / len(chosen)
    return g


def densify(indices, weights, n):
    """Top-k ``[..., rows, k]`` -> dense ``[..., rows, n]``, every pair's weight added in."""
    indices = np.asarray(indices, np.int64)
    return (np.eye(n)[indices] * np.asarray(weights)[..., None]).sum(-2)


def test_listops_tree_graphs_point_at_parents_forward_and_arguments_backward():
    text = "[MAX 2 [MIN 3 4 ] 9 ]"
    parents = gold.listops_parents(text)
    assert parents.tolist() == [-1, 0, 0, 2, 2, 2, 0, 0]
    graphs = gold.tree_graphs(parents)
    assert graphs.shape == (2, 1, 1, 8, 8) and graphs.dtype == np.float32
    np.testing.assert_allclose(graphs[:, 0, 0], loop_tree_graphs(parents))
    # The root's backward row spreads over its arguments 2, [MIN and 9 and its ].
    np.testing.assert_allclose(graphs[1, 0, 0, 0], [0, .25, .25, 0, 0, 0, .25, .25])
    assert np.all(graphs[0, 0, 0, 1:].argmax(-1) == parents[1:])


def test_tree_graphs_of_a_tree_with_heads_on_both_sides():
    parents = np.array([1, 3, 1, -1, 3, 4])  # a dependency tree: heads left and right
    np.testing.assert_allclose(gold.tree_graphs(parents)[:, 0, 0], loop_tree_graphs(parents))
    with pytest.raises(ValueError, match="parents must be -1 or the position"):
        gold.tree_graphs([0, -1])


def test_edge_graphs_of_the_planted_corpus_point_at_its_keys():
    corpus = generate_planted_corpus(4, seed=3)
    n = corpus.token_ids.shape[1]
    for i in range(4):
        forward, backward = corpus.edges_of(i, 0), corpus.edges_of(i, 1)
        graphs = gold.edge_graphs(n, forward, backward)
        for z, edges in enumerate((forward, backward)):
            for receiver, source in edges:
                assert graphs[z, 0, 0, receiver, source] == 1.0
            rows = set(int(r) for r in edges[:, 0])
            assert all(graphs[z, 0, 0, t].sum() == 0 for t in range(n) if t not in rows)
    with pytest.raises(ValueError, match="source before its receiver"):
        gold.edge_graphs(4, forward_edges=[(1, 2)])


def test_dependency_parents_of_tokens_and_units():
    # "I didn't go ." : didn't = did + n't, both headed by go.
    s = DependencySentence("I didn't go .", ("I", "didn't", "go", "."),
                           ("I", "did", "n't", "go", "."), (0, 1, 1, 2, 3), (3, 3, 3, -1, 3),
                           ("nsubj", "aux", "advmod", "root", "punct"))
    assert gold.dependency_parents(s).tolist() == [2, 2, -1, 2]
    # didn't as three units (didn ' t): its first unit takes the parent, the others point at it.
    spans = [(0, 1), (1, 4), (4, 5), (5, 6)]
    assert gold.dependency_parents(s, spans).tolist() == [4, 4, 1, 1, -1, 4]


def test_the_cache_holds_the_graphs_exactly_and_batches_feed_them():
    rng = np.random.default_rng(0)
    texts = ["[MAX 2 [MIN 3 4 ] 9 ]", "[SM 1 2 ]", "7", "[MED [MAX 1 ] 5 6 ]"]
    graphs = [gold.tree_graphs(gold.listops_parents(t)) for t in texts]
    cache = gold.gold_graph_cache(graphs)
    assert cache.exact and cache.k == 4 and cache.shape == (2, 1, 1)
    for i, g in enumerate(graphs):
        indices, weights = cache.sentence(i)
        # A zero weight's index is 0: it adds nothing where it lands.
        np.testing.assert_allclose(densify(indices, weights, g.shape[-1]), g)
    ids = np.zeros((4, 9), "int32")
    for i, t in enumerate(texts):
        ids[i, :len(t.split())] = rng.integers(2, 20, len(t.split()))
    labels = np.arange(4)
    data, order = cached_inference_batches(ids, labels, 3, cache)
    seen = []
    for (x, indices, weights), y in data:
        width = x.shape[1]
        for row in range(x.shape[0]):
            i = int(order[len(seen)])
            seen.append(i)
            assert y[row] == labels[i] and np.array_equal(x[row], ids[i, :width])
            n = len(texts[i].split())
            dense = densify(indices[row], weights[row], width)
            np.testing.assert_allclose(dense[..., :n, :n], graphs[i])
            assert dense[..., n:, :].sum() == 0
    assert sorted(seen) == [0, 1, 2, 3]
    dense, _ = cached_inference_batches(ids, labels, 3, cache, dense=True)
    for ((x, graphs_in), _), ((_, indices, weights), _) in zip(dense, data):
        np.testing.assert_allclose(graphs_in, densify(indices, weights, x.shape[1]), atol=1e-6)
    batches = list(cached_training_batches(ids, labels, 2, 0, cache))
    dense_batches = list(cached_training_batches(ids, labels, 2, 0, cache, dense=True))
    assert sum(len(y) for _, y in batches) == 4
    for ((x, indices, weights), y), ((x2, graphs_in), y2) in zip(batches, dense_batches):
        assert np.array_equal(x, x2) and np.array_equal(y, y2)  # the same batches
        np.testing.assert_allclose(graphs_in, densify(indices, weights, x.shape[1]), atol=1e-6)


@pytest.mark.parametrize("module", ["glomo_tf.data.gold_graphs", "glomo_tf.data.conllu"])
def test_module_examples_run(module):
    import doctest
    import importlib

    tests = [t for t in doctest.DocTestFinder().find(importlib.import_module(module))
             if t.examples]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 1 and result.failed == 0


def run_chain(tokens, graphs):
    """Reference: a ListOps expression evaluated by reading only the chain graphs' edges, one
    unit after another: an operator opens ``(op, [])``, an argument appends its value to the
    running list its chain source holds, a ``]`` applies its close source's list and appends the
    value to its chain source's list (or, the root's, returns it)."""
    from glomo_tf.data.listops import _apply

    state = {}
    for t, token in enumerate(tokens):
        chain = np.nonzero(graphs[0, 0, 0, t])[0]
        close = np.nonzero(graphs[0, 0, 1, t])[0]
        if token.startswith("["):
            state[t] = (token, [])
            continue
        if token == "]":
            operator, values = state[int(close[0])]
            value = _apply(operator, values)
        else:
            value = int(token)
        if not len(chain):
            state[t] = value
            continue
        operator, values = state[int(chain[0])]
        state[t] = (operator, values + [value])
    return state[len(tokens) - 1]


def test_listops_chain_graphs_compute_each_expressions_value():
    from glomo_tf.data.listops import generate_listops, parents

    graphs = gold.listops_chain_graphs(parents("[MAX 2 [MIN 3 4 ] ]".split()))
    edges = [sorted(zip(*np.nonzero(graphs[0, 0, h]))) for h in range(2)]
    assert edges == [[(1, 0), (3, 2), (4, 3), (5, 1)], [(5, 4), (6, 5)]]
    assert not graphs[1].any() and gold.chain_depth(graphs) == 4  # 2 -> 3 -> 4 -> 5 -> 6
    examples = generate_listops(300, seed=3, max_depth=5, max_length=60)
    assert len({e.label for e in examples}) == 10
    for example in examples:
        graphs = gold.listops_chain_graphs(parents(example.tokens))
        # one source per row and head, always before its receiver
        assert graphs.sum(-1).max() <= 1 and not np.triu(graphs[0, 0].any(0)).any()
        assert run_chain(example.tokens, graphs) == example.label, example.expression


def test_chain_depth_counts_the_longest_path_of_sources():
    graphs = gold.edge_graphs(5, forward_edges=[(1, 0), (2, 1), (4, 0)])
    assert gold.chain_depth(graphs) == 2
    assert gold.chain_depth(np.zeros((2, 1, 1, 3, 3))) == 0
