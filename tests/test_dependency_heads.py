"""Graphs against gold syntax: the CoNLL-U reader, the head-agreement scores (planted graphs and
NumPy loops as the references) and ``glomo extract --heads``."""

import json
import os

import numpy as np
import pytest

from _run_dirs import pretrained_run
from glomo_tf import cli
from glomo_tf.analysis import dependency_agreement, head_agreement, token_graphs
from glomo_tf.data.conllu import DependencySentence, read_conllu
from _paths import REPO

UD_DEV = os.path.join(REPO, "..", "shared", "data", "ud_ewt",
                      "en_ewt-ud-dev.conllu")

# "I didn't go home ." with "didn't" a multi-word token (did + n't) and an empty node 3.1.
TINY = """# sent_id = a
# text = I didn't go home.
1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_\t_
2-3\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdid\tdo\tAUX\t_\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_
3.1\tgo\tgo\tVERB\t_\t_\t_\t_\t4:conj\t_
4\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_
5\thome\thome\tADV\t_\t_\t4\tadvmod\t_\tSpaceAfter=No
6\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_

# sent_id = b
1\tdogs\tdog\tNOUN\t_\t_\t2\tnsubj\t_\t_
2\tbark\tbark\tVERB\t_\t_\t0\troot\t_\t_
"""


def write(tmp_path, text, name="tiny.conllu"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_reader_keeps_surface_tokens_and_maps_words_to_them(tmp_path):
    first, second = read_conllu(write(tmp_path, TINY))
    assert first.text == "I didn't go home."
    assert first.tokens == ("I", "didn't", "go", "home", ".")
    assert first.words == ("I", "did", "n't", "go", "home", ".")
    assert first.token_of == (0, 1, 1, 2, 3, 4)
    assert first.heads == (3, 3, 3, -1, 3, 3)
    assert first.relations[-1] == "punct"
    assert second.text == "dogs bark" and second.heads == (1, -1)


@pytest.mark.parametrize("line, fragment", [
    ("1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_", "10 tab-separated columns"),
    ("2\tI\tI\tPRON\t_\t_\t0\troot\t_\t_", "expected word 1"),
    ("1\tI\tI\tPRON\t_\t_\tx\troot\t_\t_", "HEAD must be a word number"),
    ("1\tI\tI\tPRON\t_\t_\t3\tnsubj\t_\t_", "outside the sentence"),
    ("1-3\tI\t_\t_\t_\t_\t_\t_\t_\t_\n1\tI\tI\tPRON\t_\t_\t0\troot\t_\t_",
     "covers words up to 3"),
])
def test_reader_names_the_line_that_is_not_conllu(tmp_path, line, fragment):
    path = write(tmp_path, f"# text = x\n{line}\n\n")
    with pytest.raises(ValueError, match=fragment) as error:
        read_conllu(path)
    assert f"{path}:" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="holds no CoNLL-U sentence"):
        read_conllu(write(tmp_path, "# only a comment\n\n", "empty.conllu"))


def test_reader_reads_the_shared_ud_file_whole():
    sentences = read_conllu(UD_DEV)
    # Independent count: word lines are those whose ID is a plain number.
    with open(UD_DEV, encoding="utf-8") as handle:
        ids = [line.split("\t", 1)[0] for line in handle if line[:1].isdigit()]
    assert len(sentences) == 2001
    assert sum(len(s.words) for s in sentences) == sum(i.isdigit() for i in ids)
    assert sum(len(s.tokens) for s in sentences) == sum(
        i.isdigit() for i in ids) - sum(int(b) - int(a) for a, b in
                                        (i.split("-") for i in ids if "-" in i))
    assert all(sum(h < 0 for h in s.heads) == 1 for s in sentences)  # one root each


def test_token_graphs_average_rows_and_sum_columns_as_a_loop_does():
    rng = np.random.default_rng(0)
    graphs = rng.random((2, 3, 2, 7, 7)).astype("float32")
    spans = [(0, 1), (1, 4), (4, 4), (4, 7)]  # a token of 3 units, one of none
    out = token_graphs(graphs, spans)
    expected = np.zeros((2, 3, 2, 4, 4))
    for a, (i0, i1) in enumerate(spans):
        for b, (j0, j1) in enumerate(spans):
            if i1 > i0:
                expected[..., a, b] = graphs[..., i0:i1, j0:j1].sum(-1).mean(-1)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def sentence(heads, relations=None):
    n = len(heads)
    return DependencySentence(" ".join(map(str, range(n))), tuple(map(str, range(n))),
                              tuple(map(str, range(n))), tuple(range(n)), tuple(heads),
                              tuple(relations or ["dep"] * n))


def graphs_pointing_at(targets, n, layers=2, heads=3):
    """Graphs [2, L, K, n, n] whose row t puts all weight on targets[t] (in the direction that
    can see it), the other direction's row uniform."""
    g = np.zeros((2, layers, heads, n, n), "float32")
    for t in range(n):
        for z, side in ((0, range(t)), (1, range(t + 1, n))):
            side = list(side)
            if side:
                g[z, :, :, t, side] = 1.0 / len(side)
        target = targets[t]
        if target is not None:
            z = 0 if target < t else 1
            g[z, :, :, t, :] = 0.0
            g[z, :, :, t, target] = 1.0
    return g


