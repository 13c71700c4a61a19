"""``glomo extract``: graphs of a saved predictor over sentences, checked against a direct call."""

import json

import numpy as np
import pytest

from _run_dirs import pretrained_run
from glomo_tf import cli
from glomo_tf.data.vocabulary import Tokenizer

LINES = ["the cat sat on the mat", "a dog ran in the park", "the dog sat on a cat"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A directory laid out like a glomo pretrain run: graph_predictor.keras and tokenizer/."""
    directory = tmp_path_factory.mktemp("run")
    # Sharper scores than a fresh initialisation gives, so the graphs have structure to check.
    tokenizer, predictor = pretrained_run(directory, LINES, seed=7, sharpen=30.0, hidden_dim=8,
                                          num_layers=2, num_heads=2, conv_layers=1)
    return directory, tokenizer, predictor


def test_json_and_table_match_the_predictor(run_dir, tmp_path, capsys):
    directory, tokenizer, predictor = run_dir
    sentences = ["the cat sat on the mat", "a dog ran"]
    out_json, out_png = tmp_path / "g.json", tmp_path / "g.png"
    assert cli.main(["extract", "--run", str(directory), "--text", sentences[0], "--text",
                     sentences[1], "--json", str(out_json), "--png", str(out_png),
                     "--top-k", "1"]) == 0
    printed = capsys.readouterr().out
    with open(out_json, encoding="utf-8") as handle:
        items = json.load(handle)
    with open(out_png, "rb") as handle:
        assert handle.read(4) == b"\x89PNG"
    # Independent path: ids from the tokenizer, graphs from the in-memory predictor.
    ids = tokenizer.encode(sentences, max_length=16).numpy()
    direct = predictor(ids, training=False)["graphs"].numpy().mean(axis=3)  # [B, 2, L, T, T]
    for i, item in enumerate(items):
        n = int((ids[i] != 0).sum())
        assert item["tokens"] == sentences[i].split()
        graphs = np.array(item["graphs"])
        assert graphs.shape == (2, 2, n, n)
        np.testing.assert_allclose(graphs, direct[i, :, :, :n, :n], atol=1e-4)
        # Each head's row sums to 1 or 0, so the mean of 2 heads sums to 0, 1/2 or 1.
        halves = 2 * graphs.sum(-1)
        assert np.all(np.abs(halves - np.round(halves)) < 1e-3)
        assert np.all(np.triu(graphs[0]) == 0) and np.all(np.tril(graphs[1]) == 0)
    # The table's forward layer-1 source of the last unit of sentence 1 is the argmax (the first
    # one among ties).
    last = direct[0, 0, 0, 5, :6]
    source = int(np.flatnonzero(last >= last.max() - 1e-6)[0])
    line = [l for l in printed.splitlines() if l.strip().startswith("5 mat")][0]
    assert f"fw1: {sentences[0].split()[source]}@{source} {last[source]:.2f}" in line


@pytest.mark.parametrize("argv, fragment", [
    (["--text", "x"], "Say which predictor"),
    (["--run", "/nonexistent/run", "--text", "x"], "is not a directory"),
    (["--model", "/nonexistent.keras", "--tokenizer", "/tmp", "--text", "x"], "No graph predictor"),
])
def test_bad_paths_are_usage_errors(capsys, argv, fragment):
    assert cli.main(["extract", *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_no_sentences_and_a_foreign_vocabulary_are_refused(run_dir, tmp_path, capsys):
    directory = run_dir[0]
    assert cli.main(["extract", "--run", str(directory)]) == 2
    assert "No sentences" in capsys.readouterr().err
    other = Tokenizer.build(["completely different words here and more of them"])
    other.save(tmp_path / "other")
    assert cli.main(["extract", "--model", str(directory / "graph_predictor.keras"),
                     "--tokenizer", str(tmp_path / "other"), "--text", "words"]) == 2
    assert "Vocabulary mismatch" in capsys.readouterr().err


def test_a_length_whose_graphs_do_not_fit_is_refused_and_a_cut_is_reported(run_dir, capsys):
    """--max-length 50000 on a 50,000-word text: refused with the memory it would take (no
    predictor call); the default --max-length cuts the text and says so."""
    directory = run_dir[0]
    text = " ".join(["the cat sat on the mat"] * 8334)  # 50,004 words
    assert cli.main(["extract", "--run", str(directory), "--text", text, "--max-length",
                     "50000", "--top-k", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "GiB" in err and "--max-length" in err, err
    assert "50000 units" in err
    assert cli.main(["extract", "--run", str(directory), "--text", text, "--top-k", "0",
                     "--stats"]) == 0
    out = capsys.readouterr().out
    assert "Note: 1 sentence(s) are longer than --max-length 128 units (the longest has 50004)" \
        in out
    assert "Graph statistics over 128 units" in out


def test_graph_statistics_on_hand_made_graphs():
    """Two sentences, 1 layer, 2 heads, values worked out by hand."""
    from glomo_tf.analysis import GraphStatistics

    ids = np.array([[5, 1, 6, 7], [8, 9, 0, 0]])  # <unk> = 1 at position 1; sentence 2 has 2 units
    g = np.zeros((2, 2, 1, 2, 4, 4), np.float32)
    # Sentence 1, forward: rows 1..3 have sources. Head 0: row 1 <- 0 (1.0); row 2 <- 1 (0.5),
    # 0 (0.5); row 3 dead. Head 1: row 1 <- 0; row 2 <- 0; row 3 <- 1 (0.25), 2 (0.75).
    g[0, 0, 0, 0, 1, 0] = 1.0
    g[0, 0, 0, 0, 2, [1, 0]] = 0.5
    g[0, 0, 0, 1, 1, 0] = 1.0
    g[0, 0, 0, 1, 2, 0] = 1.0
    g[0, 0, 0, 1, 3, [1, 2]] = [0.25, 0.75]
    # Sentence 2, forward: row 1 <- 0 in both heads. Backward: only row 0 of sentence 2 (<- 1),
    # head 0 only; every other backward row with a source is dead.
    g[1, 0, 0, :, 1, 0] = 1.0
    g[1, 1, 0, 0, 0, 1] = 1.0
    stats = GraphStatistics()
    stats.update(g[:1], ids[:1])  # two batches accumulate
    stats.update(g[1:], ids[1:])
    result = stats.result()
    assert (result["units"], result["unk_share"]) == (6, pytest.approx(1 / 6))
    forward = result["forward"][0]
    # Rows with a source: sentence 1 rows 1-3 and sentence 2 row 1, times 2 heads = 8; 7 live.
    assert forward["live"] == pytest.approx(7 / 8)
    # Live rows' weight 7 (each sums to 1). Adjacent: h0 r1 1, h0 r2 0.5, h1 r1 1, h1 r3 0.75,
    # s2 2 x 1 = 5.25. Distance: h0: 1 + (0.5 + 1); h1: 1 + 2 + (0.5 + 0.75); s2: 2 = 8.75.
    assert forward["adjacent"] == pytest.approx(5.25 / 7)
    assert forward["mean_distance"] == pytest.approx(8.75 / 7)
    assert forward["sources"] == pytest.approx((1 + 2 + 1 + 1 + 2 + 2) / 7)
    entropy = np.log(2) - (0.25 * np.log(0.25) + 0.75 * np.log(0.75))  # h0 row 2, h1 row 3
    assert forward["entropy"] == pytest.approx(entropy / 7)
    assert forward["unk"] == pytest.approx((0.5 + 0.25) / 7)  # weight on position 1 of sentence 1
    backward = result["backward"][0]
    # Backward rows with a source: sentence 1 rows 0-2, sentence 2 row 0: 4 x 2 heads; 1 live.
    assert backward["live"] == pytest.approx(1 / 8)
    assert (backward["adjacent"], backward["unk"]) == (pytest.approx(1.0), pytest.approx(0.0))


def test_stats_flag_over_batches_matches_one_call(run_dir, tmp_path, capsys):
    from glomo_tf.analysis import GraphStatistics

    directory, tokenizer, predictor = run_dir
    sentences = LINES + ["the mat ran", "a park sat on the dog cat"]
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("\n".join(sentences[:2]) + "\n", encoding="utf-8")
    second.write_text("\n".join(sentences[2:]) + "\n", encoding="utf-8")
    assert cli.main(["extract", "--run", str(directory), "--file", str(first), str(second),
                     "--stats", "--top-k", "0", "--batch-size", "2",
                     "--stats-json", str(tmp_path / "stats.json")]) == 0
    printed = capsys.readouterr().out
    ids = tokenizer.encode(sentences, max_length=128).numpy()
    expected = GraphStatistics()
    expected.update(predictor(ids, training=False)["graphs"].numpy(), ids)
    result = expected.result()
    assert f"over {result['units']} units" in printed
    row = [l for l in printed.splitlines() if l.strip().startswith("backward 2")][0]
    values = [float(v) for v in row.split()[2:]]
    np.testing.assert_allclose(values, [result["backward"][1][k] for k in GraphStatistics.KEYS],
                               atol=1.5e-3)
    # The uniform reference row, by hand: the forward row of unit t spreads 1/t over its t
    # sources, so entropy log t and t sources; weight on adjacent units 1/t per row.
    row = [l for l in printed.splitlines() if l.strip().startswith("uniform forward")][0]
    live, adjacent, distance, sources, entropy, _ = [float(v) for v in row.split()[2:]]
    rows = [t for n in (ids != 0).sum(axis=1) for t in range(1, n)]
    assert live == 1.0
    assert sources == pytest.approx(np.mean(rows), abs=1.5e-3)
    assert entropy == pytest.approx(np.mean(np.log(rows)), abs=1.5e-3)
    assert adjacent == pytest.approx(np.mean([1 / t for t in rows]), abs=1.5e-3)
    assert distance == pytest.approx(np.mean([(t + 1) / 2 for t in rows]), abs=1.5e-3)
    # --stats-json holds the same numbers, unrounded.
    import json

    saved = json.loads((tmp_path / "stats.json").read_text())
    for key in GraphStatistics.KEYS:
        assert saved["predictor"]["backward"][1][key] == pytest.approx(result["backward"][1][key])
    assert saved["uniform"]["forward"][0]["entropy"] == pytest.approx(entropy, abs=1.5e-3)
    assert saved["files"] == [str(first), str(second)]
    assert cli.main(["extract", "--run", str(directory), "--text", "a b",
                     "--stats-json", str(tmp_path / "x.json")]) == 2
    assert "pass --stats too" in capsys.readouterr().err
