"""Presets: save and load in keras-hub's layout, the built-in presets, the --preset flags, errors.

Correctness is checked against independent computations: the predictor the preset was written
from (its graphs, its weights rounded to float16 by NumPy), the tokenizer it was written with,
and the graphs recorded with a built-in preset when it was made.
"""

import json
import os
import shutil
import subprocess
import sys

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import glomo_tf
from glomo_tf import presets
from glomo_tf.cli import main as glomo_main
from glomo_tf.data import Tokenizer

from _examples import load_example
from _paths import REPO

CORPUS = ["The cat sat on the mat.", "A dog ran far away, and the cat sat still.",
          "Dogs and cats don't agree!"]
# Unknown words, punctuation, capitals and digits: the tokenizer must give the same ids.
HARD = ["The ZEBRA sat; unknownword, 42 cats!", "dog...", "Don't RUN."]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tokenizer = Tokenizer.build(CORPUS, splitter="unicode_script", lowercase=True)
    keras.utils.set_random_seed(3)
    predictor = glomo_tf.GraphPredictor(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=16,
                                        num_layers=2, num_heads=2, conv_layers=1)
    ids = tokenizer.encode(HARD).to_tensor().numpy()
    graphs = predictor(ids)["graphs"].numpy()
    root = tmp_path_factory.mktemp("presets")
    full = presets.save_preset(predictor, tokenizer, str(root / "full"),
                               metadata={"corpus": ["toy"], "tokens_seen": 123},
                               reference_texts=CORPUS)
    half = predictor.save_to_preset(str(root / "half"), tokenizer=tokenizer,
                                    weights_dtype="float16", reference_texts=CORPUS)
    return dict(tokenizer=tokenizer, predictor=predictor, ids=ids, graphs=graphs, full=full,
                half=half, root=root)


def test_layout_and_metadata(toy):
    assert sorted(os.listdir(toy["full"])) == ["README.md", "assets", "config.json",
                                               "metadata.json", "model.weights.h5",
                                               "reference_graphs.npz"]
    assert sorted(os.listdir(os.path.join(toy["full"], "assets", "tokenizer"))) == [
        "tokenizer.json", "vocab.txt"]
    info = presets.preset_metadata(toy["full"])
    assert info["format"] == "glomo_tf.preset" and info["format_version"] == 1
    assert info["corpus"] == ["toy"] and info["tokens_seen"] == 123
    assert info["parameters"] == toy["predictor"].count_params()
    assert info["vocabulary_size"] == toy["tokenizer"].vocabulary_size
    assert info["tokenizer"]["lowercase"] is True and info["weights_dtype"] == "float32"
    assert info["keras_version"] == keras.__version__ and info["tensorflow_version"] == tf.__version__


def test_float32_round_trip_gives_the_same_graphs_and_ids(toy):
    predictor, tokenizer = glomo_tf.load_preset(toy["full"])
    assert not predictor.trainable and predictor.dtype_policy.name == "float32"
    np.testing.assert_array_equal(tokenizer.encode(HARD).to_tensor().numpy(), toy["ids"])
    np.testing.assert_allclose(predictor(toy["ids"])["graphs"].numpy(), toy["graphs"],
                               atol=1e-6)
    for saved, loaded in zip(toy["predictor"].get_weights(), predictor.get_weights()):
        np.testing.assert_array_equal(saved, loaded)
    assert presets.check_preset(toy["full"]) < 1e-6


def test_float16_weights_are_numpys_rounding_and_load_as_float32(toy):
    with h5py.File(os.path.join(toy["half"], "model.weights.h5")) as f:
        stored = []
        f.visititems(lambda n, o: stored.append(o.dtype) if isinstance(o, h5py.Dataset) else None)
    assert set(stored) == {np.dtype("float16")}
    predictor = glomo_tf.GraphPredictor.from_preset(toy["half"])
    for saved, loaded, variable in zip(toy["predictor"].get_weights(), predictor.get_weights(),
                                       predictor.weights):
        assert variable.dtype == "float32"
        np.testing.assert_array_equal(loaded, saved.astype(np.float16).astype(np.float32))
    difference = presets.check_preset(toy["half"])
    assert 0 < difference < 1e-2
    graphs = predictor(toy["ids"])["graphs"].numpy()
    np.testing.assert_allclose(graphs.sum(-1)[graphs.sum(-1) > 0], 1.0, atol=1e-5)


