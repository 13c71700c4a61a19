"""Sentence-pair transfer: the ESIM-style alignment against NumPy, the pair batches, F1, and
``glomo transfer`` end to end on a planted pair task and on SICK / MRPC / SNLI files at toy size."""

import gzip
import json

import numpy as np
import pytest

from _examples import load_example

from _run_dirs import pretrained_run
from glomo_tf import cli
from glomo_tf.data.batching import pair_sorted_batches, pair_training_batches
from glomo_tf.experiments.pairs import binary_f1, load_pair_task, pair_splits
from glomo_tf.experiments.transfer import TransferConfig
from glomo_tf.models.pair_classifier import SoftAlignment, build_pair_classifier

FILLER = "the a man woman dog cat is was in on with near some small big old".split()
COLOURS = ("red", "blue", "green")
TINY = ["--embedding-dim", "16", "--rnn-units", "8", "--num-mixtures", "1", "--dropout", "0.0",
        "--batch-size", "20", "--learning-rate", "0.02", "--verbose", "2"]


def planted_pairs(count, seed):
    """Pairs of filler sentences holding one colour word each: "same" when the colours match.
    Only the relation between the two sentences decides the label."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        first_colour = COLOURS[rng.integers(3)]
        second_colour = first_colour if i % 2 else COLOURS[(COLOURS.index(first_colour)
                                                            + rng.integers(1, 3)) % 3]
        sentences = []
        for colour in (first_colour, second_colour):
            words = list(rng.choice(FILLER, size=int(rng.integers(3, 7))))
            words.insert(int(rng.integers(0, len(words) + 1)), colour)
            sentences.append(" ".join(words))
        rows.append((*sentences, "same" if i % 2 else "different"))
    return rows


def write_generic(path, rows):
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n"
                                                             for a, b, y in rows),
                    encoding="utf-8")


def test_soft_alignment_matches_numpy_with_padding():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 4, 3)).astype("float32"), rng.normal(size=(2, 5, 3)).astype(
        "float32")
    a_ids = np.array([[3, 4, 5, 0], [6, 7, 8, 9]], "int32")
    b_ids = np.array([[1, 2, 0, 0, 0], [5, 6, 7, 8, 2]], "int32")
    m_a, m_b = (x.numpy() for x in SoftAlignment()([a, b, a_ids, b_ids]))
    for n in range(2):
        la, lb = int((a_ids[n] > 0).sum()), int((b_ids[n] > 0).sum())
        e = a[n] @ b[n].T
        w_b = np.exp(e[:, :lb] - e[:, :lb].max(1, keepdims=True))
        w_b /= w_b.sum(1, keepdims=True)
        a_tilde = w_b @ b[n, :lb]
        w_a = np.exp(e[:la] - e[:la].max(0, keepdims=True))
        w_a /= w_a.sum(0, keepdims=True)
        b_tilde = w_a.T @ a[n, :la]
        np.testing.assert_allclose(
            m_a[n], np.concatenate([a[n], a_tilde, a[n] - a_tilde, a[n] * a_tilde], -1),
            rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            m_b[n], np.concatenate([b[n], b_tilde, b[n] - b_tilde, b[n] * b_tilde], -1),
            rtol=1e-5, atol=1e-5)


def test_pair_classifier_variants_build_save_and_refuse_others(tmp_path):
    import keras

    first, second = np.array([[3, 4, 5, 0]], "int32"), np.array([[6, 7, 0]], "int32")
    for variant in ("baseline", "uniform"):
        model = build_pair_classifier(50, 3, variant, embedding_dim=8, rnn_units=4)
        out = model([first, second]).numpy()
        assert out.shape == (1, 3) and out.sum() == pytest.approx(1.0, abs=1e-5)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(loaded([first, second]), model([first, second]), atol=1e-6)
    # Padding is invisible: extra padded columns leave the probabilities unchanged.
    wider = model([np.pad(first, ((0, 0), (0, 3))), np.pad(second, ((0, 0), (0, 2)))])
    np.testing.assert_allclose(wider, model([first, second]), atol=1e-5)
    with pytest.raises(ValueError, match="variant is one of"):
        build_pair_classifier(50, 3, "cn3")
    with pytest.raises(ValueError, match="needs a pretrained GraphPredictor"):
        build_pair_classifier(50, 3, "glomo_rnn")


@pytest.mark.parametrize("variant", ["uniform", "uniform_rnn"])
def test_pair_classifier_propagation_form_puts_graph_propagation_where_the_variant_says(
        tmp_path, variant):
    import keras

    from glomo_tf.layers import GlomoTransfer, GraphPropagation

    first, second = np.array([[3, 4, 5, 0]], "int32"), np.array([[6, 7, 0]], "int32")
    model = build_pair_classifier(50, 3, variant, embedding_dim=8, rnn_units=4,
                                  transfer_form="propagation", propagation_steps=2,
                                  propagation_aggregation="sum", propagation_update="mlp",
                                  propagation_directions="forward", propagation_hidden_units=5,
                                  propagation_layer_norm=True)
    transfer = [layer for layer in model.layers if isinstance(layer, GlomoTransfer)]
    assert len(transfer) == 1 and isinstance(transfer[0], GraphPropagation)
    assert (transfer[0].steps, transfer[0].aggregation, transfer[0].update,
            transfer[0].directions, transfer[0].hidden_units, transfer[0].layer_norm) == (
                2, "sum", "mlp", "forward", 5, True)
    # It adds states as wide as what it reads: the embeddings (8) or the BiGRU's (2 x 4).
    assert transfer[0].compute_output_shape(((None, None, 8), (None, None)))[-1] == 16
    out = model([first, second]).numpy()
    assert out.shape == (1, 3) and out.sum() == pytest.approx(1.0, abs=1e-5)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(loaded([first, second]), out, atol=1e-6)
    fusion = build_pair_classifier(50, 3, variant, embedding_dim=8, rnn_units=4)
    assert not any(isinstance(layer, GraphPropagation) for layer in fusion.layers)


def test_pair_batches_cut_each_side_and_map_back():
    first = np.array([[1, 2, 0, 0], [3, 0, 0, 0], [4, 5, 6, 7], [8, 9, 0, 0]], "int32")
    second = np.array([[1, 0, 0], [2, 3, 4], [5, 0, 0], [6, 7, 0]], "int32")
    labels = np.array([0, 1, 2, 0])
    data, order = pair_sorted_batches(first, second, labels, 2)
    seen = []
    for (a, b), y in data:
        a, b = a.numpy(), b.numpy()
        assert (a[:, -1] != 0).any() and (b[:, -1] != 0).any()  # cut to the batch's longest
        seen += list(y.numpy())
    assert seen == list(labels[order])
    assert sorted(order) == [0, 1, 2, 3]
    batches = list(pair_training_batches(first, second, labels, 3, seed=0))
    assert [len(y) for _, y in batches] == [3, 1]
    assert sorted(np.concatenate([y.numpy() for _, y in batches])) == sorted(labels)


def test_binary_f1_against_counts():
    predicted, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    tp, fp, fn = 2, 1, 1
    assert binary_f1(predicted, labels) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert binary_f1([0, 0], [1, 0]) == 0.0


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    train, test = root / "train.tsv", root / "test.tsv"
    write_generic(train, planted_pairs(400, 0))
    write_generic(test, planted_pairs(60, 1))
    run_dir = root / "run"
    lines = [" ".join(FILLER + list(COLOURS))] * 4
    pretrained_run(run_dir, lines, seed=3, hidden_dim=8, num_layers=1, num_heads=2,
                   conv_layers=1)
    return root, train, test, run_dir


@pytest.mark.slow
def test_pairs_file_end_to_end_learns_a_relation_and_resumes(planted, capsys):
    root, train, test, run_dir = planted
    out = root / "out"
    common = ["transfer", "--run", str(run_dir), "--dataset", "pairs", "--file", str(train),
              "--test-file", str(test), "--epochs", "8", "--patience", "8",
              "--output-dir", str(out), *TINY]
    assert cli.main([*common, "--variants", "baseline", "glomo_rnn", "--seeds", "0"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    runs = results["runs"]
    assert [(r["variant"], r["seed"]) for r in runs] == [("baseline", 0), ("glomo_rnn", 0)]
    for r in runs:
        assert (r["train_examples"], r["validation_examples"], r["test_examples"]) == (
            360, 40, 60)
        assert r["accuracy"] * 60 == pytest.approx(round(r["accuracy"] * 60))
        assert 0.0 <= r["f1"] <= 1.0
    assert runs[0]["accuracy"] > 0.7, "the colours' match decides the label (chance: 0.5)"
    assert results["config"]["class_names"] == ["different", "same"]
    assert set(results["summary"]["metrics"]) == {"f1"}
    markdown = (out / "results.md").read_text(encoding="utf-8")
    assert "test accuracy (official test split" in markdown and "## pairs: test f1" in markdown
    # Resume: seed 0's runs are kept, only seed 1 is trained.
    capsys.readouterr()
    assert cli.main([*common, "--variants", "baseline", "--seeds", "0", "1", "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "== pairs | baseline | seed 0" not in printed and "== pairs | baseline | seed 1" in printed
    resumed = json.loads((out / "results.json").read_text(encoding="utf-8"))["runs"]
    assert resumed[:2] == runs and [(r["variant"], r["seed"]) for r in resumed[2:]] == [
        ("baseline", 1)]


def _sick_file(path):
    header = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\t"
              "entailment_AB\tentailment_BA\tsentence_A_original\tsentence_B_original\t"
              "sentence_A_dataset\tsentence_B_dataset\tSemEval_set\r\n")
    rows = []
    labels = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")
    for i, (a, b, _) in enumerate(planted_pairs(60, 2)):
        split = ("TRAIN",) * 4 + ("TRIAL", "TEST")
        rows.append(f"{i + 1}\t{a}\t{b}\t{labels[i % 3]}\t3.0\tA_neutral_B\tB_neutral_A\t{a}\t{b}"
                    f"\tFLICKR\tFLICKR\t{split[i % 6]}\r\n")
    path.write_text(header + "".join(rows), encoding="utf-8")


def write_dataset_files(data, dataset):
    """The dataset's own file layout, written small; returns the expected split sizes."""
    pairs = planted_pairs(60, 2)
    if dataset == "sick":
        _sick_file(data / "SICK.txt")
        return {"train_examples": 40, "validation_examples": 10, "test_examples": 10}
    if dataset == "mrpc":
        text = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n" + "".join(
            f"{int(y == 'same')}\t{i}\t{i + 1000}\t{a}\t{b}\r\n" for i, (a, b, y) in
            enumerate(pairs))
        (data / "msr_paraphrase_train.txt").write_bytes(text.encode("utf-8"))
        return {"train_examples": 49, "validation_examples": 5, "test_examples": 6}
    gold = ("entailment", "neutral", "contradiction")

    def jsonl(name, rows, hard=False):
        with gzip.open(data / name, "wt", encoding="utf-8") as handle:
            for i, (a, b, _) in enumerate(rows):
                label = "-" if i == 0 and not hard else gold[i % 3]  # "-": no gold label
                handle.write(json.dumps({"sentence1": a, "sentence2": b,
                                         "gold_label": label}) + "\n")

    jsonl("snli_1.0_train_0.01.jsonl.gz", pairs[:30])
    jsonl("snli_1.0_dev.jsonl.gz", pairs[30:50])
    jsonl("snli_1.0_test.jsonl.gz", pairs[50:])
    jsonl("snli_1.0_test_hard.jsonl.gz", pairs[50:55], hard=True)
    return {"train_examples": 43, "validation_examples": 5, "test_examples": 9}


