"""Tests of the ListOps generator, writer and reader: labels checked by an evaluator written here
from the un-binarised token sequence alone, the original's text format, the gold trees."""

import numpy as np
import pytest

from glomo_tf.data.listops import (OPERATORS, encode_listops, generate_listops, label_counts,
                                   parse_line, read_listops, write_listops)
from glomo_tf.trees import tree_leaves, tree_spans


def evaluate_tokens(tokens):
    """ListOps value of ``[MAX 2 [MIN 4 7 ] 0 ]`` by a stack of open lists (no trees)."""
    stack = [[None, []]]
    for token in tokens:
        if token.startswith("["):
            stack.append([token, []])
        elif token == "]":
            operator, args = stack.pop()
            if operator == "[MIN":
                value = min(args)
            elif operator == "[MAX":
                value = max(args)
            elif operator == "[MED":
                ordered = sorted(args)
                mid = len(ordered) // 2
                value = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1]
                                                               + ordered[mid]) // 2
            else:
                value = sum(args) % 10
            stack[-1][1].append(value)
        else:
            stack[-1][1].append(int(token))
    assert len(stack) == 1 and len(stack[0][1]) == 1
    return stack[0][1][0]


def depth(tokens):
    level = deepest = 0
    for token in tokens:
        if token.startswith("["):
            level += 1
            deepest = max(deepest, level)
        elif token == "]":
            level -= 1
    return deepest


def test_labels_agree_with_an_independent_evaluator():
    examples = generate_listops(400, seed=1, max_depth=6)
    for e in examples:
        assert e.label == evaluate_tokens(e.tokens), e.expression
    # All four operators and a spread of labels occur.
    assert {t for e in examples for t in e.tokens if t.startswith("[")} == set(OPERATORS)
    assert min(label_counts(examples)) > 0


def test_hand_checked_examples():
    assert evaluate_tokens("[MAX 2 9 [MIN 4 7 ] 0 ]".split()) == 9  # the paper's example
    e = parse_line("9\t( ( ( ( ( [MAX 2 ) 9 ) ( ( ( [MIN 4 ) 7 ) ] ) ) 0 ) ] )")
    assert e.tokens == tuple("[MAX 2 9 [MIN 4 7 ] 0 ]".split())
    assert e.label == 9
    # Gold tree: each list left-branching from its operator, ']' joined last.
    assert e.tree == ((((("[MAX", "2"), "9"), ((("[MIN", "4"), "7"), "]")), "0"), "]")
    assert (3, 7) in tree_spans(e.tree)  # [MIN 4 7 ]
    assert evaluate_tokens("[MED 1 2 3 8 ]".split()) == 2  # int(median 2.5)
    assert evaluate_tokens("[SM 5 6 [SM 9 9 ] ]".split()) == 9


def test_seeded_and_shaped_as_asked():
    a = generate_listops(50, seed=7, max_depth=3, max_args=3, max_length=20, min_length=6)
    b = generate_listops(50, seed=7, max_depth=3, max_args=3, max_length=20, min_length=6)
    assert [e.expression for e in a] == [e.expression for e in b]
    assert [e.expression for e in a] != [e.expression for e in generate_listops(
        50, seed=8, max_depth=3, max_args=3, max_length=20, min_length=6)]
    for e in a:
        assert 6 <= len(e.tokens) <= 20
        assert depth(e.tokens) <= 3
        assert e.tokens[0].startswith("[")  # the root is a list
        # A list has 2 to max_args arguments: count the arguments of the root list.
        assert list(e.tokens).count("]") >= 1
    assert max(depth(e.tokens) for e in generate_listops(300, seed=2, max_depth=20)) > 3


def test_the_original_text_format_round_trips(tmp_path):
    examples = generate_listops(30, seed=3, max_depth=4)
    path = tmp_path / "listops.tsv"
    write_listops(path, examples)
    lines = path.read_text().splitlines()
    first = examples[0]
    assert lines[0] == f"{first.label}\t{first.expression}"
    assert lines[0].split("\t")[1].startswith("( ")
    back = read_listops(path)
    assert back == examples
    for e in back:
        # Parentheses: one pair per binary node, i.e. tokens - 1 pairs.
        assert e.expression.count("(") == len(e.tokens) - 1
        assert tree_leaves(e.tree) == list(e.tokens)


def test_the_binarisation_of_a_known_expression():
    examples = generate_listops(200, seed=0, max_depth=2, max_args=2)
    pairs = [e for e in examples if len(e.tokens) == 4]
    assert pairs
    e = pairs[0]
    op, a, b, end = e.tokens
    assert e.expression == f"( ( ( {op} {a} ) {b} ) {end} )"


def test_encoding_and_errors():
    examples = generate_listops(5, seed=4, max_length=12)
    ids, labels = encode_listops(examples, 12)
    assert ids.shape == (5, 12) and labels.tolist() == [e.label for e in examples]
    assert np.all((ids > 0).sum(1) == [len(e.tokens) for e in examples])
    with pytest.raises(ValueError, match="max_length"):
        encode_listops(examples, 3)
    with pytest.raises(ValueError, match="label"):
        parse_line("x\t( ( [MAX 2 ) ] )")
    with pytest.raises(ValueError, match="unknown"):
        parse_line("3\t( ( [MAX 22 ) ] )")
    with pytest.raises(ValueError, match="max_depth"):
        generate_listops(3, seed=0, max_depth=0)
