"""The tables and quoted figures of the results pages, each rendered from the recorded JSON it
names.

A page marks a table with an HTML comment, ``<!-- NAME table -->``, on the line above it; the table
ends at the first blank line. A figure that prose quotes sits between ``<!-- NAME figure -->`` and
``<!-- /NAME -->`` (inline; the comments do not show in the rendered page). Every marker on
:data:`PAGES` has one function here, registered with :func:`table` or :func:`figure`, that reads
its JSON (``examples/outputs/``, ``benchmarks/outputs/``) and returns the table's Markdown or the
figure's text. ``python examples/render_outputs.py`` rewrites every marked table and figure (and
every ``examples/outputs/*.md``); ``--check`` writes nothing and names the ones that differ.
"""

import functools
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

PAGES = ("README.md", "docs/results/planted.md", "docs/results/transfer.md",
         "docs/results/where-graphs-pay.md", "benchmarks/README.md",
         "docs/guides/related-models.md", "docs/guides/pretraining.md", "docs/guides/images.md",
         "docs/benchmarks.md", "docs/guides/precision.md")
MARKER = re.compile(r"^<!-- (.+) table -->$")
FIGURE = re.compile(r"<!-- ([^>]+?) figure -->(.*?)<!-- /\1 -->", re.S)
TABLES = {}  # marker name -> (page, function)
FIGURES = {}  # figure name -> (page, function)


def table(name, page):
    """Registers a function as the renderer of ``<!-- name table -->`` on ``page``."""
    def register(function):
        TABLES[name] = (page, function)
        return function
    return register


def figure(name, page):
    """Registers a function as the renderer of ``<!-- name figure -->...<!-- /name -->`` on
    ``page``."""
    def register(function):
        FIGURES[name] = (page, function)
        return function
    return register


