"""Tests of ListOps' gold parents and of the agreement of forward graphs with them: references
written here (a stack of open lists, a walk of the gold tree, plain loops over the graph rows)."""

import json

import numpy as np
import pytest

from glomo_tf.data.listops import OPERATORS, generate_listops, parent_agreement, parents


def stack_parents(tokens):
    """Parent of each token by a stack of open lists, kept as (position, operator) pairs."""
    out, stack = [], []
    for t, token in enumerate(tokens):
        if token == "]":
            position, _ = stack.pop()
            out.append(position)
        else:
            out.append(stack[-1][0] if stack else -1)
            if token.startswith("["):
                stack.append((t, token))
    assert not stack
    return out


def tree_parents(tree):
    """Parent of each token from the gold binary tree: in ((([OP a) b) ]) the first token of each
    argument and the ']' hang from [OP."""
    out = []

    def walk(node, parent):
        if not isinstance(node, tuple):
            out.append(parent)
            return
        items = []
        while isinstance(node, tuple):
            items.append(node[1])
            node = node[0]
        me = len(out)
        out.append(parent)  # the operator
        for item in reversed(items):
            if item == "]":
                out.append(me)
            else:
                walk(item, me)

    walk(tree, -1)
    return out


def test_parents_of_the_example_and_of_a_nested_expression():
    assert parents("[MAX 2 [MIN 3 4 ] ]".split()).tolist() == [-1, 0, 0, 2, 2, 2, 0]
    tokens = "[SM [MED 1 [MAX 3 8 ] ] [MIN 6 [SM 5 5 ] ] 3 ]".split()
    #          0    1    2  3   4 5 6 7   8   9  10 11 12 13 14 15 16
    assert parents(tokens).tolist() == [-1, 0, 1, 1, 3, 3, 3, 1, 0, 8, 8, 10, 10, 10, 8, 0, 0]
    assert parents(("9",)).tolist() == [-1]
    assert parents([]).tolist() == []
    assert parents("[MIN [MAX [SM [MED 1 2 ] ] ] ]".split()).tolist() == [
        -1, 0, 1, 2, 3, 3, 3, 2, 1, 0]


def test_parents_reject_ill_formed_tokens():
    for tokens in ["[MAX 2 ] ]", "[MAX 2", "9 9", "[MAX 2 ] 3", "[MAX 12 ]", "]"]:
        with pytest.raises(ValueError):
            parents(tokens.split())


def test_parents_of_generated_examples_agree_with_the_references():
    examples = generate_listops(300, seed=11, max_depth=8)
    assert max(len(e.tokens) for e in examples) > 20
    for e in examples:
        gold = parents(e.tokens)
        assert gold.dtype.kind == "i" and len(gold) == len(e.tokens)
        assert gold.tolist() == stack_parents(e.tokens) == tree_parents(e.tree), e.expression
        assert gold[0] == -1 and np.all(gold[1:] >= 0)
        for t in range(1, len(e.tokens)):
            assert gold[t] < t
            assert e.tokens[gold[t]] in OPERATORS  # every parent is an operator
        # Each ']' hangs from the [OP whose list it closes: the tokens between them are balanced
        # and the list does not close earlier.
        for t, token in enumerate(e.tokens):
            if token == "]":
                inside = e.tokens[gold[t] + 1:t]
                assert inside.count("]") == sum(x.startswith("[") for x in inside)


def hit(row, t, parent):
    """The documented rule by a plain loop: the parent's weight is positive and strictly above
    every other admissible source s < t."""
    if not row[parent] > 0:
        return False
    for s in range(t):
        if s != parent and not row[parent] > row[s]:
            return False
    return True


