"""What the ``glomo`` commands share: :class:`UsageError`, the flags of a config class's
settings (:func:`add_settings`) and the pretrained-predictor flags."""

import argparse
import dataclasses
import os
import sys

from glomo_tf.experiments.settings import default_of, precision_setting, settings_of


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default shown once: appended as ``(default: X)`` unless its help already
    says what the default is or it has none (None, False, an empty list)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (not action.option_strings or "default" in text.lower()
                or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS or action.default in ([], ())):
            return text
        return f"{text} (default: %(default)s)"


class UsageError(Exception):
    """An error in the user's input or environment, reported without a traceback."""


def add_settings(parser, config_class):
    """Adds a flag for every setting of ``config_class`` (a dataclass of
    :func:`glomo_tf.experiments.settings.setting` fields): the flag ``--name-with-dashes`` (or the
    setting's ``flags``), its destination the field's name, its type, default, choices and help
    the field's; a ``bool`` is a switch with its ``--no-...`` form, a list takes one or more
    values. Settings with a ``group`` go under that heading; returns the headings,
    ``{name: argument group}``."""
    groups = {}
    for field, kind, meta in settings_of(config_class):
        group = meta["group"]
        if group is None:
            target = parser
        else:
            if group not in groups:
                groups[group] = parser.add_argument_group(group)
            target = groups[group]
        target.add_argument(*(meta["flags"] or ("--" + field.name.replace("_", "-"),)),
                            dest=field.name, **_argument(field, kind, meta))
    return groups


def add_command(subparsers, name, config_class, run, pretrained=False, **parser_args):
    """The parser of a command that runs one config class: its settings' flags
    (:func:`add_settings`), ``--verbose`` when it has that setting, ``--preset`` / ``--run`` /
    ``--model`` + ``--tokenizer`` when it reads a pretrained predictor, and ``run(args)`` to call
    (``parser_args``: ``help``, ``description``)."""
    parser = subparsers.add_parser(name, formatter_class=HelpFormatter, **parser_args)
    if pretrained:
        add_pretrained_arguments(parser)
    groups = add_settings(parser, config_class)
    verbose = next((f for f in dataclasses.fields(config_class) if f.name == "verbose"), None)
    if verbose is not None:
        group = verbose.metadata["setting"]["group"]
        add_verbose_argument(groups[group] if group else parser)
    parser.set_defaults(func=run)
    return parser


def config_from(args, config_class, **given):
    """A ``config_class`` from the parsed flags that are its fields (``verbose`` resolved as
    :func:`resolve_verbose` says) and the ``given`` values."""
    names = {field.name for field in dataclasses.fields(config_class)}
    settings = {k: v for k, v in vars(args).items() if k in names}
    if "verbose" in settings:
        settings["verbose"] = resolve_verbose(settings["verbose"])
    return config_class(**{**settings, **given})


def _argument(field, kind, meta):
    """``add_argument``'s keywords for one setting."""
    default = default_of(field)
    keywords = {"help": (meta["help"] or "").replace("%", "%%")}
    if default is dataclasses.MISSING:
        keywords["required"] = True
    else:
        keywords["default"] = default
    if kind is bool:
        keywords["action"] = argparse.BooleanOptionalAction
        return keywords
    if kind is list and meta["repeat"]:
        keywords["action"] = "append"
    elif kind is list:
        keywords["nargs"] = meta["nargs"] or "+"
    parse = meta["parse"] or (kind if kind in (int, float) else None)
    if parse is not None:
        keywords["type"] = parse
    for key in ("choices", "metavar"):
        if meta[key] is not None:
            keywords[key] = meta[key]
    return keywords


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
    """``--precision float32|mixed_bfloat16``: the Keras dtype policy of the command's models
    (the runners' ``precision`` setting, for the commands without a config class)."""
    meta = precision_setting().metadata["setting"]
    parser.add_argument("--precision", default="float32", choices=meta["choices"],
                        help=meta["help"])
