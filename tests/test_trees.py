"""Tests of glomo_tf.trees: Algorithm 2 (tree induction from Ordered Memory's attention) on
hand-made attention sequences whose trees were worked out by hand, bracket F1 counted by hand,
the bracketed-string reader."""

import numpy as np
import pytest

from glomo_tf.trees import (bracket_f1, branching_tree, induce_tree, induce_trees,
                            parse_bracketed, prune_tree, tree_leaves, tree_spans)


def one_hot_rows(heads, num_slots):
    """Attention rows pointing at ``heads`` (slots counted from 1, as in the paper)."""
    return np.eye(num_slots)[np.asarray(heads) - 1]


# Each case: slots N, the heads y_t, the tree worked out by hand from Algorithm 2.
CASES = [
    # Every step pushes the new word above the top: nothing reduced until the end.
    (4, [4, 3, 2, 1], (0, (1, (2, 3)))),
    # Every step points at the bottom: reduce the top two, then shift (step 2 has one item).
    (4, [4, 4, 4, 4], (((0, 1), 2), 3)),
    # Reduce (0 1) at step 3, then push 3 above 2: ((0 1) (2 3)).
    (4, [4, 4, 4, 3], ((0, 1), (2, 3))),
    # Push 1 and 2, reduce (1 2) once at step 4, then the end joins the rest.
    (4, [4, 3, 2, 2], (0, ((1, 2), 3))),
    # Two reduces in one step (d = 3 - 1 = 2): (1 2) then (0 (1 2)); one more at step 5.
    (4, [4, 3, 2, 3, 3], (((0, (1, 2)), 3), 4)),
    # d = 6 - 3 = 3 reduces asked of a stack of three items: two happen, then the loop stops.
    (6, [6, 5, 4, 6], ((0, (1, 2)), 3)),
]


@pytest.mark.parametrize("num_slots,heads,expected", CASES)
def test_algorithm_2_on_hand_worked_cases(num_slots, heads, expected):
    assert induce_tree(one_hot_rows(heads, num_slots)) == expected


def test_soft_attention_is_read_by_its_argmax_and_length_cuts():
    rows = one_hot_rows([4, 4, 4, 3], 4) * 0.55 + 0.15  # argmax unchanged
    assert induce_tree(rows) == ((0, 1), (2, 3))
    assert induce_tree(rows, length=3) == ((0, 1), 2)
    assert induce_tree(rows[:1]) == 0


def test_batch_with_padding():
    probs = np.zeros((2, 4, 4))
    probs[0] = one_hot_rows([4, 3, 2, 1], 4)
    probs[1, :3] = one_hot_rows([4, 4, 4], 4)
    mask = np.array([[True] * 4, [True] * 3 + [False]])
    assert induce_trees(probs, mask) == [(0, (1, (2, 3))), ((0, 1), 2)]
    with pytest.raises(ValueError, match="padding at the end"):
        induce_trees(probs, np.array([[True, False, True, True]] * 2))
    with pytest.raises(ValueError, match="batch"):
        induce_trees(probs[0])
    with pytest.raises(ValueError, match="one sequence"):
        induce_tree(probs)


def test_spans_and_leaves():
    tree = ((0, 1), (2, (3, 4)))
    assert tree_spans(tree) == {(0, 2), (3, 5), (2, 5), (0, 5)}
    assert tree_leaves(tree) == [0, 1, 2, 3, 4]
    assert tree_spans("a") == set()


def test_bracket_f1_counted_by_hand():
    # Sentence 1: gold spans {(0,2),(0,3),(0,4)}, predicted {(0,2),(2,4),(0,4)}: 2 matched.
    # Sentence 2: gold {(1,3),(0,3)}, predicted {(0,2),(0,3)}: 1 matched. Corpus: 3 / 5 / 5.
    predicted = [((0, 1), (2, 3)), ((0, 1), 2)]
    gold = [((("w", "x"), "y"), "z"), ("a", ("b", "c"))]
    scores = bracket_f1(predicted, gold)
    assert scores["precision"] == pytest.approx(0.6)
    assert scores["recall"] == pytest.approx(0.6)
    assert scores["f1"] == pytest.approx(0.6)
    assert bracket_f1(gold, gold)["f1"] == 1.0
    # A flat gold bracket (three children) against a binary prediction: P 1/2, R 1/1.
    flat_gold = [("a", "b", "c")]
    scores = bracket_f1([((0, 1), 2)], flat_gold)
    assert scores["precision"] == pytest.approx(0.5) and scores["recall"] == 1.0
    assert scores["f1"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="same tokens"):
        bracket_f1([(0, 1)], [("a", ("b", "c"))])
    with pytest.raises(ValueError, match="as many"):
        bracket_f1([(0, 1)], [])


def test_parse_bracketed():
    tree, tokens = parse_bracketed("( ( ( [MAX 2 ) 9 ) ] )")
    assert tree == ((("[MAX", "2"), "9"), "]")
    assert tokens == ["[MAX", "2", "9", "]"]
    tree, tokens = parse_bracketed("( not ( e ( or ( not c ) ) ) )")
    assert tree == ("not", ("e", ("or", ("not", "c"))))
    assert parse_bracketed("a") == ("a", ["a"])
    assert parse_bracketed("( a b c )")[0] == (("a", "b"), "c")  # left-branching
    assert parse_bracketed("( ( a ) b )")[0] == ("a", "b")  # one child is the child
    for bad in ("( a b", "a b )", "( )", ""):
        with pytest.raises(ValueError):
            parse_bracketed(bad)


def test_prune_tree_drops_leaves_and_collapses_single_children():
    # "( not ( a ( and b ) ) )" read with its brackets: positions 0..9, brackets at 0 2 4 7 8 9.
    tokens = "( not ( a ( and b ) ) )".split()
    tree = (0, ((1, ((2, 3), ((4, (5, 6)), 7))), (8, 9)))
    pruned = prune_tree(tree, lambda t: tokens[t] not in "()")
    assert pruned == (1, (3, (5, 6)))
    assert [tokens[t] for t in tree_leaves(pruned)] == ["not", "a", "and", "b"]
    assert prune_tree((0, 1), lambda t: False) is None
    assert prune_tree("a", lambda t: True) == "a"
    # Scored against the formula's own tree, as the released code scores a bracketed read.
    gold, _ = parse_bracketed("( not ( a ( and b ) ) )")
    assert bracket_f1([pruned], [gold])["f1"] == 1.0


def test_branching_trees():
    assert branching_tree(1, True) == 0 and branching_tree(1, False) == 0
    assert branching_tree(4, True) == (((0, 1), 2), 3)
    assert branching_tree(4, False) == (0, (1, (2, 3)))