def test_dtype_trainable_and_pretrainer_argument(toy, tmp_path):
    predictor = glomo_tf.GraphPredictor.from_preset(toy["full"], trainable=True,
                                                    dtype="mixed_bfloat16")
    assert predictor.trainable and predictor.dtype_policy.name == "mixed_bfloat16"
    assert all(v.dtype == "float32" for v in predictor.weights)
    pretrainer = glomo_tf.GlomoPretrainer(toy["predictor"], num_positions=2)
    path = glomo_tf.save_preset(pretrainer, None, tmp_path / "from_pretrainer")
    assert glomo_tf.load_preset(path)[1] is None  # no tokenizer given: a preset of ids
    with pytest.raises(presets.PresetError, match="has no tokenizer"):
        Tokenizer.from_preset(path)


def test_glomo_transfer_from_preset_trains_in_model_fit(toy):
    tokenizer = Tokenizer.from_preset(toy["full"])
    ids = tokenizer.encode(CORPUS * 4).to_tensor().numpy()
    inputs = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(tokenizer.vocabulary_size, 8)(inputs)
    transfer = glomo_tf.GlomoTransfer.from_preset(toy["full"], num_mixtures=2)
    h = transfer([h, inputs])
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h)))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.copy() for w in transfer.graph_predictor.get_weights()]
    model.fit(ids, np.arange(len(ids)) % 2, epochs=1, verbose=0)
    for b, a in zip(before, transfer.graph_predictor.get_weights()):
        np.testing.assert_array_equal(b, a)  # the predictor stays frozen
    np.testing.assert_allclose(transfer.graph_predictor(toy["ids"])["graphs"].numpy(),
                               toy["graphs"], atol=1e-6)


def test_load_graph_predictor_reads_a_preset_directory(toy):
    predictor = glomo_tf.load_graph_predictor(toy["full"])
    np.testing.assert_allclose(predictor(toy["ids"])["graphs"].numpy(), toy["graphs"], atol=1e-6)


# ---------------------------------------------------------------------------- bad input
def test_bad_presets_get_one_line_errors(toy, tmp_path):
    def broken(name, edit):
        path = tmp_path / name
        shutil.copytree(toy["full"], path)
        edit(path)
        return str(path)

    def set_version(path):
        info = json.loads((path / "metadata.json").read_text())
        info["format_version"] = 99
        (path / "metadata.json").write_text(json.dumps(info))

    cases = [
        ("no_such_preset", "no preset 'no_such_preset'"),
        (broken("no_weights", lambda p: (p / "model.weights.h5").unlink()),
         "is missing model.weights.h5"),
        (broken("bad_json", lambda p: (p / "config.json").write_text("{not json")),
         "config.json"),
        (broken("newer", set_version), "format version 99, newer than this glomo_tf reads"),
        (broken("bad_weights", lambda p: (p / "model.weights.h5").write_bytes(b"garbage")),
         "could not read the weights"),
        (broken("no_vocab", lambda p: (p / "assets" / "tokenizer" / "vocab.txt").unlink()),
         "is missing assets/tokenizer/vocab.txt"),
    ]
    for preset, message in cases:
        with pytest.raises(presets.PresetError) as error:
            glomo_tf.load_preset(preset)
        text = str(error.value)
        assert message in text and "\n" not in text, text
    with pytest.raises(presets.PresetError, match="glomo_books_en"):  # names the built-ins
        glomo_tf.load_preset("no_such_preset")
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no preset"):
        glomo_tf.save_preset(toy["predictor"], None, tmp_path / "occupied")
    # Replacing a preset leaves nothing of the old one (its reference graphs, its tokenizer).
    replaced = glomo_tf.save_preset(toy["predictor"], None, tmp_path / "occupied_by_preset")
    glomo_tf.save_preset(toy["predictor"], toy["tokenizer"], replaced, reference_texts=CORPUS)
    glomo_tf.save_preset(toy["predictor"], None, replaced)
    assert sorted(os.listdir(replaced)) == ["README.md", "config.json", "metadata.json",
                                            "model.weights.h5"]
    assert not [n for n in os.listdir(tmp_path) if ".partial-" in n]
    small = Tokenizer.build(["two words"])
    with pytest.raises(ValueError, match="save the tokenizer the predictor was trained with"):
        glomo_tf.save_preset(toy["predictor"], small, tmp_path / "mismatch")
    with pytest.raises(TypeError, match="the tokenizer comes second"):
        glomo_tf.save_preset(toy["predictor"], tmp_path / "swapped", small)


