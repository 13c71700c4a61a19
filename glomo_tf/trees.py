"""Binary trees induced by Ordered Memory's attention and their bracket F1 against gold trees.

Trees are nested 2-tuples in sentence order, ``((0, 1), 2)``; a leaf is anything that is not a
tuple (token positions for induced trees, tokens for gold trees read from text). Only the leaves'
order matters to the spans, so induced and gold trees compare whatever their leaves hold.
"""

import numpy as np


def induce_tree(probs, length=None):
    """Algorithm 2 of the thesis (Appendix A.2): the binary tree of one sequence from ``p_t``.

    Shift-reduce, reading the attention greedily: with ``y_t = argmax p_t`` (slots counted from
    1, slot ``N`` the bottom of the stack) and ``h = y_{t-1} - 1``, step ``t >= 2`` reduces the
    stack ``d = y_t - h`` times (each reduce joins the two top items; fewer if the stack runs
    short) and then shifts ``w_t``. At the end the stack is reduced to one tree (Algorithm 2
    prints ``len(stack) > 2``, which would leave two items).

    Args:
        probs: ``[T, N]`` array, the attention distributions of
            :class:`glomo_tf.OrderedMemory` (``return_attention=True``) for one sequence.
        length: optional int, the number of real steps (the first ``length`` rows are read);
            default ``T``.

    Returns:
        The tree over the positions ``0 .. length - 1``: a nested tuple, or the int ``0`` for a
        sequence of one step.
    """
    probs = np.asarray(probs)
    if probs.ndim != 2:
        raise ValueError(f"induce_tree expects probs [T, N] of one sequence, got shape "
                         f"{probs.shape}; use induce_trees for a batch.")
    length = probs.shape[0] if length is None else int(length)
    if not 1 <= length <= probs.shape[0]:
        raise ValueError(f"length must be in [1, {probs.shape[0]}], got {length}.")
    heads = np.argmax(probs[:length], axis=-1) + 1  # slots from 1, as in the paper
    stack = [0]
    h = heads[0] - 1
    for t in range(1, length):
        for _ in range(max(0, heads[t] - h)):
            if len(stack) < 2:
                break
            right = stack.pop()
            left = stack.pop()
            stack.append((left, right))
        stack.append(t)
        h = heads[t] - 1
    while len(stack) > 1:
        right = stack.pop()
        left = stack.pop()
        stack.append((left, right))
    return stack[0]


def induce_trees(probs, mask=None):
    """:func:`induce_tree` for a batch: ``probs [B, T, N]`` and an optional bool ``mask [B, T]``
    (the real steps must come first, padding at the end). Returns a list of ``B`` trees."""
    probs = np.asarray(probs)
    if probs.ndim != 3:
        raise ValueError(f"induce_trees expects probs [batch, T, N], got shape {probs.shape}.")
    if mask is None:
        lengths = [probs.shape[1]] * probs.shape[0]
    else:
        mask = np.asarray(mask, bool)
        lengths = mask.sum(axis=1)
        for row, n in zip(mask, lengths):
            if not row[:n].all():
                raise ValueError("induce_trees needs the padding at the end of each sequence "
                                 "(mask True on a prefix); drop interior padding first.")
    return [induce_tree(p, n) for p, n in zip(probs, lengths)]


def tree_leaves(tree):
    """The leaves of ``tree`` in sentence order."""
    if not isinstance(tree, tuple):
        return [tree]
    return [leaf for child in tree for leaf in tree_leaves(child)]


def tree_spans(tree):
    """The set of ``(start, end)`` spans (end exclusive) of the constituents of ``tree`` that
    cover more than one leaf, the whole sentence included (Evalb's unlabelled brackets)."""
    spans = set()

    def walk(node, start):
        if not isinstance(node, tuple):
            return start + 1
        end = start
        for child in node:
            end = walk(child, end)
        if end - start > 1:
            spans.add((start, end))
        return end

    walk(tree, 0)
    return spans


def bracket_f1(predicted, gold):
    """Unlabelled bracket F1 of ``predicted`` trees against ``gold`` trees, as Evalb counts it:
    the matched spans of length > 1 (the sentence's span included) summed over the corpus, then
    ``2 P R / (P + R)``. Returns a dict with ``f1``, ``precision``, ``recall`` (in [0, 1]) and
    ``sentences``."""
    predicted, gold = list(predicted), list(gold)
    if len(predicted) != len(gold):
        raise ValueError(f"bracket_f1 needs as many predicted trees as gold trees, got "
                         f"{len(predicted)} and {len(gold)}.")
    matched = n_predicted = n_gold = 0
    for p_tree, g_tree in zip(predicted, gold):
        n_p, n_g = len(tree_leaves(p_tree)), len(tree_leaves(g_tree))
        if n_p != n_g:
            raise ValueError(f"a predicted tree has {n_p} leaves and its gold tree {n_g}; the "
                             "trees must cover the same tokens.")
        p_spans, g_spans = tree_spans(p_tree), tree_spans(g_tree)
        matched += len(p_spans & g_spans)
        n_predicted += len(p_spans)
        n_gold += len(g_spans)
    precision = matched / n_predicted if n_predicted else 1.0
    recall = matched / n_gold if n_gold else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"f1": f1, "precision": precision, "recall": recall, "sentences": len(gold)}


def prune_tree(tree, keep):
    """``tree`` without the leaves for which ``keep(leaf)`` is false, each node left with one
    child replaced by that child: the tree of a sequence read with its brackets as tokens, seen
    over its other tokens (as the released Ordered Memory code's ``remove_bracket`` scores it).
    None when no leaf is kept."""
    if not isinstance(tree, tuple):
        return tree if keep(tree) else None
    children = [c for c in (prune_tree(child, keep) for child in tree) if c is not None]
    if not children:
        return None
    return children[0] if len(children) == 1 else tuple(children)


def branching_tree(n, left):
    """The purely left- (or right-) branching binary tree over the positions ``0 .. n - 1``:
    the baselines an induced tree's F1 is read against."""
    if left:
        tree = 0
        for i in range(1, n):
            tree = (tree, i)
        return tree
    tree = n - 1
    for i in range(n - 2, -1, -1):
        tree = (i, tree)
    return tree


def parse_bracketed(text):
    """The tree of a bracketed string such as ``"( ( a b ) c )"`` (tokens split on spaces;
    ``(`` and ``)`` are the brackets). A bracket with one child is that child; one with more than
    two children is read left-branching. Returns ``(tree, tokens)``."""
    tokens = text.split()
    stack = [[]]
    for token in tokens:
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) < 2:
                raise ValueError(f"unbalanced brackets in {text!r}: a ')' closes nothing.")
            children = stack.pop()
            if not children:
                raise ValueError(f"empty brackets '( )' in {text!r}.")
            stack[-1].append(_left_branching(children))
        else:
            stack[-1].append(token)
    if len(stack) != 1 or not stack[0]:
        raise ValueError(f"unbalanced or empty bracketed string {text!r}.")
    tree = _left_branching(stack[0])
    return tree, tree_leaves(tree)


def _left_branching(children):
    tree = children[0]
    for child in children[1:]:
        tree = (tree, child)
    return tree
