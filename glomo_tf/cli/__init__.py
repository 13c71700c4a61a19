"""The ``glomo`` command line: ``glomo <command> [options]``.

Each command lives in its own module of this package, which exposes ``register(subparsers)``: it
adds its parser and sets ``func`` to a callable ``run(args) -> int`` (the exit code) that parses
the flags, calls one library function with typed arguments and prints the outcome. Errors that a
user can fix (:class:`~glomo_tf.cli.common.UsageError` here, ``ValueError`` from the library) are
printed as one clear line, without a traceback. Nothing outside this package imports it.
"""

import argparse
import importlib
import os
import sys

from glomo_tf.cli.common import UsageError

# (command, module): modules are imported lazily so `glomo --help` stays fast.
COMMANDS = [
    ("demo", "glomo_tf.cli.demo"),
    ("pretrain", "glomo_tf.cli.pretrain"),
    ("extract", "glomo_tf.cli.extract"),
    ("export", "glomo_tf.cli.export"),
    ("serve", "glomo_tf.cli.serve"),
    ("transfer", "glomo_tf.cli.transfer"),
    ("tune", "glomo_tf.cli.tune"),
]


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
    except (UsageError, ValueError) as error:
        message = " ".join(str(error).split())  # one line
        print(f"glomo {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glomo {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
