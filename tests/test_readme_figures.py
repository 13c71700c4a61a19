"""The figures the guides (``docs/guides/*.md``) and ``docs/benchmarks.md`` quote in their prose
or in tables not yet marked, against the recorded outputs.

Each test rebuilds its text from ``examples/outputs/*.json`` and ``benchmarks/outputs/*.json`` and
looks for it on its page, or checks a claim of the page against the JSON. Marked tables
(``<!-- NAME table -->``: the README, ``docs/results/*.md`` and the guides on
``examples/results_tables.py``'s ``PAGES``) are rendered from their JSON instead and checked by
``tests/test_results_tables.py``.
"""

import json
import math
import os
import re


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUTS = os.path.join(REPO, "examples", "outputs")
DIAGNOSTICS = os.path.join(OUTPUTS, "diagnostics")


def load(*parts):
    with open(os.path.join(OUTPUTS, *parts), encoding="utf-8") as handle:
        return json.load(handle)


def page(name):
    """The text of one page (``README.md`` or ``docs/...``, relative to the repository root): each
    test reads the page its figures live on, so a figure cannot move or vanish unnoticed."""
    with open(os.path.join(REPO, name), encoding="utf-8") as handle:
        return handle.read()


def pct(scores):
    """A probe row's accuracies on MR / SUBJ / SST-2 as the pages quote them (``62.3 / 82.7 /
    63.3``)."""
    return " / ".join(f"{100 * scores[t]['accuracy']:.1f}" for t in ("mr", "subj", "sst2"))


# ----------------------------------------------------------------------------- Ordered Memory

def test_ordered_memory_claims_hold_in_the_recorded_runs():
    """docs/guides/related-models.md renders its Ordered Memory tables from their JSON
    (examples/results_tables.py); its prose claims hold there: the released recipe finds the
    gold trees, the bracketed logic run leads the LSTM by 10 points at every length and its trees
    beat both branching baselines; the committed models are the recorded run's."""
    released = load("ordered_memory_listops_released.json")
    assert (released["config"]["scorer"], released["config"]["attention"]) == ("layer_norm",
                                                                                "softmax")
    assert released["models"]["ordered_memory"]["tree_f1"] == 100.0
    thesis = load("ordered_memory_listops_thesis_form.json")["config"]
    assert (thesis["attention"], thesis["scorer"], thesis["optimizer"], thesis["train_size"]) == (
        "stick_breaking", "tanh", "released", released["config"]["train_size"])
    recorded = load("ordered_memory_logic_brackets.json")
    assert recorded["config"]["brackets"] is True
    om, lstm = recorded["models"]["ordered_memory"], recorded["models"]["lstm"]
    assert all(om["test_accuracy"][str(k)] - lstm["test_accuracy"][str(k)] >= 0.10
               for k in range(7, 13))
    assert om["tree_f1"] > max(om["branching_f1"].values())
    for name in ("ordered_memory", "lstm"):
        assert len(recorded["models"][name]["curve"]) == recorded["epochs"][name]
        committed = load(os.path.join("ordered_memory_logic_models", f"{name}.json"))
        assert committed["scores"] == recorded["models"][name]
        assert {k: committed["config"][k] for k in recorded["config"]} == recorded["config"]


def test_the_transfer_cost_tables_runs_have_the_settings_it_names():
    """docs/benchmarks.md's transfer-cost table is rendered from these JSON
    (examples/results_tables.py); the settings its labels name are theirs."""
    for name in ("transfer_overhead", "transfer_overhead_chained"):
        config = load_benchmark(name)["config"]
        assert (config["batch"], config["seq"]) == (64, 48)
    assert [load_benchmark(n)["config"]["propagation"]
            for n in ("transfer_overhead", "transfer_overhead_chained")] == ["auto", "chained"]
    for name, precision in (("transfer_overhead_cache_topk", "float32"),
                            ("transfer_overhead_cache_topk_bf16", "mixed_bfloat16")):
        result = load_benchmark(name)
        config = result["config"]
        assert config.get("precision", "float32") == precision
        assert config["cache"] and config["top_k"] == 8 and config["uniform"]
        assert result["cache_fill"]["glomo_cached_candidates"]["exact"]
    large = load_benchmark("transfer_overhead_cache_topk_large")["config"]
    assert (large["seq"], large["d"]) == (128, 256)


