"""The results' tables and the figures their prose quotes are their recorded JSON rendered again:
every ``<!-- NAME table -->`` (it ends at the first blank line) and every ``<!-- NAME figure
-->...<!-- /NAME -->`` of the pages of ``examples/results_tables.py``'s ``PAGES``, by its function
in ``examples/results_tables.py``, and every ``examples/outputs/*.md``. ``python
examples/render_outputs.py`` rewrites them all."""

import json
import os

import pytest

from _examples import load_example
from _paths import REPO

TABLES = load_example("results_tables")
recorded = TABLES.output  # examples/outputs/NAME parsed, shared: copy it before changing it


@pytest.mark.parametrize("page", TABLES.PAGES)
def test_the_pages_tables_and_figures_are_their_json_rendered(page):
    with open(os.path.join(REPO, page), encoding="utf-8") as handle:
        text = handle.read()
    rendered = TABLES.render_page(page)  # raises ValueError naming a marker without a renderer
    differ = [m for m, (on_page, again) in TABLES.tables_of(page).items() if on_page != again]
    assert text == rendered, f"{page}: {differ} differ from their JSON: examples/render_outputs.py"


def test_a_rendered_table_moves_with_its_json(monkeypatch):
    """A table reads its JSON: a changed recorded figure changes the table."""
    before = TABLES.demo_table()
    demo = json.loads(json.dumps(recorded("demo.json")))
    demo["recovery"]["forward"]["best_head"]["share"] -= 0.5
    monkeypatch.setattr(TABLES, "output", lambda name: demo)
    assert TABLES.demo_table() != before


@pytest.mark.parametrize("name, precision", [("demo.json", "float32"),
                                             ("demo_bfloat16.json", "mixed_bfloat16")])
def test_the_recorded_demos_are_the_default_run(name, precision):
    """The README's demo table and the precision guide's bfloat16 row are of runs with the demo's
    current settings; the bfloat16 run recovers the planted edges as the parity bar asks (best
    head at least 0.95 in each direction)."""
    from glomo_tf.experiments import demo

    metrics = recorded(name)
    assert {k: v for k, v in metrics["model"].items() if k != "parameters"} == demo.MODEL
    training = metrics["training"]
    assert (training["epochs"], training["steps_per_epoch"], training["batch_size"],
            training["seed"], training.get("precision", "float32")) == (
        demo.DEFAULTS["epochs"], demo.DEFAULTS["steps_per_epoch"], demo.DEFAULTS["batch_size"], 0,
        precision)
    assert training["embedding_scale"] == demo.EMBEDDING_SCALE
    for direction in ("forward", "backward"):
        assert metrics["recovery"][direction]["best_head"]["share"] >= 0.95


def test_the_ud_heads_json_holds_the_whole_yardstick():
    for name, result in recorded("ud_heads.json")["predictors"].items():
        layers, heads = len(result["per_head"]), len(result["per_head"][0])
        best = result["best_head"]
        assert result["per_head"][best["layer"] - 1][best["head"] - 1] == best["share"]
        assert best["share"] == max(max(row) for row in result["per_head"])
        assert len(result["heads_averaged"]) == layers and heads >= 1
        assert result["chance"] < result["adjacent"] <= result["best_offset_rule"]["share"]
        assert result["command"].startswith("python examples/ud_heads.py")


@pytest.mark.parametrize("name", ["listops_ceiling.json", "listops_ceiling_3seeds.json",
                                  "listops_ceiling_12k.json", "listops_ceiling_40k.json"])
def test_the_ceiling_json_pairs_every_row_with_its_baseline_seed_by_seed(name):
    from scipy import stats

    import re

    rows = recorded(name)["rows"]
    for entry in rows.values():
        if entry["row"].startswith("baseline"):
            continue
        # a row trained for other than the default length pairs with the baseline trained as long
        length = re.search(r"(\d+ epochs, patience \d+)\)$", entry["row"])
        baseline_row = f"baseline ({length.group(1)})" if length else "baseline"
        baseline = rows[f"{entry['size']} | {baseline_row}"]["accuracy_by_seed"]
        paired = entry["paired_with_baseline"]
        shared = sorted(set(entry["accuracy_by_seed"]) & set(baseline))
        assert paired["seeds"] == len(shared)
        assert abs(paired["mean_difference"] - sum(entry["accuracy_by_seed"][s] - baseline[s]
                                                   for s in shared) / len(shared)) < 1e-12
        assert "--seeds" in entry["command"]
        if len(shared) > 1:  # the paired t-test, recomputed
            p = stats.ttest_rel([entry["accuracy_by_seed"][s] for s in shared],
                                [baseline[s] for s in shared]).pvalue
            assert abs(paired["p"] - p) < 1e-9


