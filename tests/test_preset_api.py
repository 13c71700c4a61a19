"""The preset API next to keras-hub's: each class's ``presets`` listing, ``save_to_preset`` on
every class with ``from_preset`` (round trips that give the same outputs), the model card written
from the metadata, ``hf://`` / ``kaggle://`` handles (their downloaders replaced by local stand-ins:
no network) and the one line a handle gives without the ``hub`` extra; ``from_preset`` trainable,
the transfer layer and the task models frozen."""

import ast
import json
import os
import shutil
import sys
import types

import h5py
import keras
import numpy as np
import pytest

import glomo_tf
from glomo_tf import presets
from glomo_tf.cli import main as glomo_main
from glomo_tf.data import Tokenizer
from glomo_tf.models.task import GlomoClassifier, GlomoPairClassifier
from glomo_tf.preprocessing import GlomoTokenizer
from _paths import REPO

CORPUS = ["the cat sat on the mat", "a dog ran far away", "the dog sat still"]
TEXTS = ["the cat ran", "a dog sat on the mat", "unknown words here"]
METADATA = {"description": "A toy predictor of three sentences", "corpus": ["three lines"],
            "tokens_seen": 1234, "training_steps": 56, "validation_perplexity": 7.891,
            "validation_text": "the same three lines", "data_licence": "CC0 1.0",
            "sources": ["tests/test_preset_api.py"], "licence": "Apache-2.0"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tokenizer = Tokenizer.build(CORPUS)
    keras.utils.set_random_seed(7)
    predictor = glomo_tf.GraphPredictor(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=8,
                                        num_layers=2, num_heads=2, conv_layers=1)
    ids = tokenizer.encode(TEXTS).to_tensor().numpy()
    graphs = predictor(ids)["graphs"].numpy()
    root = tmp_path_factory.mktemp("api")
    path = predictor.save_to_preset(root / "toy", tokenizer=tokenizer, metadata=METADATA,
                                    reference_texts=CORPUS)
    return dict(tokenizer=tokenizer, predictor=predictor, ids=ids, graphs=graphs, path=path,
                root=root)


# ------------------------------------------------------------------------------ listings
def builtin_directories():
    """The built-in presets as the package directory holds them (not through the listing)."""
    names = [n for n in os.listdir(presets.BUILTIN_DIR)
             if os.path.isdir(os.path.join(presets.BUILTIN_DIR, n))]
    with_text = [n for n in names if os.path.isfile(os.path.join(
        presets.BUILTIN_DIR, n, "assets", "tokenizer", "vocab.txt"))]
    return sorted(names), sorted(with_text)


def test_each_class_lists_the_builtin_presets_it_loads():
    names, with_text = builtin_directories()
    assert names and with_text and set(with_text) < set(names)  # one preset reads ids only
    for cls in (glomo_tf.GraphPredictor, glomo_tf.GlomoTransfer):
        assert sorted(cls.presets) == names, cls
    for cls in (Tokenizer, GlomoTokenizer, GlomoClassifier, GlomoPairClassifier):
        assert sorted(cls.presets) == with_text, cls
    for name in names:
        with open(os.path.join(presets.BUILTIN_DIR, name, "metadata.json")) as f:
            assert glomo_tf.GraphPredictor.presets[name] == json.load(f)
    for name in with_text:  # every listed name loads into the class that lists it
        assert GlomoTokenizer.from_preset(name).vocabulary_size() == \
            GlomoClassifier.presets[name]["vocabulary_size"]
    assert glomo_tf.GraphPredictor(vocabulary_size=5, hidden_dim=4).presets.keys() == \
        glomo_tf.GraphPredictor.presets.keys()  # on an instance too


# ------------------------------------------------------------------------------ trainable
def test_from_preset_is_trainable_and_the_transfer_layers_freeze(toy):
    assert glomo_tf.GraphPredictor.from_preset(toy["path"]).trainable
    assert not glomo_tf.GraphPredictor.from_preset(toy["path"], trainable=False).trainable
    assert not glomo_tf.GlomoTransfer.from_preset(toy["path"]).graph_predictor.trainable
    assert glomo_tf.GlomoTransfer.from_preset(toy["path"],
                                              fine_tune=True).graph_predictor.trainable
    classifier = GlomoClassifier.from_preset(toy["path"], num_classes=2, embedding_dim=4,
                                             rnn_units=4)
    assert not classifier.graph_predictor.trainable
    frozen = {id(v) for v in classifier.graph_predictor.weights}
    assert frozen and not frozen & {id(v) for v in classifier.trainable_weights}
    assert not glomo_tf.load_preset(toy["path"])[0].trainable  # load_preset keeps its default
    assert not glomo_tf.load_graph_predictor(toy["path"]).trainable


# ------------------------------------------------------------------------------ round trips
def test_the_predictor_round_trip_gives_the_same_graphs(toy):
    loaded = glomo_tf.GraphPredictor.from_preset(toy["path"])
    np.testing.assert_allclose(loaded(toy["ids"])["graphs"].numpy(), toy["graphs"], atol=1e-6)


def test_glomo_transfer_saves_its_fine_tuned_predictor(toy, tmp_path):
    transfer = glomo_tf.GlomoTransfer.from_preset(toy["path"], fine_tune=True)
    embedding = transfer.graph_predictor.embeddings
    embedding.assign(embedding.numpy() + 0.5)  # as fine-tuning moves it
    expected = transfer.graph_predictor(toy["ids"])["graphs"].numpy()
    assert np.abs(expected - toy["graphs"]).max() > 1e-3
    path = transfer.save_to_preset(tmp_path / "tuned", tokenizer=toy["tokenizer"])
    loaded = glomo_tf.GraphPredictor.from_preset(path)
    np.testing.assert_allclose(loaded(toy["ids"])["graphs"].numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(GlomoTokenizer.from_preset(path)(TEXTS).numpy(),
                                  toy["ids"])
    with pytest.raises(ValueError, match="has no graph predictor to save"):
        glomo_tf.GlomoTransfer(None).save_to_preset(tmp_path / "none")


def test_the_tokenizers_round_trip_give_the_same_ids(toy, tmp_path):
    path = toy["predictor"].save_to_preset(tmp_path / "ids_only")
    layer = GlomoTokenizer.from_preset(toy["path"], sequence_length=4)
    layer.save_to_preset(path)
    np.testing.assert_array_equal(GlomoTokenizer.from_preset(path, sequence_length=4)(TEXTS),
                                  layer(TEXTS))
    np.testing.assert_array_equal(Tokenizer.from_preset(path).encode(TEXTS).to_tensor(),
                                  toy["ids"])


@pytest.mark.parametrize("transfer_at", ["rnn", None])
def test_the_classifier_round_trip_predicts_the_same(toy, tmp_path, transfer_at):
    keras.utils.set_random_seed(1)
    classifier = GlomoClassifier.from_preset(toy["path"], num_classes=3,
                                             transfer_at=transfer_at, sequence_length=6,
                                             embedding_dim=4, rnn_units=4)
    classifier.fit(CORPUS, [0, 1, 2], epochs=2, verbose=0)
    expected = classifier.predict(TEXTS, verbose=0)
    path = classifier.save_to_preset(tmp_path / "task", metadata={"corpus": ["three lines"]})
    assert {"task.json", "task.weights.h5", "README.md"} <= set(os.listdir(path))
    loaded = GlomoClassifier.from_preset(path)
    assert type(loaded) is GlomoClassifier and loaded.tokenizer.sequence_length == 6
    assert loaded.transfer_at == transfer_at and loaded.num_classes == 3
    np.testing.assert_allclose(loaded.predict(TEXTS, verbose=0), expected, atol=1e-6)
    # The preset's parts load on their own, and a new head is built on them with num_classes.
    assert GlomoClassifier.from_preset(path, num_classes=2, transfer_at=transfer_at,
                                       embedding_dim=4, rnn_units=4).num_classes == 2
    if transfer_at:
        for saved, live in zip(glomo_tf.GraphPredictor.from_preset(path).get_weights(),
                               classifier.graph_predictor.get_weights(), strict=True):
            np.testing.assert_array_equal(saved, live)
    # The predictor's weights are stored once: in its own file, not again in the task's.
    predictor_paths = {v.path for v in classifier.graph_predictor.weights} if transfer_at else set()
    with h5py.File(os.path.join(path, "task.weights.h5"), "r") as f:
        stored = [f[name].attrs["path"] for name in sorted(f)]
    assert stored == [v.path for v in classifier.weights if v.path not in predictor_paths]
    assert bool(predictor_paths) == bool(transfer_at)
    with h5py.File(os.path.join(path, "task.weights.h5"), "a") as f:
        del f[sorted(f)[0]]
    with pytest.raises(presets.PresetError, match="could not read the task weights .* holds "
                                                  f"{len(stored) - 1} variables where"):
        GlomoClassifier.from_preset(path)
    card = open(os.path.join(path, "README.md")).read()
    assert f'GlomoClassifier.from_preset("path/to/task")' in card and "3 classes" in card
    assert ("GraphPredictor.from_preset" in card) == bool(transfer_at)


def test_the_pair_classifier_round_trip_and_the_class_check(toy, tmp_path):
    keras.utils.set_random_seed(2)
    pairs = GlomoPairClassifier.from_preset(toy["path"], num_classes=2, embedding_dim=4,
                                            rnn_units=4)
    x = (CORPUS, TEXTS)
    expected = pairs.predict(x, verbose=0)
    path = pairs.save_to_preset(tmp_path / "pairs")
    np.testing.assert_allclose(GlomoPairClassifier.from_preset(path).predict(x, verbose=0),
                               expected, atol=1e-6)
    with pytest.raises(presets.PresetError, match="holds a GlomoPairClassifier, not a "
                                                  "GlomoClassifier"):
        GlomoClassifier.from_preset(path)
    with pytest.raises(ValueError, match="needs num_classes: the preset holds no saved"):
        GlomoClassifier.from_preset(toy["path"])
    with pytest.raises(ValueError, match="keeps its own settings"):
        GlomoPairClassifier.from_preset(path, rnn_units=8)


# ------------------------------------------------------------------------------ model card
def test_the_model_card_is_written_from_the_metadata(toy, tmp_path):
    card = open(os.path.join(toy["path"], "README.md"), encoding="utf-8").read()
    assert card == presets.model_card(toy["path"])
    info = presets.preset_metadata(toy["path"])
    for expected in ["# `toy`", "A toy predictor of three sentences.",
                     f"GraphPredictor, {info['parameters']:,} parameters",
                     f"{toy['tokenizer'].vocabulary_size} ids (whitespace splitting)",
                     "| corpus | three lines |", "| tokens seen | 1,234 |",
                     "| training steps | 56 |",
                     "| validation perplexity | 7.9 (the same three lines) |",
                     "| licence | Apache-2.0 |", "| data licence | CC0 1.0 |",
                     "| sources | tests/test_preset_api.py |",
                     'glomo_tf.GraphPredictor.from_preset("path/to/toy")',
                     'glomo_tf.GlomoTokenizer.from_preset("path/to/toy")',
                     'glomo_tf.GlomoClassifier.from_preset("path/to/toy", num_classes=2)',
                     "check_preset(", info["date"], keras.__version__]:
        assert expected in card, expected
    # Nothing recorded of the training or the licence: no such sections, and no tokenizer line.
    bare = toy["predictor"].save_to_preset(tmp_path / "bare")
    bare_card = open(os.path.join(bare, "README.md"), encoding="utf-8").read()
    assert "## How it was trained" not in bare_card and "## Licence" not in bare_card
    assert "GlomoTokenizer" not in bare_card and "(token ids, no tokenizer)" in bare_card
    assert "## How to load it" in bare_card and "check_preset" not in bare_card


def test_the_builtin_cards_begin_with_the_card_of_their_metadata():
    for name in glomo_tf.GraphPredictor.presets:
        with open(os.path.join(presets.BUILTIN_DIR, name, "README.md"), encoding="utf-8") as f:
            card = f.read()
        assert card.startswith(presets.model_card(name).rstrip("\n") + "\n")
        assert f'GraphPredictor.from_preset("{name}")' in card
        assert "is a built-in preset: its name is enough" in card


# ------------------------------------------------------------------------------ handles
@pytest.fixture
def hubs(toy, monkeypatch):
    """``huggingface_hub`` and ``kagglehub`` stand-ins: each download is recorded and answered
    with the toy preset's local directory."""
    calls = []

    def snapshot_download(repo_id, revision=None):
        calls.append(("hf", repo_id, revision))
        return toy["path"]

    def model_download(handle):
        calls.append(("kaggle", handle))
        return toy["path"]

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(
        snapshot_download=snapshot_download))
    monkeypatch.setitem(sys.modules, "kagglehub", types.SimpleNamespace(
        model_download=model_download))
    return calls


def test_hub_handles_resolve_to_the_downloaded_directory(toy, hubs):
    predictor = glomo_tf.GraphPredictor.from_preset("hf://someone/toy@v2")
    np.testing.assert_allclose(predictor(toy["ids"])["graphs"].numpy(), toy["graphs"],
                               atol=1e-6)
    layer = GlomoTokenizer.from_preset("kaggle://someone/toy/keras/small/3")
    np.testing.assert_array_equal(layer(TEXTS).numpy(), toy["ids"])
    assert hubs == [("hf", "someone/toy", "v2"), ("kaggle", "someone/toy/keras/small/3")]
    hubs.clear()
    GlomoClassifier.from_preset("hf://someone/toy", num_classes=2, embedding_dim=4, rnn_units=4)
    assert hubs == [("hf", "someone/toy", None)]  # one download for the tokenizer and predictor
    assert presets.preset_directory("kaggle://someone/toy/keras/small") == toy["path"]


def test_bad_handles_say_how_to_write_one(hubs, tmp_path, monkeypatch):
    for handle, message in [("hf://someone", "write it hf://OWNER/NAME"),
                            ("kaggle://someone/toy", "kaggle://OWNER/MODEL/FRAMEWORK/VARIATION"),
                            ("s3://bucket/preset", "not s3://")]:
        with pytest.raises(presets.PresetError, match=message):
            glomo_tf.GraphPredictor.from_preset(handle)
    assert not hubs  # refused before any download
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(
        snapshot_download=lambda repo_id, revision=None: str(tmp_path)))
    with pytest.raises(presets.PresetError, match="holds no glomo_tf preset"):
        glomo_tf.GraphPredictor.from_preset("hf://someone/not_a_preset")