def build_graphs(examples, width, seed=0):
    """[n, 2, 3, T, T] forward graphs: layer 0 = (random rows, rows at the parent, rows at t-1),
    layer 1 = (uniform rows, all zeros, a tie between the parent and another source)."""
    rng = np.random.default_rng(seed)
    graphs = np.zeros((len(examples), 2, 3, width, width))
    for i, e in enumerate(examples):
        gold = parents(e.tokens)
        for t in range(1, len(e.tokens)):
            random_row = rng.random(t) ** 4
            graphs[i, 0, 0, t, :t] = random_row / random_row.sum()
            graphs[i, 0, 1, t, gold[t]] = 1.0
            graphs[i, 0, 2, t, t - 1] = 1.0
            graphs[i, 1, 0, t, :t] = 1.0 / t
            other = gold[t] + 1 if gold[t] + 1 < t else gold[t] - 1
            graphs[i, 1, 2, t, gold[t]] += 0.5
            graphs[i, 1, 2, t, max(other, 0)] += 0.5
    return graphs


def test_agreement_of_hand_built_graphs():
    examples = generate_listops(40, seed=3, max_depth=6, max_length=30)
    width = max(len(e.tokens) for e in examples) + 3
    graphs = build_graphs(examples, width)
    lengths = [len(e.tokens) for e in examples]
    result = parent_agreement(graphs, lengths, [e.tokens for e in examples])
    json.dumps(result)

    units = [(i, t, p) for i, e in enumerate(examples)
             for t, p in enumerate(stack_parents(e.tokens)) if p >= 0]
    assert result["units"] == len(units) == sum(lengths) - len(examples)

    def loop_share(rows_of):
        return sum(hit(rows_of(i, t), t, p) for i, t, p in units) / len(units)

    expected = [[loop_share(lambda i, t, l=l, h=h: graphs[i, l, h, t]) for h in range(3)]
                for l in range(2)]
    np.testing.assert_allclose(result["per_head"], expected, rtol=0, atol=1e-12)
    assert result["per_head"][0][1] == 1.0  # the head pointing at the parents
    assert result["best_head"] == {"layer": 1, "head": 2, "share": 1.0}  # numbered from 1
    offset_one = sum(p == t - 1 for _, t, p in units) / len(units)
    assert result["per_head"][0][2] == pytest.approx(offset_one)
    assert result["offset_rules"][1] == pytest.approx(offset_one)
    # Uniform rows and two-way ties at the top: only units with one admissible source (t = 1)
    # agree; all-zero rows never.
    first_only = sum(t == 1 for _, t, _ in units) / len(units)
    assert 0 < first_only < 0.2
    assert result["per_head"][1][0] == pytest.approx(first_only)
    assert result["per_head"][1][2] == pytest.approx(first_only)
    assert result["per_head"][1][1] == 0.0
    assert 0 < result["per_head"][0][0] < 1

    averaged = [loop_share(lambda i, t, l=l: graphs[i, l, :, t].mean(axis=0)) for l in range(2)]
    np.testing.assert_allclose(result["heads_averaged"], averaged, rtol=0, atol=1e-12)
    best = int(np.argmax(averaged))
    assert result["best_heads_averaged"] == {"layer": best + 1, "share": averaged[best]}

    assert set(result["offset_rules"]) == set(range(1, max(lengths)))
    for k, share in result["offset_rules"].items():
        assert share == pytest.approx(sum(p == t - k for _, t, p in units) / len(units))
    best_k = max(result["offset_rules"].values())
    assert result["best_offset"]["share"] == best_k
    assert result["best_offset"]["offset"] == min(
        k for k, v in result["offset_rules"].items() if v == best_k)
    assert result["chance"] == pytest.approx(np.mean([1 / t for _, t, _ in units]))


def test_padding_and_inadmissible_sources_are_ignored():
    examples = generate_listops(20, seed=4, max_depth=5, max_length=25)
    width = max(len(e.tokens) for e in examples) + 4
    graphs = build_graphs(examples, width, seed=1)
    lengths = [len(e.tokens) for e in examples]
    tokens = [e.tokens for e in examples]
    clean = parent_agreement(graphs, lengths, tokens)
    noisy = graphs.copy()
    for i, length in enumerate(lengths):
        noisy[i, :, :, length:, :] = 1e6  # padded rows
        noisy[i, :, :, :, length:] = 1e6  # padded sources
        # The receiver itself and later sources (s >= t) are inadmissible too.
        noisy[i][:, :, np.triu(np.ones((width, width), bool))] = 5e5
        noisy[i, :, :, length - 2, length - 1] = np.nan
    assert parent_agreement(noisy, lengths, tokens) == clean
    # Wider padding changes nothing either.
    wider = np.zeros(graphs.shape[:3] + (width + 5, width + 5))
    wider[..., :width, :width] = graphs
    assert parent_agreement(wider, lengths, tokens) == clean