# ----------------------------------------------------------------------------- sentence encoders

def sentence_encoder_figures(name):
    """A recorded sentence-encoder run, the page's leave-one-out sentence and its comparisons."""
    result = load(name)
    drop = result["comparisons"]["drop_when_left_out"]
    sentence = ("leaving out G2L costs {g2l:.1f} points of mean accuracy, SP {sp:.2f}, QT {qt:.2f}"
                .format(**{k: 100 * v for k, v in drop.items()}))
    return result, sentence, result["comparisons"]


def test_sentence_encoder_figures_come_from_the_recorded_run():
    doc = page("docs/guides/related-models.md")
    result, sentence, comparisons = sentence_encoder_figures(
        "sentence_encoders_long.json")
    assert result["settings"]["steps_per_epoch"] * result["settings"]["epochs"] == 1440
    assert all(run["steps"] == 1440 for run in result["pretraining"].values())
    flat = " ".join(doc.split())  # prose wraps
    assert sentence in flat
    beaten = [encoder for encoder, tasks in comparisons["beats_bow_and_random"].items()
              if any(tasks.values())]
    assert not beaten  # the README says no trained encoder beats both baselines on any task
    assert "no trained encoder beats both the bag of words and the random encoder" in flat
    probe = result["probe"]
    full, bow = probe["QT+SP+G2L"], probe["bow"]
    tasks = ("mr", "subj", "sst2")

    assert all(full[t]["accuracy"] > probe["random"][t]["accuracy"] for t in tasks)
    assert ("the bag of words of its own embeddings reaches " + " / ".join(
        f"{100 * bow[t]['accuracy']:.1f}" for t in tasks)) in flat
    first = load("sentence_encoders.json")["probe"]["QT+SP+G2L"]
    assert "QT+SP+G2L " + " / ".join(f"{100 * first[t]['accuracy']:.1f}" for t in tasks) in flat
    losses = result["pretraining"]["QT+SP-G2L"]["last_epoch"]
    assert f"QT {losses['qt_loss']:.2f} and SP {losses['sp_loss']:.2f}" in flat
    assert f"{result['probe_wall_time_s'] / 60:.0f} min" in flat
    graphs = probe["QT+SP+G2L+GLoMo"]
    assert f"GLoMo graphs do not help the full model ({pct(graphs)})" in flat
    assert "full model (" + pct(full) + ")" not in flat or pct(graphs) == pct(full)
    four = [run["wall_time_s"] for name, run in result["pretraining"].items()
            if name != "QT+SP+G2L+GLoMo"]
    assert f"their last 1,200 took {min(four):.0f}-{max(four):.0f} s each" in flat
    assert (f"the GLoMo-fed model's 1,440 steps "
            f"{result['pretraining']['QT+SP+G2L+GLoMo']['wall_time_s']:,.0f} s") in flat
    chosen = [c for scores in load("sentence_encoders.json")["probe"].values()
              for task in scores.values()
              for c in (task["c"] if isinstance(task["c"], list) else [task["c"]])]
    assert (f"{sum(c == max(chosen) for c in chosen)} of the {len(chosen)} choices were the "
            f"largest, {max(chosen):g}") in flat


