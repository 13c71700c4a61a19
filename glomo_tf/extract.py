"""``glomo extract``: the graphs a pretrained predictor draws over your sentences.

Reads a run directory written by ``glomo pretrain`` (``RUN/graph_predictor.keras`` and
``RUN/tokenizer/``), or a predictor file and a tokenizer directory given separately, tokenizes the
sentences exactly as pretraining did, and

* prints, for every unit, its strongest sources in each direction (graph averaged over heads, per
  layer): ``--top-k`` of them with their weights;
* writes ``--png``: heatmaps with the units on both axes, one panel per direction and layer;
* writes ``--json``: the tokens and the head-averaged graphs ``[2, L, T, T]`` of every sentence;
* prints with ``--stats`` what the graphs look like over all the sentences, per direction and
  layer (every head pooled): the share of live rows, the weight on adjacent units, the mean
  distance to the sources, the number of sources with weight, the rows' entropy and the weight
  on ``<unk>`` sources (see :class:`GraphStatistics`), and the same for uniform graphs over
  the same units as the reference.

Examples::

    glomo extract --run runs/wiki --text "the film was released in may" --png graphs.png
    glomo extract --model runs/wiki/graph_predictor.keras --tokenizer runs/wiki/tokenizer \\
        --file sentences.txt --json graphs.json
    glomo extract --run runs/wiki --file ../shared/data/mr/rt-polarity.* --stats --top-k 0
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
    text.add_argument("--file", nargs="+", default=[], metavar="FILE",
                      help="text files, one sentence per line")
    parser.add_argument("--max-length", type=int, default=128,
                        help="units kept per sentence (default 128)")
    parser.add_argument("--top-k", type=int, default=2,
                        help="strongest sources printed per unit and direction (default 2; 0 prints "
                             "nothing)")
    parser.add_argument("--png", help="write heatmaps of the first sentences here")
    parser.add_argument("--png-sentences", type=int, default=1,
                        help="sentences drawn in --png (default 1)")
    parser.add_argument("--json", help="write tokens and head-averaged graphs here")
    parser.add_argument("--stats", action="store_true",
                        help="print statistics of the graphs over all the sentences")
    parser.add_argument("--stats-json", metavar="PATH",
                        help="with --stats, also write the statistics (the predictor's and the "
                             "uniform graphs') as JSON here")
    parser.add_argument("--batch-size", type=int, default=128,
                        help="sentences per predictor call (default 128)")
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
    for path in args.file:
        if not os.path.isfile(path):
            raise UsageError(f"--file {path!r} does not exist.")
        with open(path, encoding="utf-8", errors="replace") as handle:
            sentences += [line.strip() for line in handle if line.strip()]
    if not sentences:
        raise UsageError("No sentences: pass --text \"...\" (repeatable) or --file FILE.")
    return sentences


def extract(predictor, tokenizer, sentences, max_length=128, batch_size=128, statistics=None,
            uniform_statistics=None):
    """Tokens and head-averaged graphs of ``sentences``, ``batch_size`` sentences per call.

    Returns a list of dicts ``{"text", "tokens", "graphs"}`` where ``graphs`` is a float array
    ``[2, L, n, n]`` over the sentence's ``n`` units (direction 0 forward, 1 backward). A
    :class:`GraphStatistics` given as ``statistics`` is updated with every batch's per-head graphs,
    one given as ``uniform_statistics`` with the uniform graphs over the same units (the
    reference: every admissible source weighted alike).
    """
    from glomo_tf import ops
    from glomo_tf.data.vocabulary import check_vocabulary_matches

    check_vocabulary_matches(tokenizer.vocabulary, predictor)
    unk_id = tokenizer.vocabulary.unk_id
    out = []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start:start + batch_size]
        ids = np.asarray(tokenizer.encode(batch, max_length=max_length))
        per_head = np.asarray(predictor(ids, training=False)["graphs"], np.float32)
        if statistics is not None:
            statistics.update(per_head, ids, unk_id)
        if uniform_statistics is not None:
            uniform = np.asarray(ops.uniform_graphs(ids != 0))  # [B, 2, T, T]
            uniform_statistics.update(uniform[:, :, None, None], ids, unk_id)
        graphs = per_head.mean(axis=3)  # [B, 2, L, T, T]
        tokens = tokenizer.ids_to_tokens(ids).numpy()
        lengths = (ids != 0).sum(axis=1)
        for i, n in enumerate(lengths):
            out.append({"text": batch[i],
                        "tokens": [t.decode("utf-8", "replace") for t in tokens[i, :n]],
                        "graphs": graphs[i, :, :, :n, :n]})
    return out


class GraphStatistics:
    """What graphs ``[B, 2, L, K, T, T]`` look like, accumulated over batches.

    Per direction and layer, every head pooled, over the rows of real units that have an
    admissible source (a real unit before them, forward; after them, backward):

    * ``live``: the share of those rows with any weight;
    * over the live rows, as shares of their total weight: ``adjacent`` (on ``|t - s| = 1``) and
      ``unk`` (on ``<unk>`` sources); ``mean_distance``, the weight-averaged ``|t - s|``;
    * ``sources``: the mean number of sources with weight per live row, and ``entropy``: the mean
      entropy (nats) of the live rows normalised to sum to one.

    ``units`` and ``unk_share`` count the real units and the share of them that are ``<unk>``.
    """

    KEYS = ("live", "adjacent", "mean_distance", "sources", "entropy", "unk")

    def __init__(self):
        self._sums = None
        self.units = 0
        self.unknown = 0

    def update(self, graphs, token_ids, unk_id=1):
        from glomo_tf import ops

        graphs = np.asarray(graphs, np.float32)
        token_ids = np.asarray(token_ids)
        real = token_ids != 0  # [B, T]
        _, directions, layers, _, steps, _ = graphs.shape
        if self._sums is None:
            self._sums = np.zeros((directions, layers, 8))
        self.units += int(real.sum())
        self.unknown += int((real & (token_ids == unk_id)).sum())
        position = np.arange(steps)
        distance = np.abs(position[:, None] - position[None, :]).astype(np.float32)
        admissible = np.asarray(ops.admissible_sources(real))[:, :, 0, 0] > 0  # [B, 2, T, T]
        receives = real[:, None] & admissible.any(axis=-1)  # [B, 2, T]: real, with a source
        unknown_source = (token_ids == unk_id)[:, None, None, :]  # [B, 1, 1, T] (sources)
        for z in range(directions):
            has_source = receives[:, z]  # [B, T]
            for layer in range(layers):
                g = graphs[:, z, layer]  # [B, K, T, T]
                total = g.sum(-1)  # [B, K, T]
                rows = np.broadcast_to(has_source[:, None], total.shape)
                live = rows & (total > 0)
                p = g / np.where(total > 0, total, 1.0)[..., None]
                entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)
                self._sums[z, layer] += [  # float64 sums
                    rows.sum(), live.sum(), total[live].astype(np.float64).sum(),
                    (g * (distance == 1)).sum(-1)[live].sum(),
                    (g * distance).sum(-1)[live].sum(),
                    (g > 0).sum(-1)[live].sum(), entropy[live].sum(),
                    (g * unknown_source).sum(-1)[live].sum()]

    def result(self):
        """``{"forward": [per layer {key: value}], "backward": [...], "units", "unk_share"}``."""
        out = {"units": self.units, "unk_share": self.unknown / max(self.units, 1)}
        if self._sums is None:
            return out
        for z, name in enumerate(DIRECTIONS[:self._sums.shape[0]]):
            out[name] = []
            for rows, live, weight, adjacent, distance, sources, entropy, unk in self._sums[z]:
                weight_ = max(weight, 1e-12)
                out[name].append({
                    "live": live / max(rows, 1), "adjacent": adjacent / weight_,
                    "mean_distance": distance / weight_, "sources": sources / max(live, 1),
                    "entropy": entropy / max(live, 1), "unk": unk / weight_})
        return out


def format_statistics(result, uniform=None):
    """Table lines of a :meth:`GraphStatistics.result`, and of the uniform graphs' if given."""
    lines = [f"\nGraph statistics over {result['units']} units ({100 * result['unk_share']:.1f}% "
             "<unk>), every head pooled, rows with an admissible source:",
             f"  {'graph':<18}" + "".join(f"{key:>14}" for key in GraphStatistics.KEYS)]
    for label, source in (("", result), ("uniform ", uniform or {})):
        for name in DIRECTIONS:
            for layer, values in enumerate(source.get(name, [])):
                row = label + name + ("" if label else f" {layer + 1}")
                lines.append(f"  {row:<18}" +
                             "".join(f"{values[key]:>14.3f}" for key in GraphStatistics.KEYS))
    return lines


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
    if args.max_length < 1 or args.top_k < 0 or args.png_sentences < 1 or args.batch_size < 1:
        raise UsageError("--max-length, --png-sentences and --batch-size must be >= 1, "
                         "--top-k >= 0.")
    if args.stats_json and not args.stats:
        raise UsageError("--stats-json writes the statistics of --stats: pass --stats too.")
    model_path, tokenizer_path = _paths(args)
    sentences = _sentences(args)
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    tokenizer = Tokenizer.load(tokenizer_path)
    predictor = load_graph_predictor(model_path)
    statistics = GraphStatistics() if args.stats else None
    uniform = GraphStatistics() if args.stats else None
    try:
        items = extract(predictor, tokenizer, sentences, args.max_length, args.batch_size,
                        statistics, uniform)
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
    if statistics is not None:
        print("\n".join(format_statistics(statistics.result(), uniform.result())))
    if args.stats_json:
        with open(args.stats_json, "w", encoding="utf-8") as handle:
            json.dump({"model": model_path, "files": list(args.file), "texts": len(args.text),
                       "max_length": args.max_length, "predictor": statistics.result(),
                       "uniform": uniform.result()}, handle, indent=1)
        print(f"Wrote {args.stats_json}")
    return 0
