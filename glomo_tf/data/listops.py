"""ListOps (Nangia and Bowman, 2018): nested list operations on digits, generated here, seeded.

An expression is a tree: a node is, with probability ``operator_prob`` (0.25 in the original),
an operator with 2 to ``max_args`` (5) arguments, else a digit 0-9; no operator at
``max_depth`` (20) or deeper (:func:`generate_listops`). The operators are ``[MIN``,
``[MAX``, ``[MED`` (the median, truncated to an integer as NumPy's ``int(np.median(...))``)
and ``[SM`` (the sum modulo 10); ``]`` closes a list. The label is the value of the expression,
a digit (:func:`evaluate`). The original data also hold bare-digit expressions, ``9<TAB>9``
(label 9): :func:`parse_line` reads them (one token, the tree that token), the generator never
draws them.

The text format is the original's, one example a line: ``label<TAB>expression``, where the
expression is the left-branching binarisation of every list with parentheses, e.g.
``[MAX 2 9 ]`` is ``( ( ( [MAX 2 ) 9 ) ] )``. The model reads the tokens without the parentheses
(``[MAX 2 9 ]``); the parentheses give the gold tree (:func:`glomo_tf.trees.parse_bracketed`).

Gold dependencies: :func:`parents` gives each token its parent operator, read from the tokens
alone (each argument of a list, a digit or the ``[OP`` of a nested list, and the list's ``]`` hang
from the ``[OP`` that opens the list; the root has -1): ``[MAX 2 [MIN 3 4 ] ]`` ->
``[-1, 0, 0, 2, 2, 2, 0]``. A parent always precedes its child, so a forward graph (sources
``s < t``) can point at it; :func:`parent_agreement` measures how often the strongest source of a
graph predictor's forward rows is the parent, next to fixed-offset rules and chance.
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
        examples.append(ListOpsExample(evaluate(tree), to_expression(tree), tuple(tokens), tree))
    return examples


def _leaves(tree):
    if not isinstance(tree, tuple):
        return [tree]
    return _leaves(tree[0]) + _leaves(tree[1])


def evaluate(tree):
    """The value (an int 0-9) of a ListOps tree: a bare digit token (``"9"`` -> 9) or a
    binarised list ``((([OP a) b) ])`` -> ``OP(a, b)``, its arguments digits or binarised lists
    (the trees of :class:`ListOpsExample`, :func:`parse_line` and :func:`generate_listops`).
    ``[MED`` of an even count is ``int(np.median(...))``, e.g. ``[MED 3 4 ]`` is 3. A malformed
    tree (an unknown leaf, a list without its ``]``, an operator without arguments) is a
    ``ValueError``."""
    if not isinstance(tree, tuple):
        if tree in VALUES:
            return int(tree)
        raise ValueError(f"a ListOps leaf value is a digit 0-9, got {tree!r}.")
    if len(tree) != 2 or tree[1] != END:
        raise ValueError(f"a binarised ListOps list is ((([OP a) b) ]), got {tree!r}.")
    arguments = []
    node = tree[0]
    while isinstance(node, tuple):
        if len(node) != 2:
            raise ValueError(f"a binarised ListOps list is ((([OP a) b) ]), got {tree!r}.")
        arguments.append(evaluate(node[1]))
        node = node[0]
    if node not in OPERATORS or not arguments:
        raise ValueError(f"a ListOps list opens with one of {OPERATORS} and has at least one "
                         f"argument, got {tree!r}.")
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
    parentheses). A bare-digit expression, ``9<TAB>9``, gives tokens ``("9",)`` and the tree
    ``"9"``."""
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
    """The examples of a ListOps file in the original format (blank lines skipped).

    A line that is not UTF-8 or not ``label<TAB>expression`` raises a one-line ``ValueError``
    naming the file and the line (1-based)."""
    examples = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}:{number}: not UTF-8 text; a ListOps file holds "
                                 "'label<TAB>expression' lines in UTF-8.") from None
            if not line.strip():
                continue
            try:
                examples.append(parse_line(line))
            except ValueError as error:
                raise ValueError(f"{path}:{number}: {error} Fix or remove the line.") from None
    return examples


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


