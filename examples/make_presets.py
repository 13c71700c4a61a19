"""Writes the built-in presets of ``glomo_tf/builtin_presets/`` and their model cards.

    python examples/make_presets.py --books-run runs/books/gru --demo-run glomo-demo
    python examples/make_presets.py --cards-only     # the model cards again, from the JSON

``glomo_books_en`` is the books predictor of docs/results/where-graphs-pay.md (``glomo
pretrain`` on two books shards, Penn Treebank and WikiText-2; the predictor every sentence-pair
transfer there used); ``glomo_planted_demo`` is the predictor ``glomo demo`` trains (its
``RUN/preset``). Weights are stored in float16; each preset records the graphs of a few reference
inputs computed in float32 before the rounding, and how far the stored weights move them
(``metadata.json``: ``float16_graph_difference``, checked against ``graph_tolerance`` by the
tests). Each model card (``README.md``) is the card every preset is written with, rendered from
``metadata.json``, and the results recorded in ``examples/outputs/`` (:func:`model_card`); a test
renders it again and compares.
"""

import argparse
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILTIN = os.path.join(REPO, "glomo_tf", "builtin_presets")
OUTPUTS = os.path.join(REPO, "examples", "outputs")
BOOKS_REFERENCE = [
    "The old man said that he would come back to the village tomorrow.",
    "She gave the letter to her brother, who had asked for it twice.",
    "When the rain stopped, the children ran out into the Garden of Kensington!",
]
GRAPH_TOLERANCE = 0.01  # the largest graph-weight change float16 storage may cause
BOOKS_LICENCE = ("Project Gutenberg books: public domain in the US; Penn Treebank (WSJ text, LDC) "
                 "as preprocessed by Mikolov et al. (2010) for language-model research; "
                 "WikiText-2: CC BY-SA 3.0")


def write_books(run_dir):
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(run_dir, "metrics.json")) as f:
        metrics = json.load(f)
    predictor = load_graph_predictor(run_dir, dtype="float32")
    tokenizer = Tokenizer.load(os.path.join(run_dir, "tokenizer"))
    return _write("glomo_books_en", predictor, tokenizer, BOOKS_REFERENCE, None, {
        "description": "GLoMo graph predictor in the paper's form (Eq. 1 squared ReLU, GRU "
                       "composition), English, lower-cased, 30,000 words",
        "summary": "English (books, Penn Treebank, WikiText-2), the paper's form, 30,000 words",
        "corpus": [os.path.basename(path) for path in config["train"]],
        "data_licence": BOOKS_LICENCE,
        "training_steps": metrics["steps"],
        "tokens_seen": metrics["steps"] * config["batch_size"] * config["window"],
        "validation_perplexity": round(metrics["val_perplexity"], 2),
        "validation_text": "the first 3,000 paragraphs of the books' validation split",
        "training_precision": config["precision"],
        "made_by": "glomo pretrain --train ../shared/data/books/train-00.txt.gz "
                   "../shared/data/books/train-01.txt.gz ../shared/data/ptb/ptb.train.txt "
                   "../shared/data/wikitext2/test.txt (flags in the README's books section)",
    })


def write_demo(run_dir):
    import numpy as np

    from glomo_tf import GraphPredictor
    from glomo_tf.presets import preset_metadata
    source = os.path.join(run_dir, "preset")
    info = preset_metadata(source)
    reference = np.load(os.path.join(source, "reference_graphs.npz"))
    predictor = GraphPredictor.from_preset(source)
    keep = {k: info[k] for k in ("corpus", "data_licence", "tokens_seen",
                                 "planted_recovery_best_head")}
    keep["description"] = ("The predictor `glomo demo` trains on its planted corpus (ids, no "
                           "text): a small model whose true graph is known")
    keep["made_by"] = "glomo demo (seed 0)"
    keep["summary"] = "the planted demo's predictor (token ids, no text)"
    return _write("glomo_planted_demo", predictor, None, None, reference["token_ids"], keep)


def _write(name, predictor, tokenizer, texts, ids, metadata):
    from glomo_tf.presets import check_preset, save_preset
    directory = os.path.join(BUILTIN, name)
    if os.path.isdir(directory):
        shutil.rmtree(directory)
    save_preset(predictor, tokenizer, directory, metadata=metadata,
                weights_dtype="float16", reference_texts=texts, reference_ids=ids)
    difference = check_preset(directory)
    path = os.path.join(directory, "metadata.json")
    with open(path) as f:
        info = json.load(f)
    info.update(float16_graph_difference=float(f"{difference:.3g}"),
                graph_tolerance=GRAPH_TOLERANCE)
    if difference > GRAPH_TOLERANCE:
        raise SystemExit(f"{name}: float16 weights move the graphs by {difference:.3g} > "
                         f"{GRAPH_TOLERANCE}; store float32 weights instead.")
    with open(path, "w") as f:
        json.dump(info, f, indent=1)
    print(f"{name}: {directory}, graphs within {difference:.2g} of float32")
    return directory


# ------------------------------------------------------------------------------ model cards
def _load(name):
    with open(os.path.join(OUTPUTS, name)) as f:
        return json.load(f)


def _share_of_uniform(stats):
    graphs = [row for d in ("forward", "backward") for row in stats["predictor"][d]]
    entropy = sum(g["entropy"] for g in graphs) / len(graphs)
    return 100 * entropy / stats["uniform"]["forward"][0]["entropy"]