def test_upload_preset_sends_the_checked_directory_to_its_hub(toy, tmp_path, monkeypatch):
    """keras-hub's ``upload_preset``: the preset checked whole and the handle's form before the
    hub library (a stand-in here) is called with the directory."""
    sent = []
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(
        create_repo=lambda repo_id, exist_ok: sent.append(("create", repo_id, exist_ok)),
        upload_folder=lambda repo_id, folder_path: sent.append(("hf", repo_id, folder_path))))
    monkeypatch.setitem(sys.modules, "kagglehub", types.SimpleNamespace(
        model_upload=lambda handle, directory: sent.append(("kaggle", handle, directory))))
    assert glomo_tf.upload_preset("hf://someone/toy", toy["path"]) == "hf://someone/toy"
    glomo_tf.upload_preset("kaggle://someone/toy/keras/small", toy["path"])
    assert sent == [("create", "someone/toy", True), ("hf", "someone/toy", toy["path"]),
                    ("kaggle", "someone/toy/keras/small", toy["path"])]
    sent.clear()
    partial = tmp_path / "partial"
    shutil.copytree(toy["path"], partial)
    os.remove(partial / "model.weights.h5")
    for uri, preset, message in [
            ("hf://someone/toy@v2", toy["path"], "not a hf handle to upload to: write it "
                                                 "hf://OWNER/NAME"),
            ("kaggle://someone/toy/keras/small/3", toy["path"], "FRAMEWORK/VARIATION\\.$"),
            ("s3://bucket/toy", toy["path"], "uploads presets to hf:// and kaggle://"),
            ("hf://someone/toy", tmp_path / "missing", "takes a local preset directory"),
            ("hf://someone/toy", "glomo_books_en", "takes a local preset directory"),
            ("hf://someone/toy", partial, "is missing model.weights.h5")]:
        with pytest.raises(presets.PresetError, match=message):
            glomo_tf.upload_preset(uri, preset)
    assert not sent  # refused before anything was sent
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ImportError, match=r"uploading to 'hf://someone/toy' needs huggingface_hub: "
                                          r"pip install 'glomo_tf\[hub\]'"):
        glomo_tf.upload_preset("hf://someone/toy", toy["path"])