def test_the_small_example_by_hand():
    tokens = [tuple("[MAX 2 [MIN 3 4 ] ]".split()), ("5",)]  # a bare digit adds no unit
    gold = [-1, 0, 0, 2, 2, 2, 0]
    graphs = np.zeros((2, 1, 2, 9, 9))
    for t in range(1, 7):
        graphs[0, 0, 0, t, gold[t]] = 1.0
    graphs[0, 0, 1, 1, 0] = 0.0  # head 2: row t = 1 all zeros (a miss), then t-1
    for t in range(2, 7):
        graphs[0, 0, 1, t, t - 1] = 1.0
    result = parent_agreement(graphs, [7, 1], tokens)
    assert result["units"] == 6
    # Offsets t - parent: 1, 2, 1, 2, 3, 6.
    assert result["offset_rules"] == {1: 2 / 6, 2: 2 / 6, 3: 1 / 6, 4: 0.0, 5: 0.0, 6: 1 / 6}
    assert result["best_offset"] == {"offset": 1, "share": 2 / 6}
    assert result["chance"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6) / 6)
    assert result["chance"] == pytest.approx(49 / 120)
    assert result["per_head"] == [[1.0, pytest.approx(1 / 6)]]  # head 2 hits only t = 3
    assert result["best_head"] == {"layer": 1, "head": 1, "share": 1.0}
    # Heads averaged: t = 1 has weight 0.5 on its only source (a hit); t = 2..6 split 0.5/0.5
    # between the parent and t-1: t = 3 both are 2 (a hit), the others tie (misses).
    assert result["heads_averaged"] == [pytest.approx(2 / 6)]
    assert result["best_heads_averaged"] == {"layer": 1, "share": pytest.approx(2 / 6)}
    assert parent_agreement(graphs, [7, 1], tokens, max_offset=2)["offset_rules"] == {
        1: 2 / 6, 2: 2 / 6}


def test_agreement_errors():
    tokens = [tuple("[MAX 2 9 ]".split())]
    graphs = np.zeros((1, 1, 1, 5, 5))
    with pytest.raises(ValueError, match="forward_graphs"):
        parent_agreement(graphs[0], [4], tokens)
    with pytest.raises(ValueError, match="one length"):
        parent_agreement(graphs, [4, 4], tokens)
    with pytest.raises(ValueError, match="length"):
        parent_agreement(graphs, [3], tokens)
    with pytest.raises(ValueError, match="length"):
        parent_agreement(np.zeros((1, 1, 1, 3, 3)), [4], tokens)
    with pytest.raises(ValueError, match="no unit"):
        parent_agreement(graphs, [1], [("7",)])
    with pytest.raises(ValueError, match="max_offset"):
        parent_agreement(graphs, [4], tokens, max_offset=0)


def test_read_listops_names_the_file_and_line_of_a_bad_line(tmp_path):
    from glomo_tf.data.listops import read_listops

    good = "9\t9\n4\t( ( ( [MAX 2 ) 4 ) ] )\n"
    path = tmp_path / "ops.tsv"
    path.write_text(good + "\n", encoding="utf-8")
    assert [e.label for e in read_listops(path)] == [9, 4]
    for bad, fragment in [("7 ( ( [MIN 1 ) ] )\n", "label<TAB>expression"),
                          ("3\t( ( [FOO 1 ) ] )\n", "unknown ListOps token")]:
        path.write_text(good + "\n" + bad, encoding="utf-8")
        with pytest.raises(ValueError, match=fragment) as error:
            read_listops(path)
        assert f"{path}:4:" in str(error.value) and "\n" not in str(error.value)
    path.write_bytes(good.encode() + b"2\t\xff\n")
    with pytest.raises(ValueError, match=f"{path}:3: not UTF-8"):
        read_listops(path)