# ---------------------------------------------------------------------------- built-ins
def test_builtin_presets_load_and_match_their_recorded_graphs():
    listed = glomo_tf.list_presets()
    assert set(listed) == {"glomo_books_en", "glomo_planted_demo"}
    for name, info in listed.items():
        predictor = glomo_tf.GraphPredictor.from_preset(name)
        difference = presets.check_preset(name, predictor)
        assert difference <= info["graph_tolerance"], (name, difference)
        assert info["weights_dtype"] == "float16"
        assert predictor.count_params() == info["parameters"]
    books = Tokenizer.from_preset("glomo_books_en")
    recorded = np.load(os.path.join(presets.preset_directory("glomo_books_en"),
                                    "reference_graphs.npz"))
    ids = books.encode(list(recorded["texts"])).to_tensor().numpy()
    np.testing.assert_array_equal(ids, recorded["token_ids"])  # the same tokenisation


def test_package_stays_under_15_mb():
    package = os.path.join(REPO, "glomo_tf")
    total = sum(os.path.getsize(os.path.join(root, name))
                for root, dirs, names in os.walk(package) if "__pycache__" not in root
                for name in names)
    assert total < 15e6, f"glomo_tf/ holds {total / 1e6:.1f} MB"


def test_builtin_presets_ship_with_the_package():
    setup = open(os.path.join(REPO, "setup.py")).read()
    assert "builtin_presets" in setup and "package_data" in setup


def make_presets():
    return load_example("make_presets")


def preset_timing_sentence():
    with open(os.path.join(REPO, "benchmarks", "outputs", "preset_load.json")) as f:
        r = json.load(f)
    load, first = r["rounds_s"]["load_preset_s"], r["rounds_s"]["first_graphs_s"]
    return (f"`load_preset(\"{r['preset']}\")` takes {r['median_s']['load_preset_s']:.2f} s in a "
            f"fresh interpreter (rounds {min(load):.2f}-{max(load):.2f} s), after "
            f"{r['median_s']['import_s']:.1f} s of `import glomo_tf`; the first graphs "
            f"{r['median_s']['first_graphs_s']:.2f} s more (rounds {min(first):.2f}-"
            f"{max(first):.2f} s; `benchmarks/outputs/preset_load.json`).")


def test_readme_presets_table_and_timing_come_from_the_recorded_outputs():
    """The presets table and the load timing, on the page they live on (the transfer guide)."""
    guide = open(os.path.join(REPO, "docs", "guides", "transfer.md"), encoding="utf-8").read()
    module = make_presets()
    for name in glomo_tf.list_presets():
        # readme_row links the model card from the repository root; the guide is two levels down.
        row = module.readme_row(name).replace("](glomo_tf/", "](../../glomo_tf/")
        assert row in guide, f"docs/guides/transfer.md lacks: {row}"
    text = " ".join(guide.split())
    assert preset_timing_sentence() in text, \
        f"docs/guides/transfer.md lacks: {preset_timing_sentence()}"


def test_model_cards_are_rendered_from_the_recorded_results():
    module = make_presets()
    for name in glomo_tf.list_presets():
        card = os.path.join(presets.BUILTIN_DIR, name, "README.md")
        with open(card) as f:
            assert f.read() == module.model_card(name), f"{card} is stale: run " \
                "python examples/make_presets.py --cards-only"


