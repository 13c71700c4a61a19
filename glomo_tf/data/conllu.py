"""Dependency trees from CoNLL-U files (Universal Dependencies), to score graphs against syntax.

A CoNLL-U file holds one word a line (ten tab-separated columns: ``ID FORM LEMMA UPOS XPOS FEATS
HEAD DEPREL DEPS MISC``), ``#`` comment lines (``# text = ...`` the sentence as written) and a blank
line after each sentence. Two kinds of lines are not words of the tree:

* a **multi-word token** ``4-5  didn't``: the surface token that the syntactic words 4 and 5
  (``did``, ``n't``) are written as. Graphs are drawn over text as written, so a sentence's
  :attr:`DependencySentence.tokens` are its surface tokens (a multi-word token once, in place of
  its words) and each word points at the token that writes it;
* an **empty node** ``8.1`` (enhanced dependencies only): skipped.

:func:`read_conllu` reads a file into :class:`DependencySentence` objects;
:func:`glomo_tf.analysis.head_agreement` scores a predictor's graphs against their heads.

Example:

>>> import tempfile, os
>>> text = ("# text = I didn't go.\\n1\\tI\\tI\\tPRON\\t_\\t_\\t4\\tnsubj\\t_\\t_\\n"
...         "2-3\\tdidn't\\t_\\t_\\t_\\t_\\t_\\t_\\t_\\t_\\n2\\tdid\\tdo\\tAUX\\t_\\t_\\t4\\taux\\t_\\t_\\n"
...         "3\\tn't\\tnot\\tPART\\t_\\t_\\t4\\tadvmod\\t_\\t_\\n4\\tgo\\tgo\\tVERB\\t_\\t_\\t0\\troot\\t_\\t_\\n"
...         "5\\t.\\t.\\tPUNCT\\t_\\t_\\t4\\tpunct\\t_\\t_\\n\\n")
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.conllu")
>>> _ = open(path, "w").write(text)
>>> sentence, = read_conllu(path)
>>> sentence.tokens, sentence.token_of, sentence.heads
(('I', "didn't", 'go', '.'), (0, 1, 1, 2, 3), (3, 3, 3, -1, 3))
"""

import dataclasses
import re

COLUMNS = 10
_RANGE = re.compile(r"^(\d+)-(\d+)$")
_EMPTY_NODE = re.compile(r"^\d+\.\d+$")


@dataclasses.dataclass(frozen=True)
class DependencySentence:
    """One sentence of a CoNLL-U file.

    Attributes:
        text: the ``# text`` comment, or the surface tokens joined by spaces when there is none.
        tokens: the surface tokens in order (a multi-word token once, in place of its words).
        words: the syntactic words' forms (``ID`` 1, 2, ... as ``words[0]``, ``words[1]``, ...).
        token_of: for each word, the index of the surface token that writes it.
        heads: for each word, the index (into ``words``) of its head; -1 for the root.
        relations: for each word, its relation to the head (``DEPREL``: ``nsubj``, ``punct``...).
    """

    text: str
    tokens: tuple
    words: tuple
    token_of: tuple
    heads: tuple
    relations: tuple


def read_conllu(path):
    """The sentences of the CoNLL-U file at ``path``, a list of :class:`DependencySentence`.

    Raises:
        ValueError: a line that is not CoNLL-U (not 10 tab-separated columns, an ``ID`` or
            ``HEAD`` that is not a number, a head outside the sentence, words not numbered
            1, 2, ... in order, a multi-word range that does not cover the words after it), named
            with its line number; a file with no sentence.
        FileNotFoundError: no file at ``path``.
    """
    sentences = []
    lines = []  # (line number, columns) of the sentence being read
    text = None
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                if lines:
                    sentences.append(_sentence(path, lines, text))
                lines, text = [], None
                continue
            if line.startswith("#"):
                if line.startswith("# text =") and not lines:
                    text = line[len("# text ="):].strip()
                continue
            columns = line.split("\t")
            if len(columns) != COLUMNS:
                raise ValueError(f"{path}:{number}: a CoNLL-U word line has {COLUMNS} "
                                 f"tab-separated columns, this one {len(columns)}: {line[:60]!r}.")
            lines.append((number, columns))
    if lines:
        sentences.append(_sentence(path, lines, text))
    if not sentences:
        raise ValueError(f"{path} holds no CoNLL-U sentence (word lines of {COLUMNS} "
                         "tab-separated columns, a blank line after each sentence).")
    return sentences


def _sentence(path, lines, text):
    """A :class:`DependencySentence` of one sentence's ``(line number, columns)``."""
    tokens, words, token_of, heads, relations, numbers = [], [], [], [], [], []
    covered_until = 0  # the last word ID of the open multi-word token
    for number, columns in lines:
        ident, form, head, relation = columns[0], columns[1], columns[6], columns[7]
        if _EMPTY_NODE.match(ident):
            continue
        span = _RANGE.match(ident)
        if span:
            first, last = int(span.group(1)), int(span.group(2))
            if first != len(words) + 1 or last < first:
                raise ValueError(f"{path}:{number}: the multi-word token {ident} must start at "
                                 f"the next word, {len(words) + 1}, and end at or after it.")
            tokens.append(form)
            covered_until = last
            continue
        if not ident.isdigit() or int(ident) != len(words) + 1:
            raise ValueError(f"{path}:{number}: expected word {len(words) + 1}, got ID "
                             f"{ident!r} (words are numbered 1, 2, ... in order).")
        if not head.isdigit():
            raise ValueError(f"{path}:{number}: HEAD must be a word number (0 for the root), "
                             f"got {head!r}.")
        if int(ident) > covered_until:
            tokens.append(form)
        words.append(form)
        numbers.append(number)
        token_of.append(len(tokens) - 1)
        heads.append(int(head) - 1)
        relations.append(relation)
    if covered_until > len(words):
        raise ValueError(f"{path}:{lines[-1][0]}: a multi-word token covers words up to "
                         f"{covered_until}, the sentence has {len(words)}.")
    for number, head in zip(numbers, heads):
        if head >= len(words):
            raise ValueError(f"{path}:{number}: HEAD {head + 1} is outside the sentence of "
                             f"{len(words)} words.")
    return DependencySentence(text if text is not None else " ".join(tokens), tuple(tokens),
                              tuple(words), tuple(token_of), tuple(heads), tuple(relations))
