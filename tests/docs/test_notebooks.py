"""Executes the notebooks in ``notebooks/`` with their small settings and checks what they show.

Each notebook is copied to a temporary folder and executed from there with nbclient, in a kernel
started from *this* interpreter (a ``python3`` kernelspec written into a temporary ``JUPYTER_PATH``
whose argv is ``sys.executable``, so a system-wide ``python3`` kernel can never be picked up), with
the working directory ``notebooks/`` and ``GLOMO_NOTEBOOK_SMALL=1``. The stored notebooks are never
modified.
"""

import base64
import json
import os
import re
import shutil
import sys

import nbformat
import pytest
from nbclient import NotebookClient
from _paths import REPO

NOTEBOOKS = os.path.join(REPO, "notebooks")
CELL_TIMEOUT_S = 300
MAX_STORED_BYTES = 1_500_000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
KERNEL_CHECK = 'import sys\nprint("KERNEL_PREFIX=" + sys.prefix)\nprint("KERNEL_EXECUTABLE=" + sys.executable)'


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A ``python3`` kernelspec running this interpreter, and the environment for the kernel."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test venv)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    env = dict(os.environ)
    env.pop("GLOMO_RUN", None)  # the gallery must pretrain its own predictor here
    env.update(GLOMO_NOTEBOOK_SMALL="1", TF_CPP_MIN_LOG_LEVEL="3", MPLBACKEND="Agg",
               PYTHONUNBUFFERED="1")
    return env


def run_notebook(name, tmp_path, env):
    """Executes a copy of ``notebooks/<name>``; returns it with its outputs."""
    source = os.path.join(NOTEBOOKS, name)
    copy = tmp_path / name
    shutil.copyfile(source, copy)
    notebook = nbformat.read(str(copy), as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(KERNEL_CHECK))
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            allow_errors=False,
                            resources={"metadata": {"path": NOTEBOOKS}})
    try:
        client.execute(env=env)
    finally:
        nbformat.write(notebook, str(tmp_path / f"executed-{name}"))  # kept for debugging
    return notebook


def outputs(notebook):
    return [output for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.get("outputs", [])]


def stdout_text(notebook):
    return "".join(o.get("text", "") for o in outputs(notebook)
                   if o.output_type == "stream" and o.get("name") == "stdout")


def png_images(notebook):
    images = [base64.b64decode(o["data"]["image/png"]) for o in outputs(notebook)
              if o.output_type in ("display_data", "execute_result") and "image/png" in o.get("data", {})]
    assert all(image.startswith(PNG_SIGNATURE) for image in images)
    return images


def check_ran_cleanly(notebook):
    errors = [o for o in outputs(notebook) if o.output_type == "error"]
    assert not errors, [f"{e.ename}: {e.evalue}" for e in errors]
    text = stdout_text(notebook)
    # The kernel ran this interpreter's environment (the project's venv), with the small settings.
    assert f"KERNEL_PREFIX={sys.prefix}\n" in text, text[-500:]
    assert f"KERNEL_EXECUTABLE={sys.executable}\n" in text, text[-500:]
    assert "SMALL = True" in text
    return text


def check_stored(name):
    """The committed notebook is valid, carries its outputs, and stays small enough for GitHub."""
    path = os.path.join(NOTEBOOKS, name)
    assert os.path.getsize(path) < MAX_STORED_BYTES
    stored = nbformat.read(path, as_version=4)
    nbformat.validate(stored)
    assert png_images(stored), f"{name} is stored without its figures"
    assert not [o for o in outputs(stored) if o.output_type == "error"]


@pytest.mark.slow
def test_quickstart_notebook(tmp_path, kernel_env):
    check_stored("quickstart.ipynb")
    notebook = run_notebook("quickstart.ipynb", tmp_path, kernel_env)
    text = check_ran_cleanly(notebook)

    # Graph heatmaps (forward and backward directions) were drawn.
    assert len(png_images(notebook)) >= 2
    # The saved and reloaded predictor is frozen and gives the same graphs.
    assert "trainable after loading: False | same graphs as before saving: True" in text
    # Both classifiers were trained and evaluated; their test accuracies are printed.
    accuracies = dict(re.findall(r"test accuracy \((\w+)\): (\S+)", text))
    assert set(accuracies) == {"glomo_rnn", "baseline"}, text[-1000:]
    for variant, value in accuracies.items():
        accuracy = float(value)
        assert 0.0 <= accuracy <= 1.0, (variant, accuracy)


@pytest.mark.slow
def test_graph_gallery_notebook(tmp_path, kernel_env):
    check_stored("graph_gallery.ipynb")
    notebook = run_notebook("graph_gallery.ipynb", tmp_path, kernel_env)
    text = check_ran_cleanly(notebook)

    # One panel per direction, layer and head for every sentence: the count of axes holding a
    # heatmap in each figure is printed next to the expected count.
    heads = re.findall(r"sentence (\d+) panels: (\d+) drawn, (\d+) expected "
                       r"\(2 directions x (\d+) layers x (\d+) heads\)", text)
    assert heads, text[-1500:]
    for _, drawn, expected, layers, num_heads in heads:
        assert int(drawn) == int(expected) == 2 * int(layers) * int(num_heads) >= 2
    # The mixed graph M of the trained classifier: one panel per direction and mixture, and M H
    # matches the layer's own (chained) computation.
    mixed = re.findall(r"sentence (\d+) mixed-graph panels: (\d+) drawn, (\d+) expected "
                       r"\(2 directions x (\d+) mixtures\)", text)
    assert len(mixed) == len(heads), text[-1500:]
    for _, drawn, expected, mixtures in mixed:
        assert int(drawn) == int(expected) == 2 * int(mixtures) >= 2
    assert text.count("M H equals the layer's chained output: True") == len(mixed)
    # One figure per sentence for the heads and one for the mixed graphs.
    assert len(png_images(notebook)) == len(heads) + len(mixed)


@pytest.mark.slow
def test_presets_notebook(tmp_path, kernel_env):
    check_stored("presets.ipynb")
    notebook = run_notebook("presets.ipynb", tmp_path, kernel_env)
    text = check_ran_cleanly(notebook)
    # The preset loaded frozen and matches the graphs recorded with it.
    assert "trainable: False" in text
    assert re.search(r"reference graphs within \S+ of the recorded ones \(tolerance \S+\): "
                     r"True", text), text[-1500:]
    # Two sentences, each with both directions' strongest sources and a two-panel figure.
    assert text.count(" panels: 2 drawn") == 2 and len(png_images(notebook)) == 2
    assert len(re.findall(r"sentence \d (forward|backward): \S+->\S+", text)) == 4
    accuracies = dict(re.findall(r"test accuracy \((\w+)\): (\S+)", text))
    assert set(accuracies) == {"glomo_rnn", "baseline"}, text[-1000:]
    assert all(0.0 <= float(v) <= 1.0 for v in accuracies.values())