def test_planted_heads_agree_everywhere_and_uniform_rows_nowhere():
    heads = [1, -1, 1, 4, 2, 1]  # word 3's head comes after it; the root is word 1
    s = sentence(heads)
    planted = graphs_pointing_at([h if h >= 0 else None for h in heads], 6)
    result = dependency_agreement([planted], [s])
    assert result["words"] == 5 and result["left_out"] == 0
    assert np.allclose(result["per_head"], 1.0) and result["best_head"]["share"] == 1.0
    uniform = graphs_pointing_at([None] * 6, 6)
    result = dependency_agreement([uniform], [s])
    # A uniform row ties at the top (a miss) unless one source is admissible: word 0 backward
    # sees 5 sources, word 2 forward 2, word 3 backward 2, word 4 forward 4, word 5 forward 5:
    # none has one, so nothing agrees.
    assert result["best_head"]["share"] == 0.0
    # Chance and the offset rules by hand: offsets 1 (w0, bw), 1 (w2, fw), 1 (w3, bw),
    # 2 (w4, fw), 4 (w5, fw); admissible sources 5, 2, 2, 4, 5.
    assert result["chance"] == pytest.approx(np.mean([1 / 5, 1 / 2, 1 / 2, 1 / 4, 1 / 5]))
    assert result["offset_rules"]["forward"] == {1: 1 / 3, 2: 1 / 3, 3: 0.0, 4: 1 / 3}
    assert result["offset_rules"]["backward"] == {1: 1.0}
    assert result["best_offset_rule"] == {"forward": 1, "backward": 1, "share": 3 / 5}
    assert result["adjacent"] == pytest.approx(3 / 5)
    assert result["forward_share"] == pytest.approx(3 / 5)


def test_one_head_that_finds_heads_is_the_best_and_averaging_dilutes_it():
    heads = [1, -1, 1, 4, 2, 1]
    s = sentence(heads, ["nsubj", "root", "obj", "det", "obj", "punct"])
    g = graphs_pointing_at([None] * 6, 6)  # uniform everywhere...
    planted = graphs_pointing_at([h if h >= 0 else None for h in heads], 6)
    g[:, 1, 2] = planted[:, 1, 2]  # ...but layer 2, head 3
    result = dependency_agreement([g], [s], min_relation_words=2)
    assert result["best_head"] == {"layer": 2, "head": 3, "share": 1.0}
    assert np.count_nonzero(np.array(result["per_head"])) == 1
    # Averaged with two uniform heads, the planted head's source still wins every row.
    assert result["heads_averaged"] == [0.0, 1.0]
    assert result["by_relation"] == {"obj": {"words": 2, "best_head": 1.0,
                                             "best_offset_rule": 0.5}}


def test_words_in_one_token_and_past_the_cut_are_left_out():
    # Words 1 and 2 are one token (a multi-word token); the graph covers 2 of 3 tokens.
    s = DependencySentence("a bc d", ("a", "bc", "d"), ("a", "b", "c", "d"), (0, 1, 1, 2),
                           (1, -1, 1, 1), ("x", "root", "x", "x"))
    g = graphs_pointing_at([1, None], 2)
    result = dependency_agreement([g], [s])
    assert result["words"] == 1 and result["left_out"] == 1 and result["best_head"]["share"] == 1


def test_head_agreement_scores_a_predictor_against_a_direct_call(tmp_path):
    lines = ["the cat sat on the mat", "a dog ran in the park"]
    tokenizer, predictor = pretrained_run(tmp_path, lines, seed=3, sharpen=30.0, hidden_dim=8,
                                          num_layers=2, num_heads=2, conv_layers=1)
    s = DependencySentence("the cat sat", ("the", "cat", "sat"), ("the", "cat", "sat"),
                           (0, 1, 2), (1, 2, -1), ("det", "nsubj", "root"))
    result = head_agreement(predictor, tokenizer, [s, s], batch_size=1)
    ids = tokenizer.encode(["the cat sat"], max_length=3).numpy()
    direct = predictor(ids, training=False)["graphs"].numpy()[0]
    assert result == {"sentences": 2, "max_length": 128,
                      **dependency_agreement([direct, direct], [s, s])}
    cut = head_agreement(predictor, tokenizer, [s], max_length=2)
    assert cut["words"] == 1 and cut["left_out"] == 1


def test_extract_heads_prints_and_writes_the_scores(tmp_path, capsys):
    lines = ["i did go home", "dogs bark"]
    pretrained_run(tmp_path / "run", lines, seed=3, sharpen=30.0, hidden_dim=8, num_layers=2,
                   num_heads=2, conv_layers=1)
    conllu, out = write(tmp_path, TINY), tmp_path / "heads.json"
    assert cli.main(["extract", "--run", str(tmp_path / "run"), "--heads", conllu,
                     "--heads-json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    # "I didn't go home ." has 5 words with a head; n't and did share a token, not their head's.
    assert result["words"] == 5 + 1 and result["sentences"] == 2
    assert f"best head            {result['best_head']['share']:.3f}" in printed
    assert f"previous/next word   {result['adjacent']:.3f}" in printed


@pytest.mark.parametrize("argv, fragment", [
    (["--heads", "/nonexistent.conllu"], "does not exist"),
    (["--heads", "{conllu}", "--text", "x"], "leave out --text"),
    (["--heads-json", "x.json", "--text", "x"], "pass --heads"),
])
def test_extract_heads_usage_errors(tmp_path, capsys, argv, fragment):
    conllu = write(tmp_path, TINY)
    argv = [a.format(conllu=conllu) for a in argv]
    assert cli.main(["extract", "--preset", "glomo_planted_demo", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1
