"""``glomo transfer --dataset listops`` and ``examples/listops_graphs.py``: a ListOps file read
in the original format (bare digits included), the example's tiny run end to end (pretraining,
the graphs' agreement with the gold parents, transfer, saved classifiers) and its evaluate
command on a file of one's own."""

import json

import numpy as np
import pytest

from glomo_tf import cli
from glomo_tf.data.listops import generate_listops, write_listops

from _examples import load_example

TINY = ["--embedding-dim", "16", "--rnn-units", "8", "--attention-heads", "2", "--dropout", "0.0",
        "--batch-size", "25", "--verbose", "2"]


@pytest.fixture(scope="module")
def example():
    return load_example("listops_graphs")


def test_transfer_reads_listops_files_with_a_test_file(tmp_path):
    train, test = tmp_path / "train.tsv", tmp_path / "test.tsv"
    write_listops(train, generate_listops(100, seed=0, max_depth=3, max_length=20))
    examples = generate_listops(19, seed=1, max_depth=3, max_length=20)
    write_listops(test, examples)
    with open(test, "a", encoding="utf-8") as handle:
        handle.write("7\t7\n")  # a bare digit is a valid expression of the original format
    out = tmp_path / "out"
    assert cli.main(["transfer", "--dataset", "listops", "--file", str(train), "--test-file",
                     str(test), "--variants", "baseline", "--seeds", "0", "--epochs", "1",
                     "--save-models", "--output-dir", str(out), *TINY]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    run = results["runs"][0]
    assert (run["train_examples"], run["validation_examples"], run["test_examples"]) == (90, 10, 20)
    assert results["config"]["class_names"] == [str(v) for v in range(10)]
    assert (out / "models" / "baseline-seed0.keras").is_file()


def test_a_bad_listops_line_exits_2_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("3\t( ( [MIN 3 ) ] )\n12\t( ( [MAX 1 ) ] )\n", encoding="utf-8")
    assert cli.main(["transfer", "--dataset", "listops", "--file", str(bad), "--variants",
                     "baseline", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{bad}:2:" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_example_tiny_run_end_to_end_and_evaluate(example, tmp_path, capsys):
    out = tmp_path / "result.json"
    models = tmp_path / "models"
    result = example.main([
        "--run-dir", str(tmp_path / "run"), "--pretrain-size", "300", "--train-size", "200",
        "--test-size", "40", "--max-depth", "3", "--max-length", "20", "--hidden-dim", "16",
        "--pretrain-epochs", "1", "--seeds", "0", "--variants", "baseline", "glomo_rnn",
        "--units", "8", "--epochs", "1", "--output", str(out), "--models-dir", str(models),
        "--verbose", "2"])
    recorded = json.loads(out.read_text(encoding="utf-8"))
    assert recorded["agreement"]["best_head"] == result["agreement"]["best_head"]
    agreement = recorded["agreement"]
    assert 0.0 <= agreement["chance"] < 1.0 and agreement["units"] > 40
    assert np.asarray(agreement["per_head"]).shape == (2, 4)  # 2 layers x 4 heads
    assert agreement["unknown_units"] == 0
    assert [r["variant"] for r in recorded["transfer"]["runs"]] == ["baseline", "glomo_rnn"]
    assert (models / "test.tsv").is_file() and (models / "baseline-seed0.keras").is_file()
    # evaluate: a saved classifier on a file of one's own, bare digits included.
    own = tmp_path / "own.tsv"
    examples = generate_listops(9, seed=7, max_depth=3, max_length=20)
    write_listops(own, examples)
    with open(own, "a", encoding="utf-8") as handle:
        handle.write("4\t4\n")
    capsys.readouterr()
    kept = tmp_path / "evaluations.json"
    scored = example.main(["evaluate", "--model", str(models / "glomo_rnn-seed0.keras"),
                           "--tokenizer", str(models / "tokenizer"), "--file", str(own),
                           "--output", str(kept), "--name", "glomo_rnn"])
    assert scored["examples"] == 10 and scored["accuracy"] * 10 == pytest.approx(
        round(scored["accuracy"] * 10))
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == scored
    assert sum(g["examples"] for g in scored["by_operator"].values()) == 10
    assert scored["by_operator"]["digit"]["examples"] == 1 and "0" in scored["by_depth"]
    entry = json.loads(kept.read_text(encoding="utf-8"))["evaluations"]["glomo_rnn"]
    assert entry["command"].startswith("python examples/listops_graphs.py evaluate --model")
    assert {k: v for k, v in entry.items() if k != "command"} == scored


def test_the_breakdown_counts_each_operator_and_depth(example):
    from glomo_tf.data.listops import parse_line

    lines = ["9\t[MAX 2 9 ]", "1\t[MIN [MAX 1 2 ] 1 ]", "4\t4", "3\t[SM [MIN 1 2 ] [MAX 1 2 ] ]",
             "2\t[MAX [SM 1 1 ] 0 ]"]
    examples = [parse_line(line) for line in lines]
    assert [example.operator_depth(e.tokens) for e in examples] == [1, 2, 0, 2, 2]
    result = example.breakdown(examples, [True, False, True, True, False])
    assert result["by_operator"] == {
        "[MAX": {"examples": 2, "accuracy": 0.5}, "[MIN": {"examples": 1, "accuracy": 0.0},
        "[SM": {"examples": 1, "accuracy": 1.0}, "digit": {"examples": 1, "accuracy": 1.0}}
    assert result["by_depth"] == {"0": {"examples": 1, "accuracy": 1.0},
                                  "1": {"examples": 1, "accuracy": 1.0},
                                  "2": {"examples": 3, "accuracy": round(1 / 3, 4)}}
    assert result["by_operator_and_depth"] == {
        "[MAX 1": {"examples": 1, "accuracy": 1.0}, "[MAX 2": {"examples": 1, "accuracy": 0.0},
        "[MIN 2": {"examples": 1, "accuracy": 0.0}, "[SM 2": {"examples": 1, "accuracy": 1.0},
        "digit 0": {"examples": 1, "accuracy": 1.0}}