# ---------------------------------------------------------------------------- commands
def test_export_with_preset_embeds_exactly_its_tokenizer(toy, tmp_path, capsys):
    code = glomo_main(["export", "--preset", toy["full"], "--export-dir", str(tmp_path),
                       "--model-name", "toy", "--max-length", "16", "--skip-op-check"])
    assert code == 0, capsys.readouterr().err
    loaded = tf.saved_model.load(str(tmp_path / "toy" / "1"))
    out = loaded.signatures["serving_default"](text=tf.constant(HARD))
    expected = Tokenizer.from_preset(toy["full"]).encode(HARD).to_tensor().numpy()
    ids = out["token_ids"].numpy()
    np.testing.assert_array_equal(ids[:, :expected.shape[1]], expected)
    assert not ids[:, expected.shape[1]:].any()
    padded = np.zeros_like(ids)
    padded[:, :expected.shape[1]] = expected  # the preset tokenizer's ids, fed as ids
    from_ids = loaded.signatures["graphs_from_ids"](token_ids=tf.constant(padded))
    np.testing.assert_array_equal(out["graphs"].numpy(), from_ids["graphs"].numpy())
    assert glomo_main(["export", "--preset", toy["full"], "--model", "x.keras",
                       "--export-dir", str(tmp_path), "--model-name", "toy"]) == 2
    assert "not both" in capsys.readouterr().err


def test_extract_with_preset_and_unknown_preset_error(toy, capsys):
    assert glomo_main(["extract", "--preset", toy["full"], "--text", "the cat sat",
                       "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "cat" in out
    assert glomo_main(["extract", "--preset", "nope", "--text", "a"]) == 2
    err = capsys.readouterr().err
    assert "--preset: no preset 'nope'" in err and "glomo_books_en" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert glomo_main(["extract", "--preset", toy["full"], "--run", toy["full"],
                       "--text", "a"]) == 2
    assert "Give one of --preset" in capsys.readouterr().err


def readme_first_lines():
    """The README's first Python block (under ``<!-- four lines -->``): its code, and its lines
    besides reading the data (the line commented ``reading the data`` and the next)."""
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    start = readme.index("<!-- four lines -->")
    block = readme[readme.index("```python", start) + len("```python"):]
    block = block[:block.index("```")].strip()
    lines = [line for line in block.splitlines() if line.strip()]
    reading = next(i for i, line in enumerate(lines) if "reading the data" in line)
    return block, lines[:reading] + lines[reading + 2:]


def test_the_readme_first_lines_are_four_besides_the_data():
    _, lines = readme_first_lines()
    assert len(lines) <= 4, lines
    code = "\n".join(lines)
    assert "GlomoClassifier.from_preset(" in code and ".fit(" in code and ".evaluate(" in code


def test_the_readme_classifier_table_is_its_json_rendered():
    from _examples import load_example

    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read().splitlines()
    start = readme.index("<!-- readme classifier table -->") + 1
    end = next(i for i in range(start, len(readme)) if not readme[i].strip())
    with open(os.path.join(REPO, "examples", "outputs", "readme_classifier.json"),
              encoding="utf-8") as handle:
        record = json.load(handle)
    assert "\n".join(readme[start:end]) == load_example("readme_classifier").render_table(record)
    assert {run["transfer_at"] for run in record["runs"]} == {"rnn", None}


@pytest.mark.slow
def test_newcomer_first_lines_from_the_readme_fit_and_evaluate():
    """The README's first lines, run as written in a fresh interpreter (SST-2, one epoch)."""
    block, _ = readme_first_lines()
    code = block + "\nprint('accuracy', classifier.evaluate(test, y_test, verbose=0)[1])\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=900, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    accuracy = float(result.stdout.strip().splitlines()[-1].split()[-1])
    assert accuracy > 0.6, "SST-2 after one epoch (chance: 0.5)"


def test_preset_load_benchmark_prints_its_phases(toy):
    out = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "preset_load.py"),
                          "--preset", toy["full"], "--rounds", "1"], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    result = json.loads(out)
    assert set(result["median_s"]) == {"import_s", "load_preset_s", "first_graphs_s"}
    assert all(0 < v < 120 for v in result["median_s"].values())
    assert result["recorded"]["command"].startswith("python benchmarks/preset_load.py")