def parents(tokens):
    """The gold parent of each token of one expression: ``int64 [len(tokens)]``.

    Each argument of a list (a digit, or the ``[OP`` that opens a nested list) has as parent the
    position of the ``[OP`` that opens the list it belongs to; each ``]`` has its own list's
    ``[OP``; the root ``[OP`` (and a bare-digit expression's only token) has -1. Read from the
    tokens alone with a stack of open lists: ``[MAX 2 [MIN 3 4 ] ]`` ->
    ``[-1, 0, 0, 2, 2, 2, 0]``.

    Args:
        tokens: the expression's tokens without parentheses (``ListOpsExample.tokens``).

    Returns:
        ``np.ndarray`` of ints, one per token; a parent always precedes its child.

    Raises:
        ValueError: an unknown token, a ``]`` that closes nothing, a list left open, or more
            than one top-level item.
    """
    tokens = list(tokens)
    result = np.full(len(tokens), -1, np.int64)
    open_lists = []
    roots = 0
    for t, token in enumerate(tokens):
        if token not in OPERATORS and token not in VALUES and token != END:
            raise ValueError(f"unknown ListOps token {token!r} at position {t}.")
        if token == END:
            if not open_lists:
                raise ValueError(f"a ']' at position {t} closes no list in {tokens[:20]}.")
            result[t] = open_lists.pop()
            continue
        if open_lists:
            result[t] = open_lists[-1]
        else:
            roots += 1
            if roots > 1:
                raise ValueError(f"a ListOps expression has one top-level item; position {t} "
                                 f"starts another in {tokens[:20]}.")
        if token in OPERATORS:
            open_lists.append(t)
    if open_lists:
        raise ValueError(f"{len(open_lists)} list(s) left open in {tokens[:20]}.")
    return result


def _parent_hits(rows, receivers, sources):
    """``[..., U]`` bool: True where row ``u`` of ``rows [..., U, T]`` gives its source
    ``sources[u]`` a positive weight strictly above every other admissible source
    (``s < receivers[u]``); ties at the top and all-zero rows are misses."""
    positions = np.arange(rows.shape[-1])
    admissible = positions[None, :] < receivers[:, None]  # [U, T]
    others = admissible & (positions[None, :] != sources[:, None])
    on_source = rows[..., np.arange(len(sources)), sources]  # [..., U]
    strongest_other = np.where(others, rows, -np.inf).max(axis=-1)  # -inf when none
    return (on_source > 0) & (on_source > strongest_other)


