"""The ``glomo`` command itself: every command registers, also without the optional extras."""

import subprocess
import sys

BLOCK_EXTRAS = ("import sys\n"
                "for name in ('keras_tuner', 'tensorflow_datasets', 'tensorflow_serving'):\n"
                "    sys.modules[name] = None  # as if the extra were not installed\n")


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_help_lists_every_command_without_the_optional_extras():
    """`pip install -e .` (no extras) then `glomo demo`: the parser must not need keras-tuner,
    tensorflow-datasets or tensorflow-serving-api."""
    proc = run_python(BLOCK_EXTRAS + "from glomo_tf.cli import main\nsys.exit(main(['--help']))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from glomo_tf.cli import COMMANDS
    for command, _ in COMMANDS:
        assert command in proc.stdout


def test_tune_without_keras_tuner_says_what_to_install(tmp_path):
    proc = run_python(BLOCK_EXTRAS + "from glomo_tf.cli import main\n"
                      f"sys.exit(main(['tune', '--planted', '--directory', {str(tmp_path)!r}]))")
    assert proc.returncode == 2
    assert 'pip install -e ".[tune]"' in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_library_never_imports_the_command_line():
    """Only glomo_tf/cli/ parses arguments: no other module imports argparse or glomo_tf.cli (the
    library raises ValueError; the commands turn it into a one-line usage error)."""
    import ast
    import pathlib

    import glomo_tf

    root = pathlib.Path(glomo_tf.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if any(n == "argparse" or n == "glomo_tf.cli" or n.startswith("glomo_tf.cli.")
                   for n in names):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, offenders
    assert len(list(root.rglob("*.py"))) > 30  # the walk saw the package


def run_as_glomo(argv, timeout=600):
    """``glomo ARGV`` as the console script runs it, in a fresh process without the test
    session's TF_CPP_MIN_LOG_LEVEL (the command must set what it needs)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    code = (f"import sys\nsys.argv = ['glomo'] + {list(argv)!r}\n"
            "from glomo_tf.cli import main\nsys.exit(main())")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_help_parses_without_importing_tensorflow():
    """`glomo --help`, every `glomo CMD --help` and flag errors are answered before TensorFlow,
    Keras or tensorflow-text is imported (they take seconds to import)."""
    from glomo_tf.cli import COMMANDS

    commands = [command for command, _ in COMMANDS]
    bad_flags = [["pretrain", "--train", "/nonexistent.txt", "--hidden-dim", "-16",
                  "--output-dir", "/nonexistent/run"],
                 ["transfer", "--dataset", "nope", "--output-dir", "/nonexistent/t"],
                 ["tune", "--planted", "--max-trials", "0"], ["demo", "--epochs", "0"]]
    code = ("import sys\nsys.argv = ['glomo']\nfrom glomo_tf.cli import main\n"
            f"for argv in {bad_flags!r}:\n    assert main(argv) == 2\n"
            f"for argv in [['--help'], ['--version']] + [[c, '--help'] for c in {commands!r}]:\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'tensorflow', 'keras', 'tensorflow_text', 'keras_tuner', 'grpc'})\n"
            "print('HEAVY', heavy)")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HEAVY []" in proc.stdout, proc.stdout[-500:]
    errors = proc.stderr.splitlines()  # the flag errors, one line each, nothing else
    assert len(errors) == len(bad_flags), proc.stderr
    assert all(line.startswith("glomo ") and ": error: " in line for line in errors), errors


def test_every_option_has_help_and_shows_its_default_once():
    """`glomo CMD --help`: each option explains itself; a default appears once (appended by the
    formatter unless the help already says it), never as "(default: None)" or an empty list."""
    import argparse

    from glomo_tf.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        formatter = command._get_formatter()
        for action in command._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"glomo {name} {action.option_strings[0]} has no help"
            shown = formatter._expand_help(action)
            assert shown.lower().count("(default") <= 1, (name, shown)
            assert "(default: None)" not in shown and "(default: False)" not in shown
            assert "(default: [])" not in shown
            if (action.default is not None and action.default is not False
                    and action.default != [] and action.dest != "help"):
                assert "default" in shown.lower(), (name, action.option_strings[0], shown)
        command.format_help()  # every help string formats (no stray %)


def test_expected_retracing_warnings_are_dropped_and_other_warnings_kept(caplog):
    """`glomo transfer` and `glomo tune` build a new model per seed, variant or trial: TensorFlow's
    "triggered tf.function retracing" warning is expected there and kept out of the output."""
    import logging

    from glomo_tf.cli import quiet_tensorflow

    quiet_tensorflow()
    logger = logging.getLogger("tensorflow")
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        logger.warning("5 out of the last 5 calls to <function f> triggered tf.function "
                       "retracing. Tracing is expensive ...")
        logger.warning("something else went wrong")
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["something else went wrong"]


def test_each_command_prints_nothing_on_stderr_on_a_small_real_run(tmp_path):
    """demo --quick, then pretrain -> extract -> export -> transfer -> tune, each as the console
    script runs it on a tiny setting, in a process without the test session's
    TF_CPP_MIN_LOG_LEVEL and with its output in a pipe: stderr stays empty (no TensorFlow/CUDA
    start-up lines, no Keras or Python warnings), stdout has no carriage-return progress bars and
    no escape codes, one line per epoch."""
    import concurrent.futures
    import random

    rng = random.Random(0)
    nouns = ["cat", "dog", "bird", "tree", "house", "car", "river", "road"]
    lines = [" ".join(["the", rng.choice(nouns), "sees", "the", rng.choice(nouns), "."] * 2)
             for _ in range(80)]
    (tmp_path / "corpus.txt").write_text("\n".join(lines) + "\n")
    labelled = ["text\tlabel"] + [f"{line}\t{'pos' if 'cat' in line else 'neg'}"
                                  for line in lines]
    (tmp_path / "labelled.tsv").write_text("\n".join(labelled) + "\n")
    run = str(tmp_path / "run")
    commands = [
        ["demo", "--quick", "--output-dir", str(tmp_path / "demo")],
        ["pretrain", "--train", str(tmp_path / "corpus.txt"), "--output-dir", run, "--window",
         "12", "--shift", "6", "--hidden-dim", "8", "--layers", "1", "--heads", "2",
         "--conv-layers", "1", "--decoder-layers", "1", "--positions", "all", "--epochs", "1",
         "--steps-per-epoch", "2", "--batch-size", "4"],
        ["extract", "--run", run, "--text", "the cat sees the dog", "--stats"],
        ["export", "--model", f"{run}/graph_predictor.keras", "--export-dir",
         str(tmp_path / "models"), "--model-name", "glomo"],
        ["transfer", "--run", run, "--dataset", "file", "--file", str(tmp_path / "labelled.tsv"),
         "--variants", "baseline", "glomo_embeddings", "--seeds", "0", "--epochs", "1",
         "--embedding-dim", "8", "--rnn-units", "8", "--output-dir", str(tmp_path / "transfer")],
        ["tune", "--planted", "--max-trials", "1", "--epochs", "1", "--steps-per-epoch", "2",
         "--hidden-dim", "8", "--heads", "2", "--layers", "1", "--context-lengths", "1",
         "--thresholds", "scalar", "--learning-rates", "0.01", "--directory",
         str(tmp_path / "tuning")],
    ]

    def run_in_turn(chain):  # each command reads what the one before it wrote
        return [(argv, run_as_glomo(argv)) for argv in chain]

    # The run's chain on one core, the demo and the tuner on the other.
    chains = [commands[1:5], [commands[0], commands[5]]]
    with concurrent.futures.ThreadPoolExecutor(len(chains)) as pool:
        finished = [done for chain in pool.map(run_in_turn, chains) for done in chain]
    assert sorted(argv[0] for argv, _ in finished) == sorted(argv[0] for argv in commands)
    for argv, proc in finished:
        assert proc.returncode == 0, (argv[0], proc.stderr[-3000:])
        assert proc.stderr == "", (argv[0], proc.stderr[-3000:])
        assert "\r" not in proc.stdout and "\x1b[" not in proc.stdout, argv[0]
        if argv[0] == "demo":
            assert "recovery: forward" in proc.stdout
            assert any(line.startswith("3/3 - ") for line in proc.stdout.splitlines())


def test_library_errors_name_settings_and_the_command_line_shows_their_flags(capsys):
    """A library error names the setting in backticks; ``glomo`` prints the flag that sets it
    (the command's own option for that destination, read from its parser), and a setting the
    command has no flag for without its backticks."""
    from glomo_tf import cli

    parser = cli.build_parser()
    flags = parser.parse_args(["transfer", "--dataset", "mr", "--output-dir", "x"]).flags
    assert flags["data_dir"] == "--data-dir" and flags["num_mixtures"] == "--num-mixtures"
    assert cli.with_flags("pass the folder as `data_dir` (not `subword`)", flags) == \
        "pass the folder as --data-dir (not subword)"

    def failing(args):
        from glomo_tf.precision import check_precision
        check_precision("half")

    original = cli.build_parser

    def parser_with_failing_transfer(*args, **kwargs):
        parser = original(*args, **kwargs)
        parser._subparsers._group_actions[0].choices["transfer"].set_defaults(func=failing)
        return parser

    cli.build_parser = parser_with_failing_transfer
    try:
        code = cli.main(["transfer", "--dataset", "mr", "--output-dir", "x"])
    finally:
        cli.build_parser = original
    assert code == 2
    assert "glomo transfer: error: --precision must be one of" in capsys.readouterr().err