def test_every_table_under_examples_outputs_is_its_json_rendered():
    tables = load_example("render_outputs").rendered()
    assert "listops_results.md" in tables and "ablations_mr.md" in tables
    for name, markdown in tables.items():
        with open(os.path.join(REPO, "examples", "outputs", name), encoding="utf-8") as handle:
            assert handle.read() == markdown, f"{name}: run python examples/render_outputs.py"


def test_a_results_table_moves_with_its_runs():
    """The renderer reads the runs: changing one run's accuracy changes the table."""
    from glomo_tf import evaluation

    module = load_example("render_outputs")
    record = recorded("mr_results.json")
    runs = [dict(r) for r in record["runs"]]
    runs[0]["accuracy"] -= 0.2
    changed = dict(record, runs=runs,
                   summary=evaluation.summarize(runs, list(record["summary"]["variants"])))
    assert module.render_results(changed) != module.render_results(record)


def test_what_the_prose_says_of_the_tables_holds():
    """The claims the pages make in words about their tables' JSON."""
    learned = [recorded(f"{task}_entmax15_results.json")["summary"]["paired_with_uniform"][name]
               for task in ("mr", "subj", "sst2") for name in ("glomo_embeddings", "glomo_rnn")]
    assert all(p["p"] >= 0.05 for p in learned)  # "no difference reaches p < 0.05"
    assert sum(p["mean_difference"] < 0 for p in learned) == 5  # "five of the six are negative"
    for task in ("mr", "subj", "sst2"):  # "`<unk>` and the period are the two most weighted"
        for direction in recorded(f"graph_sources_{task}.json")["directions"].values():
            assert all({w for w, *_ in g["top_sources"][:2]} == {"<unk>", "."}
                       for g in direction["learned"])
    vs_uniform = [recorded(f"{task}_results.json")["summary"]["paired_with_uniform"][name]["p"]
                  for task in ("mr", "mr_text", "subj") for name in ("glomo_embeddings",
                                                                     "glomo_rnn")]
    assert min(vs_uniform) >= 0.19  # "no p under 0.19"
    paired = {n: TABLES.compare(recorded("sick_walk_results.json")["runs"], n,
                                recorded("sick_results.json")["runs"], n)
              for n in ("baseline", "uniform", "glomo_embeddings", "glomo_rnn")}
    assert min(p["p"] for p in paired.values()) >= 0.05  # "no variant moved measurably"
    shares = [TABLES.graph_stats(f"books_{task}_stats_{run}.json")["share"]
              for task in ("mr", "sick") for run in ("gru_walk", "gru", "gru_20")]
    assert shares[0] > max(shares[1:3]) and shares[3] > max(shares[4:])  # "flatter, not sharper"
    from glomo_tf.experiments.pretraining import SHUFFLE_BUFFER

    settings = recorded("books_gru_curve.json")["settings"]  # "What these runs read"
    per_epoch = settings["steps_per_epoch"] * settings["batch_size"]
    assert (per_epoch, per_epoch + SHUFFLE_BUFFER) == (8_000, 18_000)
    assert (per_epoch + SHUFFLE_BUFFER) * settings["window"] == 1_152_000
    hard = recorded("snli_results.json")["summary"]["metrics"]["test_hard_accuracy"]["variants"]
    assert all(abs(100 * v["mean"] - 30) < 1 for v in hard.values())  # "about 30%"
    listops = recorded("listops_graphs.json")["transfer"]
    others = {tau: recorded(f"listops_temperature{tau}_results.json")["runs"]
              for tau in ("0.5", "0.25")} | {"top2": recorded("listops_top2_results.json")["runs"]}
    for name, runs in others.items():  # "top 2 and, just, 0.25 above the baseline at p < 0.05"
        to_baseline = TABLES.compare(runs, "glomo_rnn", listops["runs"], "baseline")["p"]
        assert (to_baseline < 0.05) == (name != "0.5")
        assert TABLES.compare(runs, "glomo_rnn", listops["runs"], "glomo_rnn")["p"] > 0.3
    own = recorded("squad_own_predictor.json")
    f1 = own["paired"]["f1"]["glomo_rnn - uniform_rnn"]
    assert f1["wins"] == 5 and f1["p"] >= 0.05  # "in F1 on all 5 seeds, short of p < 0.05"
    alone, pooled = (own["replication"][k] for k in ("alone", "pooled"))
    assert alone["exact_match"]["glomo_rnn - uniform_rnn"]["p"] < 0.05 <= alone["f1"][
        "glomo_rnn - uniform_rnn"]["p"]
    assert all(pooled[m]["glomo_rnn - uniform_rnn"]["p"] < 0.05 for m in ("exact_match", "f1"))
    assert all(own["paired"]["exact_match"][f"{v}: own - books predictor"]["losses"] == 5
               for v in ("glomo_rnn", "uniform_rnn"))  # "on every seed"
    assert max(TABLES.bench("reader_epoch")["ratio_to_baseline"]["glomo_rnn"]) < 2  # "under twice"
    parity = recorded("precision_parity.json")  # "within a percent", "inside the seeds' spread"
    assert abs(parity["val_perplexity_bf16_over_float32"] - 1) < 0.01
    assert abs(parity["transfer_bf16_vs_float32"]["mean_difference"]) < parity[
        "transfer_float32_seed_std"]