def test_wider_encoder_figures_come_from_the_recorded_run():
    """The width row: the full model with GRUs of 512 a direction, every other setting as the
    recorded 128-unit run's, its table and the differences the page quotes."""
    doc = page("docs/guides/related-models.md")
    flat = " ".join(doc.split())
    wide, narrow = load("sentence_encoders_units512.json"), load("sentence_encoders_long.json")
    assert (wide["settings"]["units"], narrow["settings"]["units"]) == (512, 128)
    for key in ("embedding_dim", "batch_size", "epochs", "steps_per_epoch", "learning_rate",
                "seed", "vocab_size", "max_length", "folds", "inner_folds", "c_values", "tasks"):
        assert wide["settings"][key] == narrow["settings"][key], key
    assert wide["pretraining"]["QT+SP+G2L"]["steps"] == 1440
    tasks = ("mr", "subj", "sst2")

    def shown(scores):  # the table's one-decimal figures
        return [round(100 * scores[t]["accuracy"], 1) for t in tasks]

    def fmt(values):
        return " / ".join(f"{v:.1f}" for v in values)

    def gap(a, b):
        return fmt(x - y for x, y in zip(shown(a), shown(b)))

    full, bow, rand = (wide["probe"][name] for name in ("QT+SP+G2L", "bow", "random"))
    old = narrow["probe"]
    assert (f"the full model reaches {fmt(shown(full))} ({fmt(shown(old['QT+SP+G2L']))} at 128 "
            f"units), its bag of words {fmt(shown(bow))} and the random encoder of its size "
            f"{fmt(shown(rand))}") in flat
    assert (f"narrows from {gap(old['bow'], old['QT+SP+G2L'])} points to {gap(bow, full)}, "
            "above it on none of the three tasks") in flat
    assert not any(wide["comparisons"]["beats_bow_and_random"]["QT+SP+G2L"].values())
    assert (f"the random encoder gains {gap(rand, old['random'])} points from 512 to 2,048 "
            f"dimensions, the trained one {gap(full, old['QT+SP+G2L'])}") in flat
    pre = wide["pretraining"]["QT+SP+G2L"]
    assert f"({pre['last_epoch']['qt_loss']:.2f} against `ln 100` = 4.61; " in flat
    assert f"the 1,440 steps took {pre['wall_time_s']:,.0f} s on two threads" in flat
    assert f"{pre['wall_time_s'] / 1440:.1f} s a step of 100" in flat
    assert f"the probe {wide['probe_wall_time_s'] / 60:.0f} min" in flat


def test_bfloat16_encoder_figures_come_from_the_recorded_runs():
    """The bfloat16 row: the 512-unit run again under mixed_bfloat16, every other setting as the
    float32 run's; its table, speed and the differences the page quotes."""
    flat = " ".join(page("docs/guides/related-models.md").split())
    half, full = load("sentence_encoders_units512_bfloat16.json"), load(
        "sentence_encoders_units512.json")
    assert (half["settings"]["precision"], full["settings"].get("precision", "float32")) == (
        "mixed_bfloat16", "float32")
    for key in ("units", "embedding_dim", "batch_size", "epochs", "steps_per_epoch",
                "learning_rate", "seed", "vocab_size", "max_length", "folds", "inner_folds",
                "c_values", "tasks", "variants"):
        assert half["settings"][key] == full["settings"][key], key
    assert "--precision mixed_bfloat16" in half["command"]

    model, bow = (half["probe"][name] for name in ("QT+SP+G2L", "bow"))
    float_model, float_bow = (full["probe"][name] for name in ("QT+SP+G2L", "bow"))
    assert (f"The full model reaches {pct(model)} against float32's {pct(float_model)}, its bag "
            f"of words {pct(bow)} against {pct(float_bow)}") in flat
    sst2 = {name: round(100 * half["probe"][name]["sst2"]["accuracy"], 1)
            for name in ("QT+SP+G2L", "bow")}
    assert f"{sst2['QT+SP+G2L'] - sst2['bow']:.1f} points above its bag of words here" in flat
    assert (round(100 * full["probe"]["QT+SP+G2L"]["sst2"]["accuracy"], 1)
            == round(100 * full["probe"]["bow"]["sst2"]["accuracy"], 1))  # "level" in float32
    slow, fast = (run["pretraining"]["QT+SP+G2L"] for run in (full, half))
    assert (f"took {fast['wall_time_s']:,.0f} s against float32's {slow['wall_time_s']:,.0f} "
            f"({slow['wall_time_s'] / fast['wall_time_s']:.2f} times as fast") in flat
    assert f"about {20 * fast['wall_time_s'] / slow['wall_time_s']:.0f} hours instead of 20" in flat
    names = {"Quick Thoughts": "qt_loss", "Self Prediction": "sp_loss"}
    for name, key in names.items():
        assert (f"{name} {fast['last_epoch'][key]:.2f} against "
                f"{slow['last_epoch'][key]:.2f}") in flat
    assert (f"Global-to-Local {fast['last_epoch']['g2l_loss']:.1f} against "
            f"{slow['last_epoch']['g2l_loss']:.1f}") in flat