@pytest.mark.parametrize("dataset", ["sick", "mrpc", "snli"])
def test_each_pair_dataset_splits_as_documented(tmp_path, dataset):
    """SICK: the SemEval_set column; MRPC: seeded test and validation parts of its one file;
    SNLI: 1% train + dev with a seeded validation part, the official test and its hard subset."""
    expected = write_dataset_files(tmp_path, dataset)
    config = TransferConfig(dataset=dataset, output_dir=str(tmp_path / "o"),
                            data_dir=str(tmp_path), variants=["baseline"])
    task = load_pair_task(config.validated())
    for seed in (0, 1):
        train, validation, test = pair_splits(task, seed)
        assert [len(train.labels), len(validation.labels), len(test.labels)] == list(
            expected.values())
        seen = set(zip(train.first, train.second))
        assert not seen & set(zip(test.first, test.second))  # no pair in two splits
        assert not seen & set(zip(validation.first, validation.second))
    assert set(task.extra_tests) == ({"test_hard"} if dataset == "snli" else set())
    if dataset == "mrpc":  # seeded parts differ between seeds
        assert pair_splits(task, 0)[2].first != pair_splits(task, 1)[2].first


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["sick", "mrpc", "snli"])
def test_each_pair_dataset_runs_end_to_end_from_its_files(tmp_path, capsys, dataset):
    """The datasets' own file layouts (written small here) through ``glomo transfer``."""
    data = tmp_path / dataset
    data.mkdir()
    expected = write_dataset_files(data, dataset)
    out = tmp_path / "out"
    assert cli.main(["transfer", "--dataset", dataset, "--data-dir", str(data), "--variants",
                     "baseline", "uniform", "--seeds", "0", "--epochs", "1",
                     "--output-dir", str(out), *TINY]) == 0
    runs = json.loads((out / "results.json").read_text(encoding="utf-8"))["runs"]
    assert [r["variant"] for r in runs] == ["baseline", "uniform"]
    for r in runs:
        assert {k: r[k] for k in expected} == expected
        assert ("f1" in r) == (dataset == "mrpc")
        assert ("test_hard_accuracy" in r) == (dataset == "snli")


