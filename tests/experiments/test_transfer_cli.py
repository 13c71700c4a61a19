"""``glomo transfer`` end to end on a planted-word task, its report, and its usage errors."""

import json

import keras
import numpy as np
import pytest

from _examples import load_example
from _run_dirs import pretrained_run
from _tiny_runs import CLASS_WORDS, TRANSFER_TINY as TINY, planted_rows
from glomo_tf import cli, evaluation
from glomo_tf.evaluation import paired_t, summarize
from glomo_tf.experiments.runs import split_indices


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """A labelled TSV file (columns sentence/class) and a tiny pretraining run directory."""
    root = tmp_path_factory.mktemp("transfer")
    rows = planted_rows()  # 160 / 18 / 20 examples: no partial training batch of 16
    data = root / "planted.tsv"
    data.write_text("id\tsentence\tclass\n" +
                    "".join(f"{i}\t{text}\t{label}\n" for i, (text, label) in enumerate(rows)),
                    encoding="utf-8")
    run_dir = root / "run"
    pretrained_run(run_dir, [text for text, _ in rows], seed=5, hidden_dim=8, num_layers=2,
                   num_heads=2, conv_layers=1)
    return root, data, run_dir


@pytest.mark.slow
def test_transfer_end_to_end_with_a_run_dir(task, capsys):
    root, data, run_dir = task
    out = root / "out"
    assert cli.main(["transfer", "--run", str(run_dir), "--dataset", "file", "--file", str(data),
                     "--text-column", "sentence", "--label-column", "class",
                     "--variants", "baseline", "glomo_embeddings", "--seeds", "0", "1",
                     "--epochs", "2", "--patience", "2", "--max-length", "16",
                     "--output-dir", str(out), *TINY]) == 0
    printed = capsys.readouterr().out
    with open(out / "results.json", encoding="utf-8") as handle:
        results = json.load(handle)
    runs = results["runs"]
    assert [(r["variant"], r["seed"]) for r in runs] == [
        ("baseline", 0), ("glomo_embeddings", 0), ("baseline", 1), ("glomo_embeddings", 1)]
    for r in runs:
        assert r["dataset"] == "file" and r["fold"] is None
        assert 1 <= r["epochs_run"] <= 2 and r["seconds"] > 0
        assert (r["train_examples"], r["validation_examples"], r["test_examples"]) == (160, 18, 20)
        assert r["accuracy"] * 20 == pytest.approx(round(r["accuracy"] * 20))  # exact count / 20
    baseline = [r["accuracy"] for r in runs if r["variant"] == "baseline"]
    assert min(baseline) > 0.8, f"the planted word decides the class; baseline got {baseline}"
    assert results["config"]["class_names"] == ["neg", "pos"]
    markdown = (out / "results.md").read_text(encoding="utf-8")
    table_rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in table_rows] == [
        "variant", "baseline", "glomo_embeddings", "variant - baseline", "glomo_embeddings"]
    mean = 100 * np.mean(baseline)
    assert f"| baseline | 2 | {mean:.2f} ± " in markdown
    assert "| baseline | 2 |" in printed and "Epoch 1/2" in printed  # table and fit's progress


def test_transfer_with_a_preset_gives_the_run_dirs_results(task, capsys):
    """--preset NAME_OR_DIR reads the same predictor and tokenizer as --run: equal accuracies."""
    from glomo_tf.data import Tokenizer
    from glomo_tf.presets import save_preset
    from glomo_tf.saving import load_graph_predictor

    root, data, run_dir = task
    preset = save_preset(load_graph_predictor(str(run_dir)),
                         Tokenizer.load(str(run_dir / "tokenizer")), root / "preset")
    common = ["--dataset", "file", "--file", str(data), "--text-column", "sentence",
              "--label-column", "class", "--variants", "glomo_rnn", "--seeds", "0",
              "--epochs", "1", "--patience", "1", "--max-length", "16", *TINY]
    accuracies = []
    for source, out in (["--run", str(run_dir)], "by_run"), (["--preset", preset], "by_preset"):
        assert cli.main(["transfer", *source, *common, "--output-dir", str(root / out)]) == 0
        with open(root / out / "results.json", encoding="utf-8") as handle:
            accuracies.append(json.load(handle)["runs"][0]["accuracy"])
    capsys.readouterr()
    assert accuracies[0] == accuracies[1]