def test_book_scale_sentence_encoder_figures_come_from_the_recorded_curve():
    doc = page("docs/guides/related-models.md")
    flat = " ".join(doc.split())
    result = load("sentence_encoders_books.json")
    curve = list(result["curve"].values())
    last, newest = curve[-1], list(result["curve"])[-1]
    assert result["baselines"]["snapshot"] == newest
    assert [p["pairs_seen"] for p in curve] == [500_000 * (i + 1) for i in range(len(curve))]
    config = result["run_config"]
    assert (config["format"], config["batch_size"], config["steps_per_epoch"]) == (
        "books", 400, 1250)
    tasks = ("mr", "subj", "sst2")
    bow, rand = (result["baselines"]["results"][b] for b in ("bow", "random"))

    beaten = [t for t in tasks if last["probe"][t]["accuracy"] > bow[t]["accuracy"]]
    assert (f"after {last['pairs_seen']:,} pairs the full model reaches {pct(last['probe'])} on "
            f"MR / SUBJ / SST-2, the bag of words of its own embeddings {pct(bow)} and the "
            f"random encoder {pct(rand)}") in flat
    assert f"above the bag of words on {len(beaten)} of the three tasks" in flat
    qt = [p["losses"]["qt_loss"] for p in curve]
    g2l = [p["losses"]["g2l_loss"] for p in curve]
    assert (f"Quick Thoughts' loss went from {qt[0]:.2f} to {qt[-1]:.2f}") in flat
    assert f"Global-to-Local's {g2l[-1]:.0f}" in flat
    assert result["probe_settings"]["c_values"][-1] == 1024
    small = load("sentence_encoders_long.json")["settings"]
    assert f"WikiText run's {small['batch_size'] * 1440:,} (1,440" in flat
    in_batch = [p["losses"]["g2l_loss"] / (p["losses"]["g2l_loss"] + p["losses"][other])
                for p in curve for other in ("qt_loss", "sp_loss")]
    assert 0.955 <= min(in_batch) and max(in_batch) < 0.975  # "96-97% of every batch's loss"
    with open(os.path.join(REPO, "examples", "outputs",
                           "sentence_encoders_books_pretrain.log")) as handle:
        log = handle.read()
    epochs = [int(s) for s in re.findall(r"^1250/1250 - (\d+)s", log, re.M)]
    assert f"epochs 2 and 3: {epochs[0]:,} s and {epochs[1]:,} s" in flat
    assert f"epochs 4-6: {epochs[2]:,} s, {epochs[3]:,} s and {epochs[4]:,} s" in flat
    per_step = sorted(e / 1250 for e in epochs)
    assert f"Training took {per_step[0]:.1f}-{per_step[-1]:.1f} s a step of 400" in flat
    chosen = [c for c in (bow[t]["c"] for t in tasks)
              for c in (c if isinstance(c, list) else [c])]
    assert f"{sum(c >= 256 for c in chosen)} of its {len(chosen)} choices" in flat