def test_what_the_guides_say_of_their_tables_holds():
    """The claims the guides and docs/benchmarks.md make in words about their rendered tables."""
    tasks = ("mr", "subj", "sst2")
    higher = lambda a, b: all(a[t]["accuracy"] > b[t]["accuracy"] for t in tasks)  # noqa: E731
    logic = recorded("ordered_memory_logic_brackets.json")  # Ordered Memory, with the brackets
    om, lstm = logic["models"]["ordered_memory"], logic["models"]["lstm"]
    assert all(om["test_accuracy"][str(k)] - lstm["test_accuracy"][str(k)] >= 0.10
               for k in range(7, 13))  # "leads the LSTM by at least 10 points at every length"
    assert om["tree_f1"] > max(om["branching_f1"].values())
    assert recorded("ordered_memory_listops_released.json")["models"]["ordered_memory"][
        "tree_f1"] == 100.0  # "the induced trees are the gold ones"
    long = recorded("sentence_encoders_long.json")["probe"]  # sentence encoders, WikiText
    assert higher(long["QT+SP+G2L"], long["random"])
    wide, half = (recorded(f"sentence_encoders_units512{s}.json") for s in ("", "_bfloat16"))
    for a, b, differ in ((wide, recorded("sentence_encoders_long.json"), {"units", "variants"}),
                         (half, wide, {"precision"})):  # "the same run" but for ...
        assert {k for k in a["settings"] if a["settings"][k] != b["settings"].get(k)} - {
            "runs_dir", "output", "glomo_run", "graph_run"} == differ
    last = [r["pretraining"]["QT+SP+G2L"]["last_epoch"] for r in (half, wide)]
    assert all(last[0][k] > last[1][k] for k in last[0])  # "end a little higher in bfloat16"
    runs = recorded("sentence_g2l_reduction.json")["runs"]  # "worse", "lets QT and SP train"
    assert higher(runs["sum"]["probe"]["sum"], runs["mean"]["probe"]["mean"])
    assert all(runs["mean"]["pretraining"]["last_epoch"][k] < runs["sum"]["pretraining"][
        "last_epoch"][k] for k in ("qt_loss", "sp_loss"))
    books = recorded("sentence_encoders_books.json")  # at book scale
    def cost(suffix):  # the full model minus the run, at the run's newest point
        name, point = list(recorded(f"sentence_encoders_books_{suffix}.json")["curve"].items())[-1]
        return [books["curve"][name]["probe"][t]["accuracy"] - point["probe"][t]["accuracy"]
                for t in tasks]

    costs = {s: cost(s) for s in ("qt_sp", "qt_g2l", "sp_g2l")}
    assert max(costs, key=lambda s: sum(costs[s])) == "qt_sp"  # "G2L out costs most"
    assert max(costs["qt_g2l"]) <= 0  # "SP out costs nothing or less"
    configs = [recorded(f"sentence_encoders_books{s}.json")["run_config"] for s in (
        "", "_qt_sp", "_qt_g2l", "_sp_g2l", "_units512", "_glomo", "_glomo_control")]
    assert len({(c["steps_per_epoch"], c["batch_size"]) for c in configs}) == 1  # "every book run"
    wide_point = TABLES.newest("sentence_encoders_books_units512")[0]
    assert higher(wide_point["probe"], next(p["probe"] for p in books["curve"].values()
                                            if p["pairs_seen"] == wide_point["pairs_seen"]))
    fed, control = (recorded(f"sentence_encoders_books_glomo{s}.json") for s in ("", "_control"))
    a, b = fed["run_config"], control["run_config"]  # "the graphs are the only difference"
    assert {k for k in a if a[k] != b.get(k)} - {"epochs"} == {"graph_run", "vocab"}
    x, y = ([r["curve"][n] for n in fed["curve"]] for r in (fed, control))
    held = [[p["heldout_losses"][k] > q["heldout_losses"][k] for p, q in zip(x, y)]
            for k in ("qt_loss", "sp_loss", "g2l_loss")]
    assert all(held[0]) and not any(held[1]) and all(held[2])
    beyond = {t: [i for i, (p, q) in enumerate(zip(x, y))
                  if abs(p["probe"][t]["accuracy"] - q["probe"][t]["accuracy"])
                  > max(p["probe"][t]["std"], q["probe"][t]["std"])] for t in ("mr", "subj")}
    assert beyond == {"mr": [], "subj": [0, 1, 2]}
    assert all(not higher(r["curve"][list(r["curve"])[-1]]["probe"], r["baselines"]["results"][
        "bow"]) for r in (fed, control))
    keys = ("batch", "seq", "d", "propagation", "precision", "cache", "top_k", "uniform")
    configs = [{"precision": "float32", **TABLES.bench(f"transfer_overhead{n}")["config"]} for n in
               ("", "_chained", "_cache_topk", "_cache_topk_bf16", "_cache_topk_large")]
    assert [tuple(c[k] for k in keys) for c in configs] == [  # docs/benchmarks.md's labels
        (64, 48, 64, "auto", "float32", False, None, False),
        (64, 48, 64, "chained", "float32", False, None, False),
        (64, 48, 64, "auto", "float32", True, 8, True),
        (64, 48, 64, "auto", "mixed_bfloat16", True, 8, True),
        (16, 128, 256, "auto", "float32", True, 8, True)]


