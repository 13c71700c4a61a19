"""``examples/listops_ceiling.py``: the deep form's settings name a row and its run folder (the
default's rows keep their names and folders), reach ``glomo transfer``'s flags, and the JSON pairs
each row with the baseline seed by seed. ``glomo transfer`` itself is replaced by a stand-in that
writes a results file as it does, so no classifier is trained here."""

import json
import os

import pytest

from _examples import load_example


@pytest.fixture(scope="module")
def ceiling():
    return load_example("listops_ceiling")


def test_the_default_forms_rows_keep_their_names_and_folders(ceiling):
    for row in ceiling.ROWS:
        name = ceiling.row_name(row, 8, "sum", "mlp")
        assert name == row
        assert ceiling.run_folder(name) == row.replace(", ", "_").replace(" ", "_")


def test_other_settings_name_the_deep_rows_only(ceiling):
    assert ceiling.row_name("gold, propagation", 8, "sum", "gru") == "gold, propagation (gru, sum)"
    assert (ceiling.row_name("uniform, propagation", 4, "mean", "mlp")
            == "uniform, propagation (mlp, mean, 4 steps)")
    # the fusion rows and the baseline have no deep form: the settings do not rename them
    assert ceiling.row_name("gold, fusion", 4, "mean", "gru") == "gold, fusion"
    assert ceiling.row_name("baseline", 8, "sum", "gru") == "baseline"
    assert (ceiling.run_folder("gold, propagation (gru, mean, 4 steps)")
            == "gold_propagation_gru_mean_4_steps")


def test_one_direction_names_the_deep_rows_and_adds_its_flag(ceiling):
    assert (ceiling.row_name("gold, propagation", 8, "sum", "mlp", "backward")
            == "gold, propagation (mlp, sum, backward)")
    assert ceiling.row_name("gold, fusion", 8, "sum", "mlp", "backward") == "gold, fusion"
    assert ceiling.deep_flags(8, "sum", "mlp", "backward")[-2:] == [
        "--propagation-directions", "backward"]
    assert "--propagation-directions" not in ceiling.deep_flags(8, "sum", "mlp")


def test_a_wider_perceptron_names_the_deep_rows_and_adds_its_flag(ceiling):
    assert (ceiling.row_name("gold, propagation", 8, "sum", "mlp", "backward", 512)
            == "gold, propagation (mlp, sum, backward, hidden 512)")
    assert (ceiling.row_name("gold, propagation", 8, "sum", "mlp", hidden_units=512)
            == "gold, propagation (mlp, sum, hidden 512)")
    assert ceiling.row_name("baseline", 8, "sum", "mlp", hidden_units=512) == "baseline"
    assert ceiling.deep_flags(8, "sum", "mlp", hidden_units=512)[-2:] == [
        "--propagation-hidden-units", "512"]
    assert "--propagation-hidden-units" not in ceiling.deep_flags(8, "sum", "mlp", "backward")
    assert (ceiling.row_name("gold, propagation", 8, "sum", "mlp", "backward", 512, True)
            == "gold, propagation (mlp, sum, backward, hidden 512, layer norm)")
    assert ceiling.deep_flags(8, "sum", "mlp", layer_norm=True)[-1] == "--propagation-layer-norm"
    assert "--propagation-layer-norm" not in ceiling.deep_flags(8, "sum", "mlp", "backward", 512)


def test_a_longer_training_names_every_row_with_its_length(ceiling):
    assert ceiling.row_name("baseline", 8, "sum", "mlp", epochs=20, patience=4) == "baseline"
    assert (ceiling.row_name("baseline", 8, "sum", "mlp", epochs=40, patience=8)
            == "baseline (40 epochs, patience 8)")
    assert (ceiling.row_name("gold, propagation", 8, "sum", "gru", epochs=40)
            == "gold, propagation (gru, sum, 40 epochs, patience 4)")
    assert (ceiling.run_folder(ceiling.row_name("gold, fusion", 8, "sum", "mlp", patience=8))
            == "gold_fusion_20_epochs_patience_8")


