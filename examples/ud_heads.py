"""Graphs against English syntax: how often a predictor's strongest edge points at a word's gold
dependency head (UD English EWT), against the best fixed-offset rule and chance.

For every predictor given (a built-in preset name or a ``glomo pretrain`` run directory), the
development split of UD English EWT (``../shared/data/ud_ewt/en_ewt-ud-dev.conllu``, 2,001
sentences; any CoNLL-U file with ``--file``) is scored by
:func:`glomo_tf.analysis.head_agreement` (the same as ``glomo extract --heads``): per layer and
head, heads averaged, the rules "the token ``k`` before / after" with each direction's best ``k``
and chance, each word read in the direction that can see its head (Clark et al. 2019 score
BERT's attention heads this way). The JSON keeps every predictor's whole result;
:func:`render_table` makes the table of ``docs/results/where-graphs-pay.md`` from it.

Run (the recorded output, seconds a predictor on 2 cores)::

    python examples/ud_heads.py --predictors glomo_books_en --output examples/outputs/ud_heads.json

Add a run to the same JSON (its earlier predictors are kept)::

    python examples/ud_heads.py --predictors runs/books_wide --output examples/outputs/ud_heads.json
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _records import read_record, write_record  # noqa: E402

UD_DEV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "data", "ud_ewt", "en_ewt-ud-dev.conllu")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--predictors", nargs="+", required=True,
                   help="built-in preset names or glomo pretrain run directories")
    p.add_argument("--file", default=os.path.normpath(UD_DEV), help="a CoNLL-U file")
    p.add_argument("--max-length", type=int, default=128, help="units kept per sentence")
    p.add_argument("--output", help="the JSON to write (predictors already in it are kept)")
    p.add_argument("--render", action="store_true",
                   help="print the Markdown table of --output's predictors and stop")
    return p.parse_args(argv)


def load(name):
    """``(predictor, tokenizer)`` of a preset name or a run directory."""
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    if os.path.isdir(name):
        return (load_graph_predictor(os.path.join(name, "graph_predictor.keras")),
                Tokenizer.load(os.path.join(name, "tokenizer")))
    from glomo_tf.saving import load_preset

    return load_preset(name)


def render_table(record):
    """The Markdown table of a JSON written by this script: a row per predictor."""
    lines = ["| predictor | words | best head | heads averaged | best offset rule | "
             "previous / next word | chance |", "|---|---|---|---|---|---|---|"]
    for name, r in record["predictors"].items():
        best, averaged, rule = r["best_head"], r["best_heads_averaged"], r["best_offset_rule"]
        lines.append(
            f"| `{name}` | {r['words']:,} | {best['share']:.3f} (layer {best['layer']}, head "
            f"{best['head']}) | {averaged['share']:.3f} (layer {averaged['layer']}) | "
            f"{rule['share']:.3f} (t - {rule['forward']} / t + {rule['backward']}) | "
            f"{r['adjacent']:.3f} | {r['chance']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    record = read_record(args.output, {"predictors": {}})
    if args.render:
        print(render_table(record))
        return 0
    from glomo_tf.analysis import format_head_agreement, head_agreement
    from glomo_tf.data.conllu import read_conllu

    sentences = read_conllu(args.file)
    for name in args.predictors:
        start = time.perf_counter()
        predictor, tokenizer = load(name)
        result = head_agreement(predictor, tokenizer, sentences, args.max_length)
        print(f"\n{name}:\n" + "\n".join(format_head_agreement(result)))
        record["predictors"][name] = {
            "command": "python examples/ud_heads.py " + " ".join(argv or sys.argv[1:]),
            "file": os.path.relpath(args.file), "date": time.strftime("%Y-%m-%d"),
            "seconds": round(time.perf_counter() - start, 1), **result}
    if args.output:
        write_record(args.output, record)
        print(f"\nWrote {args.output}\n\n{render_table(record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
