"""The runners' settings and the command line built from them (glomo_tf.experiments.settings,
glomo_tf.cli.common.add_settings)."""

import argparse
import ast
import dataclasses
import pathlib
import re
import typing

import pytest

from glomo_tf import cli
from glomo_tf.experiments.settings import count_or_all, default_of, setting, settings_of
from _paths import REPO

EXPERIMENTS = pathlib.Path(REPO) / "glomo_tf" / "experiments"


def _configs():
    from glomo_tf.experiments.pretraining import PretrainingConfig
    from glomo_tf.experiments.probe import ProbeConfig
    from glomo_tf.experiments.search import SearchConfig
    from glomo_tf.experiments.sentence_pretraining import SentencePretrainingConfig
    from glomo_tf.experiments.transfer import TransferConfig
    return {"pretrain": PretrainingConfig, "sentence-pretrain": SentencePretrainingConfig,
            "transfer": TransferConfig, "tune": SearchConfig, "probe": ProbeConfig}


def _commands():
    parser = cli.build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("command", sorted(_configs()))
def test_every_setting_is_a_flag_with_its_default_type_and_help(command):
    config_class, parser = _configs()[command], _commands()[command]
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        meta = field.metadata["setting"]
        if not meta["command_line"]:
            continue
        action = actions[field.name]
        assert action.help and "`" not in action.help, field.name
        default = default_of(field)
        if default is dataclasses.MISSING:
            assert action.required, field.name
        else:
            assert action.default == default, field.name
        if hints[field.name] is bool:
            assert isinstance(action, argparse.BooleanOptionalAction)
        if meta["choices"] is not None:
            assert tuple(action.choices) == tuple(meta["choices"])
    # and every flag of the command sets a field or is one of the command line's own
    own = {"help", "verbose", "preset", "run", "model", "tokenizer"}
    assert set(actions) - {f.name for f in dataclasses.fields(config_class)} <= own


def test_flags_parse_to_typed_settings():
    from glomo_tf.experiments.search import SearchConfig

    parser = argparse.ArgumentParser()
    cli.common.add_settings(parser, SearchConfig)
    args = parser.parse_args(["--planted", "--heads", "2", "4", "--learning-rates", "0.01",
                              "--tuner", "bayesian", "--no-overwrite", "--window", "12"])
    config = cli.common.config_from(args, SearchConfig, verbose=0)
    assert config.heads == [2, 4] and config.learning_rates == [0.01]
    assert config.planted is True and config.overwrite is False and config.window == 12
    assert config.tuner == "bayesian" and config.verbose == 0
    assert config.context_lengths == SearchConfig().context_lengths  # the default, untouched


def test_a_repeatable_setting_and_aliases():
    @dataclasses.dataclass(kw_only=True)
    class Config:
        layers: int = setting(2, "layers", flags=("--num-layers", "--layers"))
        probe: typing.Optional[list] = setting(None, "a sentence", repeat=True)
        name: str = setting(help="required")

    parser = argparse.ArgumentParser()
    cli.common.add_settings(parser, Config)
    args = parser.parse_args(["--layers", "3", "--probe", "a b", "--probe", "c", "--name", "x"])
    assert cli.common.config_from(args, Config) == Config(layers=3, probe=["a b", "c"], name="x")
    assert [f.name for f, _, _ in settings_of(Config)] == ["layers", "probe", "name"]
    with pytest.raises(SystemExit):
        parser.parse_args([])  # --name is required


def test_count_or_all():
    assert count_or_all("all", "n") is None and count_or_all(None, "n") is None
    assert count_or_all("7", "n") == 7 and count_or_all(3, "n") == 3
    for bad in ("some", "0", -2):
        with pytest.raises(ValueError, match="`n` must be a positive integer or 'all'"):
            count_or_all(bad, "n")


def test_help_texts_name_flags_not_settings():
    text = _commands()["pretrain"].format_help()
    assert "alpha-entmax, --entmax-alpha" in text and "(must divide --hidden-dim)" in text
    assert "`" not in text
    assert "data (one of --train, --planted)" in _commands()["tune"].format_help()


def test_the_librarys_errors_name_settings_not_flags():
    """The runners and the rest of the library: a message that names what to change names the
    setting (`num_heads`), which the command line prints as its flag. Left out: the command line
    itself, and the development server, whose answers name its own TF Serving flags
    (``--max_request_bytes``) as TF Serving's do."""
    flagged = []
    package = EXPERIMENTS.parent
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] in ("cli", "serving"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            for text in ast.walk(node.exc):
                if isinstance(text, ast.Constant) and isinstance(text.value, str) \
                        and re.search(r"(?<![\w-])--[a-z]", text.value.replace(
                            "pip install --", "pip install ")):
                    flagged.append(f"{path.name}:{node.lineno}: {text.value}")
    assert not flagged, "\n".join(flagged)


def test_a_runner_error_reaches_the_user_as_its_flag(tmp_path, capsys):
    code = cli.main(["pretrain", "--train", str(tmp_path / "x.txt"), "--heads", "3",
                     "--hidden-dim", "10", "--output-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--hidden-dim (10) must be divisible by --num-heads (3)" in err and "`" not in err
