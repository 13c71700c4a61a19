"""Tests of the ListOps generator, writer and reader: labels checked by an evaluator written here
from the un-binarised token sequence alone, the original's text format, the gold trees."""

import numpy as np
import pytest

from glomo_tf.data.listops import (OPERATORS, evaluate, encode_listops, format_line,
                                   generate_listops, label_counts, parse_line, read_listops,
                                   write_listops)
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


def binarise(tokens):
    """The left-branching binary tree of ``[MAX 2 [MIN 3 4 ] ]`` built here by a stack of open
    lists: ``(((([MAX, 2), ((([MIN, 3), 4), ])), ])``; a bare digit is itself."""
    stack = [[]]
    for token in tokens:
        if token.startswith("["):
            stack.append([token])
        elif token == "]":
            items = stack.pop() + ["]"]
            tree = items[0]
            for item in items[1:]:
                tree = (tree, item)
            stack[-1].append(tree)
        else:
            stack[-1].append(token)
    assert len(stack) == 1 and len(stack[0]) == 1
    return stack[0][0]


@pytest.mark.parametrize("expression, value", [
    ("7", 7),
    ("0", 0),
    ("[MAX 2 9 [MIN 4 7 ] 0 ]", 9),
    ("[MIN 7 [MAX 2 9 ] 8 ]", 7),
    ("[SM 9 8 7 ]", 4),  # 24 mod 10
    ("[SM 0 0 ]", 0),
    ("[SM 5 6 [SM 9 9 ] ]", 9),  # 5 + 6 + 8 = 19
    ("[MED 5 1 7 ]", 5),
    ("[MED 3 4 ]", 3),  # int(3.5)
    ("[MED 0 9 ]", 4),  # int(4.5)
    ("[MED 1 2 3 8 ]", 2),  # int(2.5)
    ("[MED 2 2 9 9 ]", 5),  # int(5.5)
    ("[MED [SM 9 9 ] [MIN 1 2 ] 5 7 ]", 6),  # MED(8, 1, 5, 7) = int(6.0)
    ("[SM [MED 1 [MAX 3 8 ] ] [MIN 6 [SM 5 5 ] ] 3 ]", 7),  # SM(int(4.5), MIN(6, 0), 3)
    ("[MAX [MAX [MAX [MIN 9 3 ] 1 ] 2 ] 0 ]", 3),
])
def test_evaluate_hand_computed(expression, value):
    tokens = expression.split()
    assert evaluate(binarise(tokens)) == value
    assert evaluate_tokens(tokens) == value  # the stack evaluator above agrees


def test_a_bare_digit_line():
    e = parse_line("9\t9")
    assert e.label == 9 and e.tokens == ("9",) and e.tree == "9" and e.expression == "9"
    assert evaluate(e.tree) == 9
    assert evaluate(parse_line("3\t( 3 )").tree) == 3
    assert parse_line(format_line(e)) == e


def test_evaluate_of_a_parsed_line():
    e = parse_line("9\t( ( ( ( ( [MAX 2 ) 9 ) ( ( ( [MIN 4 ) 7 ) ] ) ) 0 ) ] )")
    assert evaluate(e.tree) == 9
    assert e.tree == binarise(e.tokens)


def test_evaluate_rejects_malformed_trees():
    for tree in ["]", "[MAX", "12", ("[MAX", "2"), (("[MAX", "2"), ")"), ("[MAX", "]"),
                 ((("[MIN", "2"), "]"), "]"), (("[MAX", "x"), "]")]:
        with pytest.raises(ValueError):
            evaluate(tree)


def test_generated_labels_are_the_value_of_the_parsed_tree():
    examples = generate_listops(300, seed=5, max_depth=8)
    for e in examples:
        assert e.label == evaluate(parse_line(format_line(e)).tree), e.expression
        assert e.label == evaluate(e.tree)