def parent_agreement(forward_graphs, lengths, token_lists, max_offset=None):
    """How often the strongest source of forward graphs is a unit's gold parent (:func:`parents`).

    A unit counts when it has a parent (every token but the root). It agrees with a graph when
    its parent is the argmax of ``G[t, s]`` over the admissible sources ``s < t`` (all real,
    since ``t < length``); padded rows and sources and the inadmissible ``s >= t`` are never
    read. Ties: the parent must have a positive weight strictly above every other admissible
    source, so a tie at the top (a uniform row, say) and an all-zero row are misses; a unit with
    one admissible source (``t = 1``) agrees when that weight is positive. (This is stricter
    than :func:`glomo_tf.evaluation.recovery_from_rows`, where ``np.argmax`` breaks ties
    towards the first source.) NaN weights never agree.

    Args:
        forward_graphs: float ``[n, L, H, T, T]``, the forward-direction graphs of a graph
            predictor on the ``n`` expressions' token ids (rows ``t``, sources ``s``), e.g.
            ``graphs[:, 0]`` of ``GlomoPretrainer``'s ``[n, 2, L, H, T, T]``.
        lengths: ``n`` ints, the real tokens of each expression (the rest of ``T`` is padding).
        token_lists: ``n`` token sequences (``ListOpsExample.tokens``), ``len(token_lists[i])
            == lengths[i]``.
        max_offset: the largest offset ``k`` of the fixed-offset rules; default the longest
            expression's length - 1 (the largest possible offset).

    Returns:
        A JSON-able dict: ``units`` (how many units counted); ``per_head`` (``[L][H]`` nested
        lists of agreeing shares); ``best_head`` (``{"layer", "head", "share"}``, layers and
        heads numbered from 1 as in :func:`glomo_tf.experiments.demo.recovery_report`, the first on ties);
        ``heads_averaged`` (per layer, the share of the graph averaged over heads);
        ``best_heads_averaged`` (``{"layer", "share"}``, the best layer of those); ``offset_rules``
        (``{k: share}`` for ``k = 1..max_offset``, int keys: the share of units whose parent is
        at ``t - k``, the agreement of the rule "point at ``t - k``"); ``best_offset``
        (``{"offset", "share"}``, the smallest best ``k``); ``chance`` (the mean over units of
        ``1 / t``, the expected share of a uniformly random admissible source).

    Raises:
        ValueError: shapes that disagree, or no unit with a parent (bare digits only).
    """
    graphs = np.asarray(forward_graphs)
    if graphs.ndim != 5 or graphs.shape[-1] != graphs.shape[-2]:
        raise ValueError(f"parent_agreement expects forward_graphs [n, L, H, T, T], got shape "
                         f"{graphs.shape}.")
    n, num_layers, num_heads, width, _ = graphs.shape
    lengths = [int(length) for length in lengths]
    token_lists = [list(tokens) for tokens in token_lists]
    if len(lengths) != n or len(token_lists) != n:
        raise ValueError(f"parent_agreement needs one length and one token list per graph: "
                         f"{n} graphs, {len(lengths)} lengths, {len(token_lists)} token lists.")
    for i, (length, tokens) in enumerate(zip(lengths, token_lists)):
        if len(tokens) != length or not 1 <= length <= width:
            raise ValueError(f"expression {i} has {len(tokens)} tokens and length {length}; "
                             f"both must agree and lie in [1, {width}].")
    head_hits = np.zeros((num_layers, num_heads))
    averaged_hits = np.zeros(num_layers)
    offsets, receivers_all = [], []
    for graph, tokens in zip(graphs, token_lists):
        gold = parents(tokens)
        receivers = np.nonzero(gold >= 0)[0]
        if not len(receivers):
            continue
        sources = gold[receivers]
        rows = graph[:, :, receivers, :]  # [L, H, U, T]
        head_hits += _parent_hits(rows, receivers, sources).sum(axis=-1)
        averaged = np.where(np.arange(width) < receivers[:, None], rows, 0).mean(axis=1)
        averaged_hits += _parent_hits(averaged, receivers, sources).sum(axis=-1)
        offsets.append(receivers - sources)
        receivers_all.append(receivers)
    if not offsets:
        raise ValueError("parent_agreement found no unit with a parent (bare digits only).")
    offsets = np.concatenate(offsets)
    units = len(offsets)
    per_head = head_hits / units
    heads_averaged = averaged_hits / units
    max_offset = max(lengths) - 1 if max_offset is None else int(max_offset)
    if max_offset < 1:
        raise ValueError(f"max_offset must be at least 1, got {max_offset}.")
    offset_rules = {k: float(np.mean(offsets == k)) for k in range(1, max_offset + 1)}
    best_k = max(offset_rules, key=lambda k: (offset_rules[k], -k))
    return {
        "units": int(units),
        **head_shares(per_head, heads_averaged),
        "offset_rules": offset_rules,
        "best_offset": {"offset": int(best_k), "share": offset_rules[best_k]},
        "chance": float(np.mean(1.0 / np.concatenate(receivers_all))),
    }


def head_shares(per_head, heads_averaged):
    """``{"per_head", "best_head", "heads_averaged", "best_heads_averaged"}`` of agreeing shares
    ``per_head [L, K]`` and ``heads_averaged [L]``: the best head and layer numbered from 1, the
    first on ties."""
    per_head, heads_averaged = np.asarray(per_head), np.asarray(heads_averaged)
    layer, head = np.unravel_index(int(np.argmax(per_head)), per_head.shape)
    best_layer = int(np.argmax(heads_averaged))
    return {"per_head": per_head.tolist(),
            "best_head": {"layer": int(layer) + 1, "head": int(head) + 1,
                          "share": float(per_head[layer, head])},
            "heads_averaged": heads_averaged.tolist(),
            "best_heads_averaged": {"layer": best_layer + 1,
                                    "share": float(heads_averaged[best_layer])}}