def test_a_run_records_each_forms_flags_and_its_pairing(ceiling, monkeypatch, tmp_path):
    from glomo_tf import cli

    accuracy = {("baseline", 0): 0.50, ("baseline", 1): 0.60,
                ("gold_embeddings", 0): 0.70, ("gold_embeddings", 1): 0.65}
    calls = []

    def transfer(argv):
        calls.append(argv)
        variant = argv[argv.index("--variants") + 1]
        out = argv[argv.index("--output-dir") + 1]
        os.makedirs(out, exist_ok=True)
        runs = [{"variant": variant, "seed": s, "accuracy": accuracy[variant, s], "seconds": 2.0}
                for s in (0, 1)]
        with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as handle:
            json.dump({"runs": runs}, handle)
        return 0

    monkeypatch.setattr(cli, "main", transfer)
    monkeypatch.setattr(ceiling, "make_data", lambda d: {12000: "train.tsv", 40000: "big.tsv",
                                                         "test": "test.tsv"})
    output = tmp_path / "ceiling.json"
    assert ceiling.main(["--sizes", "12000", "--seeds", "0", "1", "--rows", "baseline",
                         "gold, propagation", "--propagation-update", "gru",
                         "--propagation-aggregation", "mean", "--run-dir", str(tmp_path / "runs"),
                         "--output", str(output)]) == 0
    gold_call, baseline_call = calls  # the baseline the rows are paired with runs last
    assert "--transfer-form" not in baseline_call
    form = gold_call[gold_call.index("--transfer-form"):][:8]
    assert form == ["--transfer-form", "propagation", "--propagation-steps", "8",
                    "--propagation-aggregation", "mean", "--propagation-update", "gru"]
    assert gold_call[gold_call.index("--output-dir") + 1] == str(
        tmp_path / "runs" / "12000" / "gold_propagation_gru_mean")

    rows = json.loads(output.read_text(encoding="utf-8"))["rows"]
    entry = rows["12000 | gold, propagation (gru, mean)"]
    assert entry["seconds_by_seed"] == {"0": 2.0, "1": 2.0}
    paired = entry["paired_with_baseline"]
    assert (paired["seeds"], paired["wins"], paired["losses"]) == (2, 2, 0)
    assert paired["mean_difference"] == pytest.approx(((0.70 - 0.50) + (0.65 - 0.60)) / 2)
    assert "| 12,000 | gold, propagation (gru, mean) | 2 | 70.0 / 65.0 | 67.5 |" in (
        ceiling.render_table({"rows": rows}))


def test_a_seed_is_marked_trained_here_unless_its_run_was_resumed(ceiling, monkeypatch, tmp_path):
    """The record's ``trained_on`` entry for a seed is kept only where the row's directory held
    the seed's run before (resumed); a run trained again, its directory gone, is stamped anew."""
    from glomo_tf import cli

    def transfer(argv):
        variant = argv[argv.index("--variants") + 1]
        out = argv[argv.index("--output-dir") + 1]
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as handle:
            json.dump({"runs": [{"variant": variant, "seed": 0, "accuracy": 0.5,
                                 "seconds": 1.0}]}, handle)
        return 0

    monkeypatch.setattr(cli, "main", transfer)
    monkeypatch.setattr(ceiling, "make_data", lambda d: {12000: "train.tsv", "test": "test.tsv"})
    monkeypatch.setattr(ceiling, "where_this_runs", lambda: {"date": "now"})
    output = tmp_path / "ceiling.json"
    earlier = {"date": "earlier"}
    output.write_text(json.dumps({"rows": {
        f"12000 | {row}": {"seeds": [0], "trained_on": {"0": earlier}}
        for row in ("baseline", "gold, propagation")}}), encoding="utf-8")
    # the baseline's run is on disk (resumed); the gold row's directory is gone (trained again)
    transfer(["--variants", "baseline", "--output-dir",
              str(tmp_path / "runs" / "12000" / "baseline")])
    assert ceiling.main(["--sizes", "12000", "--seeds", "0", "--rows", "baseline",
                         "gold, propagation", "--run-dir", str(tmp_path / "runs"),
                         "--output", str(output)]) == 0
    rows = json.loads(output.read_text(encoding="utf-8"))["rows"]
    assert rows["12000 | baseline"]["trained_on"] == {"0": earlier}
    assert rows["12000 | gold, propagation"]["trained_on"] == {"0": {"date": "now"}}