def test_converged_probe_and_book_ablation_figures_come_from_their_json():
    """The converged probe (``--max-iter 1000``) of the newest snapshots, set beside the 100
    iterations' scores of the same snapshots, and the leave-one-out row at equal pairs."""
    flat = " ".join(page("docs/guides/related-models.md").split())
    tasks = ("mr", "subj", "sst2")

    books = load("sentence_encoders_books.json")
    converged = load("sentence_encoders_books_converged.json")
    assert converged["probe_settings"]["max_iter"] == 1000
    assert books["probe_settings"].get("max_iter", 100) == 100
    newest = converged["baselines"]["snapshot"]
    assert newest == books["baselines"]["snapshot"] == list(converged["curve"])[-1]
    enc, bow = converged["curve"][newest]["probe"], converged["baselines"]["results"]["bow"]
    beaten = [t for t in tasks if enc[t]["accuracy"] > bow[t]["accuracy"]]
    pairs = converged["curve"][newest]["pairs_seen"]
    assert (f"after {pairs:,} pairs, converged, the full model reaches {pct(enc)} against its "
            f"bag of words' {pct(bow)} (100 iterations: {pct(books['curve'][newest]['probe'])} "
            f"against {pct(books['baselines']['results']['bow'])}): above it on "
            f"{len(beaten)} of the three tasks") in flat
    for suffix, label, left_out in BOOK_ABLATIONS:
        ablation = load(f"sentence_encoders_books_{suffix}.json")
        assert ablation["run_config"]["objectives"] == label.lower().split("+")
        assert ablation["probe_settings"] == {**books["probe_settings"], "max_iter": 100}
        costs = []
        for name, point in ablation["curve"].items():
            full = books["curve"][name]
            assert full["pairs_seen"] == point["pairs_seen"]
            costs.append(" / ".join(
                f"{100 * (full['probe'][t]['accuracy'] - point['probe'][t]['accuracy']):.1f}"
                for t in tasks))
        assert f"leaving {left_out} out costs {costs[-1]} points" in flat, (label, costs[-1])
    qt_g2l = load("sentence_encoders_books_qt_g2l.json")
    name, point = list(qt_g2l["curve"].items())[-1]
    newest = books["curve"][books["baselines"]["snapshot"]]["probe"]
    above = [t for t in tasks if point["probe"][t]["accuracy"] > books["curve"][name]["probe"][t][
        "accuracy"]]
    assert len(above) == 3 and "QT+G2L is above the full model on all three tasks" in flat
    beyond = [t for t in tasks if point["probe"][t]["accuracy"] > newest[t]["accuracy"]]
    assert beyond == ["mr", "sst2"] and "after 3,000,000 pairs on MR and SST-2" in flat
    assert (f"({pct(point['probe'])} against {pct(newest)}), though still below its own bag of "
            f"words ({pct(qt_g2l['baselines']['results']['bow'])})") in flat
    converged_qt_g2l = load("sentence_encoders_books_qt_g2l_converged.json")
    assert converged_qt_g2l["probe_settings"]["max_iter"] == 1000
    enc = converged_qt_g2l["curve"][name]["probe"]
    bow = converged_qt_g2l["baselines"]["results"]["bow"]
    below = [t for t in tasks if enc[t]["accuracy"] < bow[t]["accuracy"]]
    assert len(below) == 3 and (
        f"QT+G2L after {point['pairs_seen']:,} pairs reaches {pct(enc)} against its bag of words' "
        f"{pct(bow)}: below it on all three tasks") in flat
    name, point = list(load("sentence_encoders_books_qt_sp.json")["curve"].items())[-1]
    full = books["curve"][name]["losses"]
    assert (f"Self Prediction's loss falls to {point['losses']['sp_loss']:.2f} "
            f"({full['sp_loss']:.2f} in the full model at {point['pairs_seen']:,} pairs) "
            f"while Quick Thoughts' stays near chance ({point['losses']['qt_loss']:.2f} against "
            f"{full['qt_loss']:.2f})") in flat


# The leave-one-out rows at the book budget: output suffix, the encoder's label, what it leaves out.
BOOK_ABLATIONS = (("qt_sp", "QT+SP", "Global-to-Local"), ("qt_g2l", "QT+G2L", "Self Prediction"),
                  ("sp_g2l", "SP+G2L", "Quick Thoughts"))


def test_g2l_reduction_figures_come_from_the_recorded_runs():
    flat = " ".join(page("docs/guides/related-models.md").split())
    runs = load("sentence_g2l_reduction.json")["runs"]
    tasks = ("mr", "subj", "sst2")

    mean, total = runs["mean"], runs["sum"]
    assert mean["pretraining"]["steps"] == total["pretraining"]["steps"] == 1440
    losses = [r["pretraining"]["last_epoch"] for r in (mean, total)]
    assert (f"(final losses {losses[0]['qt_loss']:.2f} and {losses[0]['sp_loss']:.2f} against "
            f"{losses[1]['qt_loss']:.2f} and {losses[1]['sp_loss']:.2f})") in flat
    assert (f"worse: {pct(mean['probe']['mean'])} against {pct(total['probe']['sum'])} with "
            f"Eq. 3.5's sum (bags of words {pct(mean['probe']['bow'])} and "
            f"{pct(total['probe']['bow'])})") in flat
    assert all(mean["probe"]["mean"][t]["accuracy"] < total["probe"]["sum"][t]["accuracy"]
               for t in tasks)  # "worse", "the sum stays the default"


# ----------------------------------------------------------------------------- the bfloat16 transfer

def load_benchmark(name):
    with open(os.path.join(REPO, "benchmarks", "outputs", f"{name}.json"),
              encoding="utf-8") as handle:
        return json.load(handle)


