"""The ``glomo`` command line: ``glomo <command> [options]``.

Each command lives in its own module, which exposes ``register(subparsers)``: it adds its parser
and sets ``func`` to a callable ``run(args) -> int`` (the exit code). Errors that a user can fix are
raised as :class:`UsageError` and printed as one clear line, without a traceback.
"""

import argparse
import importlib
import os
import sys

# (command, module): modules are imported lazily so `glomo --help` stays fast.
COMMANDS = [
    ("demo", "glomo_tf.demo"),
    ("pretrain", "glomo_tf.pretrain"),
    ("extract", "glomo_tf.extract"),
    ("export", "glomo_tf.export.cli"),
    ("serve", "glomo_tf.serving.server"),
    ("transfer", "glomo_tf.transfer"),
    ("tune", "glomo_tf.tuning.cli"),
]


class UsageError(Exception):
    """An error in the user's input or environment, reported without a traceback."""


def add_pretrained_arguments(parser):
    """``--run`` or ``--model`` + ``--tokenizer``: a pretrained predictor and its tokenizer."""
    group = parser.add_argument_group("pretrained graphs")
    group.add_argument("--run", help="a glomo pretrain output directory")
    group.add_argument("--model", help="a graph_predictor.keras file (instead of --run)")
    group.add_argument("--tokenizer", help="its tokenizer directory (with --model)")
    return group


def pretrained_paths(args):
    """``(predictor file, tokenizer directory)`` named by ``--run`` or ``--model``/``--tokenizer``.

    Returns ``(None, None)`` when neither is given (callers say whether that is an error); raises
    :class:`UsageError` for half-given or missing paths.
    """
    if args.run:
        if args.model or args.tokenizer:
            raise UsageError("Give either --run, or --model and --tokenizer, not both.")
        if not os.path.isdir(args.run):
            raise UsageError(f"--run {args.run!r} is not a directory; pass the --output-dir of a "
                             "glomo pretrain run.")
        model = os.path.join(args.run, "graph_predictor.keras")
        tokenizer = os.path.join(args.run, "tokenizer")
    elif args.model or args.tokenizer:
        if not (args.model and args.tokenizer):
            raise UsageError("--model and --tokenizer go together (the predictor reads the ids of "
                             "its own tokenizer).")
        model, tokenizer = args.model, args.tokenizer
    else:
        return None, None
    if not os.path.isfile(model):
        raise UsageError(f"No graph predictor at {model!r}: a glomo pretrain run writes "
                         "graph_predictor.keras when it finishes.")
    if not os.path.exists(tokenizer):
        raise UsageError(f"No tokenizer at {tokenizer!r} (a directory with vocab.txt).")
    return model, tokenizer


def refuse_changed_settings(saved, current, may_change, holder, remedy):
    """Raises :class:`UsageError` when ``current`` settings differ from ``saved`` ones.

    Keys in ``may_change`` are free to differ; ``holder`` names what holds the saved settings
    ("the run directory holds a run") and ``remedy`` says what to do instead.
    """
    changed = [k for k in current if k not in may_change and saved.get(k) != current[k]]
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed)
        raise UsageError(f"{holder} with other settings ({details}). {remedy}")


def build_parser(commands=COMMANDS):
    parser = argparse.ArgumentParser(
        prog="glomo",
        description="GLoMo: learn latent relational graphs from unlabeled text and transfer them.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _, module in commands:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from glomo_tf import __version__
        print(__version__)
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"glomo {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glomo {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
