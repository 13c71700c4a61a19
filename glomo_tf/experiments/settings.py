"""Settings of the runners: dataclass fields that carry their own documentation.

A runner's config (:class:`~glomo_tf.experiments.pretraining.PretrainingConfig`, ...) is a
dataclass whose fields are made with :func:`setting`: the name, type, default, allowed values and
help of a setting are written once, there. The ``glomo`` command line builds each command's flags
from those fields (``glomo_tf.cli.common.add_settings``: ``--learning-rate`` for
``learning_rate``), and the runners' errors name settings in backticks (`` `learning_rate` ``),
which a Python caller reads as the argument and the command line prints as the flag that sets it.
"""

import dataclasses
import typing

_MISSING = dataclasses.MISSING


def setting(default=_MISSING, help=None, *, group=None, flags=None, choices=None, metavar=None,
            parse=None, nargs=None, repeat=False, default_factory=_MISSING, command_line=True):
    """A dataclass field with what its command-line flag needs.

    Args:
        default: the default value (``default_factory`` for a list); none for a required one.
        help: one sentence on what it sets, shown by ``--help``.
        group: the heading it is listed under in ``--help`` ("data", "model", ...).
        flags: the flag names when they are not ``--`` + the name with dashes (the first one is
            the name errors use; the others are aliases).
        choices: the values allowed.
        metavar: the placeholder ``--help`` shows for the value.
        parse: a function from the flag's text to the value, when the value is not simply an
            ``int``, ``float`` or ``str`` (for a list: of each item).
        nargs: ``argparse``'s ``nargs`` for a list (default ``"+"``).
        repeat: a list given one value per flag (``--probe A --probe B``) instead.
        command_line: False for a setting the command line fills in itself (no flag of its own).
    """
    metadata = {"help": help, "group": group, "flags": tuple(flags or ()), "choices": choices,
                "metavar": metavar, "parse": parse, "nargs": nargs, "repeat": repeat,
                "command_line": command_line}
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"setting": metadata})


def settings_of(config_class):
    """``[(field, type, metadata)]`` of a config class's fields made with :func:`setting`, in
    their order (``type`` resolved from the annotation: ``Optional[int]`` is ``int``)."""
    hints = typing.get_type_hints(config_class)
    found = []
    for field in dataclasses.fields(config_class):
        metadata = field.metadata.get("setting")
        if metadata is not None and metadata["command_line"]:
            found.append((field, _plain_type(hints[field.name]), metadata))
    return found


def _plain_type(hint):
    """``int`` for ``Optional[int]``, ``list`` for ``Optional[list]`` / ``list[int]`` /
    ``tuple``; otherwise the hint itself."""
    if typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return list if origin in (list, tuple) else hint


def default_of(field):
    """A field's default value (its factory called), or ``dataclasses.MISSING``."""
    if field.default_factory is not _MISSING:
        return field.default_factory()
    return field.default


def precision_setting(group=None):
    """The ``precision`` setting every runner has (one Keras dtype policy for its models)."""
    from glomo_tf.hparams import PRECISIONS
    return setting(
        "float32", "mixed_bfloat16: compute in bfloat16 with float32 variables, losses and graph "
        "normalisation; pays on CPUs with bfloat16 matrix units (avx512_bf16, AMX) and on GPUs, "
        "without `jit` on a CPU", group=group, choices=PRECISIONS)


def verbose_setting(default=1, group=None):
    """The ``verbose`` setting (how much ``model.fit`` prints; the command line picks its
    default from the terminal, ``glomo_tf.cli.common.add_verbose_argument``)."""
    return setting(default, "0: quiet, 1: a progress bar, 2: one line per epoch", group=group,
                   command_line=False)


def count_or_all(value, name):
    """A setting that is a positive integer or ``all`` (None: all of them), as an int or None;
    ``ValueError`` naming the setting ``name`` otherwise."""
    if value is None or str(value).lower() == "all":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"`{name}` must be a positive integer or 'all', got {value!r}.")
    return count