def _transfer_rows(results, label):
    summary = results["summary"]
    means = {v: 100 * s["mean"] for v, s in summary["variants"].items()}
    stds = {v: 100 * s["std"] for v, s in summary["variants"].items()}
    cells = " | ".join(f"{means[v]:.2f} ± {stds[v]:.2f}" if v in means else "-"
                       for v in ("baseline", "glomo_embeddings", "glomo_rnn", "uniform"))
    paired = summary["paired_with_uniform"]["glomo_rnn"]
    seeds = summary["variants"]["baseline"]["seeds"]
    return (f"| {label} | {seeds} | {cells} | {100 * paired['mean_difference']:+.2f} "
            f"(p {paired['p']:.2f}) |"), paired


def model_card(name):
    """The model card (``README.md``) of the built-in preset ``name``: the card every preset is
    written with (:func:`glomo_tf.presets.model_card`, from its metadata), then the results
    recorded for it in ``examples/outputs/``."""
    from glomo_tf import presets

    info = presets.preset_metadata(name)
    lines = [presets.model_card(name).rstrip("\n"), ""]
    if "planted_recovery_best_head" in info:
        best = info["planted_recovery_best_head"]
        lines += ["## The planted edges it recovers", "",
                  f"Share of the planted receivers whose strongest edge, in its best head, "
                  f"points at the planted source: forward {best['forward']:.2f}, backward "
                  f"{best['backward']:.2f} (`glomo demo`, held-out windows).", ""]
    if name == "glomo_books_en":
        mr = _load("books_mr_stats_gru.json")
        sick_stats = _load("books_sick_stats_gru.json")
        lines += ["## Its graphs against a uniform graph", "",
                  f"On MR's 10,662 sentences (`examples/outputs/books_mr_stats_gru.json`) the rows "
                  f"hold {_share_of_uniform(mr):.0f}% of the uniform graph's entropy; on SICK's "
                  f"test sentences {_share_of_uniform(sick_stats):.0f}%: the graphs are spread, "
                  "not sharp (see the README's books section for the table).", "",
                  "## What it transfers to (accuracy %, paired seeds, `glomo transfer`)", "",
                  "| task | seeds | baseline | glomo_embeddings | glomo_rnn | uniform | "
                  "glomo_rnn - uniform |",
                  "|---|---|---|---|---|---|---|"]
        sick_row, sick = _transfer_rows(_load("sick_results.json"), "SICK (3-way entailment)")
        mrpc_row, mrpc = _transfer_rows(_load("mrpc_results.json"), "MRPC (paraphrase)")
        lines += [sick_row, mrpc_row, "",
                  f"It helps on SICK: graphs on the RNN states beat the same fusion with a "
                  f"uniform graph by {100 * sick['mean_difference']:.2f} points "
                  f"({sick['wins']} wins / {sick['losses']} losses, p {sick['p']:.3f}). "
                  f"It does not on MRPC ({100 * mrpc['mean_difference']:+.2f}, p "
                  f"{mrpc['p']:.2f}), nor on single-sentence classification (MR, SUBJ, SST-2 "
                  "with the WikiText-2 predictors: level with a uniform graph).", ""]
        walk = _load("sick_walk_results.json")["summary"]["paired_with_uniform"]["glomo_rnn"]
        walk_curve = _load("books_gru_walk_curve.json")["curve"][-1]
        lines += [f"A predictor of the same settings that read its corpus part after part "
                  f"(validation perplexity {walk_curve['val_perplexity']:.0f} after "
                  f"{walk_curve['tokens_seen'] / 1e6:.1f}M tokens) draws flatter graphs and "
                  f"transferred no better on SICK (graphs on the RNN states "
                  f"{100 * walk['mean_difference']:+.2f} over the uniform graph, p "
                  f"{walk['p']:.3f}; `examples/outputs/sick_walk_results.json`, "
                  "docs/results/where-graphs-pay.md), so these weights stay.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def readme_row(name):
    """The presets-table row (docs/guides/transfer.md; its model-card link from the repository
    root) of the built-in preset ``name``, from its metadata."""
    with open(os.path.join(BUILTIN, name, "metadata.json")) as f:
        info = json.load(f)
    perplexity = info.get("validation_perplexity")
    what = info["summary"]
    if "planted_recovery_best_head" in info:
        best = info["planted_recovery_best_head"]
        what += f"; planted edges recovered {best['forward']:.2f} / {best['backward']:.2f}"
    return (f"| `{name}` | {what} | {info['tokens_seen']:,} | "
            f"{'-' if perplexity is None else f'{perplexity:.1f}'} | {info['parameters']:,} | "
            f"{info['float16_graph_difference']:.2g} (tolerance {info['graph_tolerance']}) | "
            f"[card](glomo_tf/builtin_presets/{name}/README.md) |")


def write_cards():
    for name in sorted(os.listdir(BUILTIN)):
        if os.path.isfile(os.path.join(BUILTIN, name, "metadata.json")):
            with open(os.path.join(BUILTIN, name, "README.md"), "w") as f:
                f.write(model_card(name))
            print(f"wrote {name}/README.md")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--books-run", help="the glomo pretrain run of glomo_books_en")
    p.add_argument("--demo-run", help="a glomo demo output directory (its preset/)")
    p.add_argument("--cards-only", action="store_true", help="only render the model cards")
    a = p.parse_args(argv)
    if not a.cards_only:
        if not (a.books_run or a.demo_run):
            p.error("give --books-run and/or --demo-run, or --cards-only")
        os.makedirs(BUILTIN, exist_ok=True)
        if a.books_run:
            write_books(a.books_run)
        if a.demo_run:
            write_demo(a.demo_run)
    write_cards()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    sys.exit(main())