def test_wide_book_run_and_its_max_pooled_states_come_from_their_json():
    """The 512-unit book run in bfloat16 probed with the thesis' vector and with max-pooled
    states, each beside its bag of words and a random encoder pooled the same way."""
    flat = " ".join(page("docs/guides/related-models.md").split())
    final, pooled = (load(f"sentence_encoders_books_units512{s}.json") for s in ("", "_max"))
    assert final["probe_settings"]["pooling"] == "final"
    assert pooled["probe_settings"]["pooling"] == "max" and "--pooling max" in pooled["command"]
    for result in (final, pooled):
        config = result["run_config"]
        assert (config["units"], config["precision"], config["format"]) == (
            512, "mixed_bfloat16", "books")
    newest = list(final["curve"])[-1]
    assert newest == list(pooled["curve"])[-1] == final["baselines"]["snapshot"]
    assert pooled["baselines"]["snapshot"] == newest
    point, maxed = final["curve"][newest], pooled["curve"][newest]["probe"]
    bow = pooled["baselines"]["results"]["bow"]
    same_bow = final["baselines"]["results"]["bow"]  # pooling does not touch the bag of words
    assert all(bow[t]["accuracy"] == same_bow[t]["accuracy"] for t in bow)
    random_max = pooled["baselines"]["results"]["random"]
    narrow = next(p for p in load("sentence_encoders_books.json")["curve"].values()
                  if p["pairs_seen"] == point["pairs_seen"])
    tasks = ("mr", "subj", "sst2")
    assert (f"After {point['pairs_seen']:,} pairs the wider model reaches {pct(point['probe'])} "
            f"with the thesis' vector, against the 128-unit run's {pct(narrow['probe'])}") in flat
    assert all(point["probe"][t]["accuracy"] > narrow["probe"][t]["accuracy"] for t in tasks)
    assert f"the bag of words of its own embeddings ({pct(bow)}) stays ahead on all three" in flat
    assert all(point["probe"][t]["accuracy"] < bow[t]["accuracy"] for t in tasks)
    beaten = [t for t in tasks if maxed[t]["accuracy"] > bow[t]["accuracy"]]
    assert (f"Max-pooling the same model's states gives {pct(maxed)}: above the bag of words on "
            f"{len(beaten)} of the three tasks ({'/'.join(t.upper() for t in beaten)})") in flat
    assert f"an untrained encoder of the same size, max-pooled, reaches {pct(random_max)}" in flat
    assert sum(random_max[t]["accuracy"] > maxed[t]["accuracy"] for t in tasks) >= 2
    losses = point["losses"]
    assert (f"Quick Thoughts {losses['qt_loss']:.2f}, chance `ln 400` = 5.99; Self Prediction "
            f"{losses['sp_loss']:.2f}; Global-to-Local {losses['g2l_loss']:.0f})") in flat


def book_sentence_pairs():
    """The books' sentence-pair counts the 128-unit run's pretraining log reports (one a start)."""
    with open(os.path.join(OUTPUTS, "sentence_encoders_books_pretrain.log")) as handle:
        return {int(m) for m in re.findall(r"^(\d+) sentence pairs", handle.read(), re.M)}


def test_glomo_fed_book_run_and_its_control_hold_the_pages_claims():
    """The full model fed with the built-in books predictor's graphs at book scale, beside the same
    model on the same vocabulary without graphs (the page renders their tables from this JSON):
    every other setting equal, probed at the same snapshots, and the prose's claims hold."""
    fed, control = (load(f"sentence_encoders_books_glomo{s}.json") for s in ("", "_control"))
    a, b = fed["run_config"], control["run_config"]
    assert a["graph_run"] == "glomo_books_en" and b["graph_run"] is None
    assert b["vocab"].endswith("glomo_books_en/assets/tokenizer") and a["vocab"] is None
    # ``epochs`` is where a run stops (resuming may raise it), not how it trains.
    assert {k for k in a if a[k] != b.get(k)} - {"epochs"} == {"graph_run", "vocab"}
    snapshots = list(fed["curve"])
    assert snapshots == list(control["curve"]) and len(snapshots) == 5
    assert fed["heldout"] == control["heldout"] == {
        "files": ["../shared/data/books/test.txt.gz"], "pairs": 20000, "batch_size": 400}
    flat = " ".join(page("docs/guides/related-models.md").split())
    assert "the first 20,000 pairs of the books' test split, in batches of 400" in flat
    x, y = [[r["curve"][n] for n in snapshots] for r in (fed, control)]
    held = lambda p, k: p["heldout_losses"][k]  # noqa: E731
    assert all(held(p, "sp_loss") < held(q, "sp_loss") for p, q in zip(x, y))
    for k in ("qt_loss", "g2l_loss"):  # a little higher held out, lower in epoch 1's training
        assert held(x[-1], k) > held(y[-1], k) and held(x[0], k) > held(y[0], k)
    assert all(x[0]["losses"][k] < y[0]["losses"][k] for k in ("qt_loss", "sp_loss", "g2l_loss"))
    for r in (x, y):
        g2l = [held(p, "g2l_loss") for p in r]
        assert g2l[1] - g2l[2] > g2l[0] - g2l[1] and g2l[4] > g2l[3] > g2l[2]
        for k in ("qt_loss", "sp_loss"):
            assert [held(p, k) for p in r[2:]] == sorted((held(p, k) for p in r[2:]), reverse=True)
    beyond = {t: [i for i, (p, q) in enumerate(zip(x, y))
                  if abs(p["probe"][t]["accuracy"] - q["probe"][t]["accuracy"])
                  > max(p["probe"][t]["std"], q["probe"][t]["std"])] for t in ("mr", "subj")}
    assert beyond == {"mr": [], "subj": [0, 1, 2]}
    for result in (fed, control):
        bow = result["baselines"]["results"]["bow"]
        assert all(result["curve"][snapshots[-1]]["probe"][t]["accuracy"] < bow[t]["accuracy"]
                   for t in ("mr", "subj", "sst2"))


