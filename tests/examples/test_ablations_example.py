"""examples/ablations_mr.py on tiny settings: each configuration pretrains with its own flag, all
are transferred on the same seeds, and the table pairs them with the full model."""

import importlib.util
import json
import os

import numpy as np
import pytest

from glomo_tf.evaluation import paired_t
from _paths import REPO

EXAMPLE = os.path.join(REPO, "examples", "ablations_mr.py")
WORDS = "the a film movie story actor plot scene was is and of it this that very quite".split()


def load_example():
    spec = importlib.util.spec_from_file_location("ablations_mr", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_configuration_changes_exactly_its_own_pretraining_setting():
    """Each ablation's command line, read by glomo pretrain's own parser, differs from the full
    model's in the paper's one setting only (also when --pretrain-args sets the same flag)."""
    from glomo_tf import cli

    example = load_example()
    args = example.parse_args(["--output-dir", "out", "--pretrain-args",
                               "--layers 3 --hidden-dim 64"])
    parser = cli.build_parser()

    def settings(config):
        namespace = vars(parser.parse_args(example.pretrain_argv(config, args, "run")))
        return {k: v for k, v in namespace.items() if k != "func"}

    full = settings("glomo")
    assert full["num_layers"] == 3 and full["hidden_dim"] == 64  # --pretrain-args override
    assert full["normalization"] == "squared_relu" and full["context_length"] == 3
    expected = {"decouple": {"coupled": True}, "sparse": {"normalization": "softmax"},
                "hierarchical": {"num_layers": 1}, "unit-level": {"objective": "sentence"},
                "sequence": {"context_length": 1}}
    assert set(expected) | {"glomo", "uniform"} == set(example.ABLATIONS)
    for config, changed in expected.items():
        own = settings(config)
        assert {k: v for k, v in own.items() if full[k] != v} == changed, config
    assert [example.label(c) for c in example.ABLATIONS] == [
        "glomo", "-decouple", "-sparse", "-hierarchical", "-unit-level", "-sequence", "uniform"]


@pytest.mark.slow
def test_ablations_pretrain_transfer_and_pair_with_the_full_model(tmp_path, capsys):
    rng = np.random.default_rng(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(WORDS, 12)) for _ in range(60)) + "\n")
    rows = []
    for i in range(120):
        words = list(rng.choice(WORDS, 6))
        words.insert(int(rng.integers(0, 7)), ("awful", "great")[i % 2])
        rows.append(f"{' '.join(words)}\t{('neg', 'pos')[i % 2]}")
    data = tmp_path / "task.tsv"
    data.write_text("text\tlabel\n" + "\n".join(rows) + "\n")
    example = load_example()
    argv = ["--output-dir", str(tmp_path / "out"), "--train", str(corpus), "--validation",
            "--epochs", "1", "--steps-per-epoch", "2", "--seeds", "0", "1", "--dataset", "file",
            "--configs", "sparse", "uniform",
            "--pretrain-args", "--vocab-size 100 --window 10 --shift 10 --hidden-dim 8 "
                               "--heads 2 --conv-layers 1 --positions all --batch-size 4",
            "--transfer-args", f"--file {data} --epochs 1 --embedding-dim 8 --rnn-units 4 "
                               "--attention-heads 1 --num-mixtures 1 --batch-size 16"]
    summary = example.main(argv)

    assert list(summary) == ["glomo", "-sparse", "uniform"]
    expected = {"glomo": {}, "sparse": {"normalization": "softmax"}}
    full = json.loads((tmp_path / "out" / "pretrain" / "glomo" / "config.json").read_text())
    for name, changed in expected.items():
        config = json.loads((tmp_path / "out" / "pretrain" / name / "config.json").read_text())
        assert config["hidden_dim"] == 8 and config["epochs"] == 1  # the shared budget
        differing = {k: v for k, v in config.items() if full.get(k) != v and k != "output_dir"}
        assert differing == changed, name

    # The paired columns, recomputed from each configuration's own results.json.
    def accuracies(name, variant):
        runs = json.loads((tmp_path / "out" / "transfer" / name / "results.json").read_text())
        assert {r["variant"] for r in runs["runs"]} == {variant}
        return {r["seed"]: r["accuracy"] for r in runs["runs"]}

    reference = accuracies("glomo", "glomo_rnn")
    assert sorted(reference) == [0, 1]
    for config in ("sparse", "uniform"):
        own = accuracies(config, "uniform" if config == "uniform" else "glomo_rnn")
        d = [own[s] - reference[s] for s in (0, 1)]
        entry = summary[example.label(config)]
        assert entry["mean_difference"] == pytest.approx(np.mean(d))
        assert entry["t"] == paired_t(d)
        assert entry["mean"] == pytest.approx(np.mean(list(own.values())))
    table = (tmp_path / "out" / "ablations.md").read_text()
    for config in ("glomo", "sparse", "uniform"):
        assert f"| {example.label(config)} | 2 |" in table
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in rows}) == 1  # every row has the header's columns

    # Running again reuses the finished pretraining runs and transfers (same command lines).
    capsys.readouterr()
    again = example.main(argv[:-4] + ["--configs", "sparse", "--transfer-args", argv[-1]])
    out = capsys.readouterr().out
    assert "[glomo] reusing" in out and "[sparse] reusing" in out
    assert f"[sparse] reusing {tmp_path / 'out' / 'transfer' / 'sparse'}" in out
    assert "] glomo transfer" not in out  # no transfer ran
    assert again["-sparse"] == summary["-sparse"]


def test_a_transfer_is_reused_only_with_the_same_command_line(tmp_path):
    example = load_example()
    out = tmp_path / "transfer"
    out.mkdir()
    argv = ["transfer", "--run", "r", "--seeds", "0", "1"]
    runs = [{"variant": "glomo_rnn", "seed": 0, "fold": None, "accuracy": 0.7}]
    assert example._finished_transfer(str(out), argv) is None  # nothing there
    (out / "results.json").write_text(json.dumps({"runs": runs}))
    assert example._finished_transfer(str(out), argv) is None  # no record of its command
    (out / "command.json").write_text(json.dumps(argv))
    assert example._finished_transfer(str(out), argv) == runs
    assert example._finished_transfer(str(out), argv[:-1]) is None  # other seeds: run again
