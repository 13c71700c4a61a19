"""``glomo extract``: the graphs a pretrained predictor draws over your sentences.

Reads a run directory written by ``glomo pretrain`` (``RUN/graph_predictor.keras`` and
``RUN/tokenizer/``), or a predictor file and a tokenizer directory given separately, tokenizes the
sentences exactly as pretraining did, and

* prints, for every unit, its strongest sources in each direction (graph averaged over heads, per
  layer): ``--top-k`` of them with their weights;
* writes ``--png``: heatmaps with the units on both axes, one panel per direction and layer;
* writes ``--json``: the tokens and the head-averaged graphs ``[2, L, T, T]`` of every sentence.

Examples::

    glomo extract --run runs/wiki --text "the film was released in may" --png graphs.png
    glomo extract --model runs/wiki/graph_predictor.keras --tokenizer runs/wiki/tokenizer \\
        --file sentences.txt --json graphs.json
"""

import json
import os

import numpy as np

from glomo_tf.cli import UsageError, add_pretrained_arguments, pretrained_paths

DIRECTIONS = ("forward", "backward")


def register(subparsers):
    parser = subparsers.add_parser(
        "extract", help="graphs of a pretrained predictor over sentences (table, PNG, JSON)",
        description=__doc__.split("\n\n")[0])
    add_pretrained_arguments(parser)
    text = parser.add_argument_group("sentences")
    text.add_argument("--text", action="append", default=[], help="a sentence (repeatable)")
    text.add_argument("--file", help="a text file, one sentence per line")
    parser.add_argument("--max-length", type=int, default=128,
                        help="units kept per sentence (default 128)")
    parser.add_argument("--top-k", type=int, default=2,
                        help="strongest sources printed per unit and direction (default 2; 0 prints "
                             "nothing)")
    parser.add_argument("--png", help="write heatmaps of the first sentences here")
    parser.add_argument("--png-sentences", type=int, default=1,
                        help="sentences drawn in --png (default 1)")
    parser.add_argument("--json", help="write tokens and head-averaged graphs here")
    parser.set_defaults(func=run)
    return parser


def _paths(args):
    model, tokenizer = pretrained_paths(args)
    if model is None:
        raise UsageError("Say which predictor to use: --run RUN_DIR, or --model FILE.keras "
                         "--tokenizer DIR.")
    return model, tokenizer


def _sentences(args):
    sentences = list(args.text)
    if args.file:
        if not os.path.isfile(args.file):
            raise UsageError(f"--file {args.file!r} does not exist.")
        with open(args.file, encoding="utf-8", errors="replace") as handle:
            sentences += [line.strip() for line in handle if line.strip()]
    if not sentences:
        raise UsageError("No sentences: pass --text \"...\" (repeatable) or --file FILE.")
    return sentences


def extract(predictor, tokenizer, sentences, max_length=128):
    """Tokens and head-averaged graphs of ``sentences``.

    Returns a list of dicts ``{"text", "tokens", "graphs"}`` where ``graphs`` is a float array
    ``[2, L, n, n]`` over the sentence's ``n`` units (direction 0 forward, 1 backward).
    """
    from glomo_tf.data.vocabulary import check_vocabulary_matches

    check_vocabulary_matches(tokenizer.vocabulary, predictor)
    ids = tokenizer.encode(sentences, max_length=max_length)
    graphs = predictor(ids, training=False)["graphs"]
    graphs = np.asarray(graphs, np.float32).mean(axis=3)  # [B, 2, L, T, T]
    tokens = tokenizer.ids_to_tokens(ids).numpy()
    lengths = (np.asarray(ids) != 0).sum(axis=1)
    out = []
    for i, n in enumerate(lengths):
        out.append({"text": sentences[i],
                    "tokens": [t.decode("utf-8", "replace") for t in tokens[i, :n]],
                    "graphs": graphs[i, :, :, :n, :n]})
    return out


def format_edges(item, top_k):
    """Lines ``unit: forward layer l -> source (weight) ...`` for one sentence."""
    tokens, graphs = item["tokens"], item["graphs"]
    lines = [f"\n{' '.join(tokens)}"]
    for t, token in enumerate(tokens):
        parts = []
        for z in range(len(DIRECTIONS)):
            for layer in range(graphs.shape[1]):
                row = graphs[z, layer, t]
                best = [s for s in np.argsort(-row, kind="stable")[:top_k] if row[s] > 0]
                edges = ", ".join(f"{tokens[s]}@{s} {row[s]:.2f}" for s in best) or "-"
                parts.append(f"{('fw', 'bw')[z]}{layer + 1}: {edges}")
        lines.append(f"  {t:3d} {token:<14} " + " | ".join(parts))
    return lines


def run(args):
    if args.max_length < 1 or args.top_k < 0 or args.png_sentences < 1:
        raise UsageError("--max-length and --png-sentences must be >= 1, --top-k >= 0.")
    model_path, tokenizer_path = _paths(args)
    sentences = _sentences(args)
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    tokenizer = Tokenizer.load(tokenizer_path)
    predictor = load_graph_predictor(model_path)
    try:
        items = extract(predictor, tokenizer, sentences, args.max_length)
    except ValueError as error:  # a vocabulary that does not match the model
        raise UsageError(str(error)) from None
    if args.top_k:
        print("Strongest sources per unit (heads averaged; fw/bw = forward/backward, then the "
              "layer): source@position weight")
        for item in items:
            print("\n".join(format_edges(item, args.top_k)))
    if args.png:
        from glomo_tf import viz
        panels = [dict(graph=item["graphs"][z, layer], tokens=item["tokens"],
                       title=f"{name} graph, layer {layer + 1} (heads averaged)")
                  for item in items[:args.png_sentences]
                  for z, name in enumerate(DIRECTIONS)
                  for layer in range(item["graphs"].shape[1])]
        layers = items[0]["graphs"].shape[1]
        viz.figure_to_png(viz.panels_figure(panels, columns=2 * layers if layers < 3 else layers,
                                            panel_size=5.0,
                                            suptitle="G[t, s]: row t receives from column s"),
                          args.png)
        print(f"\nWrote {args.png}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([{"text": item["text"], "tokens": item["tokens"],
                        "graphs": np.round(item["graphs"], 5).tolist()} for item in items],
                      handle)
        print(f"Wrote {args.json}")
    return 0
