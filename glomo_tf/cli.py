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
