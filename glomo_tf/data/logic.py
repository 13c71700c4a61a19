"""The propositional-logic inference data of Bowman, Manning and Potts (2015).

Files ``trainK`` / ``testK`` hold pairs of formulas with ``K`` logical operators, one pair a line:
``relation<TAB>formula1<TAB>formula2``. The seven relations are ``#`` (independence), ``<``
(forward entailment), ``=`` (equivalence), ``>`` (reverse entailment), ``^`` (negation), ``v``
(cover) and ``|`` (alternation). Formulas are bracketed binary trees over the variables ``a`` to
``f`` and the operators ``not``, ``and``, ``or``: ``( d ( and ( not e ) ) )``. The brackets give
the gold tree; a model reads the formula as written, brackets included, as the released Ordered
Memory code does (``encode_logic(..., brackets=True)``), or its tokens alone (the default), where
a formula such as ``not e or not c`` no longer says which of its two trees it is.

Nothing is downloaded: pass the directory that holds the files (in this project's checkout,
``../shared/data/propositionallogic`` from the repository root).
"""

import dataclasses
import os

import numpy as np

from glomo_tf.trees import parse_bracketed

RELATIONS = ("#", "<", "=", ">", "^", "v", "|")
#: Token ids: 0 is padding, then the variables and the operators.
VOCABULARY = ("<pad>", "a", "b", "c", "d", "e", "f", "not", "and", "or")
TOKEN_IDS = {token: i for i, token in enumerate(VOCABULARY)}
#: The same ids, and the two brackets after them, for formulas read with their brackets.
BRACKETED_VOCABULARY = VOCABULARY + ("(", ")")
BRACKETED_IDS = {token: i for i, token in enumerate(BRACKETED_VOCABULARY)}


@dataclasses.dataclass(frozen=True)
class LogicPair:
    """One pair: ``relation`` (index into :data:`RELATIONS`), the two formulas' tokens (without
    brackets) and gold trees, ``operators`` (the ``K`` of the file it came from), and the two
    formulas' tokens as written, brackets included."""

    relation: int
    left: tuple
    right: tuple
    left_tree: object
    right_tree: object
    operators: int
    left_bracketed: tuple = ()
    right_bracketed: tuple = ()


def parse_line(line, operators=-1):
    """A :class:`LogicPair` from ``relation<TAB>formula1<TAB>formula2``."""
    parts = line.rstrip("\n").split("\t")
    if len(parts) != 3 or parts[0] not in RELATIONS:
        raise ValueError(f"a logic line is 'relation<TAB>formula1<TAB>formula2' with a relation "
                         f"in {' '.join(RELATIONS)}; got {line[:60]!r}.")
    trees = []
    for formula in parts[1:]:
        tree, tokens = parse_bracketed(formula)
        for token in tokens:
            if token not in TOKEN_IDS or token == "<pad>":
                raise ValueError(f"unknown token {token!r} in the formula {formula!r}.")
        trees.append((tree, tuple(tokens)))
    return LogicPair(RELATIONS.index(parts[0]), trees[0][1], trees[1][1], trees[0][0],
                     trees[1][0], operators, tuple(parts[1].split()), tuple(parts[2].split()))


def read_logic_file(path, operators=-1):
    """The pairs of one file (blank lines skipped), tagged with ``operators``."""
    with open(path, encoding="utf-8") as f:
        return [parse_line(line, operators) for line in f if line.strip()]


def load_logic(directory, split, operators):
    """The pairs of ``{split}{K}`` for every ``K`` in ``operators`` (``split`` is ``"train"`` or
    ``"test"``), in file order."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    pairs = []
    for k in operators:
        path = os.path.join(directory, f"{split}{k}")
        if not os.path.exists(path):
            raise ValueError(f"{path} does not exist; pass the directory of the propositional "
                             "logic files (trainK/testK).")
        pairs.extend(read_logic_file(path, k))
    return pairs


def train_validation_split(pairs, every=10):
    """``(train, validation)``: every ``every``-th pair (the 10th, 20th, ...) held out."""
    if int(every) < 2:
        raise ValueError(f"every must be at least 2, got {every}.")
    validation = [p for i, p in enumerate(pairs) if i % every == every - 1]
    train = [p for i, p in enumerate(pairs) if i % every != every - 1]
    return train, validation


def formula_ids(tokens, brackets=False):
    """The ids of one formula's tokens: :data:`TOKEN_IDS`, or with ``brackets`` (tokens as
    written, ``(`` and ``)`` included) :data:`BRACKETED_IDS`."""
    ids = BRACKETED_IDS if brackets else TOKEN_IDS
    return [ids[t] for t in tokens]


def encode_logic(pairs, max_length=None, brackets=False):
    """``(left_ids [n, L], right_ids [n, L], relations [n])`` (int32, 0 as padding at the end);
    ``L`` is ``max_length`` or the longest formula. With ``brackets`` the formulas are read as
    written, their brackets as two more tokens (:data:`BRACKETED_VOCABULARY`)."""
    sides = [(p.left_bracketed, p.right_bracketed) if brackets else (p.left, p.right)
             for p in pairs]
    longest = max((max(len(a), len(b)) for a, b in sides), default=1)
    width = longest if max_length is None else int(max_length)
    if longest > width:
        raise ValueError(f"a formula has {longest} tokens, more than max_length={width}.")
    left = np.zeros((len(pairs), width), np.int32)
    right = np.zeros((len(pairs), width), np.int32)
    for n, (a, b) in enumerate(sides):
        left[n, :len(a)] = formula_ids(a, brackets)
        right[n, :len(b)] = formula_ids(b, brackets)
    return left, right, np.array([p.relation for p in pairs], np.int32)