@pytest.mark.parametrize("handle, library", [("hf://someone/toy", "huggingface_hub"),
                                             ("kaggle://someone/toy/keras/small", "kagglehub")])
def test_a_handle_without_its_library_is_one_line_naming_the_extra(handle, library,
                                                                   monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, library, None)  # `import` of it raises ImportError

    def no_work(*args, **kwargs):
        raise AssertionError("work done before the missing library was reported")

    monkeypatch.setattr(presets, "read_json", no_work)  # every file of a preset read
    for load in (glomo_tf.GraphPredictor.from_preset, glomo_tf.GlomoTransfer.from_preset,
                 Tokenizer.from_preset, GlomoTokenizer.from_preset,
                 lambda h: GlomoClassifier.from_preset(h, num_classes=2),
                 GlomoClassifier.from_preset):
        with pytest.raises(ImportError) as error:
            load(handle)
        text = str(error.value)
        assert text == (f"loading the preset {handle!r} needs {library}: "
                        "pip install 'glomo_tf[hub]'."), text
        assert isinstance(error.value, presets.PresetError)
    assert glomo_main(["extract", "--preset", handle, "--text", "a"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'glomo_tf[hub]'" in err and err.count("\n") == 1, err


def test_the_hub_extra_declares_both_libraries():
    tree = ast.parse(open(os.path.join(REPO, "setup.py"), encoding="utf-8").read())
    extras = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                  and getattr(node.targets[0], "id", None) == "EXTRAS")
    extras = ast.literal_eval(extras)
    assert presets.HUB_EXTRA in extras
    declared = {req.split(">")[0].split("=")[0].replace("-", "_").lower()
                for req in extras[presets.HUB_EXTRA]}
    assert declared == {library for library, _ in presets.HUBS.values()}


def test_the_card_leaves_out_what_the_metadata_records_as_none():
    """``glomo pretrain`` without validation records its perplexity as None: the card has no
    perplexity row and still says what was recorded."""
    from glomo_tf import preset_cards

    info = {"class_name": "GraphPredictor", "vocabulary_size": 11, "validation_perplexity": None,
            "tokens_seen": 512, "corpus": ["train.txt"], "parameters": None}
    card = preset_cards.render_card(info, "run", builtin=False)
    assert "perplexity" not in card and "parameters" not in card
    assert "| tokens seen | 512 |" in card and "| corpus | train.txt |" in card