@functools.lru_cache(maxsize=None)
def _read(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        return json.load(handle)


def output(name):
    """``examples/outputs/NAME``, parsed."""
    return _read(f"examples/outputs/{name}")


def bench(name):
    """``benchmarks/outputs/NAME.json``, parsed."""
    return _read(f"benchmarks/outputs/{name}.json")


def markdown(header, rows, align=None):
    """A Markdown table: a header row, its rule (``align``: one ``---`` or ``---:`` per column),
    the rows."""
    def line(cells):
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    return "\n".join([line(header), "|" + "|".join(align or ["---"] * len(header)) + "|"]
                     + [line(row) for row in rows])


# ----------------------------------------------------------------------------------- formats

def p_text(p):
    """A two-sided p-value to two significant digits (``0.049``, ``0.31``, ``4.0e-05``)."""
    return "n/a" if p is None else f"{p:#.2g}"


def paired(p, scale=100):
    """``+1.23 (7 / 3, p 0.041)``: the mean difference (points), wins / losses (and ties), p."""
    ties = f", {p['ties']} tie{'s' if p['ties'] > 1 else ''}" if p.get("ties") else ""
    return (f"{scale * p['mean_difference']:+.2f} ({p['wins']} / {p['losses']}{ties}, "
            f"p {p_text(p['p'])})")


def mean_std(v):
    return f"{100 * v['mean']:.2f} ± {100 * v['std']:.2f}"


def pair(values, digits=2):
    return f"{values['forward']:.{digits}f} / {values['backward']:.{digits}f}"


def mean(values):
    values = list(values)
    return sum(values) / len(values)


@functools.lru_cache(maxsize=None)
def _evaluation():
    from glomo_tf import evaluation

    return evaluation


def compare(runs, variant, reference_runs, reference, metric="accuracy"):
    """``variant``'s runs paired seed by seed with ``reference``'s (other runs, the same seeds)."""
    evaluation = _evaluation()
    return evaluation.paired_comparison(
        evaluation.per_seed_accuracy(runs, variant, metric),
        evaluation.per_seed_accuracy(reference_runs, reference, metric))


def runs_summary(runs, variant, metric="accuracy"):
    evaluation = _evaluation()
    return evaluation.accuracy_summary(
        list(evaluation.per_seed_accuracy(runs, variant, metric).values()))


# ------------------------------------------------------------------------------- README.md

@table("demo", "README.md")
def demo_table():
    """``glomo demo``'s recovery of the planted edges, per direction (``demo.json``)."""
    rows = []
    for name in ("forward", "backward"):
        r = output("demo.json")["recovery"][name]
        best, avg, pos = r["best_head"], r["best_layer_head_average"], r["positional_baseline"]
        rows.append([name, f"{best['share']:.3f} (layer {best['layer']}, head {best['head']})",
                     f"{avg['share']:.3f} (layer {avg['layer']})",
                     f"{pos['share']:.3f} (offset {pos['offset']:+d})", f"{r['chance']:.3f}",
                     f"{r['random_key']:.3f}", f"{r['value_cross_entropy']:.2f}"])
    return markdown(["direction", "best head", "heads averaged", "positional bound", "chance",
                     "random key", "value CE"], rows)


@table("demo run", "README.md")
def demo_run_table():
    """The demo run's length and time (``demo.json``)."""
    metrics = output("demo.json")
    training = metrics["training"]
    return markdown(["steps", "batch", "precision", "training", "in all"],
                    [[f"{training['epochs'] * training['steps_per_epoch']:,}",
                      training["batch_size"], training["precision"],
                      f"{training['seconds']:.0f} s", f"{metrics['wall_seconds']:.0f} s"]],
                    ["---:", "---:", "---", "---:", "---:"])


@table("readme classifier", "README.md")
def readme_classifier_table():
    """The README's four lines, run (``readme_classifier.json``, rendered by its script)."""
    import readme_classifier

    return readme_classifier.render_table(output("readme_classifier.json"))


@figure("books predictor", "README.md")
def books_predictor_figure():
    """The tokens the books predictor (``glomo_books_en``) saw, and the corpus' first tokens they
    all came from: each epoch drawn from its first ``steps x batch + SHUFFLE_BUFFER`` windows
    (``books_gru_curve.json``)."""
    from glomo_tf.experiments.pretraining import SHUFFLE_BUFFER

    label, curve, _, epochs = BOOKS[0]  # the preset is the 12-epoch ``gru`` predictor
    settings = output(curve)["settings"]
    per_epoch = settings["steps_per_epoch"] * settings["batch_size"]
    seen = output(curve)["curve"][epochs - 1]["tokens_seen"]
    return (f"{seen / 1e6:.1f}M tokens seen, all from the "
            f"corpus' first {(per_epoch + SHUFFLE_BUFFER) * settings['window'] / 1e6:.1f}M")


# ------------------------------------------------------------------- docs/results/planted.md

def diagnostic(name):
    return output(f"diagnostics/{name}")


@table("capacity", "docs/results/planted.md")
def capacity_table():
    """The graph predictor alone, taught the planted edges (``diagnostics/capacity*.json``)."""
    rows = []
    for label, name in (("Eq. 1, scalar threshold (the paper)", "capacity.json"),
                        ("`entmax15`", "capacity_entmax15.json"),
                        ("`softmax`", "capacity_softmax.json")):
        final = diagnostic(name)["final"]
        rows.append([label, pair(final["best_head"]), pair(final["worst_head"]),
                     f"{final['step']:,}"])
    return markdown(["normalisation", "best head (fw / bw)", "worst head", "steps"], rows)


@table("value path", "docs/results/planted.md")
def value_path_table():
    """Steps until the decoder reads the value through an oracle graph
    (``diagnostics/value_path_*.json``)."""
    rows = []
    for composition, label in (("gru", "`gru` (the paper)"), ("residual", "`residual`"),
                               ("projected", "`projected`")):
        for scale in ("0.1", "0.5"):
            result = diagnostic(f"value_path_{composition}_scale{scale}.json")
            solved = result["steps_to_solve"]
            rows.append([f"{label}, embeddings ±{scale}",
                         f"not by {result['steps']:,}" if solved is None else f"{solved:,}"])
    return markdown(["composition", "steps to solve"], rows)


@table("learning curve", "docs/results/planted.md")
def learning_curve_table():
    """The unsupervised model's best head at four step counts (``diagnostics/curve_*.json``)."""
    steps = (1200, 3000, 6000, 12000)
    rows = []
    for label, name in (("the paper (`gru`, Eq. 1)", "curve_paper_demo.json"),
                        ("`entmax15`", "curve_entmax15.json"),
                        ("the paper, trained on 16-unit windows", "curve_short_windows.json"),
                        ("`projected`, learning rate 3e-3", "curve_projected.json"),
                        ("`projected`, learning rate 5e-3", "curve_projected_lr0.005.json"),
                        ("`projected`, learning rate 1e-2", "curve_projected_lr0.01.json"),
                        ("`projected` + `entmax15`", "curve_projected_entmax15.json")):
        result = diagnostic(name)
        at = {r["step"]: r for r in result["curve"]}
        final = result["final"]
        rows.append([label] + [pair(at[s]["best_head"]) if s in at else "-" for s in steps]
                    + [f"{pair(final['value_cross_entropy'])} at {final['step']:,}"])
    return markdown(["configuration"] + [f"{s:,}" for s in steps] + ["value CE"], rows)


# ------------------------------------------------------------------ docs/results/transfer.md

LABELS = {"glomo_rnn_dropout": "glomo_rnn, `--transfer-dropout 0.3`"}


def variant_table(record):
    """A ``glomo transfer`` run's variants: accuracy, the paired differences with the baseline
    and with the uniform graph, seconds per run (the mean)."""
    summary = record["summary"]
    rows = []
    for name, v in summary["variants"].items():
        row = [LABELS.get(name, name), mean_std(v)]
        p = summary["paired"].get(name)
        if p is None:
            row += ["", "", ""]
        else:
            ties = f" ({p['ties']} tie{'s' if p['ties'] > 1 else ''})" if p["ties"] else ""
            row += [f"{100 * p['mean_difference']:+.2f}", f"{p['wins']} / {p['losses']}{ties}",
                    p_text(p["p"])]
        u = summary.get("paired_with_uniform", {}).get(name)
        row.append(f"{100 * u['mean_difference']:+.2f} ({p_text(u['p'])})" if u else "")
        row.append(f"{mean(r['seconds'] for r in record['runs'] if r['variant'] == name):.0f}")
        rows.append(row)
    return markdown(["variant", "accuracy (mean ± std)", "vs baseline, paired", "wins / losses",
                     "p", "vs uniform, paired (p)", "s / run"], rows,
                    ["---"] + ["---:"] * 6)


@table("mr wikitext-2", "docs/results/transfer.md")
def mr_wikitext2_table():
    """MR with the WikiText-2 predictor (``mr_results.json``)."""
    return variant_table(output("mr_results.json"))


@table("mr own text", "docs/results/transfer.md")
def mr_own_text_table():
    """MR with a predictor of MR's own sentences (``mr_text_results.json``)."""
    return variant_table(output("mr_text_results.json"))


@table("subj own text", "docs/results/transfer.md")
def subj_own_text_table():
    """SUBJ with a predictor of SUBJ's own sentences (``subj_results.json``)."""
    return variant_table(output("subj_results.json"))


TASKS = (("MR", "mr"), ("SUBJ", "subj"), ("SST-2", "sst2"))


@table("entmax15 transfer", "docs/results/transfer.md")
def entmax15_transfer_table():
    """The sharp WikiText-2 predictor on three tasks (``{mr,subj,sst2}_entmax15_results.json``)."""
    rows = []
    for task, name in TASKS:
        summary = output(f"{name}_entmax15_results.json")["summary"]
        v = summary["variants"]
        rows.append([task, v["baseline"]["seeds"]]
                    + [mean_std(v[n]) for n in ("baseline", "uniform", "glomo_embeddings",
                                                 "glomo_rnn")]
                    + [paired(summary["paired_with_uniform"][n])
                       for n in ("glomo_embeddings", "glomo_rnn")])
    return markdown(["task", "seeds", "baseline", "uniform", "glomo_embeddings", "glomo_rnn",
                     "glomo_embeddings - uniform (wins / losses, p)", "glomo_rnn - uniform"],
                    rows, ["---"] + ["---:"] * 7)


@table("graph sources", "docs/results/transfer.md")
def graph_sources_table():
    """What a row of the sharp graphs hands its unit, learned / uniform
    (``graph_sources_{mr,subj,sst2}.json``: the learned graphs' mean over directions and
    layers, the uniform graph's over directions)."""
    rows = []
    for task, name in TASKS:
        result = output(f"graph_sources_{name}.json")["directions"]
        learned = [row for d in result.values() for row in d["learned"]]
        uniform = [d["uniform"] for d in result.values()]
        period = mean(next((s for w, s, *_ in r["top_sources"] if w == "."), 0.0)
                      for r in learned)
        uniform_period = mean(next((b for w, _, b in r["top_sources"] if w == "."), None)
                              for r in learned)
        rows.append([task,
                     f"{mean(r['sources'] for r in learned):.2f} / "
                     f"{mean(r['sources'] for r in uniform):.1f}",
                     f"{period:.2f} / {uniform_period:.2f}",
                     f"{mean(r['frequent_share'] for r in learned):.2f} / "
                     f"{mean(r['frequent_share'] for r in uniform):.2f}",
                     f"{mean(r['label_information'] for r in learned):.3f} / "
                     f"{mean(r['label_information'] for r in uniform):.3f}"])
    return markdown(["task", "sources per row", "weight on \".\"",
                     "on the 50 most frequent words", "class information of a source"], rows,
                    ["---"] + ["---:"] * 4)


@table("ablations", "docs/results/transfer.md")
def ablations_table():
    """The paper's Table 2 ablations on MR (``ablations_mr.json``, through
    ``examples/ablations_mr.py``'s table)."""
    import ablations_mr

    record = output("ablations_mr.json")
    results = {}
    for run in record["runs"]:
        results.setdefault(run["configuration"], {})[run["seed"]] = run["accuracy"]
    return ablations_mr.table(results, record["args"]["configs"])[1].rstrip("\n")


# ---------------------------------------------------------- docs/results/where-graphs-pay.md

def graph_stats(name):
    """``glomo extract --stats-json``: the mean row entropy of every layer and direction, its
    share of the uniform graph's, the mean sources per row and weight on the adjacent unit."""
    stats = output(name)
    graphs = [row for d in ("forward", "backward") for row in stats["predictor"][d]]
    entropy = [g["entropy"] for g in graphs]
    return {"entropy": entropy,
            "share": 100 * mean(entropy) / stats["uniform"]["forward"][0]["entropy"],
            "sources": mean(g["sources"] for g in graphs),
            "adjacent": mean(g["adjacent"] for g in graphs),
            "uniform": stats["uniform"]["forward"][0]}


BOOKS = (("`gru` (the paper), bfloat16, 12 epochs", "books_gru_curve.json", "gru", 12),
         ("`gru` (the paper), bfloat16, 20 epochs", "books_gru_curve.json", "gru_20", 20),
         ("`gru` (the paper), bfloat16, 20 epochs, read part after part",
          "books_gru_walk_curve.json", "gru_walk", 20),
         ("`projected`, bfloat16, 20 epochs", "books_projected_curve.json", "projected", 20),
         ("`projected` + `entmax15`, bfloat16, 20 epochs", "books_projected_entmax15_curve.json",
          "projected_entmax15", 20))


@table("books graphs", "docs/results/where-graphs-pay.md")
def books_graphs_table():
    """The books predictors: tokens seen, validation perplexity (``books_*_curve.json``) and
    their graphs on MR's sentences and SICK's test sentences (``books_{mr,sick}_stats_*.json``)."""
    rows = []
    for label, curve, stats, epochs in BOOKS:
        last = output(curve)["curve"][epochs - 1]
        mr, sick = graph_stats(f"books_mr_stats_{stats}.json"), graph_stats(
            f"books_sick_stats_{stats}.json")
        rows.append([label, f"{last['tokens_seen'] / 1e6:.1f}M", f"{last['val_perplexity']:.0f}",
                     " / ".join(f"{e:.2f}" for e in mr["entropy"]), f"{mr['share']:.0f}%",
                     f"{mr['sources']:.1f}", f"{mr['adjacent']:.2f}", f"{sick['share']:.0f}%",
                     f"{sick['sources']:.1f}"])
    mr, sick = graph_stats("books_mr_stats_gru.json"), graph_stats("books_sick_stats_gru.json")
    rows.append(["uniform graph", "-", "-", f"{mr['uniform']['entropy']:.2f} (every graph)",
                 "100%", f"{mr['uniform']['sources']:.1f}", f"{mr['uniform']['adjacent']:.2f}",
                 "100%", f"{sick['uniform']['sources']:.1f}"])
    return markdown(["predictor (books + PTB + WikiText-2)", "tokens seen", "val perplexity",
                     "MR: row entropy", "of uniform", "sources", "adjacent",
                     "SICK: of uniform", "sources"], rows)


@table("books curve", "docs/results/where-graphs-pay.md")
def books_curve_table():
    """Validation (training) perplexity after each epoch of the four books runs
    (``books_*_curve.json``)."""
    curves = [output(name)["curve"] for name in (
        "books_gru_curve.json", "books_gru_walk_curve.json", "books_projected_curve.json",
        "books_projected_entmax15_curve.json")]
    rows = []
    for epoch in zip(*curves):
        assert len({r["tokens_seen"] for r in epoch}) == 1
        rows.append([epoch[0]["epoch"], f"{epoch[0]['tokens_seen'] / 1e6:.1f}M"]
                    + [f"{r['val_perplexity']:.0f} ({r['train_perplexity']:.0f})" for r in epoch])
    return markdown(["epoch", "tokens seen", "`gru`, its slice again", "`gru`, part after part",
                     "`projected`, its slice again", "`projected` + `entmax15`, its slice again"],
                    rows, ["---:"] * 6)


@table("sick rerun", "docs/results/where-graphs-pay.md")
def sick_rerun_table():
    """SICK with the first books predictor (``sick_results.json``) and with the one that read
    the corpus part after part (``sick_walk_results.json``), and the two paired seed by seed."""
    first, walk = output("sick_results.json"), output("sick_walk_results.json")
    rows = []
    for name in ("baseline", "uniform", "glomo_embeddings", "glomo_rnn"):
        cells = [name]
        for record in (first, walk):
            summary = record["summary"]
            u = summary["paired_with_uniform"].get(name)
            cells += [mean_std(summary["variants"][name]), paired(u) if u else "-"]
        cells.append(paired(compare(walk["runs"], name, first["runs"], name)))
        rows.append(cells)
    return markdown(["variant", "first predictor", "- uniform", "read part after part",
                     "- uniform", "part after part - first, seed by seed"], rows,
                    ["---"] + ["---:"] * 5)


PAIR_TASKS = (("SICK", "sick_results.json", None), ("MRPC", "mrpc_results.json", None),
              ("MRPC, F1 (paraphrase)", "mrpc_results.json", "f1"),
              ("SNLI", "snli_results.json", None),
              ("SNLI, hard subset", "snli_results.json", "test_hard_accuracy"))
PAY_PAIRS = (("paired", "glomo_rnn"), ("paired_with_uniform", "glomo_rnn"),
             ("paired_with_uniform", "glomo_embeddings"))


@table("pairs", "docs/results/where-graphs-pay.md")
def pairs_table():
    """The pair model on SICK, MRPC and SNLI (``{sick,mrpc,snli}_results.json``)."""
    rows = []
    for task, name, metric in PAIR_TASKS:
        summary = output(name)["summary"]
        if metric is not None:
            summary = summary["metrics"][metric]
        v = summary["variants"]
        seeds = v["baseline"]["seeds"]
        rows.append([task, seeds]
                    + [mean_std(v[n]) if n in v else "-"
                       for n in ("baseline", "uniform", "glomo_embeddings", "glomo_rnn")]
                    + [paired(summary[key][n]) if n in summary.get(key, {}) else "-"
                       for key, n in PAY_PAIRS])
    return markdown(["task", "seeds", "baseline", "uniform", "glomo_embeddings", "glomo_rnn",
                     "glomo_rnn - baseline", "glomo_rnn - uniform", "glomo_embeddings - uniform"],
                    rows, ["---"] + ["---:"] * 8)


def other_graphs_table(main, others):
    """``glomo_rnn`` on other graphs (``others``: label, runs), each paired seed by seed with
    the ``main`` run's baseline, uniform graph and ``glomo_rnn`` (the paper's graphs)."""
    rows = []
    for label, runs in [("the paper's graphs", main["runs"])] + others:
        accuracy = runs_summary(runs, "glomo_rnn")
        rows.append([label, accuracy["seeds"], mean_std(accuracy)]
                    + ["-" if runs is main["runs"] and reference == "glomo_rnn"
                       else paired(compare(runs, "glomo_rnn", main["runs"], reference))
                       for reference in ("baseline", "uniform", "glomo_rnn")])
    return markdown(["`glomo_rnn` on", "seeds", "accuracy", "- baseline", "- uniform",
                     "- the paper's graphs"], rows, ["---"] + ["---:"] * 5)


@table("sick graphs", "docs/results/where-graphs-pay.md")
def sick_graphs_table():
    """SICK's ``glomo_rnn`` on sharper graphs (``sick_temperature0.5_results.json``,
    ``sick_projected_entmax15_results.json``) against ``sick_results.json``'s runs."""
    return other_graphs_table(output("sick_results.json"), [
        ("`--graph-temperature 0.5`", output("sick_temperature0.5_results.json")["runs"]),
        ("the `projected` + `entmax15` books predictor",
         output("sick_projected_entmax15_results.json")["runs"])])


LISTOPS_PREDICTORS = (("the paper's form", "listops_graphs.json"),
                      ("`projected` + `entmax15`", "listops_graphs_projected_entmax15.json"),
                      ("`entmax`, alpha 1.25", "listops_graphs_gru_entmax1.25.json"),
                      ("`entmax15` (the paper's composition)", "listops_graphs_gru_entmax15.json"))


@table("listops agreement", "docs/results/where-graphs-pay.md")
def listops_agreement_table():
    """The ListOps predictors' forward graphs against the gold trees
    (``listops_graphs*.json``)."""
    rows = []
    for label, name in LISTOPS_PREDICTORS:
        record = output(name)
        a = record["agreement"]
        best, averaged, offset = a["best_head"], a["best_heads_averaged"], a["best_offset"]
        rows.append([label, f"{record['pretraining']['val_perplexity']:.1f}", f"{a['units']:,}",
                     f"{best['share']:.3f} (layer {best['layer']}, head {best['head']})",
                     f"{averaged['share']:.3f} (layer {averaged['layer']})",
                     f"{offset['share']:.3f} (t - {offset['offset']})", f"{a['chance']:.3f}"])
    return markdown(["graphs (4 epochs)", "val perplexity", "units scored", "best head",
                     "heads averaged", "best fixed offset", "chance"], rows)


LISTOPS_SWEEP = ("conv2x3", "conv4x5", "conv4x11", "conv4x11_entmax15", "conv4x5_context6",
                 "conv4x5_hidden128", "conv4x5_epochs12", "conv4x5_epochs12_run2",
                 "conv4x5_projected_entmax15")
# The sweep's settings besides the reach, and their values in examples/listops_graphs.py's
# recorded runs (4 epochs of pretraining): a row names those it changes.
SWEEP_SETTINGS = (("composition", "gru"), ("normalization", "squared_relu"),
                  ("hidden_dim", 64), ("context_length", 3), ("pretrain_epochs", 4))


@table("listops predictor sweep", "docs/results/where-graphs-pay.md")
def listops_predictor_sweep_table():
    """The ListOps predictor's key / query reach and other settings against the gold trees
    (``listops_predictor_sweep/*.json``)."""
    rows = []
    for name in LISTOPS_SWEEP:
        record = output(f"listops_predictor_sweep/{name}.json")
        config, a, pretraining = record["config"], record["agreement"], record["pretraining"]
        layers, width = config["conv_layers"], config["kernel_size"]
        best, averaged = a["best_head"], a["best_heads_averaged"]
        changed = ", ".join(f"`--{k.replace('_', '-')} {config.get(k, v)}`"
                            for k, v in SWEEP_SETTINGS if config.get(k, v) != v)
        rows.append([f"{layers} x {width}", layers * (width - 1) + 1, changed or "",
                     f"{pretraining['steps']:,}", f"{pretraining['val_perplexity']:.2f}",
                     f"{best['share']:.3f} (layer {best['layer']}, head {best['head']})",
                     f"{averaged['share']:.3f} (layer {averaged['layer']})",
                     f"{pretraining['wall_time_s']:.0f}", cpu_name(record["machine"])])
    return markdown(["convolutions x width", "units a query sees", "other settings", "steps",
                     "val perplexity", "best head", "heads averaged", "pretraining (s)", "on"],
                    rows, ["---", "---:", "---", "---:", "---:", "---", "---", "---:", "---"])


def cpu_name(machine):
    """``Intel Xeon, AMX`` / ``AMD EPYC``: a recorded machine's CPU, and AMX where it has it."""
    name = " ".join(machine["cpu"].replace("(R)", "").split()[:2])
    return name + (", AMX" if "amx_bf16" in machine.get("bfloat16_units", []) else "")


@table("listops transfer", "docs/results/where-graphs-pay.md")
def listops_transfer_table():
    """The BiGRU classifier on ListOps with the paper's-form predictor (``listops_graphs.json``)."""
    return variant_table(output("listops_graphs.json")["transfer"])


@table("listops graphs", "docs/results/where-graphs-pay.md")
def listops_graphs_table():
    """ListOps' ``glomo_rnn`` on other graphs, against ``listops_graphs.json``'s runs."""
    return other_graphs_table(output("listops_graphs.json")["transfer"], [
        ("`--graph-temperature 0.5`", output("listops_temperature0.5_results.json")["runs"]),
        ("`--graph-temperature 0.25`", output("listops_temperature0.25_results.json")["runs"]),
        ("`--top-k 2`", output("listops_top2_results.json")["runs"]),
        ("`entmax`, alpha 1.25", output("listops_graphs_gru_entmax1.25.json")["transfer"]["runs"]),
        ("`entmax15` (the paper's composition)",
         output("listops_graphs_gru_entmax15.json")["transfer"]["runs"])])


@table("listops ordered memory", "docs/results/where-graphs-pay.md")
def listops_ordered_memory_table():
    """Ordered Memory on the same ListOps files (``ordered_memory_listops_same_files.json``) and
    on 40,000 expressions (``ordered_memory_listops_released.json``)."""
    rows = []
    for record in (output("ordered_memory_listops_same_files.json"),
                   output("ordered_memory_listops_released.json")):
        size, epochs = f"{record['data']['train']:,}", record["config"]["epochs"]
        om, lstm = record["models"]["ordered_memory"], record["models"]["lstm"]
        rows += [["Ordered Memory, the released code's recipe", size, epochs,
                  f"{100 * om['test_accuracy']:.1f}", f"{om['tree_f1']:.1f}"],
                 [f"LSTM, {record['config']['units']} units", size, epochs,
                  f"{100 * lstm['test_accuracy']:.1f}", "-"],
                 ["left-branching trees", size, "-", "-", f"{record['branching_f1']['left']:.1f}"]]
    return markdown(["model", "training expressions", "epochs", "test accuracy", "tree F1"],
                    rows, ["---", "---:", "---:", "---:", "---:"])


# The paper's SQuAD rows (Yang et al. 2018, Table 1 with GloVe features; Table 2's uniform
# graph), checked against ../shared/papers/glomo-paper.txt by tests/docs/test_results_tables.py.
PAPER_SQUAD = (("paper: baseline (GloVe features, no graphs)", "69.33", "78.73"),
               ("paper: GLoMo on embeddings", "70.84", "79.90"),
               ("paper: GLoMo on RNN states", "70.95", "79.95"),
               ("paper: uniform graph", "69.48", "78.82"))


def squad_runs(record, parts):
    return {(r["variant"], r["seed"]): r for part in parts for r in record[part]["runs"]}


@table("squad seed 0", "docs/results/where-graphs-pay.md")
def squad_seed0_table():
    """The reader on seed 0: the pilot (``squad_pilot_results.json``) and its baseline with the
    predictor's word vectors against random ones of the same width
    (``squad_init_embeddings.json``)."""
    pilot = output("squad_pilot_results.json")
    init = output("squad_init_embeddings.json")
    rows = []
    for record, vectors in ((pilot, "random"), (init["random_embeddings"], "random"),
                            (init["predictor_embeddings"], "the predictor's")):
        width = record["config"]["embedding_dim"]
        for r in record["runs"]:
            rows.append([f"`{r['variant']}`", f"{vectors}, {width} wide",
                         f"{100 * r['exact_match']:.2f}", f"{100 * r['f1']:.2f}"])
    return markdown(["reader, seed 0", "word vectors", "exact match", "F1"], rows,
                    ["---", "---", "---:", "---:"])


SQUAD_HERE = (("here: baseline (the books predictor's word vectors)", "baseline"),
              ("here: GLoMo on embeddings (`glomo_embeddings`)", "glomo_embeddings"),
              ("here: GLoMo on RNN states (`glomo_rnn`)", "glomo_rnn"),
              ("here: uniform graph (at the embeddings)", "uniform"),
              ("here: uniform graph at the RNN states (`uniform_rnn`)", "uniform_rnn"))


@table("squad", "docs/results/where-graphs-pay.md")
def squad_table():
    """The reader over seeds 0-4 with the books predictor's word vectors
    (``squad_init_seeds.json``) beside the paper's rows."""
    record = output("squad_init_seeds.json")
    by = squad_runs(record, ("baseline", "glomo_variants", "glomo_embeddings", "uniform_rnn"))
    rows = [[label, "-", em, f1, "-"] for label, em, f1 in PAPER_SQUAD]
    for label, variant in SQUAD_HERE:
        runs = [r for (v, _), r in sorted(by.items()) if v == variant]
        em = [100 * r["exact_match"] for r in runs]
        rows.append([label, len(runs), f"{mean(em):.2f}", f"{mean(100 * r['f1'] for r in runs):.2f}",
                     f"{min(em):.2f}-{max(em):.2f}"])
    return markdown(["reader", "seeds", "exact match", "F1", "exact match, seeds' range"], rows,
                    ["---", "---:", "---:", "---:", "---:"])


@table("squad paired", "docs/results/where-graphs-pay.md")
def squad_paired_table():
    """The readers of ``squad_init_seeds.json`` paired seed by seed, as recorded there."""
    record = output("squad_init_seeds.json")["paired"]
    rows = [[f"`{key.replace(' - ', '` - `')}`", paired(p), paired(record["f1"][key])]
            for key, p in record["exact_match"].items()]
    return markdown(["seeds 0-4", "exact match (wins / losses, p)", "F1"], rows,
                    ["---", "---:", "---:"])


@table("squad own predictor", "docs/results/where-graphs-pay.md")
def squad_own_predictor_table():
    """The reader on the passages' own predictor (``squad_own_predictor.json``): seeds 0-4, the
    replication decided before it ran (seeds 5-9), and all ten pooled."""
    record = output("squad_own_predictor.json")
    replication = record["replication"]
    parts = (("0-4", {m: dict(record["summary"][m],
                               **{"glomo_rnn - uniform_rnn": record["paired"][m][
                                   "glomo_rnn - uniform_rnn"]}) for m in ("exact_match", "f1")}),
             ("5-9 (the replication)", replication["alone"]),
             ("0-9 (pooled)", replication["pooled"]))
    rows = []
    for seeds, part in parts:
        cells = [seeds]
        for variant in ("glomo_rnn", "uniform_rnn"):
            cells.append(" / ".join(f"{100 * part[m]['variants'][variant]['mean']:.2f}"
                                    for m in ("exact_match", "f1")))
        cells += [paired(part[m]["glomo_rnn - uniform_rnn"]) for m in ("exact_match", "f1")]
        rows.append(cells)
    return markdown(["seeds", "`glomo_rnn`: exact match / F1", "`uniform_rnn`",
                     "`glomo_rnn` - `uniform_rnn`: exact match", "F1"], rows,
                    ["---", "---:", "---:", "---:", "---:"])


@table("squad own against books", "docs/results/where-graphs-pay.md")
def squad_own_against_books_table():
    """The passages' own predictor's readers paired with the books predictor's, seeds 0-4
    (``squad_own_predictor.json``)."""
    record = output("squad_own_predictor.json")["paired"]
    rows = [[f"`{v}`", paired(record["exact_match"][f"{v}: own - books predictor"]),
             paired(record["f1"][f"{v}: own - books predictor"])]
            for v in ("glomo_rnn", "uniform_rnn")]
    return markdown(["own predictor - books predictor", "exact match (wins / losses, p)", "F1"],
                    rows, ["---", "---:", "---:"])


@table("ud heads", "docs/results/where-graphs-pay.md")
def ud_heads_table():
    """``glomo extract --heads`` on UD English EWT (``ud_heads.json``, by its script)."""
    import ud_heads

    return ud_heads.render_table(output("ud_heads.json"))


def ceiling_table(name):
    """A JSON of ``examples/listops_ceiling.py`` rendered by its own table."""
    import listops_ceiling

    return listops_ceiling.render_table(output(name))


@table("listops ceiling", "docs/results/where-graphs-pay.md")
def listops_ceiling_table():
    """ListOps with its gold trees (``listops_ceiling.json``, by its script)."""
    return ceiling_table("listops_ceiling.json")


@table("listops ceiling 3 seeds", "docs/results/where-graphs-pay.md")
def listops_ceiling_3_seeds_table():
    """The pre-registered three-seed ceiling (``listops_ceiling_3seeds.json``)."""
    return ceiling_table("listops_ceiling_3seeds.json")


@table("listops ceiling 12k", "docs/results/where-graphs-pay.md")
def listops_ceiling_12k_table():
    """The deep form's update and aggregation on the 12,000 (``listops_ceiling_12k.json``)."""
    return ceiling_table("listops_ceiling_12k.json")


@table("listops ceiling 40k pilots", "docs/results/where-graphs-pay.md")
def listops_ceiling_40k_pilots_table():
    """The learned graphs and the gold folds on the 40,000 (``listops_ceiling_40k.json``)."""
    return ceiling_table("listops_ceiling_40k.json")


@table("listops ceiling 12k breakdown", "docs/results/where-graphs-pay.md")
def listops_ceiling_12k_breakdown_table():
    """The committed 12,000 models' test accuracy by outermost operator and nesting depth
    (``listops_ceiling_12k_evaluations.json``, by ``listops_graphs.py evaluate --output``)."""
    return breakdown_table(output("listops_ceiling_12k_evaluations.json")["evaluations"])


@table("listops ceiling 40k breakdown", "docs/results/where-graphs-pay.md")
def listops_ceiling_40k_breakdown_table():
    """The same for the committed 40,000 models (``listops_ceiling_40k_evaluations.json``)."""
    return breakdown_table(output("listops_ceiling_40k_evaluations.json")["evaluations"])


@table("listops ceiling 40k composed once", "docs/results/where-graphs-pay.md")
def listops_ceiling_40k_once_table():
    """The committed 40,000 models on the test expressions of one flat list (depth 1), by their
    operator: how well each composes an operator once (``by_operator_and_depth``)."""
    return once_table(output("listops_ceiling_40k_evaluations.json")["evaluations"])


def once_table(evaluations):
    """A row per evaluated model: its accuracy on each operator's depth-1 expressions."""
    keys = sorted({k for e in evaluations.values() for k in e["by_operator_and_depth"]
                   if k.endswith(" 1")})
    first = next(iter(evaluations.values()))["by_operator_and_depth"]
    header = ["model"] + [f"`{k[:-2]}` at depth 1 ({first[k]['examples']})" for k in keys]
    rows = [[name] + [f"{100 * e['by_operator_and_depth'][k]['accuracy']:.1f}"
                      if k in e["by_operator_and_depth"] else "-" for k in keys]
            for name, e in evaluations.items()]
    return markdown(header, rows, ["---"] + ["---:"] * len(keys))


def breakdown_table(evaluations):
    """A row per evaluated model: its accuracy in all, by outermost operator and by depth."""
    operators = sorted({op for e in evaluations.values() for op in e["by_operator"]})
    depths = sorted({d for e in evaluations.values() for d in e["by_depth"]}, key=int)

    def cell(group, key):
        found = group.get(key)
        return f"{100 * found['accuracy']:.1f}" if found else "-"

    first = next(iter(evaluations.values()))
    header = (["model", "all"] + [f"`{op}` ({first['by_operator'][op]['examples']})"
                                  for op in operators]
              + [f"depth {d} ({first['by_depth'][d]['examples']})" for d in depths])
    rows = [[name, f"{100 * e['accuracy']:.1f}"] + [cell(e["by_operator"], op) for op in operators]
            + [cell(e["by_depth"], d) for d in depths] for name, e in evaluations.items()]
    return markdown(header, rows, ["---"] + ["---:"] * (len(header) - 1))


# -------------------------------------------------------------------------- benchmarks/README.md

def when(result):
    """The "recorded" cell: date and machine."""
    recorded = result["recorded"]
    machine = recorded["machine"]
    if isinstance(machine, dict):
        gpus = machine.get("gpus")
        machine = (f"{machine['cpus']} CPUs" + ("" if gpus is None else f", {gpus} GPUs")
                   + (f", TF {machine['tensorflow']}" if "tensorflow" in machine else "")
                   + (f", {machine['cpu']} with {'+'.join(machine['bfloat16_units']) or 'no'}"
                      " bfloat16 units" if "cpu" in machine else ""))
    return f"{recorded['date']}; {machine}"


def spread(values, unit=""):
    return f"{min(values):.1f}-{max(values):.1f}{unit}"


def bench_row(script, name, figures, result, command=None):
    command = command or result.get("command") or result["recorded"]["command"]
    return [f"`{script}`", f"`{name}.json`", figures, when(result), f"`{command}`"]


TRANSFER_VARIANTS = {"glomo": "GlomoTransfer", "glomo_fused": "fused normalization",
                     "glomo_cached": "cached", "glomo_cached_candidates": "cached candidates",
                     "glomo_topk": "top-k", "glomo_cached_topk": "cached top-k",
                     "glomo_uniform": "uniform graphs"}


def transfer_overhead_row(name):
    r = bench(name)
    added, ratios = r["added_ms_per_step"], r["ratio_added_over_mha_added"]
    cells = [f"MultiHeadAttention +{added['mha']:.1f} ms/step"]
    for variant, ratio in ratios.items():
        cells.append(f"{TRANSFER_VARIANTS[variant]} +{added[variant]:.1f} ms ({ratio:.1f}x,"
                     f" rounds {spread(r['ratio_added_over_mha_added_rounds'][variant], 'x')})")
    if "matmul_bound_added_ms" in r:
        bound = r["matmul_bound_added_ms"]
        cells.append(f"the products alone, at this CPU's {r['matmul_gflop_per_s_n1024']:.0f} "
                     f"GFLOP/s: MultiHeadAttention {bound['mha']:.1f} ms, GlomoTransfer "
                     f"{bound['glomo']:.1f} ms")
    c = r["config"]
    size = (f"B {c['batch']}, T {c['seq']}, d {c['d']}, {c['layers']}x{c['heads']} heads, "
            f"{c['propagation']}"
            + (f", {c['precision']}" if c.get("precision", "float32") != "float32" else ""))
    return bench_row("transfer_overhead.py", name, f"{size}: " + "; ".join(cells), r)


def sparse_mixture_row():
    r = bench("sparse_mixture")
    res, speedup = r["results"], r["dense_ms_over_form_ms"]["top_k=8"]
    cells = [f"T {t}: dense {res['dense'][t]['ms_median']:.1f} ms, top-8 "
             f"{res['top_k=8'][t]['ms_median']:.1f} ms ({speedup[t]:.2f}x)"
             for t in (str(r["config"]["seq"][0]), str(r["config"]["seq"][-1]))]
    return bench_row("sparse_mixture.py", "sparse_mixture", "; ".join(cells), r)


def serving_latency_row(name):
    r = bench(name)

    def p50(mode):
        return next(x for x in r["results"] if x["mode"] == mode and x["concurrency"] == 1)[
            "p50_ms"]

    rounds, c = r["rest_vs_in_process"], r["config"]
    c1, c8 = rounds["concurrency_1"], rounds["concurrency_8"]["throughput_ratio"]
    figures = (f"d {c['hidden_dim']}, {c['layers']}x{c['heads']} heads, {c['words']} words, "
               f"{c['signature']}: p50 at concurrency 1: in-process {p50('in_process'):.2f} ms, "
               f"gRPC {p50('grpc'):.2f}, REST {p50('rest'):.2f}; over {len(r['runs'])} rounds "
               f"REST adds {spread(c1['p50_added_ms'], ' ms')} ({min(c1['p50_ratio']):.2f}-"
               f"{max(c1['p50_ratio']):.2f}x in-process); REST throughput at concurrency 8: "
               f"{min(c8):.2f}-{max(c8):.2f}x in-process")
    if r.get("client_decode"):
        d = r["client_decode"]
        figures += (f"; the client reads one answer ({d['answer_bytes'] / 1e3:,.0f} KB) in "
                    f"{d['simdjson_ms']:.2f} ms (simdjson) against {d['orjson_ms']:.2f} ms "
                    "(orjson lists)")
    if r.get("server_encode"):
        figures += f"; the server writes it in {r['server_encode']['ms']:.2f} ms"
    return bench_row("serving_latency.py", name, figures, r)


def serving_soak_row(name):
    r = bench(name)
    mixed, large = r["mixed"], r["large_requests"]
    requests = sum(v["requests"] for v in mixed["latency"].values())
    rss = mixed["rss_mb"]
    figures = (f"{mixed['minutes']:.0f} min of mixed good and bad traffic at concurrency "
               f"{mixed['concurrency']}: {requests:,} requests, {mixed['unexpected']} unexpected "
               f"answers, {r['server_log']['tracebacks']} tracebacks, RSS {rss['start']} -> max "
               f"{rss['max']} -> {rss['end']} MB; {large['requests']} requests of "
               f"{large['body_mb']} MB: RSS +{large['growth_mb']} MB")
    return bench_row("serving_soak.py", name, figures, r)


def serving_long_text_row():
    r = bench("serving_soak_long_text")
    text = r["long_text"]
    return bench_row("serving_soak.py", "serving_soak_long_text",
                     f"one {text['mb']:.0f} MB text request answered in {text['seconds']:.2f} s "
                     f"(cut before tokenisation), RSS {text['rss_after_mb']} MB after", r)


def serving_memory_row(name):
    """Resident memory over a stream of large requests: the highest reading of each stretch of
    30 requests (the allocator's swing has that period here)."""
    r = bench(name)
    large = r["large_requests"]
    curve = large["rss_every_10_mb"]
    peaks = [max(curve[i:i + 3]) for i in range(0, len(curve), 3)]
    return bench_row("serving_soak.py", name,
                     f"{large['requests']} requests of {large['body_mb']} MB, one after another: "
                     f"RSS {large['rss_after_first_mb']} MB after the first, highest of each 30: "
                     f"{', '.join(str(p) for p in peaks)} MB ({r['note'].split(':')[0]})", r)


def ordered_memory_speed_row(name):
    r = bench(name)
    med, spreads = r["ms_per_step_median"], r["ms_per_step_spread"]
    cells = [f"{mode} {med[mode]:.1f} ms ({spread(spreads[mode])})" for mode in med]
    return bench_row("ordered_memory_speed.py", name,
                     f"batch {r['config']['batch']}, ms/step (rounds): " + ", ".join(cells), r)


def top_k_accuracy_row(task, label):
    name = f"top_k_accuracy_{task}"
    r = bench(name)
    diffs, p = r["top8_minus_dense_points"], r.get("paired_top8_vs_dense")
    test = (f"; {p['wins']} / {p['ties']} / {p['losses']} seeds up / even / down, paired t p "
            f"{p['p']:.2f}" if p else "")
    figures = (f"{label}, glomo_embeddings, {len(diffs)} seeds: top-8 minus dense "
               f"{r['mean_top8_minus_dense_points']:+.2f} points (per seed "
               + ", ".join(f"{d:+.2f}" for d in diffs)
               + f"{test}); top-8 keeps {r['graph_mass_kept_by_top8']:.0%} of the graph mass")
    return ["`glomo transfer --top-k`", f"`{name}.json`", figures, when(r),
            f"`{r['commands']['top8']}`"]


def peer_row(script, name):
    """A benchmark timed beside the PyTorch peer: every mode's tokens/s, the peer in each
    precision, glomo_tf's best over the peer at its best and over the peer in float32."""
    r = bench(name)
    best, c = r["best_mode"], r["config"]
    size = f"B {c['batch']}, T {c['seq']}, d {c['d']}"
    if "peers" not in r:
        rounds = r["ratio_vs_peer_rounds"][best]
        return bench_row(script, name, f"{size}: glomo_tf {best} {r['tokens_per_s'][best]:,.0f} "
                         f"tokens/s, peer {r['peer']['tokens_per_s']:,.0f}: "
                         f"{r['ratio_best_vs_peer']:.2f}x (rounds {min(rounds):.2f}-"
                         f"{max(rounds):.2f}x)", r)
    modes = ", ".join(f"{mode} {tokens:,.0f}" for mode, tokens in r["tokens_per_s"].items())
    peers = ", ".join(f"{p} {v['tokens_per_s']:,.0f}" for p, v in r["peers"].items())
    at_best, f32 = r["ratio_best_vs_peer_best_rounds"], r["ratio_vs_peers_rounds"]["float32"][best]
    return bench_row(script, name, f"{size}: glomo_tf tokens/s {modes}; peer {peers}; best "
                     f"({best}) over the peer at its best ({r['best_peer']}) "
                     f"{r['ratio_best_vs_peer_best']:.2f}x (rounds {min(at_best):.2f}-"
                     f"{max(at_best):.2f}x), over the peer in float32 "
                     f"{r['ratio_vs_peers']['float32'][best]:.2f}x (rounds {min(f32):.2f}-"
                     f"{max(f32):.2f}x)", r)


def transfer_cost_row():
    r = bench("transfer_cost")
    ratio = r["results"]["function/forward_backward"]["explicit_over_chained_ms"]
    return bench_row("transfer_cost.py", "transfer_cost",
                     "forward+backward, explicit / chained time: "
                     + ", ".join(f"{ratio[t]:.2f} at T {t}" for t in ratio)
                     + f"; outputs equal to {r['max_abs_diff_output']:.0e}", r)


def preset_load_row():
    r = bench("preset_load")
    m, rounds = r["median_s"], r["rounds_s"]
    names = {"import_s": "import glomo_tf", "load_preset_s": "load_preset",
             "first_graphs_s": "first graphs"}
    return bench_row("preset_load.py", "preset_load",
                     f"{r['preset']}, {r['rounds']} fresh interpreters: " + ", ".join(
                         f"{names[k]} {m[k]:.2f} s (rounds {min(rounds[k]):.2f}-"
                         f"{max(rounds[k]):.2f})" for k in names), r)


def reader_epoch_row():
    r = bench("reader_epoch")
    m, ratios, s = r["seconds_per_step"], r["ratio_to_baseline"], r["settings"]
    return bench_row("reader_epoch.py", "reader_epoch",
                     f"SQuAD reader, passages of {s['max_length']} units, batches of "
                     f"{s['batch_size']}, one thread: s/step baseline {m['baseline']:.3f}, uniform "
                     f"{m['uniform']:.3f} ({spread(ratios['uniform'], 'x')}), glomo_rnn with "
                     f"cached passage graphs {m['glomo_rnn']:.3f} "
                     f"({spread(ratios['glomo_rnn'], 'x')}); cache fill {r['cache_fill_s']:.0f} s", r)


def serving_client_transport_row():
    r = bench("serving_client_transport")
    s = {side: v["summary"] for side, v in r["small_model"].items()}

    def q(side, key, unit=""):
        x = s[side][key]
        return f"{x['median']:.2f}{unit} ({x['quartiles'][0]:.2f}-{x['quartiles'][2]:.2f})"

    sides = (("before", "own HTTP/1.1 + httptools"), ("after_per_thread_loop",
             "aiohttp, a loop per thread"), ("after_shared_loop", "aiohttp, one shared loop"))
    figures = ("ServingClient's REST transport side by side, small model, the sides alternating "
               "(median and quartiles of the rounds): REST's p50 over in-process at concurrency "
               "1: " + ", ".join(f"{label} +{q(side, 'rest_p50_added_ms_c1', ' ms')}"
                                  for side, label in sides)
               + "; REST throughput over in-process at concurrency 8: "
               + ", ".join(f"{label} {q(side, 'rest_throughput_over_in_process_c8', 'x')}"
                           for side, label in sides))
    return bench_row("serving_latency.py", "serving_client_transport", figures, r,
                     command=r["commands"]["small"])


@table("benchmarks", "benchmarks/README.md")
def benchmarks_table():
    """Every recorded benchmark (``benchmarks/outputs/**.json``): its figures, when and where it
    ran, its command."""
    rows = [transfer_overhead_row(name) for name in (
        "transfer_overhead", "transfer_overhead_chained", "transfer_overhead_cache_topk",
        "transfer_overhead_cache_topk_bf16", "transfer_overhead_bf16_fused",
        "transfer_overhead_cache_topk_large")]
    rows += [sparse_mixture_row(), serving_latency_row("serving_latency"),
             serving_latency_row("serving_latency_large"), serving_soak_row("serving_soak"),
             serving_long_text_row()]
    rows += [serving_latency_row(f"serving_candidates/{name}") for name in (
        "latency_uvicorn", "latency_http_client", "latency_large_uvicorn")]
    rows += [serving_soak_row("serving_candidates/soak_uvicorn"), serving_client_transport_row()]
    rows += [serving_memory_row(f"serving_memory/{name}") for name in (
        "aiohttp_arena_cap", "aiohttp_no_arena_cap", "aiohttp_no_arena_cap_earlier",
        "aiohttp_arena_cap_with_trim")]
    rows += [ordered_memory_speed_row("ordered_memory_speed"),
             ordered_memory_speed_row("ordered_memory_speed_batch1"),
             top_k_accuracy_row("mr", "MR"), top_k_accuracy_row("sst2", "SST-2")]
    rows += [peer_row(script, name) for script, name in (
        ("extract_throughput.py", "extract_throughput"),
        ("extract_throughput.py", "extract_throughput_features"),
        ("extract_throughput.py", "extract_throughput_t512_top8"),
        ("pretrain_throughput.py", "pretrain_throughput"))]
    rows += [transfer_cost_row(), preset_load_row(), reader_epoch_row()]
    return markdown(["script", "output", "latest figures", "recorded (date; machine)", "command"],
                    rows)


# The structure learners beside GLoMo on MR and SUBJ: variant, label, command.
RELATED_ROWS = (
    ("baseline", "baseline (BiGRU + self-attention)", "`glomo transfer --run runs/wt2 --dataset mr "
     "--variants baseline ...` (flags as in [Results on MR and SUBJ](../results/transfer.md"
     "#results-on-mr-and-subj); `--run runs/subj_text --dataset subj` for SUBJ)"),
    ("cn3", "CN3 (`cn3`: CN3_LSTM, one graph layer, mean pooling)", "`... --variants cn3`"),
    ("shared_private", "shared/private RNN (`shared_private`: half shared, 2 anchors, reconstruct "
     "and predict 4 units, weight 0.5)", "`... --variants shared_private`"),
    ("glomo_embeddings", "GLoMo on the embeddings (`glomo_embeddings`)",
     "`... --variants glomo_embeddings`"),
    ("glomo_rnn", "GLoMo on the BiGRU states (`glomo_rnn`)", "`... --variants glomo_rnn`"),
)


@table("related models", "docs/guides/related-models.md")
def related_models_table():
    """CN3 and the shared/private RNN beside the baseline and GLoMo (``mr_results.json``,
    ``subj_results.json``), 5 paired seeds."""
    summaries = [output(f"{task}_results.json")["summary"] for task in ("mr", "subj")]
    rows = []
    for name, label, command in RELATED_ROWS:
        row = [label, command]
        for summary in summaries:
            p = summary["paired"].get(name)
            row += [mean_std(summary["variants"][name]),
                    "" if p is None else f"{100 * p['mean_difference']:+.2f} ({p['wins']} / "
                    f"{p['ties']} / {p['losses']}; p {p['p']:.2f})"]
        rows.append(row)
    return markdown(["model", "command", "MR (WikiText-2 tokenizer)",
                     "paired with the baseline (wins / ties / losses; p)", "SUBJ (SUBJ tokenizer)",
                     "paired with the baseline"], rows)


@figure("subj uniform", "docs/guides/related-models.md")
def subj_uniform_figure():
    uniform = output("subj_results.json")["summary"]["paired"]["uniform"]
    return f"{100 * uniform['mean_difference']:+.2f}"


# The earlier runs kept beside the latest (``benchmarks/outputs/pretrain_runs/``,
# ``serving_runs/``): each output and the code it ran, what came after it.
EARLIER_PRETRAIN_RUNS = (
    ("before_fused_batch_norm", "before the training CNNs' fused batch norm, the decoders' "
     "one input product and the float32 gate sigmoids (`--mode function` only)"),
    ("before_xla_guard", "before code that XLA compiles came to keep the masked batch norm"),
    ("before_gather_then_cast", "before the transfer path's changes (the gate sigmoid in float32, "
     "the mixtures' products with one batch axis, the predictor's rows gathered then cast)"),
    ("before_head_messages", "before `FeaturePredictor`'s per-head messages ran as one batched "
     "product instead of TensorFlow's einsum"),
    ("before_transpose_rows", "before the transposes that keep their last axis moved rows in "
     "8-byte words (`transpose_rows`)"),
    ("before_transpose_rows_same_machine", "the commit right before `transpose_rows`, run next "
     "after the latest row, on its machine"),
)
EARLIER_SERVING_RUNS = (  # output, the run, whether issue 35's bar is for it (the small model)
    ("latency_2026-11-29", "the small model, on the latest pretraining row's machine", True),
    ("latency_large_2026-11-29", "the large model, the same session", False),
    ("latency_2026-11-29_b", "the small model again, the machine quiet", True),
)


def _code(result):
    return result["recorded"]["code"].replace("commit ", "")


@table("earlier pretraining runs", "benchmarks/README.md")
def earlier_pretraining_runs_table():
    """The pretraining command's earlier runs (``benchmarks/outputs/pretrain_runs/*.json``) and
    the latest (``pretrain_throughput.json``): the ratios against the peer, each side's bfloat16
    step, the step's GFLOP and its transposes."""
    rows = []
    for name, what in EARLIER_PRETRAIN_RUNS + (("../pretrain_throughput", "the latest"),):
        r = bench(f"pretrain_runs/{name}")
        best = r["best_mode"]
        at_best = r["ratio_best_vs_peer_best_rounds"]
        f32 = r["ratio_vs_peers_rounds"]["float32"][best]
        profile = r.get("profile_ms_per_step", {})
        transposes = " / ".join(f"{profile[m]['_MklTranspose']:.1f}"
                                for m in ("function_bf16", "function")
                                if "_MklTranspose" in profile.get(m, {}))
        rows.append([f"`{os.path.normpath('pretrain_runs/' + name)}.json`", _code(r), when(r), what,
                     f"{r['ratio_best_vs_peer_best']:.2f}x "
                     f"({min(at_best):.2f}-{max(at_best):.2f}x)",
                     f"{r['ratio_vs_peers']['float32'][best]:.2f}x "
                     f"({min(f32):.2f}-{max(f32):.2f}x)",
                     f"{r['ms_per_iter_median']['function_bf16']:,.0f} ms",
                     f"{r['peers']['mixed_bfloat16']['ms_per_iter_median']:,.0f} ms",
                     f"{r['matmul_gflop_per_step']:.0f}", transposes or "-"])
    return markdown(["output", "code", "recorded (date; machine)", "what ran", "best / peer at its "
                     "best (rounds)", "best / peer float32 (rounds)", "glomo_tf bfloat16 step",
                     "peer bfloat16 step", "GFLOP a step", "transposes, ms (bfloat16 / float32)"],
                    rows)


@table("earlier serving runs", "benchmarks/README.md")
def earlier_serving_runs_table():
    """The serving command's runs on the machine of the latest pretraining rows
    (``benchmarks/outputs/serving_runs/*.json``) against issue 35's bar: REST adds at most 1 ms
    to the p50 and keeps at least 0.7x of in-process throughput at concurrency 8, every round."""
    rows = []
    for name, what, small in EARLIER_SERVING_RUNS:
        r = bench(f"serving_runs/{name}")
        added = r["rest_vs_in_process"]["concurrency_1"]["p50_added_ms"]
        ratio = r["rest_vs_in_process"]["concurrency_8"]["throughput_ratio"]
        bar = max(added) <= 1.0 and min(ratio) >= 0.7
        rows.append([f"`serving_runs/{name}.json`", _code(r), when(r), what, spread(added, " ms"),
                     f"{min(ratio):.2f}-{max(ratio):.2f}x",
                     ("held" if bar else "missed") if small else "-"])
    return markdown(["output", "code", "recorded (date; machine)", "run", "REST adds to the p50 "
                     "(rounds)", "REST throughput at concurrency 8 (rounds)", "issue 35's bar"],
                    rows)


# ------------------------------------------------------------- docs/guides/related-models.md

def _percent(value):
    return f"{100 * value:.1f}%"


def _validation(model):
    """``48.1% / 97.4% (epoch 39)``: the validation accuracy after one epoch, the best and when."""
    val = [epoch["val_accuracy"] for epoch in model["curve"]]
    best = max(range(len(val)), key=val.__getitem__)
    return f"{_percent(val[0])} / {_percent(val[best])} (epoch {best + 1} of {len(val)})"


def _listops_rows(result, om_label, extra=()):
    om, lstm = result["models"]["ordered_memory"], result["models"]["lstm"]
    branching = result["branching_f1"]
    rows = [[om_label, _percent(om["test_accuracy"]), f"{om['tree_f1']:.1f}", _validation(om),
             f"{om['parameters']:,}", f"{om['train_seconds']:,.0f} s"]]
    rows += list(extra)
    rows += [[f"LSTM, {result['config']['units']} units", _percent(lstm["test_accuracy"]), "-",
              _validation(lstm), f"{lstm['parameters']:,}", f"{lstm['train_seconds']:,.0f} s"],
             ["majority class", _percent(result["data"]["majority_test_accuracy"]), "", "", "",
              ""],
             ["left- / right-branching trees", "",
              f"{branching['left']:.1f} / {branching['right']:.1f}", "", "", ""]]
    return rows


LISTOPS_HEADER = ["model", "test accuracy", "induced-tree F1",
                  "validation accuracy: epoch 1 / best", "parameters", "training"]


@table("ordered memory listops released", "docs/guides/related-models.md")
def ordered_memory_listops_released_table():
    """ListOps with the released code's recipe, and the thesis' attention on the same recipe
    (``ordered_memory_listops_released.json``, ``ordered_memory_listops_thesis_form.json``)."""
    thesis = output("ordered_memory_listops_thesis_form.json")
    om = thesis["models"]["ordered_memory"]
    extra = [[f"Ordered Memory (the thesis' stick-breaking), the same recipe, "
              f"{len(om['curve'])} epochs", _percent(om["test_accuracy"]), f"{om['tree_f1']:.1f}",
              _validation(om), f"{om['parameters']:,}", f"{om['train_seconds']:,.0f} s"]]
    return markdown(LISTOPS_HEADER, _listops_rows(
        output("ordered_memory_listops_released.json"),
        "Ordered Memory (the released code's attention)", extra))


@table("ordered memory listops", "docs/guides/related-models.md")
def ordered_memory_listops_table():
    """ListOps with the thesis' layer as written (``ordered_memory_listops.json``)."""
    rows = _listops_rows(output("ordered_memory_listops.json"), "Ordered Memory (stick-breaking)")
    rows.append(["the thesis, 128 units, 21 slots", "99.9%", "100", "", "", ""])
    return markdown(LISTOPS_HEADER, rows)


@table("ordered memory logic", "docs/guides/related-models.md")
def ordered_memory_logic_table():
    """Propositional logic by number of operators (``ordered_memory_logic_full.json``,
    ``ordered_memory_logic_released.json``, ``ordered_memory_logic_brackets.json``)."""
    operators = [str(k) for k in range(7, 13)]

    def row(label, model=None, accuracy=None):
        accuracy = accuracy or model["test_accuracy"]
        cells = [f"{100 * accuracy[k]:.1f}" for k in operators]
        tree = f"{model['tree_f1']:.1f}" if model and model.get("tree_f1") is not None else ""
        best = _percent(model["best_val_accuracy"]) if model else ""
        return [label] + cells + [tree, best]

    full = output("ordered_memory_logic_full.json")
    released = output("ordered_memory_logic_released.json")
    brackets = output("ordered_memory_logic_brackets.json")
    epochs = brackets["epochs"]
    om = brackets["models"]["ordered_memory"]
    rows = [row("Ordered Memory", full["models"]["ordered_memory"]),
            row(f"LSTM, {full['config']['units']} units", full["models"]["lstm"]),
            row(f"majority relation (`{full['data']['majority_relation']}`)",
                accuracy=full["data"]["majority_test_accuracy"]),
            row(f"Ordered Memory, the released code's attention and optimizer, "
                f"{len(released['models']['ordered_memory']['curve'])} epochs",
                released["models"]["ordered_memory"]),
            row("LSTM, the same run", released["models"]["lstm"]),
            row(f"Ordered Memory, formulas with their brackets, {brackets['config']['slots']} "
                f"slots, {epochs['ordered_memory']} epochs", om),
            row(f"LSTM, formulas with their brackets, {epochs['lstm']} epochs",
                brackets["models"]["lstm"]),
            ["left- / right-branching trees (formulas with their brackets)"] + [""] * 6
            + [f"{om['branching_f1']['left']:.1f} / {om['branching_f1']['right']:.1f}", ""],
            ["the thesis, Ordered Memory (200 units)", "98", "97", "96", "94", "94", "92", "87.9",
             ""],
            ["the thesis, LSTM", "88", "84", "80", "78", "71", "69", "", ""]]
    return markdown(["model"] + operators + ["induced-tree F1", "best validation accuracy"], rows)


@table("ordered memory speed", "docs/guides/related-models.md")
def ordered_memory_speed_table():
    """Ordered Memory's ms per step, median of 3 rounds (``ordered_memory_speed*.json``)."""
    runs = [bench("ordered_memory_speed"), bench("ordered_memory_speed_batch1")]
    labels = {"infer": "inference, graph mode", "infer_dynamic": "inference, dynamic threshold",
              "infer_xla": "inference, XLA",
              "infer_xla_dynamic": "inference, XLA, dynamic threshold",
              "train": "training step", "train_xla": "training step, XLA"}

    def cell(r, mode):
        if mode not in r["ms_per_step_median"]:
            return "-"
        low, high = r["ms_per_step_spread"][mode]
        return f"{r['ms_per_step_median'][mode]:.1f} ms ({low:.1f}-{high:.1f})"

    header = ["step"] + [f"batch {r['batch_shape'][0]} x {r['batch_shape'][1]}" for r in runs]
    return markdown(header, [[label] + [cell(r, mode) for r in runs]
                             for mode, label in labels.items()],
                    ["---"] + ["---:"] * len(runs))


def _probe_table(name, marker):
    @table(marker, "docs/guides/related-models.md")
    def render():
        return output(f"{name}.json")["table"]

    render.__name__ = render.__qualname__ = f"{name}_table"
    render.__doc__ = (f"The probe of ``{name}.json`` (its ``table``, rendered by "
                      "``examples/sentence_curve.py``).")
    return render


for _name in ("long", "units512", "units512_bfloat16", "books", "books_converged", "books_glomo",
              "books_glomo_control", "books_units512", "books_units512_max"):
    _probe_table(f"sentence_encoders_{_name}",
                 "sentence encoders " + _name.replace("_", " "))

SENTENCE_TASKS = {"mr": "MR", "subj": "SUBJ", "sst2": "SST-2"}
COUNTS = {0: "none", 1: "one", 2: "two", 3: "all three", 4: "four", 5: "five", 6: "six"}


def points(a, b, shown=False):
    """``a - b`` on MR / SUBJ / SST-2 in points (``shown``: of the one-decimal figures the tables
    show)."""
    digits = 1 if shown else 12
    gaps = [round(100 * a[t]["accuracy"], digits) - round(100 * b[t]["accuracy"], digits)
            for t in SENTENCE_TASKS]
    return " / ".join(f"{gap:.1f}" for gap in gaps)


def above(a, b):
    """The tasks where ``a`` is above ``b``, by name (``["SUBJ"]``)."""
    return [name for t, name in SENTENCE_TASKS.items() if a[t]["accuracy"] > b[t]["accuracy"]]


def newest(name):
    """``(the newest snapshot's curve point, the baselines)`` of a ``sentence_curve.py`` JSON."""
    result = output(f"{name}.json")
    return list(result["curve"].values())[-1], result["baselines"]["results"]


def _figure(name, page="docs/guides/related-models.md"):
    """Registers a function returning a figure's text (a short form of :func:`figure`)."""
    return figure(name, page)


@_figure("wikitext beaten")
def wikitext_beaten_figure():
    """Which trained encoders beat both baselines on some task (``sentence_encoders_long``)."""
    beaten = [e for e, tasks in output("sentence_encoders_long.json")["comparisons"][
        "beats_bow_and_random"].items() if any(tasks.values())]
    return ("no trained encoder beats" if not beaten else ", ".join(beaten) + " beat" +
            ("s" if len(beaten) == 1 else "")) + " both the bag of words and the random encoder"


@_figure("wikitext first run")
def wikitext_first_run_figure():
    """The first, shorter run's full model and its probe's choices (``sentence_encoders.json``)."""
    first = output("sentence_encoders.json")
    chosen = [c for scores in first["probe"].values() for task in scores.values()
              for c in (task["c"] if isinstance(task["c"], list) else [task["c"]])]
    steps = first["pretraining"]["QT+SP+G2L"]["steps"]
    return (f"{steps} steps, `examples/outputs/sentence_encoders.json`: QT+SP+G2L "
            f"{pct(first['probe']['QT+SP+G2L'])} on MR / SUBJ / SST-2, probed over C in "
            f"{{{', '.join(f'{c:g}' for c in first['settings']['c_values'])}}}); in that probe "
            f"{sum(c == max(chosen) for c in chosen)} of the {len(chosen)} choices were the "
            f"largest, {max(chosen):g}")


@_figure("wikitext left out")
def wikitext_left_out_figure():
    """What leaving each objective out costs in mean accuracy (``sentence_encoders_long``)."""
    drop = output("sentence_encoders_long.json")["comparisons"]["drop_when_left_out"]
    return ("G2L costs {g2l:.1f} points of mean accuracy, SP {sp:.2f}, QT {qt:.2f}"
            .format(**{k: 100 * v for k, v in drop.items()}))


# The WikiText-budget runs whose objectives' losses the page tabulates: JSON, its run, the label.
WIKITEXT_RUNS = (
    ("sentence_encoders_long.json", "QT+SP+G2L", "QT+SP+G2L, 128 units"),
    ("sentence_encoders_long.json", "QT+SP-G2L", "QT+SP (G2L left out)"),
    ("sentence_encoders_long.json", "QT+G2L-SP", "QT+G2L (SP left out)"),
    ("sentence_encoders_long.json", "SP+G2L-QT", "SP+G2L (QT left out)"),
    ("sentence_encoders_long.json", "QT+SP+G2L+GLoMo", "QT+SP+G2L+GLoMo"),
    ("sentence_encoders_units512.json", "QT+SP+G2L", "QT+SP+G2L, 512 units"),
    ("sentence_encoders_units512_bfloat16.json", "QT+SP+G2L",
     "QT+SP+G2L, 512 units, `mixed_bfloat16`"),
    ("sentence_g2l_reduction.json", "sum", "QT+SP+G2L, G2L summed (Eq. 3.5; its own run)"),
    ("sentence_g2l_reduction.json", "mean", "QT+SP+G2L, G2L averaged (`--g2l-reduction mean`)"),
)


@table("sentence encoders wikitext losses", "docs/guides/related-models.md")
def wikitext_losses_table():
    """Each WikiText-budget run's steps and last epoch's mean losses (``WIKITEXT_RUNS``)."""
    rows = []
    for name, run, label in WIKITEXT_RUNS:
        record = output(name)
        pre = (record["runs"][run] if "runs" in record else record)["pretraining"]
        pre = pre.get(run, pre)
        last = pre["last_epoch"]
        rows.append([label, f"{pre['steps']:,}"] + [
            f"{last[k]:.{d}f}" if k in last else "-" for k, _, d in BOOK_LOSSES])
    return markdown(["encoder", "steps", "Quick Thoughts", "Self Prediction", "Global-to-Local"],
                    rows, ["---"] + ["---:"] * 4)


@table("sentence encoders width", "docs/guides/related-models.md")
def sentence_width_table():
    """128 against 512 units a direction at the WikiText budget, in points
    (``sentence_encoders_long.json``, ``sentence_encoders_units512.json``)."""
    narrow, wide = (output(f"sentence_encoders_{n}.json")["probe"] for n in ("long", "units512"))
    full, bow, rand = "QT+SP+G2L", "bow", "random"
    rows = [["the full model: 512 units minus 128", points(wide[full], narrow[full], True)],
            ["the random encoder: 2,048-d minus 512-d", points(wide[rand], narrow[rand], True)],
            ["bag of words minus the full model, 128 units",
             points(narrow[bow], narrow[full], True)],
            ["bag of words minus the full model, 512 units", points(wide[bow], wide[full], True)]]
    return markdown(["difference", "MR / SUBJ / SST-2"], rows, ["---", "---:"])


@_figure("bfloat16 speed")
def bfloat16_speed_figure():
    """The 512-unit run's pretraining time in each precision."""
    slow, fast = (output(f"sentence_encoders_units512{s}.json")["pretraining"]["QT+SP+G2L"][
        "wall_time_s"] for s in ("", "_bfloat16"))
    return f"{fast:,.0f} s against float32's {slow:,.0f} ({slow / fast:.2f} times as fast"


@_figure("bfloat16 sst2")
def bfloat16_sst2_figure():
    """The full model against its bag of words on SST-2 in each precision."""
    def gap(name):
        probe = output(f"sentence_encoders_units512{name}.json")["probe"]
        return round(100 * probe["QT+SP+G2L"]["sst2"]["accuracy"], 1) - round(
            100 * probe["bow"]["sst2"]["accuracy"], 1)

    def said(d):
        if abs(d) < 0.05:
            return "level with it"
        return f"{abs(d):.1f} points {'above' if d > 0 else 'below'} it"

    return f"{said(gap('_bfloat16'))} here and {said(gap(''))} in float32"


@table("sentence g2l reduction", "docs/guides/related-models.md")
def g2l_reduction_table():
    """The probe of the runs with G2L averaged and summed, each beside its bag of words
    (``sentence_g2l_reduction.json``)."""
    runs = output("sentence_g2l_reduction.json")["runs"]
    rows = []
    for reduction, label in (("mean", "averaged"), ("sum", "summed (Eq. 3.5)")):
        probe = runs[reduction]["probe"]
        for name, what in ((reduction, "QT+SP+G2L"), ("bow", "its bag of words")):
            rows.append([f"{what}, G2L {label}"] + [f"{100 * probe[name][t]['accuracy']:.1f}"
                                                    for t in SENTENCE_TASKS])
    return markdown(["encoder", "mr", "subj", "sst2"], rows, ["---"] + ["---:"] * 3)


def book_pairs():
    """The books' sentence-pair count the 128-unit run's pretraining log reports."""
    with open(os.path.join(HERE, "outputs", "sentence_encoders_books_pretrain.log"),
              encoding="utf-8") as handle:
        pairs, = {int(m) for m in re.findall(r"^(\d+) sentence pairs", handle.read(), re.M)}
    return pairs


@_figure("books pairs")
def books_pairs_figure():
    return f"{book_pairs():,}"


@_figure("books budget")
def books_budget_figure():
    """The book run's steps and pairs against the WikiText run's."""
    config = output("sentence_encoders_books.json")["run_config"]
    last = list(output("sentence_encoders_books.json")["curve"].values())[-1]
    small = output("sentence_encoders_long.json")
    steps = small["pretraining"]["QT+SP+G2L"]["steps"]
    seen = steps * small["settings"]["batch_size"]
    return (f"{last['steps']:,} steps, {last['pairs_seen']:,} pairs, "
            f"{last['pairs_seen'] / seen:.0f} times the WikiText run's {seen:,} ({steps:,} steps "
            f"of {small['settings']['batch_size']} over its "
            f"{small['pretraining']['QT+SP+G2L']['pairs']:,} pairs), with a snapshot every "
            f"{config['steps_per_epoch'] * config['batch_size']:,} pairs")


@_figure("books bow choices")
def books_bow_choices_figure():
    bow = output("sentence_encoders_books.json")["baselines"]["results"]["bow"]
    chosen = [c for task in SENTENCE_TASKS
              for c in (bow[task]["c"] if isinstance(bow[task]["c"], list) else [bow[task]["c"]])]
    return f"{sum(c >= 256 for c in chosen)} of its {len(chosen)} choices"


@_figure("books gap")
def books_gap_figure():
    """The bag of words over the full model after the newest snapshot."""
    point, baselines = newest("sentence_encoders_books")
    return (f"{point['pairs_seen']:,} pairs the bag of words of its own embeddings is "
            f"{points(baselines['bow'], point['probe'], True)} points above it on MR / SUBJ / "
            "SST-2, "
            f"the full model above it on {COUNTS[len(above(point['probe'], baselines['bow']))]}"
            " of the three tasks")


@table("sentence encoders books losses", "docs/guides/related-models.md")
def books_losses_table():
    """The book run's mean training losses in each epoch, and Global-to-Local's share of a
    batch's loss (two objectives a batch) (``sentence_encoders_books.json``)."""
    rows = []
    for point in output("sentence_encoders_books.json")["curve"].values():
        losses = point["losses"]
        share = [losses["g2l_loss"] / (losses["g2l_loss"] + losses[k]) for k in ("qt_loss",
                                                                                 "sp_loss")]
        rows.append([f"{point['pairs_seen']:,}"] + [f"{losses[k]:.{d}f}" for k, _, d in
                                                    BOOK_LOSSES]
                    + [f"{100 * min(share):.0f}-{100 * max(share):.0f}%"])
    return markdown(["pairs", "Quick Thoughts", "Self Prediction", "Global-to-Local",
                     "G2L's share of a batch's loss"], rows, ["---:"] * 5)


@_figure("books step time")
def books_step_time_figure():
    """Seconds a step of the book run's epochs, from its log (1,250 steps an epoch)."""
    with open(os.path.join(HERE, "outputs", "sentence_encoders_books_pretrain.log"),
              encoding="utf-8") as handle:
        epochs = sorted(int(s) / 1250 for s in re.findall(r"^1250/1250 - (\d+)s",
                                                           handle.read(), re.M))
    return f"{epochs[0]:.1f}-{epochs[-1]:.1f} s"


@_figure("books epoch reads")
def books_epoch_reads_figure():
    """What each epoch of the book runs was drawn from: the epoch's pairs and the shuffle
    buffer's, out of the books' pairs."""
    from glomo_tf.experiments.pretraining import SHUFFLE_BUFFER

    config = output("sentence_encoders_books.json")["run_config"]
    steps, batch = config["steps_per_epoch"], config["batch_size"]
    share = {1: "all", 2: "a half", 3: "a third", 4: "a quarter", 5: "a fifth"}[
        round(book_pairs() / (steps * batch + SHUFFLE_BUFFER))]
    return (f"{steps * batch:,} pairs ({steps:,} steps of {batch}) was drawn from its first "
            f"{steps * batch + SHUFFLE_BUFFER:,} (the epoch's and the {SHUFFLE_BUFFER:,} of the "
            f"shuffle buffer), {share} of the {book_pairs():,}")


@_figure("books passes")
def books_passes_figure():
    config = output("sentence_encoders_books.json")["run_config"]
    last = list(output("sentence_encoders_books.json")["curve"].values())[-1]
    epoch = config["steps_per_epoch"] * config["batch_size"]
    return f"{COUNTS[last['pairs_seen'] // epoch]} passes"


@_figure("books converged")
def books_converged_figure():
    """The converged probe of the newest snapshot against its bag of words."""
    point, baselines = newest("sentence_encoders_books_converged")
    beaten = above(point["probe"], baselines["bow"])
    below = [t for t, name in SENTENCE_TASKS.items() if name not in beaten]
    short = [baselines["bow"][t]["accuracy"] - point["probe"][t]["accuracy"] for t in below]
    return (f"{COUNTS[len(beaten)]} of the three tasks ({'/'.join(beaten)}); the target asks for "
            f"two. Converging lifts the encoder on every task and leaves the bag of words where "
            f"it was, but " + " and ".join(SENTENCE_TASKS[t] for t in below) + " stay "
            + " and ".join(f"{100 * gap:.1f}" for gap in short) + " points short")


# The leave-one-out runs at the book budget: output suffix, the encoder's label, what it leaves out.
BOOK_ABLATIONS = (("qt_sp", "QT+SP", "Global-to-Local"), ("qt_g2l", "QT+G2L", "Self Prediction"),
                  ("sp_g2l", "SP+G2L", "Quick Thoughts"))


@table("sentence encoders books left out", "docs/guides/related-models.md")
def books_left_out_table():
    """What leaving each objective out costs at the run's newest point, in points, and its
    losses against the full model's at the same pairs (``sentence_encoders_books_*.json``)."""
    books = output("sentence_encoders_books.json")["curve"]
    rows = []
    for suffix, label, left_out in BOOK_ABLATIONS:
        name, point = list(output(f"sentence_encoders_books_{suffix}.json")["curve"].items())[-1]
        full = books[name]
        rows.append([left_out, label, f"{point['pairs_seen']:,}",
                     points(full["probe"], point["probe"])] + [
            f"{point['losses'][k]:.{d}f} / {full['losses'][k]:.{d}f}"
            if k in point["losses"] else "-" for k, _, d in BOOK_LOSSES])
    return markdown(["left out", "encoder", "pairs", "cost, MR / SUBJ / SST-2",
                     "Quick Thoughts (left out / full)", "Self Prediction", "Global-to-Local"],
                    rows, ["---", "---", "---:", "---:", "---:", "---:", "---:"])


@_figure("qt g2l")
def qt_g2l_figure():
    """QT+G2L's newest point against the full model's newest and its own bag of words."""
    result = output("sentence_encoders_books_qt_g2l.json")
    name, point = list(result["curve"].items())[-1]
    books = output("sentence_encoders_books.json")
    at_pairs = above(point["probe"], books["curve"][name]["probe"])
    full, _ = newest("sentence_encoders_books")
    return (f"above the full model at the same pairs on {COUNTS[len(at_pairs)]} tasks, and above "
            f"the full model after {full['pairs_seen']:,} pairs on "
            f"{' and '.join(above(point['probe'], full['probe']))} ({pct(point['probe'])} against "
            f"{pct(full['probe'])}), though still below its own bag of words "
            f"({pct(result['baselines']['results']['bow'])})")


@_figure("qt g2l converged")
def qt_g2l_converged_figure():
    point, baselines = newest("sentence_encoders_books_qt_g2l_converged")
    below = 3 - len(above(point["probe"], baselines["bow"]))
    return (f"QT+G2L after {point['pairs_seen']:,} pairs reaches {pct(point['probe'])} against "
            f"its bag of words' {pct(baselines['bow'])}: below it on {COUNTS[below]} tasks")


@_figure("books 512 narrow")
def books_512_narrow_figure():
    """The 128-unit run at the 512-unit run's pairs."""
    point, _ = newest("sentence_encoders_books_units512")
    narrow = next(p for p in output("sentence_encoders_books.json")["curve"].values()
                  if p["pairs_seen"] == point["pairs_seen"])
    return pct(narrow["probe"])


@_figure("books 512 max")
def books_512_max_figure():
    """Max-pooled states against the bag of words, and the max-pooled random encoder."""
    point, baselines = newest("sentence_encoders_books_units512_max")
    beaten = above(point["probe"], baselines["bow"])
    random_ahead = above(baselines["random"], point["probe"])
    return (f"above the bag of words on {COUNTS[len(beaten)]} of the three tasks "
            f"({'/'.join(beaten)}), the target asks for two. But an untrained encoder of the same "
            f"size, max-pooled, is above these states on {COUNTS[len(random_ahead)]} of the three "
            f"({'/'.join(random_ahead)})")


@_figure("books 512 losses")
def books_512_losses_figure():
    losses = newest("sentence_encoders_books_units512")[0]["losses"]
    return (f"Quick Thoughts {losses['qt_loss']:.2f}, chance `ln 400` = 5.99; Self Prediction "
            f"{losses['sp_loss']:.2f}; Global-to-Local {losses['g2l_loss']:.0f}")


@_figure("books heldout")
def books_heldout_figure():
    held = output("sentence_encoders_books_glomo.json")["heldout"]
    return f"the first {held['pairs']:,} pairs of the books' test split, in batches of " \
           f"{held['batch_size']}"


@_figure("book encoder weights")
def book_encoder_weights_figure():
    """The book run's model at its sizes (its vocabulary plus ``[MASK]``): its weights."""
    import math

    from glomo_tf.models.sentence_pretrainer import SentencePretrainer

    config = output("sentence_encoders_books.json")["run_config"]
    model = SentencePretrainer(config["vocab_size"] + 1, config["vocab_size"],
                               embedding_dim=config["embedding_dim"], units=config["units"],
                               objectives=config["objectives"])
    model.build()
    weights = sum(math.prod(w.shape) for w in model.weights)
    return (f"{config['vocab_size']:,}-unit vocabulary, {weights / 1e6:.1f} million weights in "
            f"all ({4 * weights / 1e6:.0f} MB in float32)")


def committed_models_size():
    folder = os.path.join(HERE, "outputs", "ordered_memory_logic_models")
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    return f"{size / 1e6:.1f} MB"


_figure("ordered memory models size")(committed_models_size)
_figure("ordered memory models size again")(committed_models_size)


BOOK_LOSSES = (("qt_loss", "Quick Thoughts", 2), ("sp_loss", "Self Prediction", 2),
               ("g2l_loss", "Global-to-Local", 1))


@table("sentence encoders books glomo heldout", "docs/guides/related-models.md")
def books_glomo_heldout_table():
    """Held-out losses with / without the graphs at each snapshot
    (``sentence_encoders_books_glomo.json``, ``sentence_encoders_books_glomo_control.json``)."""
    fed, control = (output(f"sentence_encoders_books_glomo{s}.json") for s in ("", "_control"))
    rows = []
    for name, x in fed["curve"].items():
        y = control["curve"][name]
        rows.append([f"{x['pairs_seen']:,}"] + [
            f"{x['heldout_losses'][k]:.{d}f} / {y['heldout_losses'][k]:.{d}f}"
            for k, _, d in BOOK_LOSSES])
    return markdown(["pairs"] + [label for _, label, _ in BOOK_LOSSES], rows)


@table("sentence encoders books glomo difference", "docs/guides/related-models.md")
def books_glomo_difference_table():
    """The probe with the graphs minus without, in points, beside the larger of the two runs'
    spread over the folds (SST-2 is one test split)."""
    fed, control = (output(f"sentence_encoders_books_glomo{s}.json") for s in ("", "_control"))
    rows = []
    for name, x in fed["curve"].items():
        y = control["curve"][name]
        cells = []
        for task in ("mr", "subj", "sst2"):
            a, b = x["probe"][task], y["probe"][task]
            cell = f"{100 * (a['accuracy'] - b['accuracy']):+.1f}"
            if a.get("std") is not None and b.get("std") is not None:
                cell += f" (± {100 * max(a['std'], b['std']):.1f})"
            cells.append(cell)
        rows.append([f"{x['pairs_seen']:,}"] + cells)
    return markdown(["pairs", "MR", "SUBJ", "SST-2"], rows, ["---:"] * 4)


@table("sentence encoders books ablations", "docs/guides/related-models.md")
def books_ablations_table():
    """The leave-one-out runs at the book budget beside the full model at the same pairs, 100
    probe iterations (``sentence_encoders_books{,_qt_sp,_qt_g2l,_sp_g2l}.json``)."""
    books = output("sentence_encoders_books.json")
    ablations = [(label, output(f"sentence_encoders_books_{suffix}.json"))
                 for suffix, label in (("qt_sp", "QT+SP"), ("qt_g2l", "QT+G2L"),
                                       ("sp_g2l", "SP+G2L"))]
    rows = []
    for name, full in books["curve"].items():
        present = [(label, a["curve"][name]) for label, a in ablations if name in a["curve"]]
        if not present:
            continue
        for label, point in [("QT+SP+G2L", full)] + present:
            rows.append([label, f"{point['pairs_seen']:,}"]
                        + [f"{100 * point['probe'][t]['accuracy']:.1f}"
                           for t in ("mr", "subj", "sst2")])
    return markdown(["encoder", "pairs", "mr", "subj", "sst2"], rows,
                    ["---", "---:", "---:", "---:", "---:"])


@table("sentence neighbours", "docs/guides/related-models.md")
def sentence_neighbours_table():
    """Each query's nearest MR sentence by encoder, cosine in parentheses
    (``sentence_neighbours.json``)."""
    first = {}
    for entry in output("sentence_neighbours.json")["neighbours"]:
        first.setdefault(entry["query"], {})[entry["encoder"]] = entry["neighbours"][0]
    return markdown(["query", "QT+SP+G2L", "bag of words"], [
        [query] + [f"{found[e]['sentence']} ({found[e]['cosine']:.3f})"
                   for e in ("QT+SP+G2L", "bow")] for query, found in first.items()])


# ----------------------------------------------------- docs/guides/pretraining.md, images.md

@table("wikitext-2 graphs", "docs/guides/pretraining.md")
def wikitext2_graphs_table():
    """The WikiText-2 predictors' graphs over MR (``wikitext2_*_metrics.json``,
    ``wikitext2_mr_stats_*.json``)."""
    rows = []
    for label, variant in (("`gru` (the paper)", "gru"), ("`projected`", "projected"),
                           ("`projected` + `entmax15`", "projected_entmax15")):
        metrics = output(f"wikitext2_{variant}_metrics.json")
        stats = output(f"wikitext2_mr_stats_{variant}.json")
        graphs = [row for name in ("forward", "backward") for row in stats["predictor"][name]]
        entropy = [g["entropy"] for g in graphs]
        uniform = stats["uniform"]["forward"][0]["entropy"]
        rows.append([label, f"{metrics['val_perplexity']:.0f}",
                     " / ".join(f"{e:.2f}" for e in entropy),
                     f"{100 * mean(entropy) / uniform:.0f}%",
                     f"{mean(g['sources'] for g in graphs):.1f}",
                     f"{mean(g['adjacent'] for g in graphs):.2f}"])
    uniform = output("wikitext2_mr_stats_projected.json")["uniform"]["forward"][0]
    rows.append(["uniform graph", "-", f"{uniform['entropy']:.2f} (every graph)", "100%",
                 f"{uniform['sources']:.1f}", f"{uniform['adjacent']:.2f}"])
    return markdown(["predictor (WikiText-2, 4 epochs)", "val perplexity", "row entropy",
                     "of uniform", "sources", "adjacent"], rows)


@table("images planted", "docs/guides/images.md")
def images_planted_table():
    """GLoMo on the planted 2-D corpus (``glomo_images.json``)."""
    recovery = output("glomo_images.json")["planted"]["recovery"]

    def both(key):
        return " / ".join(f"{recovery[d][key]['share']:.2f}" for d in ("forward", "backward"))

    chance = " / ".join(f"{recovery[d]['chance']:.2f}" for d in ("forward", "backward"))
    return markdown(["corpus", "best head", "best fixed offset", "chance"],
                    [["planted 2-D corpus", both("best_head"), both("positional_baseline"),
                      chance]], ["---", "---:", "---:", "---:"])


@table("images digits", "docs/guides/images.md")
def images_digits_table():
    """The digits' transfer, 10 paired seeds (``glomo_images.json``)."""
    summary = output("glomo_images.json")["digits"]["summary"]
    rows = []
    for name in ("baseline", "glomo", "uniform"):
        v = summary["variants"][name]
        cells = [name, f"{100 * v['mean']:.1f} ± {100 * v['std']:.1f}"]
        for key in ("paired", "paired_with_uniform"):
            p = summary[key].get(name)
            cells.append("" if p is None else f"{100 * p['mean_difference']:+.1f} "
                         f"({p['wins']} / {p['losses']}, p {p['p']:.3f})")
        rows.append(cells)
    return markdown(["variant", "accuracy (mean ± std)", "vs baseline (wins / losses, p)",
                     "vs uniform"], rows, ["---", "---:", "---:", "---:"])


@figure("images time", "docs/guides/images.md")
def images_time_figure():
    """The whole run's wall time (``glomo_images.json``)."""
    minutes, seconds = divmod(round(output("glomo_images.json")["wall_seconds"]), 60)
    return f"{minutes} min {seconds} s"


@figure("images verdict", "docs/guides/images.md")
def images_verdict_figure():
    """The learned graphs against the baseline and the uniform graph (``glomo_images.json``)."""
    summary = output("glomo_images.json")["digits"]["summary"]
    base, uniform = summary["paired"]["glomo"], summary["paired_with_uniform"]["glomo"]
    return (f"{-100 * base['mean_difference']:.1f} points below the baseline (p {base['p']:.3f}) "
            f"and {-100 * uniform['mean_difference']:.1f} below the uniform graph "
            f"(p {uniform['p']:.3f})")


@table("images cifar shape", "docs/guides/images.md")
def images_cifar_shape_table():
    """CIFAR-10's shape on this CPU (``glomo_images_cifar_shape.json``)."""
    shape = output("glomo_images_cifar_shape.json")["cifar_shape"]
    step = shape["seconds_per_step"]
    return markdown(["`T`", "batch", "pretraining step", "classifier step", "graphs a batch",
                     "peak memory"],
                    [[f"{shape['T']:,}", shape["batch_size"], f"{step['pretraining_step']:.2f} s",
                      f"{step['classifier_step']:.2f} s",
                      f"{shape['graphs_megabytes_per_batch']:.0f} MB",
                      f"{shape['peak_rss_megabytes'] / 1024:.1f} GB"]], ["---:"] * 6)


# ----------------------------------------------------------------------- docs/benchmarks.md

PEER_SPEED = (("graph extraction, both directions", "extract_throughput"),
              ("the same plus the feature-predictor composition the peer's extract also runs",
               "extract_throughput_features"),
              ("extraction at T 512 (batch 4), glomo_tf returning the 8 heaviest sources per unit",
               "extract_throughput_t512_top8"),
              ("pretraining step (forward, loss, backward, clipped SGD)", "pretrain_throughput"))


@table("peer speed", "docs/benchmarks.md")
def peer_speed_table():
    """glomo_tf against the peer, tokens/s (``benchmarks/outputs/extract_throughput*.json``,
    ``pretrain_throughput.json``)."""
    rows = []
    for label, name in PEER_SPEED:
        r = bench(name)
        best = r["best_mode"]

        def fastest(bfloat16):
            modes = {m: t for m, t in r["tokens_per_s"].items()
                     if m.endswith("_bf16") == bfloat16}
            mode = max(modes, key=modes.get)
            return f"{modes[mode]:,.0f} ({mode})"

        at_best = r["ratio_best_vs_peer_best_rounds"]
        float32 = r["ratio_vs_peers_rounds"]["float32"][best]
        command = re.sub(r" --peer \S+", " --peer PYTHON", r["recorded"]["command"])
        rows.append([label, f"`{command}`", fastest(False), fastest(True),
                     f"{r['peers']['float32']['tokens_per_s']:,.0f}",
                     f"{r['peers']['mixed_bfloat16']['tokens_per_s']:,.0f}",
                     f"**{r['ratio_best_vs_peer_best']:.2f}x** (rounds {min(at_best):.2f}-"
                     f"{max(at_best):.2f}x)",
                     f"{r['ratio_vs_peers']['float32'][best]:.2f}x (rounds {min(float32):.2f}-"
                     f"{max(float32):.2f}x)"])
    return markdown(["what", "command", "glomo_tf float32", "glomo_tf bfloat16", "peer float32",
                     "peer bfloat16", "glomo_tf best / peer at its best",
                     "glomo_tf best / peer float32"], rows)


# The transfer's cost table: each row's label and command, the figures from its JSON.
TRANSFER_COST_ROWS = (
    ('`M H` forward+backward, chained vs explicit form, batch 8',
     '`python benchmarks/transfer_cost.py --seq 48 128 256 512 --batch 8 --d 64 --layers '
     '2 --heads 4 --backward --threads 1` (`transfer_cost.json`)'),
    ('what `GlomoTransfer` adds to a training step, batch 64, T 48',
     '`python benchmarks/transfer_overhead.py --batch 64 --seq 48 --d 64 --layers 2 '
     '--heads 4 --vocab 14143 --threads 1 [--propagation chained]` (recorded: '
     '`benchmarks/outputs/transfer_overhead.json`, `transfer_overhead_chained.json`)'),
    ('the same with the graph cache and top-8 graphs, and on uniform graphs',
     '`python benchmarks/transfer_overhead.py --batch 64 --seq 48 --d 64 --layers 2 '
     '--heads 4 --vocab 14143 --threads 1 --cache --top-k 8 --rounds 5 --uniform` '
     '(recorded: `benchmarks/outputs/transfer_overhead_cache_topk.json`)'),
    ('the same, every model under `mixed_bfloat16`',
     '`... --cache --top-k 8 --rounds 5 --uniform --precision mixed_bfloat16` '
     '(`transfer_overhead_cache_topk_bf16.json`)'),
    ('the same, batch 16, T 128, d 256, 3 layers x 8 heads',
     '`... --batch 16 --seq 128 --d 256 --layers 3 --heads 8 --cache --top-k 8 --rounds 3'
     ' --iters 5 --uniform` (`transfer_overhead_cache_topk_large.json`)'),
    ('dense vs top-8 `GraphMixture`, forward and backward, batch 4, rows of 8 sources',
     '`python benchmarks/sparse_mixture.py --seq 48 128 256 512 1024 --batch 4 --d 64 '
     '--layers 2 --heads 4 --support 8 --top-k 8 32 --backward --threads 1 --iters 3 '
     '--warmup 1 --rounds 3` (`sparse_mixture.json`)'),
)
TRANSFER_COST_TAILS = (
    '; outputs equal to 1e-6',
    '; what remains per step is the mixture and the gated fusion (with cached candidates,'
    ' only mixing them and applying the mixed graphs). The uniform-graph layer (no '
    "predictor, one graph per direction, the same mixtures and the paper's gated fusion "
    'of `[H ; M_1 H ; ...]`, `d (1 + 2 m)` = 320 wide, through the value and gate layers)'
    ' is the floor of what `GlomoTransfer` adds at these sizes',
    '; the top-k form is densified below `T = 64 k`, gathered from there on; equal to the'
    ' dense output up to float round-off',
)


def _overhead(name):
    """The added ms per step of each mode against self-attention's (``transfer_overhead*``)."""
    r = bench(name)
    added, ratio = r["added_ms_per_step"], r["ratio_added_over_mha_added"]
    spread = r["ratio_added_over_mha_added_range"]
    cells = [f"{label} +{added[mode]:.1f} ms, {ratio[mode]:.1f}x (rounds "
             f"{spread[mode][0]:.1f}-{spread[mode][1]:.1f}x)"
             for mode, label in (("glomo", "online"), ("glomo_cached", "cached"),
                                 ("glomo_cached_candidates", "cached candidates"),
                                 ("glomo_cached_topk", "cached top-8"),
                                 ("glomo_uniform", "uniform graphs"))]
    return f"against self-attention's +{added['mha']:.1f} ms in the same run: " + "; ".join(cells)


@table("transfer cost", "docs/benchmarks.md")
def transfer_cost_table():
    """The transfer's cost (``benchmarks/outputs/transfer_cost.json``, ``transfer_overhead*.json``,
    ``sparse_mixture.json``)."""
    cost = bench("transfer_cost")["results"]
    both = cost["function/forward_backward"]["explicit_over_chained_ms"]
    forward = cost["function/forward"]["explicit_over_chained_ms"]
    results = ["explicit / chained time: " + ", ".join(f"{both[t]:.2f} at T {t}" for t in both)
               + " (forward only: " + ", ".join(f"{forward[t]:.2f}" for t in forward) + ")"
               + TRANSFER_COST_TAILS[0]]

    def cell(result):
        rounds = result["ratio_glomo_added_over_mha_added_rounds"]
        return (result["added_ms_per_step"]["glomo"], result["added_ms_per_step"]["mha"],
                result["ratio_glomo_added_over_mha_added"], min(rounds), max(rounds))

    ga, ma, ra, la, ha = cell(bench("transfer_overhead"))
    gc, mc, rc, lc, hc = cell(bench("transfer_overhead_chained"))
    results.append(f"+{ga:.1f} ms per step with `propagation=\"auto\"` against +{ma:.1f} ms for a "
                   f"`MultiHeadAttention` layer of the same width: {ra:.1f}x what self-attention "
                   f"adds (rounds {la:.1f}-{ha:.1f}x); with `--propagation chained` +{gc:.1f} ms "
                   f"against +{mc:.1f} ms, {rc:.1f}x (rounds {lc:.1f}-{hc:.1f}x)")
    fill = bench("transfer_overhead_cache_topk")["cache_fill"]["glomo_cached_candidates"]
    results.append(_overhead("transfer_overhead_cache_topk")
                   + f". Filling the candidates cache (the first epoch's extra work) took "
                   f"{fill['ms_total']:,.0f} ms for its {fill['batches']} batches, "
                   f"{fill['ms_per_batch']:.0f} ms a batch with the predictor's first call "
                   f"traced, {fill['cache_mb']:.0f} MB" + TRANSFER_COST_TAILS[1])
    results.append(_overhead("transfer_overhead_cache_topk_bf16"))
    large = bench("transfer_overhead_cache_topk_large")
    ratio, spread = large["ratio_added_over_mha_added"], large["ratio_added_over_mha_added_range"]
    results.append("added cost over self-attention's: " + ", ".join(
        f"{label} {ratio[mode]:.1f}x (rounds {spread[mode][0]:.1f}-{spread[mode][1]:.1f}x)"
        for mode, label in (("glomo", "online"), ("glomo_cached", "cached"),
                            ("glomo_cached_candidates", "cached candidates"),
                            ("glomo_uniform", "uniform graphs"))))
    sweep = bench("sparse_mixture")
    lengths = [str(t) for t in sweep["config"]["seq"]]
    dense = " / ".join(f"{sweep['results']['dense'][t]['ms_median']:.1f}" for t in lengths)
    top8 = " / ".join(f"{sweep['results']['top_k=8'][t]['ms_median']:.1f}" for t in lengths)
    results.append(f"dense {dense} ms, top-8 {top8} ms at T {' / '.join(lengths)} "
                   f"({sweep['dense_ms_over_form_ms']['top_k=8'][lengths[-1]]:.2f}x at T "
                   f"{lengths[-1]})" + TRANSFER_COST_TAILS[2])
    return markdown(["what", "command", "result"],
                    [[label, command, result]
                     for (label, command), result in zip(TRANSFER_COST_ROWS, results)])


@table("transfer limit", "docs/benchmarks.md")
def transfer_limit_table():
    """What the matrix products of each layer take at this CPU's bfloat16 product rate, against
    the time the layer adds (``transfer_overhead_cache_topk_bf16.json``)."""
    r = bench("transfer_overhead_cache_topk_bf16")
    flops, bound, added = (r["matmul_flops_per_step"], r["matmul_bound_added_ms"],
                           r["added_ms_per_step"])
    rows = [[label, f"{(flops[mode] - flops['none']) / 1e9:.2f}", f"{bound[mode]:.1f} ms",
             f"{added[mode]:.1f} ms", f"{bound[mode] / added[mode]:.0%}"]
            for mode, label in (("glomo", "`GlomoTransfer`, online"),
                                ("glomo_cached_candidates", "`GlomoTransfer`, cached candidates"),
                                ("mha", "`MultiHeadAttention`"))]
    return markdown(["layer", "its products (GFLOP a step)",
                     f"at {r['matmul_gflop_per_s_n1024']:.0f} GFLOP/s", "time it adds",
                     "products' share of that time"], rows, ["---"] + ["---:"] * 4)


@figure("online bound", "docs/benchmarks.md")
def online_bound_figure():
    """The online path's products against self-attention's whole added time."""
    r = bench("transfer_overhead_cache_topk_bf16")
    bound, mha = r["matmul_bound_added_ms"]["glomo"], r["added_ms_per_step"]["mha"]
    return f"{bound / mha:.1f} times what self-attention's whole layer adds, so 3x would leave " \
           f"{3 * mha - bound:.1f} ms"


@figure("fused normalization", "docs/benchmarks.md")
def fused_normalization_figure():
    """``--fused-normalization`` timed beside the default (``transfer_overhead_bf16_fused``)."""
    r = bench("transfer_overhead_bf16_fused")
    added, ratio = r["added_ms_per_step"], r["ratio_added_over_mha_added"]
    rounds = r["ratio_added_over_mha_added_rounds"]
    fewer = sum(f < g for f, g in zip(rounds["glomo_fused"], rounds["glomo"]))
    return (f"{r['config']['rounds']} rounds), it adds {added['glomo_fused']:.1f} ms a step "
            f"against the default's {added['glomo']:.1f} ({ratio['glomo_fused']:.1f}x against "
            f"{ratio['glomo']:.1f}x self-attention's {added['mha']:.1f} ms), less in {fewer} of "
            f"the {r['config']['rounds']} rounds")


@figure("auto switch", "docs/benchmarks.md")
def auto_switch_figure():
    """Where ``propagation="auto"`` switches to the chains at the MR classifier's sizes (d 64,
    2 layers x 4 heads): the layer's own count."""
    from glomo_tf import GraphMixture

    mixture = GraphMixture(num_mixtures=2)
    switch = next(t for t in range(1, 4096) if not mixture.explicit_is_cheaper(t, 64, 2, 4))
    return f"`T = {switch}`"


@figure("explicit crossover", "docs/benchmarks.md")
def explicit_crossover_figure():
    """Between which measured lengths the explicit form stops being the faster one, training and
    inference (``transfer_cost.json``)."""
    results = bench("transfer_cost")["results"]

    def between(ratios):
        lengths = list(ratios)
        last = max(i for i, t in enumerate(lengths) if ratios[t] < 1)
        return f"between `T = {lengths[last]}` and `{lengths[last + 1]}`"

    return (f"for training until somewhere "
            f"{between(results['function/forward_backward']['explicit_over_chained_ms'])}, for "
            f"inference only until somewhere "
            f"{between(results['function/forward']['explicit_over_chained_ms'])}")


@figure("peer machine", "docs/benchmarks.md")
def peer_machine_figure():
    """The CPU of the latest peer recording (``pretrain_throughput.json``)."""
    machine = bench("pretrain_throughput")["recorded"]["machine"]
    units = machine["bfloat16_units"]
    return (f"{machine['cpus']}-core {machine['cpu']} with "
            f"{'`' + '`, `'.join(units) + '`' if units else 'no'} bfloat16 units")


# ----------------------------------------------------------------- docs/guides/precision.md

@table("precision parity", "docs/guides/precision.md")
def precision_parity_table():
    """float32 against mixed_bfloat16 at equal steps (``demo.json``, ``demo_bfloat16.json``,
    ``precision_parity.json``)."""
    heads = [" / ".join(f"{output(n)['recovery'][d]['best_head']['share']:.2f}"
                        for d in ("forward", "backward"))
             for n in ("demo.json", "demo_bfloat16.json")]
    parity = output("precision_parity.json")
    ppl, paired = parity["pretraining"], parity["transfer_bf16_vs_float32"]
    accuracy = {p: 100 * mean(parity["transfer"][p]["accuracy"].values())
                for p in ("float32", "mixed_bfloat16")}
    return markdown(["what", "float32", "mixed_bfloat16", "difference"], [
        ["`glomo demo`, best heads forward / backward", heads[0], heads[1], ""],
        [f"WikiText-2 validation perplexity after {ppl['float32']['steps']} steps",
         f"{ppl['float32']['val_perplexity']:.1f}",
         f"{ppl['mixed_bfloat16']['val_perplexity']:.1f}",
         f"{100 * (parity['val_perplexity_bf16_over_float32'] - 1):+.1f}%"],
        [f"MR `glomo_embeddings` accuracy, mean of {paired['seeds']} paired seeds (seed std "
         f"{100 * parity['transfer_float32_seed_std']:.2f})", f"{accuracy['float32']:.2f}",
         f"{accuracy['mixed_bfloat16']:.2f}",
         f"{100 * paired['mean_difference']:+.2f} ({paired['wins']} up, {paired['losses']} down, "
         f"p {paired['p']:.2f})"]])


def pct(scores):
    """A probe row's accuracies on MR / SUBJ / SST-2 (``62.3 / 82.7 / 63.3``)."""
    return " / ".join(f"{100 * scores[t]['accuracy']:.1f}" for t in ("mr", "subj", "sst2"))


@figure("product rates", "docs/guides/precision.md")
def product_rates_figure():
    """This CPU's ``[1024, 1024]`` product rates (``pretrain_throughput.json``)."""
    rates = bench("pretrain_throughput")["matmul_gflop_per_s_n1024"]
    return (f"{rates['float32']['function']:.0f} GFLOP/s in float32 and "
            f"{rates['mixed_bfloat16']['function']:.0f} in bfloat16 under `tf.function`, and at "
            f"{rates['float32']['xla']:.0f} and {rates['mixed_bfloat16']['xla']:.0f} under XLA")


@figure("step bound", "docs/guides/precision.md")
def step_bound_figure():
    """The pretraining step's products against its fastest time (``pretrain_throughput.json``)."""
    speed = bench("pretrain_throughput")
    bound = speed["matmul_bound_ms_per_step"]["mixed_bfloat16"]
    step = speed["ms_per_iter_median"][speed["best_mode"]]
    return (f"{speed['matmul_gflop_per_step']:.0f} GFLOP, {bound:.0f} ms at the bfloat16 product "
            f"rate, {100 * bound / step:.0f}% of the fastest step ({step:.0f} ms, "
            f"{speed['best_mode']})")


@figure("sentence encoders", "docs/guides/precision.md")
def precision_sentence_encoders_figure():
    """The 512-unit sentence encoder in each precision (``sentence_encoders_units512*.json``)."""
    half, full = (output(f"sentence_encoders_units512{s}.json") for s in ("_bfloat16", ""))
    slow, fast = (r["pretraining"]["QT+SP+G2L"]["wall_time_s"] for r in (full, half))
    return (f"{pct(half['probe']['QT+SP+G2L'])} on MR / SUBJ / SST-2 in bfloat16 against "
            f"{pct(full['probe']['QT+SP+G2L'])} in float32, one seed each, and train "
            f"{slow / fast:.2f} times as fast")


# ------------------------------------------------------------------------------- the pages

def marked_tables(page):
    """``{name: (first line, last line + 1)}`` of every ``<!-- name table -->`` on ``page``."""
    with open(os.path.join(REPO, page), encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    found = {}
    for i, line in enumerate(lines):
        match = MARKER.match(line)
        if match:
            end = next((j for j in range(i + 1, len(lines)) if not lines[j].strip()), len(lines))
            found[match.group(1)] = (i + 1, end)
    return found


def marked_figures(page):
    """``{name: the figure's text on the page}`` of every ``<!-- name figure -->`` on ``page``."""
    with open(os.path.join(REPO, page), encoding="utf-8") as handle:
        return {m.group(1): m.group(2) for m in FIGURE.finditer(handle.read())}


def tables_of(page):
    """``{name: (on the page, rendered)}`` for every marked table (``NAME table``) and figure
    (``NAME figure``) of ``page``."""
    with open(os.path.join(REPO, page), encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    found = {f"{name} table": ("\n".join(lines[start:end]), TABLES[name][1]())
             for name, (start, end) in marked_tables(page).items() if name in TABLES}
    return found | {f"{name} figure": (text, FIGURES[name][1]())
                    for name, text in marked_figures(page).items() if name in FIGURES}


def render_page(page):
    """``page``'s text with every marked table and figure rendered again; raises ``ValueError``
    naming a marker that has no renderer here, or a renderer whose marker the page lacks."""
    with open(os.path.join(REPO, page), encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    found = marked_tables(page)
    for kind, marked, registry in (("table", set(found), TABLES),
                                   ("figure", set(marked_figures(page)), FIGURES)):
        expected = {name for name, (p, _) in registry.items() if p == page}
        if marked != expected:
            raise ValueError(f"{page}: {kind} markers without a renderer: "
                             f"{sorted(marked - expected)}; renderers without a marker: "
                             f"{sorted(expected - marked)}")
    starting = [line for line in lines if FIGURE.match(line) or line.startswith("<!-- /")]
    if starting:  # Markdown would read a comment that starts a line as a block of its own
        raise ValueError(f"{page}: a figure's marker starts a line: {starting[0][:60]}")
    for name, (start, end) in sorted(found.items(), key=lambda item: -item[1][0]):
        lines[start:end] = TABLES[name][1]().split("\n")
    return FIGURE.sub(lambda m: (f"<!-- {m.group(1)} figure -->{FIGURES[m.group(1)][1]()}"
                                 f"<!-- /{m.group(1)} -->"), "\n".join(lines))