def test_the_committed_ordered_memory_models_are_the_recorded_runs():
    recorded_run = recorded("ordered_memory_logic_brackets.json")
    for name in ("ordered_memory", "lstm"):
        assert len(recorded_run["models"][name]["curve"]) == recorded_run["epochs"][name]
        committed = recorded(os.path.join("ordered_memory_logic_models", f"{name}.json"))
        assert committed["scores"] == recorded_run["models"][name]
        assert {k: committed["config"][k] for k in recorded_run["config"]} == recorded_run[
            "config"]


def test_the_papers_squad_rows_are_the_papers():
    paper = os.path.join(REPO, "..", "shared", "papers", "glomo-paper.txt")
    if not os.path.exists(paper):
        pytest.skip("the paper's text is not in ../shared/papers")
    with open(paper, encoding="utf-8") as handle:
        rows = {line.split("\t")[0]: line.split("\t")[1:3] for line in handle
                if line.count("\t") >= 6}
    names = ("transfer feature only (baseline)", "GLoMo on embeddings", "GLoMo on RNN states",
             "uniform graph")
    assert [rows[n] for n in names] == [[em, f1] for _, em, f1 in TABLES.PAPER_SQUAD]


def test_the_committed_listops_classifier_gives_its_recorded_accuracy():
    """``examples/listops_graphs.py evaluate`` on the committed seed-0 ``glomo_rnn`` classifier
    and test file gives the accuracy its run recorded (the page says so)."""
    models = os.path.join(REPO, "examples", "outputs", "listops_models")
    scored = load_example("listops_graphs").main([
        "evaluate", "--model", os.path.join(models, "glomo_rnn-seed0.keras"),
        "--tokenizer", os.path.join(models, "tokenizer"), "--file", os.path.join(models, "test.tsv")])
    run = next(r for r in recorded("listops_graphs.json")["transfer"]["runs"]
               if r["seed"] == 0 and r["variant"] == "glomo_rnn")
    assert scored["examples"] == run["test_examples"]
    assert scored["accuracy"] == pytest.approx(run["accuracy"], abs=1e-4)


def test_mrpc_sits_barely_above_always_answering_paraphrase():
    import numpy as np

    from glomo_tf.data.pairs import load_mrpc
    from glomo_tf.experiments.pairs import pair_splits

    record = recorded("mrpc_results.json")
    task = load_mrpc()
    share = np.mean([np.mean(pair_splits(task, seed)[2].labels) for seed in record["config"]["seeds"]])
    assert 0 < max(v["mean"] for v in record["summary"]["variants"].values()) - share < 0.015


@pytest.mark.parametrize("size", ["12k", "40k"])
def test_the_committed_ceiling_models_evaluations_are_their_rows_runs(size):
    """``listops_ceiling_*_evaluations.json``: each committed model scored the accuracy its
    row's run recorded, on the committed test set, and its groups add up to the test set."""
    rows = recorded(f"listops_ceiling_{size}.json")["rows"]
    for name, evaluation in recorded(f"listops_ceiling_{size}_evaluations.json")[
            "evaluations"].items():
        key = f"{int(size[:-1]) * 1000} | {name}"
        assert evaluation["accuracy"] == round(rows[key]["accuracy_by_seed"]["0"], 4)
        assert evaluation["file"] == "examples/outputs/listops_ceiling_models/test.tsv"
        for groups in (evaluation["by_operator"], evaluation["by_depth"]):
            assert sum(g["examples"] for g in groups.values()) == evaluation["examples"]
            assert abs(sum(g["examples"] * g["accuracy"] for g in groups.values())
                       - evaluation["examples"] * evaluation["accuracy"]) < 0.5