def test_what_the_book_sentence_runs_read_follows_from_their_settings():
    """Each recorded book-scale sentence run drew every epoch from the corpus' first
    ``steps x batch + SHUFFLE_BUFFER`` pairs (epochs then began at the corpus' start): the
    figures of the paragraph that says so follow from the runs' settings and the run's log."""
    from glomo_tf.experiments.pretraining import SHUFFLE_BUFFER

    flat = " ".join(page("docs/guides/related-models.md").split())
    names = ["sentence_encoders_books", "sentence_encoders_books_qt_sp",
             "sentence_encoders_books_qt_g2l", "sentence_encoders_books_sp_g2l",
             "sentence_encoders_books_units512", "sentence_encoders_books_glomo",
             "sentence_encoders_books_glomo_control"]
    epochs = {(load(f"{n}.json")["run_config"]["steps_per_epoch"],
               load(f"{n}.json")["run_config"]["batch_size"]) for n in names}
    assert len(epochs) == 1
    steps, batch = epochs.pop()
    pairs, = book_sentence_pairs()
    assert (f"each epoch of {steps * batch:,} pairs ({steps:,} steps of {batch}) was drawn from "
            f"its first {steps * batch + SHUFFLE_BUFFER:,} (the epoch's and the "
            f"{SHUFFLE_BUFFER:,} of the shuffle buffer), a quarter of the {pairs:,}") in flat
    assert round(4 * (steps * batch + SHUFFLE_BUFFER) / pairs) == 1  # a quarter
    passes = load("sentence_encoders_books.json")["curve"]
    assert list(passes.values())[-1]["pairs_seen"] == 6 * steps * batch
    assert "These pairs are six passes over the same first pairs of the books" in flat


def test_the_book_encoders_size_that_keeps_their_weights_out_of_the_repository():
    """The guide's reason for not committing the book-scale encoders: built at the recorded run's
    sizes (its vocabulary plus ``[MASK]``), the full model holds more than 5 million weights, over
    20 MB in float32."""
    from glomo_tf.models.sentence_pretrainer import SentencePretrainer

    flat = " ".join(page("docs/guides/related-models.md").split())
    config = load("sentence_encoders_books.json")["run_config"]
    model = SentencePretrainer(config["vocab_size"] + 1, config["vocab_size"],
                               embedding_dim=config["embedding_dim"], units=config["units"],
                               objectives=config["objectives"])
    model.build()
    weights = sum(math.prod(w.shape) for w in model.weights)
    assert weights > 5_000_000 and 4 * weights > 20e6
    committed = os.path.join(OUTPUTS, "ordered_memory_logic_models")
    size = sum(os.path.getsize(os.path.join(committed, f)) for f in os.listdir(committed))
    assert f"the Ordered Memory models above take {size / 1e6:.1f} MB" in flat
    assert (f"an embedding table of the {config['vocab_size']:,}-unit vocabulary, more than 5 "
            "million weights in all (over 20 MB in float32)") in flat
