"""Tests of the propositional-logic reader on small files written here and on the real files in
../shared/data/propositionallogic (counts checked with ``wc -l``)."""

import os

import numpy as np
import pytest

from glomo_tf.data.logic import (BRACKETED_IDS, BRACKETED_VOCABULARY, RELATIONS, encode_logic,
                                 load_logic, parse_line, read_logic_file, train_validation_split)
from _paths import REPO

DATA = os.path.join(REPO, "..", "shared",
                    "data", "propositionallogic")


def test_a_line_by_hand():
    pair = parse_line("|\t( not ( e ( or ( not c ) ) ) )\t( d ( and e ) )", 3)
    assert RELATIONS[pair.relation] == "|"
    assert pair.left == ("not", "e", "or", "not", "c")
    assert pair.left_tree == ("not", ("e", ("or", ("not", "c"))))
    assert pair.right == ("d", "and", "e") and pair.right_tree == ("d", ("and", "e"))
    assert pair.operators == 3
    assert pair.left_bracketed == tuple("( not ( e ( or ( not c ) ) ) )".split())
    bare = parse_line("=\ta\ta")
    assert bare.left == ("a",) and bare.left_tree == "a"


def test_bad_lines():
    with pytest.raises(ValueError, match="relation"):
        parse_line("?\ta\tb")
    with pytest.raises(ValueError, match="relation"):
        parse_line("=\ta")
    with pytest.raises(ValueError, match="unknown token"):
        parse_line("=\t( a ( xor b ) )\ta")


def test_files_split_and_encoding(tmp_path):
    lines = [f"{RELATIONS[i % 7]}\t( a ( and b ) )\t( not c )" for i in range(20)]
    (tmp_path / "train2").write_text("\n".join(lines) + "\n\n")
    (tmp_path / "train3").write_text(lines[0] + "\n")
    pairs = load_logic(str(tmp_path), "train", [2, 3])
    assert len(pairs) == 21 and pairs[-1].operators == 3
    assert [p.relation for p in pairs[:7]] == list(range(7))
    train, validation = train_validation_split(pairs)
    assert len(validation) == 2 and len(train) == 19
    assert validation == [pairs[9], pairs[19]]
    left, right, relations = encode_logic(pairs)
    assert left.shape == (21, 3) and right.shape == (21, 3)
    assert (right[0] > 0).sum() == 2 and relations[:7].tolist() == list(range(7))
    # Read as written: the brackets are two more ids after the tokens' (which keep theirs).
    left_b, right_b, relations_b = encode_logic(pairs, brackets=True)
    assert left_b.shape == (21, 7) and (relations_b == relations).all()
    assert [BRACKETED_VOCABULARY[i] for i in left_b[0]] == "( a ( and b ) )".split()
    assert [BRACKETED_VOCABULARY[i] for i in right_b[0] if i] == "( not c )".split()
    assert set(left_b[0]) - {BRACKETED_IDS["("], BRACKETED_IDS[")"]} == set(left[0])
    with pytest.raises(ValueError, match="does not exist"):
        load_logic(str(tmp_path), "test", [9])
    with pytest.raises(ValueError, match="split"):
        load_logic(str(tmp_path), "dev", [1])


def test_the_real_files():
    counts = {"train0": 30, "train6": 32952, "test7": 4707, "test12": 853}
    for name, count in counts.items():
        assert len(read_logic_file(os.path.join(DATA, name))) == count, name
    train = load_logic(DATA, "train", range(7))
    assert len(train) == 135529  # the thesis' Table 4.2 "Full" training size
    def operators(tokens):
        return sum(t in ("not", "and", "or") for t in tokens)

    # In testK the larger formula of a pair holds exactly K operators (K = 3 here).
    test = load_logic(DATA, "test", [3])
    assert {max(operators(p.left), operators(p.right)) for p in test} == {3}
    relations = np.bincount([p.relation for p in train], minlength=7)
    assert np.all(relations > 0)
