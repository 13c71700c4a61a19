"""examples/transfer_quickstart.py: flags parsed before TensorFlow is imported, one line when the MR
data is missing, and (slow) a plain and a GLoMo classifier scored on held-out sentences."""

import os
import re
import subprocess
import sys

import pytest

from _examples import EXAMPLES

SCRIPT = os.path.join(EXAMPLES, "transfer_quickstart.py")
# Runs the script as __main__ and prints which heavy packages it imported.
IMPORTS = ("import runpy, sys\nsys.argv = [{script!r}, *{argv!r}]\ncode = 0\n"
           "try:\n    runpy.run_path({script!r}, run_name='__main__')\n"
           "except SystemExit as stop:\n    code = stop.code\n"
           "print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & "
           "{{'tensorflow', 'keras', 'glomo_tf'}}))\n"
           "sys.exit(code)\n")


def run_script(argv, timeout=60):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-c", IMPORTS.format(script=SCRIPT, argv=list(argv))],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_help_needs_no_tensorflow():
    proc = run_script(["--help"], timeout=30)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for flag in ("--data-dir", "--sentences", "--epochs"):
        assert flag in proc.stdout
    assert "HEAVY []" in proc.stdout


def test_missing_data_stops_with_one_line_naming_data_dir(tmp_path):
    (tmp_path / "mr").mkdir()
    (tmp_path / "mr" / "rt-polarity.pos").write_text("a fine film\n")
    proc = run_script(["--data-dir", str(tmp_path)], timeout=30)
    assert proc.returncode == 1
    assert "HEAVY []" in proc.stdout  # refused before TensorFlow is imported
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "rt-polarity.neg not found" in lines[0] and "--data-dir" in lines[0]
    assert "rt-polarity.pos not found" not in lines[0]


@pytest.mark.parametrize("argv", [["--sentences", "5"], ["--epochs", "0"]])
def test_bad_sizes_are_usage_errors(tmp_path, argv):
    proc = run_script(argv, timeout=30)
    assert proc.returncode == 2
    assert "error: --sentences must be >= 10 and --epochs >= 1" in proc.stderr


@pytest.mark.slow
def test_plain_and_glomo_classifiers_are_scored_on_held_out_sentences(tmp_path):
    (tmp_path / "mr").mkdir()
    good, bad = ["a fine , warm film", "funny and wise", "the best of the year"], [
        "dull and slow", "a mess of a movie", "far too long"]
    for name, phrases in (("rt-polarity.pos", good), ("rt-polarity.neg", bad)):
        lines = [f"{phrases[i % 3]} , take {i} ." for i in range(30)]
        (tmp_path / "mr" / name).write_text("\n".join(lines) + "\n")
    proc = run_script(["--data-dir", str(tmp_path), "--sentences", "50", "--epochs", "1"],
                      timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "40 MR sentences for training, 10 held out" in proc.stdout
    summary = [line for line in proc.stdout.splitlines() if line.startswith("held-out accuracy")]
    assert len(summary) == 1, proc.stdout
    assert re.fullmatch(r"held-out accuracy on 10 MR sentences \(one seed, 1 epoch\): "
                        r"plain [01]\.\d{3}, GLoMo [01]\.\d{3}", summary[0]), summary[0]
    assert proc.stdout.count("trainable weights") == 2