@pytest.mark.slow
def test_graph_cache_gives_the_online_results_and_top_k_runs(task, capsys):
    """--graph-cache and the online default (--no-graph-cache): the same accuracies and epochs
    on this task, flags recorded; --top-k runs the GLoMo variant on its graphs' 2 heaviest
    sources per unit, cached or online; --graph-temperature sharpens the graphs on both paths
    alike."""
    root, data, run_dir = task
    common = ["transfer", "--run", str(run_dir), "--dataset", "file", "--file", str(data),
              "--text-column", "sentence", "--label-column", "class", "--variants",
              "glomo_embeddings", "--seeds", "0", "--epochs", "2", "--max-length", "16", *TINY]
    runs = (("--graph-cache",), (), ("--graph-cache", "--top-k", "2"), ("--top-k", "2"),
            ("--graph-cache", "--graph-temperature", "0.5"), ("--graph-temperature", "0.5"))
    results = {}
    for flags in runs:
        out = root / ("cache_out" + "".join(flags))  # not the end-to-end test's "out"
        assert cli.main([*common, *flags, "--output-dir", str(out)]) == 0
        results[flags] = json.loads((out / "results.json").read_text())
    printed = capsys.readouterr().out
    assert printed.count("Graph cache: 198 sentences") == 3 and "top-2, exact" in printed
    # Resumed with every run done: neither graphs nor runs are computed again.
    out = root / "cache_out--graph-cache"
    assert cli.main([*common, "--graph-cache", "--resume", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Graph cache" not in printed and "== file" not in printed
    assert json.loads((out / "results.json").read_text())["runs"] == results[
        ("--graph-cache",)]["runs"]
    cached, online, cached_top, online_top, cached_sharp, online_sharp = (results[flags]
                                                                          for flags in runs)
    assert (cached["config"]["graph_cache"], online["config"]["graph_cache"]) == (True, False)
    assert cached_top["config"]["top_k"] == 2 and cached["config"]["top_k"] is None
    assert (online_sharp["config"]["graph_temperature"], online["config"]["graph_temperature"]
            ) == (0.5, None)
    for a, b in ((cached, online), (cached_top, online_top), (cached_sharp, online_sharp)):
        assert [(r["accuracy"], r["epochs_run"]) for r in a["runs"]] == [
            (r["accuracy"], r["epochs_run"]) for r in b["runs"]]


@pytest.mark.slow
def test_transfer_without_a_run_builds_its_own_tokenizer(tmp_path, capsys):
    classes = tmp_path / "classes"
    classes.mkdir()
    for label, word in CLASS_WORDS.items():
        lines = [text for text, row_label in planted_rows(60, seed=1) if row_label == label]
        (classes / f"{label}.txt").write_text("\n".join(lines) + "\n")
    # --variants baseline uniform both run without a predictor; uniform alone keeps this short.
    assert cli.main(["transfer", "--dataset", "file", "--file", str(classes), "--variants",
                     "uniform", "--seeds", "3", "--epochs", "1",
                     "--output-dir", str(tmp_path / "out"), *TINY]) == 0
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert [(r["variant"], r["seed"], r["epochs_run"]) for r in runs] == [("uniform", 3, 1)]
    assert (runs[0]["train_examples"], runs[0]["test_examples"]) == (49, 6)
    assert "| uniform | 1 |" in capsys.readouterr().out


def test_resume_keeps_runs_trains_only_the_missing_ones_and_refuses_overwrites(tmp_path,
                                                                                 capsys):
    """A comparison continued with --resume and more seeds holds the kept run unchanged and a new
    run equal to the same seed run from scratch; without --resume, or with other settings, the
    directory is refused before any training and its results.json is left as it was."""
    data = tmp_path / "planted.tsv"
    data.write_text("text\tlabel\n" + "".join(f"{text}\t{label}\n"
                                             for text, label in planted_rows(60, seed=2)))
    common = ["transfer", "--dataset", "file", "--file", str(data), "--variants", "uniform",
              "--epochs", "1", *TINY]
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert cli.main([*common, "--seeds", "4", "--output-dir", str(out)]) == 0
    first = json.loads((out / "results.json").read_text())["runs"]
    assert "flags" not in json.loads((out / "results.json").read_text())["config"]
    capsys.readouterr()

    written = (out / "results.json").read_text()
    assert cli.main([*common, "--seeds", "4", "5", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds 1 run(s)" in err and "--resume" in err and len(err.splitlines()) == 1
    assert cli.main([*common, "--seeds", "5", "--dropout", "0.2", "--resume",
                     "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "other settings (dropout: 0.1 -> 0.2)" in err and len(err.splitlines()) == 1
    assert (out / "results.json").read_text() == written
    # Some earlier builds kept the command line's flag table in the settings: still resumable.
    earlier = json.loads(written)
    earlier["config"]["flags"] = {"seeds": "--seeds", "resume": "--resume"}
    (out / "results.json").write_text(json.dumps(earlier))

    assert cli.main([*common, "--seeds", "4", "5", "--resume", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Resuming: 1 run(s) kept" in printed
    assert "| uniform | seed 4" not in printed and "== file | uniform | seed 5" in printed
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["runs"][0] == first[0] and [r["seed"] for r in resumed["runs"]] == [4, 5]
    assert resumed["config"]["seeds"] == [4, 5]
    assert "| uniform | 2 |" in (out / "results.md").read_text()

    assert cli.main([*common, "--seeds", "5", "--output-dir", str(fresh)]) == 0
    scratch = json.loads((fresh / "results.json").read_text())["runs"][0]
    capsys.readouterr()
    assert (scratch["accuracy"], scratch["epochs_run"]) == (
        resumed["runs"][1]["accuracy"], resumed["runs"][1]["epochs_run"])

    # Everything done already: nothing is trained, the report is written again.
    assert cli.main([*common, "--seeds", "5", "--resume", "--output-dir", str(out)]) == 0
    assert "== file" not in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["runs"] == resumed["runs"]


def test_paired_comparison_numbers():
    runs = [{"variant": v, "seed": s, "fold": f, "accuracy": a} for v, s, f, a in [
        ("baseline", 0, 0, 0.70), ("baseline", 0, 1, 0.80), ("baseline", 1, None, 0.80),
        ("baseline", 2, None, 0.60), ("glomo_rnn", 0, 0, 0.80), ("glomo_rnn", 0, 1, 0.90),
        ("glomo_rnn", 1, None, 0.80), ("glomo_rnn", 2, None, 0.70)]]
    summary = summarize(runs, ["baseline", "glomo_rnn"])
    assert summary["variants"]["baseline"]["mean"] == pytest.approx((0.75 + 0.8 + 0.6) / 3)
    assert summary["variants"]["baseline"]["std"] == pytest.approx(np.std([.75, .8, .6], ddof=1))
    paired = summary["paired"]["glomo_rnn"]
    d = np.array([0.10, 0.0, 0.10])
    assert (paired["wins"], paired["ties"], paired["losses"]) == (2, 1, 0)
    assert paired["mean_difference"] == pytest.approx(d.mean())
    assert paired["t"] == pytest.approx(d.mean() / (d.std(ddof=1) / np.sqrt(3)))
    assert paired_t([0.1]) is None
    assert paired_t([1 / 12, 0.0833333333333334]) == float("inf")  # equal up to round-off

    assert "paired_with_uniform" not in summary  # no uniform runs

    # Each uniform graph is the reference of the learned graphs at its own place.
    placed = runs + [{"variant": v, "seed": s, "fold": None, "accuracy": a} for v, s, a in [
        ("uniform", 1, 0.70), ("uniform", 2, 0.70), ("uniform_rnn", 1, 0.90),
        ("uniform_rnn", 2, 0.60), ("glomo_embeddings", 1, 0.75), ("glomo_embeddings", 2, 0.65)]]
    summary = summarize(placed, ["glomo_embeddings", "glomo_rnn", "uniform", "uniform_rnn"])
    assert set(summary["paired_with_uniform"]) == {"glomo_embeddings", "glomo_rnn"}
    assert set(summary["paired_with_uniform_rnn"]) == {"glomo_rnn"}
    assert summary["paired_with_uniform_rnn"]["glomo_rnn"]["mean_difference"] == pytest.approx(
        np.mean([0.80 - 0.90, 0.70 - 0.60]))
    assert summary["paired_with_uniform"]["glomo_embeddings"]["mean_difference"] == (
        pytest.approx(np.mean([0.05, -0.05])))

    # Any variant can be the reference: baseline against glomo_rnn is the mirror image.
    mirrored = summarize(runs, ["baseline", "glomo_rnn"], reference="glomo_rnn")["paired"]
    assert set(mirrored) == {"baseline"}
    assert mirrored["baseline"]["mean_difference"] == pytest.approx(-d.mean())
    assert (mirrored["baseline"]["wins"], mirrored["baseline"]["losses"]) == (0, 2)


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset", "yelp"], "Unknown --dataset 'yelp'"),
    (["--dataset", "mr", "--run", "/nonexistent/run"], "is not a directory"),
    (["--dataset", "mr", "--variants", "glomo_rnn"], "need a pretrained graph predictor"),
    (["--dataset", "mr", "--variants", "baseline", "lstm"], "Unknown variant(s) lstm"),
    (["--dataset", "file"], "needs --file"),
    (["--dataset", "mr", "--model", "/x.keras"], "--model and --tokenizer go together"),
    (["--dataset", "mr", "--split", "kfold", "--folds", "1"], "--folds must be >= 2"),
    (["--dataset", "mr", "--transfer-dropout", "1.0"], "--transfer-dropout must be in [0, 1)"),
    (["--dataset", "mr", "--variants", "baseline", "--top-k", "0"], "--top-k must be >= 1"),
    (["--dataset", "mr", "--variants", "baseline", "--graph-temperature", "0"],
     "--graph-temperature must be a finite number above 0"),
    (["--dataset", "sst2_tfds", "--variants", "baseline", "--split", "kfold"], "official test set"),
    (["--dataset", "sst2", "--variants", "baseline", "--split", "kfold"], "official test set"),
    (["--dataset", "mr", "--variants", "gold_rnn"], "only --dataset listops carries"),
    (["--dataset", "mr", "--variants", "baseline", "--propagation-steps", "0"],
     "--propagation-steps must be >= 1"),
    (["--dataset", "mr", "--variants", "baseline", "--propagation-hidden-units", "0"],
     "--propagation-hidden-units must be >= 1"),
    (["--dataset", "squad", "--variants", "baseline", "--transfer-form", "propagation"],
     "reading comprehension transfers graphs through the fusion"),
])
def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys, argv, fragment):
    assert cli.main(["transfer", *argv, "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1


def test_a_single_class_file_and_a_missing_mr_folder_exit_2(tmp_path, capsys):
    single = tmp_path / "single.tsv"
    single.write_text("text\tlabel\ngood film\tpos\nfine film\tpos\n")
    assert cli.main(["transfer", "--dataset", "file", "--file", str(single), "--variants",
                     "baseline", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "single class" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["transfer", "--dataset", "mr", "--data-dir", str(tmp_path), "--variants",
                     "baseline", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "rt-polarity.neg, rt-polarity.pos not found" in err and "--data-dir" in err


def test_kfold_and_seeded_splits_carve_validation_from_training():
    parts = split_indices(50, "kfold", 5, seed=2)
    assert [fold for fold, *_ in parts] == [0, 1, 2, 3, 4]
    assert sorted(np.concatenate([test for *_, test in parts]).tolist()) == list(range(50))
    for _, train, validation, test in parts:
        assert (len(train), len(validation), len(test)) == (36, 4, 10)
        assert sorted(np.concatenate([train, validation, test]).tolist()) == list(range(50))
    (fold, train, validation, test), = split_indices(50, "seeded", 10, seed=2)
    assert fold is None and (len(train), len(validation), len(test)) == (41, 4, 5)
    assert sorted(np.concatenate([train, validation, test]).tolist()) == list(range(50))


@pytest.mark.parametrize("dof, critical", [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776),
                                           (5, 2.571), (9, 2.262), (30, 2.042)])
def test_two_sided_p_at_textbook_critical_values(dof, critical):
    """The t table's two-sided 5% critical values give p = 0.05 (to the table's 3 decimals)."""
    assert evaluation.two_sided_p(critical, dof + 1) == pytest.approx(0.05, abs=2e-4)
    assert evaluation.two_sided_p(-critical, dof + 1) == pytest.approx(0.05, abs=2e-4)
    assert evaluation.two_sided_p(0.0, dof + 1) == pytest.approx(1.0)
    assert evaluation.two_sided_p(None, dof + 1) is None
    # Monotone and against the normal limit for many degrees of freedom.
    assert evaluation.two_sided_p(1.0, dof + 1) > evaluation.two_sided_p(2.0, dof + 1)
    assert evaluation.two_sided_p(1.959964, 10_001) == pytest.approx(0.05, abs=1e-4)


def test_glomo_variants_are_also_paired_with_the_uniform_graph():
    runs = [{"variant": v, "seed": s, "fold": None, "accuracy": a} for v, s, a in [
        ("baseline", 0, 0.70), ("baseline", 1, 0.72), ("baseline", 2, 0.71),
        ("uniform", 0, 0.72), ("uniform", 1, 0.71), ("uniform", 2, 0.75),
        ("glomo_rnn", 0, 0.74), ("glomo_rnn", 1, 0.74), ("glomo_rnn", 2, 0.76),
        ("cn3", 0, 0.73), ("cn3", 1, 0.73), ("cn3", 2, 0.73)]]
    summary = summarize(runs, ["baseline", "glomo_rnn", "uniform", "cn3"])
    assert set(summary["paired"]) == {"glomo_rnn", "uniform", "cn3"}
    against_uniform = summary["paired_with_uniform"]
    assert set(against_uniform) == {"glomo_rnn"}  # only the learned-graph variants
    d = np.array([0.02, 0.03, 0.01])
    assert against_uniform["glomo_rnn"]["mean_difference"] == pytest.approx(d.mean())
    t = d.mean() / (d.std(ddof=1) / np.sqrt(3))
    assert against_uniform["glomo_rnn"]["t"] == pytest.approx(t)
    markdown = evaluation.format_markdown(summary, "mr", "seeded")
    assert "| variant - uniform |" in markdown
    assert "| glomo_rnn | 3 | +2.00 | 3 / 0 / 0 |" in markdown
    assert markdown.count("| glomo_rnn | 3 |") == 3  # accuracy row, vs baseline, vs uniform


def test_init_embeddings_start_every_variant_from_the_predictors_table(task, capsys):
    """--init-embeddings predictor: the classifier's, the pair classifier's and the reader's
    embedding tables equal the predictor's before training (the baseline's too); a run trains
    from there; a width other than the predictor's is one line before any training."""
    import keras

    from glomo_tf.experiments.runs import initial_embeddings, load_pretrained
    from glomo_tf.experiments.transfer import TransferConfig
    from glomo_tf.models.classifier import build_classifier
    from glomo_tf.models.pair_classifier import build_pair_classifier
    from glomo_tf.models.reader import build_reader

    root, data, run_dir = task
    config = TransferConfig(dataset="file", file=str(data), output_dir=str(root / "init"),
                            model=str(run_dir / "graph_predictor.keras"),
                            tokenizer=str(run_dir / "tokenizer"), embedding_dim=8,
                            init_embeddings="predictor").validated()
    predictor, tokenizer = load_pretrained(config)
    table = keras.ops.convert_to_numpy(predictor.embeddings)
    size = tokenizer.vocabulary_size
    for model in (build_classifier(size, 2, "baseline", embedding_dim=8, rnn_units=4),
                  build_pair_classifier(size, 3, "glomo_rnn", predictor, embedding_dim=8,
                                        rnn_units=4),
                  build_reader(size, "baseline", embedding_dim=8, rnn_units=4)):
        before = model.get_layer("embedding").get_weights()[0]
        assert np.abs(before - table).max() > 1e-3  # a fresh table is random
        initial_embeddings(model, predictor, config)
        np.testing.assert_array_equal(model.get_layer("embedding").get_weights()[0], table)

    out = root / "init_run"
    common = ["transfer", "--run", str(run_dir), "--dataset", "file", "--file", str(data),
              "--text-column", "sentence", "--label-column", "class", "--variants", "baseline",
              "--seeds", "0", "--epochs", "1", "--patience", "1", "--max-length", "16",
              *TINY, "--init-embeddings", "predictor"]
    assert cli.main([*common, "--embedding-dim", "8", "--output-dir", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["init_embeddings"] == \
        "predictor"
    capsys.readouterr()
    assert cli.main([*common, "--output-dir", str(root / "init_bad")]) == 2  # TINY: width 16
    err = capsys.readouterr().err
    assert "--init-embeddings predictor needs --embedding-dim 8" in err
    assert len(err.strip().splitlines()) == 1 and "== file" not in capsys.readouterr().out
    assert cli.main(["transfer", "--dataset", "mr", "--variants", "baseline",
                     "--init-embeddings", "predictor", "--output-dir", str(root / "x")]) == 2
    assert "needs a pretrained predictor" in capsys.readouterr().err


def test_listops_gold_trees_through_both_forms(tmp_path, capsys):
    """The gold variants read each expression's tree (``--gold-form chain``: as its fold, two
    heads); ``--transfer-form propagation`` puts a GraphPropagation where the fusion was; the
    runs land in results.json beside the baseline."""
    from glomo_tf.data.listops import generate_listops, write_listops

    path, test_path = tmp_path / "listops.tsv", tmp_path / "test.tsv"
    write_listops(str(path), generate_listops(120, seed=0, max_depth=3, max_length=24))
    write_listops(str(test_path), generate_listops(40, seed=5, max_depth=3, max_length=24))
    for form, variants, layer_class, gold_form, directions in (
            ("fusion", ["gold_rnn"], "GlomoTransfer", "tree", "both"),
            ("propagation", ["baseline", "gold_embeddings"], "GraphPropagation", "tree",
             "backward"),
            ("propagation", ["gold_embeddings"], "GraphPropagation", "chain", "both")):
        out = tmp_path / f"{form}_{gold_form}"
        assert cli.main(["transfer", "--dataset", "listops", "--file", str(path), "--test-file",
                         str(test_path), "--variants", *variants, "--seeds", "0", "--epochs", "1",
                         "--gold-form", gold_form, "--embedding-dim", "8",
                         "--rnn-units", "4", "--attention-heads", "2", "--transfer-form", form,
                         "--propagation-steps", "2", "--propagation-aggregation", "sum",
                         "--propagation-update", "mlp", "--propagation-directions", directions,
                         "--propagation-hidden-units", "6", *(["--propagation-layer-norm"]
                                                              if directions == "backward" else []),
                         "--output-dir", str(out),
                         "--save-models", "--verbose", "0"]) == 0
        result = json.loads((out / "results.json").read_text())
        assert (result["config"]["transfer_form"], result["config"]["gold_form"]) == (
            form, gold_form)
        assert [r["variant"] for r in result["runs"]] == variants
        saved = keras.saving.load_model(str(out / "models" / f"{variants[-1]}-seed0.keras"))
        layer = saved.get_layer(variants[-1])
        assert type(layer).__name__ == layer_class and len(saved.inputs) == 2
        assert saved.inputs[1].shape[3] == {"tree": 1, "chain": 2}[gold_form]  # the heads
        if form == "propagation":
            assert (layer.steps, layer.aggregation, layer.update, layer.directions) == (
                2, "sum", "mlp", directions)
            assert layer.hidden_dense.kernel.shape[-1] == 6  # --propagation-hidden-units
            assert layer.layer_norm == (directions == "backward")  # --propagation-layer-norm
        # The saved model and its split's tokenizer give the recorded test accuracy again.
        evaluated = load_example("listops_graphs").evaluate([
            "--model", str(out / "models" / f"{variants[-1]}-seed0.keras"), "--tokenizer",
            str(out / "models" / "tokenizer-seed0"), "--file", str(test_path)])
        assert evaluated["accuracy"] == round(result["runs"][-1]["accuracy"], 4)
