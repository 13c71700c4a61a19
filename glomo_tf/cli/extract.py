"""``glomo extract``: the graphs a pretrained predictor draws over your sentences.

Parses the flags, then calls :func:`glomo_tf.analysis.extract` and prints or writes what it found.

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
  the same units as the reference;
* with ``--heads FILE.conllu`` instead of sentences, scores the graphs against gold syntax
  (:func:`glomo_tf.analysis.head_agreement`): the share of words whose strongest edge, in the
  direction that can see their head, points at it, per layer and head and heads averaged, beside
  the best fixed-offset rule and chance (``--heads-json`` writes it all).

Examples::

    glomo extract --run runs/wiki --text "the film was released in may" --png graphs.png
    glomo extract --model runs/wiki/graph_predictor.keras --tokenizer runs/wiki/tokenizer \\
        --file sentences.txt --json graphs.json
    glomo extract --run runs/wiki --file ../shared/data/mr/rt-polarity.* --stats --top-k 0
    glomo extract --preset glomo_books_en --heads ../shared/data/ud_ewt/en_ewt-ud-dev.conllu
"""

import json
import os

import numpy as np

from glomo_tf.analysis import (GraphStatistics, extract, format_edges, format_statistics,
                               graph_memory_bytes, graphs_figure, physical_memory_bytes,
                               unit_counts)
from glomo_tf.cli.common import (HelpFormatter, UsageError, add_precision_argument,
                                 add_pretrained_arguments, pretrained_paths)


def register(subparsers):
    parser = subparsers.add_parser(
        "extract", help="graphs of a pretrained predictor over sentences (table, PNG, JSON)",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter)
    add_pretrained_arguments(parser)
    text = parser.add_argument_group("sentences")
    text.add_argument("--text", action="append", default=[], help="a sentence (repeatable)")
    text.add_argument("--file", nargs="+", default=[], metavar="FILE",
                      help="text files, one sentence per line")
    text.add_argument("--heads", metavar="FILE.conllu",
                      help="instead of sentences: score the graphs against the gold dependency "
                           "heads of a CoNLL-U file (Universal Dependencies)")
    text.add_argument("--heads-json", metavar="PATH",
                      help="with --heads, also write the scores as JSON here")
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
    add_precision_argument(parser)
    parser.set_defaults(func=run)
    return parser


def _paths(args):
    model, tokenizer = pretrained_paths(args)
    if model is None:
        raise UsageError("Say which predictor to use: --preset NAME, --run RUN_DIR, or "
                         "--model FILE.keras --tokenizer DIR.")
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


def run(args):
    if args.max_length < 1 or args.top_k < 0 or args.png_sentences < 1 or args.batch_size < 1:
        raise UsageError("--max-length, --png-sentences and --batch-size must be >= 1, "
                         "--top-k >= 0.")
    if args.stats_json and not args.stats:
        raise UsageError("--stats-json writes the statistics of --stats: pass --stats too.")
    if args.heads_json and not args.heads:
        raise UsageError("--heads-json writes the scores of --heads: pass --heads FILE.conllu "
                         "too.")
    if args.heads:
        return _run_heads(args)
    model_path, tokenizer_path = _paths(args)
    sentences = _sentences(args)
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    tokenizer = Tokenizer.load(tokenizer_path)
    predictor = load_graph_predictor(model_path, dtype=args.precision)
    _check_lengths(args, predictor, unit_counts(tokenizer, sentences))
    statistics = GraphStatistics() if args.stats else None
    uniform = GraphStatistics() if args.stats else None
    items = extract(predictor, tokenizer, sentences, args.max_length, args.batch_size,
                    statistics, uniform)  # ValueError: a vocabulary that does not match
    if args.top_k:
        print("Strongest sources per unit (heads averaged; fw/bw = forward/backward, then the "
              "layer): source@position weight")
        for item in items:
            print("\n".join(format_edges(item, args.top_k)))
    if args.png:
        from glomo_tf import viz
        viz.figure_to_png(graphs_figure(items, args.png_sentences), args.png)
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


def _run_heads(args):
    """``--heads FILE.conllu``: the graphs' agreement with the file's gold heads."""
    others = [flag for flag, given in (("--text", args.text), ("--file", args.file),
                                       ("--png", args.png), ("--json", args.json),
                                       ("--stats", args.stats)) if given]
    if others:
        raise UsageError(f"--heads reads its sentences from the CoNLL-U file and prints their "
                         f"scores: leave out {', '.join(others)}.")
    if not os.path.isfile(args.heads):
        raise UsageError(f"--heads {args.heads!r} does not exist.")
    model_path, tokenizer_path = _paths(args)
    from glomo_tf.analysis import format_head_agreement, head_agreement
    from glomo_tf.data.conllu import read_conllu
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    try:
        sentences = read_conllu(args.heads)
    except (ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"--heads: {error}") from None
    tokenizer = Tokenizer.load(tokenizer_path)
    predictor = load_graph_predictor(model_path, dtype=args.precision)
    result = head_agreement(predictor, tokenizer, sentences, args.max_length, args.batch_size)
    print("\n".join(format_head_agreement(result)))
    if args.heads_json:
        with open(args.heads_json, "w", encoding="utf-8") as handle:
            json.dump({"model": model_path, "file": args.heads, **result}, handle, indent=1)
        print(f"Wrote {args.heads_json}")
    return 0


def _check_lengths(args, predictor, counts):
    """Refuses a call whose graphs would not fit in memory; says when sentences are cut."""
    length = int(min(args.max_length, max(int(counts.max()), 1)))
    batch = min(args.batch_size, len(counts))
    needed = graph_memory_bytes(predictor, batch, length)
    available = physical_memory_bytes()
    if available and needed > available / 2:
        raise UsageError(
            f"the graphs of {batch} sentence(s) of {length} units need about "
            f"{needed / 2 ** 30:.1f} GiB (2 directions x {predictor.num_layers} layers x "
            f"{predictor.num_heads} heads x {length}^2 weights each), more than half of this "
            f"machine's {available / 2 ** 30:.1f} GiB: pass a smaller --max-length, or "
            "--batch-size 1.")
    cut = int((counts > args.max_length).sum())
    if cut:
        print(f"Note: {cut} sentence(s) are longer than --max-length {args.max_length} units "
              f"(the longest has {int(counts.max())}); their graphs cover the first "
              f"{args.max_length} units. Raise --max-length to see more.", flush=True)

