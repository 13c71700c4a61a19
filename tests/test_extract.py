"""``glomo extract``: graphs of a saved predictor over sentences, checked against a direct call."""

import json

import keras
import numpy as np
import pytest

from glomo_tf import GraphPredictor, cli, save_graph_predictor
from glomo_tf.data.vocabulary import Tokenizer

LINES = ["the cat sat on the mat", "a dog ran in the park", "the dog sat on a cat"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A directory laid out like a glomo pretrain run: graph_predictor.keras and tokenizer/."""
    keras.utils.set_random_seed(7)
    directory = tmp_path_factory.mktemp("run")
    tokenizer = Tokenizer.build(LINES)
    tokenizer.save(directory / "tokenizer")
    predictor = GraphPredictor(tokenizer.vocabulary_size, hidden_dim=8, num_layers=2,
                               num_heads=2, conv_layers=1)
    predictor.build((None, None))
    # Sharper scores than a fresh initialisation gives, so the graphs have structure to check.
    predictor.query_kernel.assign(predictor.query_kernel * 30.0)
    save_graph_predictor(predictor, str(directory / "graph_predictor.keras"))
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
