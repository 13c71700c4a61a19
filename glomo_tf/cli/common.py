"""What the ``glomo`` commands share: :class:`UsageError` and the pretrained-predictor flags."""

import argparse
import os
import sys


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default shown once: appended as ``(default: X)`` unless its help already
    says what the default is or it has none (None, False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (not action.option_strings or "default" in text.lower()
                or action.default in (None, False, argparse.SUPPRESS)):
            return text
        return f"{text} (default: %(default)s)"


class UsageError(Exception):
    """An error in the user's input or environment, reported without a traceback."""


def add_pretrained_arguments(parser):
    """``--preset``, ``--run`` or ``--model`` + ``--tokenizer``: a pretrained predictor and its
    tokenizer."""
    group = parser.add_argument_group("pretrained graphs")
    group.add_argument("--preset", metavar="NAME_OR_DIR",
                       help="a built-in preset (glomo_books_en, ...) or a preset directory "
                            "(RUN/preset of glomo pretrain)")
    group.add_argument("--run", help="a glomo pretrain output directory")
    group.add_argument("--model", help="a graph_predictor.keras file (instead of --run)")
    group.add_argument("--tokenizer", help="its tokenizer directory (with --model)")
    return group


def pretrained_paths(args):
    """``(predictor path, tokenizer directory)`` named by ``--preset``, ``--run`` or
    ``--model``/``--tokenizer`` (a preset's predictor path is its directory, which
    :func:`glomo_tf.load_graph_predictor` reads).

    Returns ``(None, None)`` when none is given (callers say whether that is an error); raises
    :class:`UsageError` for half-given or missing paths.
    """
    if getattr(args, "preset", None):
        if args.run or args.model or args.tokenizer:
            raise UsageError("Give one of --preset, --run, or --model and --tokenizer.")
        return preset_paths(args.preset, "--preset")
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


def preset_paths(preset, flag):
    """``(preset directory, its tokenizer directory)`` for ``flag PRESET``, checked (without
    loading TensorFlow): an unknown name lists the built-in presets."""
    from glomo_tf.presets import PresetError, preset_directory, tokenizer_directory
    try:
        directory = preset_directory(preset)
        return directory, tokenizer_directory(directory)
    except PresetError as error:
        raise UsageError(f"{flag}: {error}") from None


def add_verbose_argument(parser):
    """``--verbose``: how much ``model.fit`` prints (see :func:`resolve_verbose`)."""
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=None,
                        help="0: quiet, 1: a progress bar, 2: one line per epoch (default: 1 on a "
                             "terminal, 2 when the output goes to a file or a pipe)")


def resolve_verbose(value):
    """``--verbose`` as given, else 1 (progress bar) on a terminal and 2 (one line per epoch)
    otherwise: a redirected progress bar is one carriage-return line per epoch, thousands of
    characters long."""
    if value is not None:
        return value
    return 1 if sys.stdout.isatty() else 2


def add_precision_argument(parser):
    """``--precision float32|mixed_bfloat16``: the Keras dtype policy of the command's models."""
    from glomo_tf.hparams import PRECISIONS
    parser.add_argument(
        "--precision", choices=PRECISIONS, default="float32",
        help="mixed_bfloat16: compute in bfloat16 with float32 variables, losses and graph "
             "normalisation; pays on CPUs with bfloat16 matrix units (avx512_bf16, AMX) and on "
             "GPUs, without --jit on a CPU")
