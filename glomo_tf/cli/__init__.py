"""The ``glomo`` command line: ``glomo <command> [options]``.

Each command lives in its own module of this package, which exposes ``register(subparsers)``: it
adds its parser and sets ``func`` to a callable ``run(args) -> int`` (the exit code) that parses
the flags, calls one library function with typed arguments and prints the outcome. Errors that a
user can fix (:class:`~glomo_tf.cli.common.UsageError` here, ``ValueError`` from the library) are
printed as one clear line, without a traceback. Nothing outside this package imports it.
"""

import argparse
import importlib
import importlib.abc
import importlib.util
import logging
import os
import re
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
    ("sentence-pretrain", "glomo_tf.cli.sentence_pretrain"),
    ("probe", "glomo_tf.cli.probe"),
]


def build_parser(commands=COMMANDS):
    parser = argparse.ArgumentParser(
        prog="glomo",
        description="GLoMo: learn latent relational graphs from unlabeled text and transfer them.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _, module in commands:
        importlib.import_module(module).register(subparsers)
    for command in subparsers.choices.values():
        flags = _flags(command)  # the settings' flags, for the library's errors and help texts
        command.set_defaults(flags=flags)
        for action in command._actions:
            if action.help:
                action.help = with_flags(action.help, flags)
        for group in command._action_groups:
            if group.title:
                group.title = with_flags(group.title, flags)
    return parser


def _flags(parser):
    """``{setting: flag}`` of a command: each option's destination and its first long flag."""
    return {action.dest: next((o for o in action.option_strings if o.startswith("--")),
                              action.option_strings[0])
            for action in parser._actions if action.option_strings}


def with_flags(message, flags):
    """A library message in the command line's words: a setting the library names in backticks
    (```data_dir```) becomes the flag that sets it (``--data-dir``); a name the command has no
    flag for loses its backticks."""
    return re.sub(r"`(\w+)`", lambda found: flags.get(found.group(1), found.group(1)), message)


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Mutes the standard error file descriptor while ``tensorflow`` is first imported.

    TensorFlow's C++ libraries print start-up lines (oneDNN, CUDA drivers) to file descriptor 2
    before ``TF_CPP_MIN_LOG_LEVEL`` applies; a command's output should not begin with them. Only
    that import is muted: an exception it raises is printed as usual, after the descriptor is back.
    """

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # one import only; find the real spec below
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def quiet_exec_module(module):
            sys.stderr.flush()
            saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            try:
                exec_module(module)
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                os.close(devnull)

        spec.loader.exec_module = quiet_exec_module
        return spec


class _ExpectedRetracing(logging.Filter):
    """Drops TensorFlow's "triggered tf.function retracing" warning: the commands build a new
    model per seed, variant or trial, each traced once, which is expected."""

    def filter(self, record):
        return "triggered tf.function retracing" not in record.getMessage()


def quiet_tensorflow():
    """Keeps TensorFlow's start-up log lines and expected-retracing warnings out of the output."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "tensorflow" not in sys.modules and not any(
            isinstance(finder, _QuietTensorFlowImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlowImport())
    logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, _ExpectedRetracing) for f in logger.filters):
        logger.addFilter(_ExpectedRetracing())


def main(argv=None):
    quiet_tensorflow()
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
        message = with_flags(" ".join(str(error).split()), getattr(args, "flags", {}))
        print(f"glomo {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glomo {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
