"""ListOps (Nangia and Bowman, 2018): nested list operations on digits, generated here, seeded.

An expression is a tree: a node is, with probability ``operator_prob`` (0.25 in the original),
an operator with 2 to ``max_args`` (5) arguments, else a digit 0-9; no operator at
``max_depth`` (20) or deeper (:func:`generate_listops`). The operators are ``[MIN``,
``[MAX``, ``[MED`` (the median, truncated to an integer as NumPy's ``int(np.median(...))``)
and ``[SM`` (the sum modulo 10); ``]`` closes a list. The label is the value of the expression, a digit.

The text format is the original's, one example a line: ``label<TAB>expression``, where the
expression is the left-branching binarisation of every list with parentheses, e.g.
``[MAX 2 9 ]`` is ``( ( ( [MAX 2 ) 9 ) ] )``. The model reads the tokens without the parentheses
(``[MAX 2 9 ]``); the parentheses give the gold tree (:func:`glomo_tf.trees.parse_bracketed`).
"""

import dataclasses
import random
import statistics

import numpy as np

from glomo_tf.trees import parse_bracketed

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VALUES = tuple(str(v) for v in range(10))
#: Token ids: 0 is padding, then the digits, the operators and ``]``.
VOCABULARY = ("<pad>",) + VALUES + OPERATORS + (END,)
TOKEN_IDS = {token: i for i, token in enumerate(VOCABULARY)}


@dataclasses.dataclass(frozen=True)
class ListOpsExample:
    """One example: ``label`` (the value, 0-9), ``expression`` (the bracketed string),
    ``tokens`` (the expression without parentheses) and ``tree`` (the gold binary tree over
    ``tokens``, a nested tuple of tokens)."""

    label: int
    expression: str
    tokens: tuple
    tree: object


def _apply(operator, values):
    if operator == "[MIN":
        return min(values)
    if operator == "[MAX":
        return max(values)
    if operator == "[MED":
        return int(np.median(values))
    return sum(values) % 10  # [SM


def generate_listops(num_examples, seed, max_depth=20, max_args=5, operator_prob=0.25,
                     max_length=None, min_length=1):
    """``num_examples`` ListOps examples drawn with ``random.Random(seed)``.

    The root is always an operator (a bare digit is no task); below it a node is an operator with
    probability ``operator_prob`` while its depth is below ``max_depth`` (the root has depth 1),
    else a digit. An expression whose token count (parentheses excluded) is outside
    ``[min_length, max_length]`` is drawn again. Returns a list of :class:`ListOpsExample`.
    """
    if int(num_examples) < 0 or int(max_depth) < 1 or int(max_args) < 2:
        raise ValueError("generate_listops needs num_examples >= 0, max_depth >= 1 and "
                         f"max_args >= 2, got {num_examples}, {max_depth}, {max_args}.")
    if not 0.0 <= float(operator_prob) < 1.0:
        raise ValueError(f"operator_prob must be in [0, 1), got {operator_prob}.")
    if max_length is not None and int(max_length) < max(4, int(min_length)):
        raise ValueError(f"max_length must be at least 4 (the shortest list) and min_length, "
                         f"got {max_length}.")
    rng = random.Random(seed)

    def node(depth):
        if depth > 1 and (depth >= max_depth or rng.random() >= operator_prob):
            return rng.choice(VALUES)
        arguments = [node(depth + 1) for _ in range(rng.randint(2, max_args))]
        tree = rng.choice(OPERATORS)
        for argument in arguments:  # left-branching binarisation
            tree = (tree, argument)
        return (tree, END)

    examples = []
    while len(examples) < num_examples:
        tree = node(1)
        tokens = _leaves(tree)
        if len(tokens) < min_length or (max_length is not None and len(tokens) > max_length):
            continue
        examples.append(ListOpsExample(_value(tree), to_expression(tree), tuple(tokens), tree))
    return examples


def _leaves(tree):
    if not isinstance(tree, tuple):
        return [tree]
    return _leaves(tree[0]) + _leaves(tree[1])


def _value(tree):
    """The value of a binarised tree: ``((([OP a) b) ]) -> OP(a, b)``."""
    arguments = []
    node = tree[0]
    while isinstance(node, tuple):
        child = node[1]
        arguments.append(_value(child) if isinstance(child, tuple) else int(child))
        node = node[0]
    return _apply(node, arguments[::-1])


def to_expression(tree):
    """The original's bracketed text of a binarised tree: ``( ( [MAX 2 ) ] )``."""
    if not isinstance(tree, tuple):
        return tree
    return f"( {to_expression(tree[0])} {to_expression(tree[1])} )"


def format_line(example):
    """``label<TAB>expression``, the original's line format."""
    return f"{example.label}\t{example.expression}"


def parse_line(line):
    """A :class:`ListOpsExample` from a line of the original format (the gold tree from the
    parentheses)."""
    parts = line.rstrip("\n").split("\t")
    if len(parts) != 2 or parts[0].strip() not in VALUES:
        raise ValueError(f"a ListOps line is 'label<TAB>expression' with a label 0-9; got "
                         f"{line[:60]!r}.")
    tree, tokens = parse_bracketed(parts[1])
    for token in tokens:
        if token not in TOKEN_IDS or token == "<pad>":
            raise ValueError(f"unknown ListOps token {token!r} in {line[:60]!r}.")
    return ListOpsExample(int(parts[0]), parts[1].strip(), tuple(tokens), tree)


def write_listops(path, examples):
    """Writes ``examples`` to ``path``, one ``label<TAB>expression`` line each."""
    with open(path, "w", encoding="utf-8") as f:
        for example in examples:
            f.write(format_line(example) + "\n")


def read_listops(path):
    """The examples of a ListOps file in the original format (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        return [parse_line(line) for line in f if line.strip()]


def encode_listops(examples, max_length=None):
    """``(ids [n, L] int32, labels [n] int32)`` with 0 as padding at the end; ``L`` is
    ``max_length`` or the longest example (a longer example is a ``ValueError``)."""
    lengths = [len(e.tokens) for e in examples]
    width = max(lengths, default=1) if max_length is None else int(max_length)
    if lengths and max(lengths) > width:
        raise ValueError(f"an example has {max(lengths)} tokens, more than max_length={width}; "
                         "raise max_length or filter the examples.")
    ids = np.zeros((len(examples), width), np.int32)
    for n, example in enumerate(examples):
        ids[n, :len(example.tokens)] = [TOKEN_IDS[t] for t in example.tokens]
    labels = np.array([e.label for e in examples], np.int32)
    return ids, labels


def label_counts(examples):
    """How many examples have each label 0-9 (a list of 10 counts)."""
    counts = [0] * 10
    for e in examples:
        counts[e.label] += 1
    return counts


def length_summary(examples):
    """Mean, median and maximum token count of ``examples`` (a dict)."""
    lengths = [len(e.tokens) for e in examples]
    return {"mean": float(np.mean(lengths)), "median": float(statistics.median(lengths)),
            "max": int(max(lengths))}