def test_sick_through_the_propagation_form_from_the_command_line(tmp_path):
    """``--transfer-form propagation`` reaches the pair classifier: the saved model's transfer
    layer is a GraphPropagation with the flags' steps, aggregation and update."""
    import keras

    from glomo_tf.layers import GraphPropagation

    data = tmp_path / "sick"
    data.mkdir()
    write_dataset_files(data, "sick")
    out = tmp_path / "out"
    assert cli.main(["transfer", "--dataset", "sick", "--data-dir", str(data), "--variants",
                     "uniform_rnn", "--seeds", "0", "--epochs", "1", "--transfer-form",
                     "propagation", "--propagation-steps", "2", "--propagation-aggregation",
                     "sum", "--save-models", "--output-dir", str(out), *TINY]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["config"]["transfer_form"] == "propagation"
    # results.json holds what results.md shows: examples/render_outputs.py renders it equal.
    assert results["split_description"] == "official train/dev/test split"
    assert load_example("render_outputs").render_results(results) == (
        out / "results.md").read_text(encoding="utf-8")
    model = keras.models.load_model(out / "models" / "uniform_rnn-seed0.keras")
    (layer,) = [layer for layer in model.layers if isinstance(layer, GraphPropagation)]
    assert (layer.steps, layer.aggregation, layer.update) == (2, "sum", "gru")


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset", "sick", "--variants", "baseline", "cn3"], "sentence-pair task"),
    (["--dataset", "sick", "--variants", "baseline", "--graph-cache"], "--graph-cache"),
    (["--dataset", "sick", "--variants", "baseline", "--split", "kfold"], "--split seeded only"),
    (["--dataset", "pairs"], "--dataset pairs needs --file"),
    (["--dataset", "mr", "--test-file", "x.tsv"], "--test-file is read with"),
    (["--dataset", "listops"], "--dataset listops needs --file"),
])
def test_pair_and_file_usage_errors_exit_2_with_one_line(tmp_path, capsys, argv, fragment):
    assert cli.main(["transfer", *argv, "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
