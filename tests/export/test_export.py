"""SavedModel export for TensorFlow Serving: tokenisation, graphs, compact views, loaders, CLI.

Two tiny exports are shared by the module: a word-level one (whitespace splitter, lowercase) and a
subword one (unicode-script splitter, WordPiece). Outputs are compared with the training-time
Tokenizer, with plain Python tokenisation, with the Keras layer run eagerly and with numpy.
"""

import base64
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GlomoPretrainer, GraphPredictor, save_graph_predictor
from glomo_tf.cli import main as glomo_main
from glomo_tf.data import Tokenizer
from glomo_tf.export import (SIGNATURES, TF_TEXT_SERVING_OPS, GlomoServingModule,
                             export_saved_model, next_version, op_inventory,
                             resolve_graph_predictor, unsupported_ops)
from _paths import REPO

README = os.path.join(REPO, "serving", "README.md")
MAX_LENGTH = 12
TOP_K = 3
CORPUS = [
    "the cat sat on the mat .",
    "the dog ate the hat , and the cat ran !",
    "a dog and a cat , naïve café straße 東京",
    "\"quoted\" (parenthesised) don't stop ... ok ?",
    "a barked dog sat",
]
LONG = " ".join(f"w{i % 7}" for i in range(5000))
TRICKY = [
    "The cat sat on the mat.",
    "\"Quoted,\" (parenthesised) [bracketed]; semi-colon: dash — ellipsis… don't stop!?",
    "Ünïcode wörds: naïve CAFÉ Straße, 東京タワー и кириллица עברית 🙂👍🏽 "
    "e\u0301",
    "tabs\tand\u00a0no-break\u3000ideographic\u2028line\u2029paragraph  spaces\r\nnewline",
    "",
    "   \t\n  ",
    "cat",
    LONG,
    "the cat " * (MAX_LENGTH // 2),  # exactly max_length units
    "the cat " * (MAX_LENGTH // 2) + "dog",  # one more
]
INVALID_UTF8 = b"bad \xff\xfe bytes \xc3 end"


def _ragged_lists(tensor):
    return [[x.decode() if isinstance(x, bytes) else x for x in row] for row in tensor.to_list()]


def _rows(values, lengths):
    return [[x.decode() if isinstance(x, bytes) else int(x) for x in row[:n]]
            for row, n in zip(values.tolist(), lengths.tolist())]


def _predictor(vocabulary_size, num_layers, num_heads):
    keras.utils.set_random_seed(7)
    predictor = GraphPredictor(vocabulary_size=vocabulary_size, hidden_dim=8,
                               num_layers=num_layers, num_heads=num_heads, conv_layers=1)
    predictor(np.ones((1, 3), "int32"))
    # Larger embeddings give varied, sparse graphs (a fresh tiny predictor's are nearly uniform).
    predictor.embeddings.assign(predictor.embeddings.numpy() * 10)
    # Non-trivial batch-norm statistics, so inference mode differs from training mode.
    for mean, var in zip(predictor.encoder.moving_means, predictor.encoder.moving_variances):
        mean.assign(np.full(mean.shape, 0.05, "float32"))
        var.assign(np.full(var.shape, 1.5, "float32"))
    return predictor


@pytest.fixture(scope="module")
def word(tmp_path_factory):
    """Word-level export: whitespace splitter, lowercase."""
    tokenizer = Tokenizer.build(CORPUS, splitter="whitespace", lowercase=True)
    predictor = _predictor(tokenizer.vocabulary_size, num_layers=2, num_heads=2)
    export_dir = tmp_path_factory.mktemp("repo")
    path = export_saved_model(predictor, tokenizer, export_dir, "glomo", max_length=MAX_LENGTH,
                              top_k=TOP_K)
    return dict(tokenizer=tokenizer, predictor=predictor, export_dir=str(export_dir), path=path,
                loaded=tf.saved_model.load(path))


@pytest.fixture(scope="module")
def subword(tmp_path_factory):
    """Subword export: unicode-script splitter, WordPiece, no lowercasing."""
    tokenizer = Tokenizer.build(CORPUS, splitter="unicode_script", subword=True, max_size=80)
    predictor = _predictor(tokenizer.vocabulary_size, num_layers=1, num_heads=1)
    path = export_saved_model(predictor, tokenizer, tmp_path_factory.mktemp("sub"), "sub",
                              max_length=MAX_LENGTH, top_k=TOP_K)
    return dict(tokenizer=tokenizer, predictor=predictor, path=path,
                loaded=tf.saved_model.load(path))


def _call(export, signature, **inputs):
    outputs = export["loaded"].signatures[signature](**inputs)
    return {name: value.numpy() for name, value in outputs.items()}


# ---------------------------------------------------------------------------------- layout
def test_export_layout_assets_and_metadata(word):
    path = word["path"]
    assert path == os.path.join(word["export_dir"], "glomo", "1")
    assert sorted(os.listdir(os.path.dirname(path))) == ["1"]  # no staging directory left
    assert {"saved_model.pb", "variables", "assets"} <= set(os.listdir(path))
    assert os.stat(path).st_mode & 0o555 == 0o555  # readable by a server running as another user
    assets = os.path.join(path, "assets")
    assert sorted(os.listdir(assets)) == ["glomo_export.json", "tokenizer.json", "vocab.txt"]
    with open(os.path.join(assets, "vocab.txt"), encoding="utf-8") as f:
        assert f.read().split("\n")[:-1] == word["tokenizer"].vocabulary.tokens
    assert Tokenizer.load(assets).get_config() == word["tokenizer"].get_config()
    with open(os.path.join(assets, "glomo_export.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["max_length"] == MAX_LENGTH and metadata["top_k"] == TOP_K
    assert metadata["model_name"] == "glomo" and metadata["model_version"] == 1
    assert metadata["vocabulary_size"] == word["tokenizer"].vocabulary_size
    assert metadata["graph_predictor"]["num_layers"] == 2
    assert set(metadata["signatures"]) == set(SIGNATURES)
    assert set(word["loaded"].signatures) == set(SIGNATURES)


def test_signature_inputs_outputs_dtypes_and_shapes(word):
    L, K = 2, 2
    expected = {
        "tokens": (tf.string, [None, None]), "token_ids": (tf.int32, [None, None]),
        "lengths": (tf.int32, [None]), "truncated": (tf.bool, [None]),
        "graphs": (tf.float32, [None, 2, L, K, None, None]),
        "mean_graphs": (tf.float32, [None, 2, L, None, None]),
        "edge_sources": (tf.int32, [None, 2, L, K, None, TOP_K]),
        "edge_weights": (tf.float32, [None, 2, L, K, None, TOP_K]),
        "mean_edge_sources": (tf.int32, [None, 2, L, None, TOP_K]),
        "mean_edge_weights": (tf.float32, [None, 2, L, None, TOP_K]),
    }
    for name, (input_name, output_names) in SIGNATURES.items():
        function = word["loaded"].signatures[name]
        (spec,) = function.structured_input_signature[1].values()
        assert spec.name == input_name
        assert spec.dtype == (tf.string if input_name == "text" else tf.int32)
        assert spec.shape.as_list() == ([None] if input_name == "text" else [None, None])
        outputs = function.structured_outputs
        assert sorted(outputs) == sorted(output_names), name
        for output in output_names:
            dtype, shape = expected[output]
            assert outputs[output].dtype == dtype and outputs[output].shape.as_list() == shape


# ---------------------------------------------------------------------------------- tokenisation
@pytest.mark.parametrize("signature", ["serving_default", "top_k_edges", "mean_graphs"])
def test_word_tokenisation_matches_training_and_python(word, signature):
    tokenizer = word["tokenizer"]
    texts = TRICKY + [INVALID_UTF8]
    out = _call(word, signature, text=tf.constant(texts))
    lengths = out["lengths"]
    # The training-time tokenizer (glomo_tf.data.Tokenizer, used by the pretraining pipeline).
    units = _ragged_lists(tokenizer.tokenize(texts))
    ids = tokenizer.encode_ragged(texts).to_list()
    assert _rows(out["tokens"], lengths) == [row[:MAX_LENGTH] for row in units]
    assert _rows(out["token_ids"], lengths) == [row[:MAX_LENGTH] for row in ids]
    assert out["truncated"].tolist() == [len(row) > MAX_LENGTH for row in units]
    # Independent: Python's Unicode-aware split and lower, and a dict lookup.
    index = {token: i for i, token in enumerate(tokenizer.vocabulary.tokens)}
    for i, text in enumerate(TRICKY):
        words = text.lower().split()
        assert _rows(out["tokens"], lengths)[i] == words[:MAX_LENGTH], repr(text)
        assert _rows(out["token_ids"], lengths)[i] == [index.get(w, 1) for w in words][:MAX_LENGTH]
        assert out["truncated"][i] == (len(words) > MAX_LENGTH)
    assert lengths[TRICKY.index("")] == 0 and lengths[TRICKY.index(LONG)] == MAX_LENGTH
    assert out["truncated"].tolist()[-3:-1] == [False, True]  # exactly max_length, one more
    # Padding: to the longest text of the batch, "" and 0.
    T = out["token_ids"].shape[1]
    assert T == MAX_LENGTH and out["tokens"].shape == (len(texts), T)
    for row, n in enumerate(lengths):
        assert (out["token_ids"][row, n:] == 0).all() and (out["tokens"][row, n:] == b"").all()
    assert (out["token_ids"][np.arange(T)[None, :] < lengths[:, None]] > 0).all()


def test_subword_tokenisation_matches_training(subword):
    tokenizer = subword["tokenizer"]
    texts = TRICKY + [INVALID_UTF8, "Straße naïve cafés 東京東京 unseenword"]
    out = _call(subword, "top_k_edges", text=tf.constant(texts))
    units = _ragged_lists(tokenizer.tokenize(texts))
    ids = tokenizer.encode_ragged(texts).to_list()
    assert any(unit.startswith("##") for row in units for unit in row)  # WordPiece in use
    assert _rows(out["tokens"], out["lengths"]) == [row[:MAX_LENGTH] for row in units]
    assert _rows(out["token_ids"], out["lengths"]) == [row[:MAX_LENGTH] for row in ids]
    assert out["truncated"].tolist() == [len(row) > MAX_LENGTH for row in units]


def test_batches_of_only_empty_texts(word):
    out = _call(word, "serving_default", text=tf.constant(["", "  \t "]))
    assert out["token_ids"].shape == (2, 0) and out["graphs"].shape == (2, 2, 2, 2, 0, 0)
    assert out["lengths"].tolist() == [0, 0]
    out = _call(word, "top_k_edges", text=tf.constant([""]))
    assert out["edge_sources"].shape == (1, 2, 2, 2, 0, TOP_K)


# ---------------------------------------------------------------------------------- graphs
def test_graphs_match_the_keras_layer_in_inference_mode(word):
    predictor = word["predictor"]
    # Training mode updates the moving statistics: run it on a copy.
    copy = GraphPredictor.from_config(predictor.get_config())
    copy(np.ones((1, 3), "int32"))
    copy.set_weights(predictor.get_weights())
    texts = TRICKY[:4] + ["", "the cat"]
    out = _call(word, "serving_default", text=tf.constant(texts))
    graphs, lengths = out["graphs"], out["lengths"]
    assert graphs.dtype == np.float32 and (graphs > 0).any()
    compared_modes = 0
    for row, n in enumerate(lengths):
        block = graphs[row, ..., :n, :n]
        outside = graphs[row].copy()
        outside[..., :n, :n] = 0
        assert not outside.any()  # padded rows and columns are zero
        if n == 0:
            continue
        # Each text alone, unpadded, eagerly: the batch does not change its graphs.
        ids = out["token_ids"][row:row + 1, :n]
        expected = predictor(ids, training=False)["graphs"][0].numpy()
        np.testing.assert_allclose(block, expected, rtol=1e-5, atol=1e-6)
        # Not the training-mode (batch statistics) graphs. With fewer than 3 units every row has
        # at most one admissible source, so both modes give the same 0/1 graphs.
        if n >= 3:
            training = copy(ids, training=True)["graphs"][0].numpy()
            assert not np.allclose(block, training, atol=1e-4)
            compared_modes += 1
        sums = block.sum(-1)
        assert np.all(np.isclose(sums, 1, atol=1e-5) | np.isclose(sums, 0))
        assert not np.triu(block[0]).any() and not np.tril(block[1]).any()  # directions
    assert compared_modes >= 3


def _numpy_top_k(graphs, k):
    """Heaviest-first sources per row, -1/0 where the weight is 0 (stable for ties)."""
    T = graphs.shape[-1]
    if T < k:
        graphs = np.concatenate([graphs, np.zeros(graphs.shape[:-1] + (k - T,), graphs.dtype)], -1)
    order = np.argsort(-graphs, axis=-1, kind="stable")[..., :k]
    weights = np.take_along_axis(graphs, order, axis=-1)
    return np.where(weights > 0, order, -1), weights


def test_top_k_and_mean_signatures_match_numpy(word):
    texts = ["the cat sat on the mat .", "a dog", "", TRICKY[1]]
    full = _call(word, "serving_default", text=tf.constant(texts))
    compact = _call(word, "top_k_edges", text=tf.constant(texts))
    mean = _call(word, "mean_graphs", text=tf.constant(texts))
    for name in ("tokens", "token_ids", "lengths", "truncated"):
        np.testing.assert_array_equal(compact[name], full[name])
        np.testing.assert_array_equal(mean[name], full[name])
    graphs = full["graphs"]
    sources, weights = _numpy_top_k(graphs, TOP_K)
    np.testing.assert_allclose(compact["edge_weights"], weights, rtol=1e-6)
    np.testing.assert_array_equal(compact["edge_sources"], sources)
    head_mean = graphs.mean(axis=3)
    np.testing.assert_allclose(mean["mean_graphs"], head_mean, rtol=1e-6, atol=1e-7)
    sources, weights = _numpy_top_k(head_mean, TOP_K)
    np.testing.assert_allclose(compact["mean_edge_weights"], weights, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(compact["mean_edge_sources"], sources)
    # "a dog": 2 units, fewer than top_k sources -> -1 and 0; each forward edge points back.
    assert (compact["edge_sources"][1, ..., 2:, :] == -1).all()
    assert (compact["edge_sources"][1, 0, :, :, 0, :] == -1).all()  # first unit: no forward source
    assert (compact["edge_weights"] >= 0).all() and (compact["edge_weights"] > 0).any()


def test_id_signatures_match_text_signatures(word):
    texts = ["the cat sat on the mat .", "a dog and a cat", LONG]
    by_text = _call(word, "serving_default", text=tf.constant(texts))
    # Padded to 20 > max_length columns, like a client padding every request the same way.
    ids = np.zeros((3, 20), "int32")
    for row, text in enumerate(texts):
        encoded = word["tokenizer"].encode_ragged([text]).to_list()[0][:20]
        ids[row, :len(encoded)] = encoded
    by_ids = _call(word, "graphs_from_ids", token_ids=tf.constant(ids))
    np.testing.assert_array_equal(by_ids["token_ids"], by_text["token_ids"])
    np.testing.assert_array_equal(by_ids["lengths"], by_text["lengths"])
    assert by_ids["truncated"].tolist() == [False, False, True]
    np.testing.assert_allclose(by_ids["graphs"], by_text["graphs"], rtol=1e-6, atol=1e-7)
    compact_ids = _call(word, "top_k_edges_from_ids", token_ids=tf.constant(ids))
    compact_text = _call(word, "top_k_edges", text=tf.constant(texts))
    for name in ("edge_sources", "mean_edge_sources"):
        np.testing.assert_array_equal(compact_ids[name], compact_text[name])
    # Trailing all-padding columns are dropped.
    short = _call(word, "graphs_from_ids", token_ids=tf.constant([[3, 4, 0, 0, 0, 0]], tf.int32))
    assert short["token_ids"].tolist() == [[3, 4]] and short["graphs"].shape[-1] == 2


@pytest.mark.parametrize("bad_id, message", [
    (10_000, "token id 10000 is out of range: token_ids must be < vocabulary_size="),
    (-3, "token id -3 is negative: token_ids must be >= 0")])
def test_id_signature_rejects_ids_outside_the_vocabulary(word, bad_id, message):
    """The error names the id, and the vocabulary's size; the server passes the assertion's own
    words to the client (glomo_tf.serving.models.client_message)."""
    from glomo_tf.serving.models import client_message

    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        word["loaded"].signatures["graphs_from_ids"](token_ids=tf.constant([[2, bad_id]],
                                                                           tf.int32))
    text = client_message(raised.value.message)
    assert text.startswith(message), text
    if bad_id > 0:
        size = word["tokenizer"].vocabulary_size
        assert f"vocabulary_size={size} (ids 0 to {size - 1})" in text
    assert "Graph execution" not in text and "node" not in text


# ---------------------------------------------------------------------------------- stock loaders
_FRESH_PROCESS = r"""
import base64, json, os, sys, importlib.util
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

path, ops_json, texts_json, out_file = sys.argv[1:]
unregistered = sorted(op for op in json.load(open(ops_json)) if op_def_registry.get(op) is None)
ops_dir = os.path.join(importlib.util.find_spec("tensorflow_text").submodule_search_locations[0],
                       "python", "ops")
for library in ("_whitespace_tokenizer", "_unicode_script_tokenizer", "_wordpiece_tokenizer"):
    tf.load_op_library(os.path.join(ops_dir, library + ".so"))
model = tf.saved_model.load(path)
texts = [base64.b64decode(t) for t in json.load(open(texts_json))]
results = {}
for name, function in model.signatures.items():
    inputs = {"text": tf.constant(texts)} if "text" in function.structured_input_signature[1] \
        else {"token_ids": tf.constant([[2, 3, 4, 0, 0]], tf.int32)}
    for key, value in function(**inputs).items():
        results[name + "/" + key] = value.numpy()
np.savez(out_file, **results)
print(json.dumps({"unregistered": unregistered,
                  "modules": sorted(m for m in ("tensorflow_text", "glomo_tf")
                                    if m in sys.modules)}))
"""


FRESH_TEXTS = [t.encode() for t in TRICKY[:5]] + [INVALID_UTF8]
NOT_SERVED = ["NormalizeUTF8", "WhitespaceTokenizeWithOffsetsV2"]  # tf-text ops TF Serving lacks
CLI_TEXTS = ["The cat sat on the mat .", "a dog"]


def _run(args, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(args, capture_output=True, text=True, env=env, **kwargs)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module", autouse=True)
def processes(word, subword, tmp_path_factory):
    """The slow checks in fresh interpreters, started with the module's first test so they run
    alongside the others (each mostly imports TensorFlow).

    Returns ``{name: (future of stdout, work directory)}``.
    """
    work = tmp_path_factory.mktemp("processes")
    ops = sorted(set(op_inventory(word["path"])) | set(op_inventory(subword["path"])))
    (work / "ops.json").write_text(json.dumps(op_inventory(word["path"])))
    (work / "texts.json").write_text(
        json.dumps([base64.b64encode(t).decode() for t in FRESH_TEXTS]))
    (work / "fresh.py").write_text(_FRESH_PROCESS)
    stock_tool = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    jobs = {
        "fresh": lambda: _run([sys.executable, str(work / "fresh.py"), word["path"],
                               str(work / "ops.json"), str(work / "texts.json"),
                               str(work / "out.npz")], cwd=str(work)),
        "show": lambda: _run([stock_tool, "show", "--dir", word["path"], "--all"]),
        "run": lambda: _run([sys.executable, "-m", "glomo_tf.export.saved_model_cli", "run",
                             "--dir", word["path"], "--tag_set", "serve", "--signature_def",
                             "serving_default", "--input_exprs", f"text={CLI_TEXTS!r}",
                             "--outdir", str(work)], cwd=REPO),
        "unsupported": lambda: json.dumps(
            {"inventory": ops, "unsupported": unsupported_ops(ops + NOT_SERVED)}),
    }
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        yield {name: (pool.submit(job), work) for name, job in jobs.items()}


def test_fresh_tensorflow_only_process_loads_it_and_gets_the_same_outputs(word, processes):
    stdout, work = processes["fresh"][0].result(), processes["fresh"][1]
    report = json.loads(stdout.strip().splitlines()[-1])
    # Only tensorflow was imported, and it lacked exactly the serving tokenizer kernels.
    assert report["modules"] == []
    assert report["unregistered"] == ["WhitespaceTokenizeWithOffsets"]
    fresh = np.load(work / "out.npz", allow_pickle=True)  # tokens: object arrays
    assert sorted({key.split("/")[0] for key in fresh.files}) == sorted(SIGNATURES)
    for key in fresh.files:
        name, output = key.split("/")
        inputs = ({"text": tf.constant(FRESH_TEXTS)} if SIGNATURES[name][0] == "text"
                  else {"token_ids": tf.constant([[2, 3, 4, 0, 0]], tf.int32)})
        expected = _call(word, name, **inputs)[output]
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(fresh[key], expected, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(fresh[key], expected)


def test_op_inventory_is_core_tensorflow_plus_serving_tokenizers(processes):
    report = json.loads(processes["unsupported"][0].result())
    ops = report["inventory"]
    assert {"WhitespaceTokenizeWithOffsets", "UnicodeScriptTokenizeWithOffsets",
            "WordpieceTokenizeWithOffsets", "InitializeTableFromTextFileV2", "Conv2D",
            "TopKV2"} <= set(ops)
    # Nothing but the export's own ops and the two planted ones that TF Serving lacks: the check
    # passes the export's ops and can fail.
    assert report["unsupported"] == NOT_SERVED
    assert set(TF_TEXT_SERVING_OPS) == {"WhitespaceTokenizeWithOffsets",
                                        "UnicodeScriptTokenizeWithOffsets",
                                        "WordpieceTokenizeWithOffsets"}


def test_saved_model_cli_show_all(processes):
    stdout = processes["show"][0].result()
    for name, (input_name, outputs) in SIGNATURES.items():
        block = stdout.split(f"signature_def['{name}']:")[1].split("signature_def[")[0]
        assert f"inputs['{input_name}']" in block
        assert "DT_STRING" in block if input_name == "text" else "DT_INT32" in block
        for output in outputs:
            assert f"outputs['{output}']" in block
        assert "tensorflow/serving/predict" in block
    graphs = stdout.split("signature_def['serving_default']:")[1].split("outputs['graphs']")[1]
    assert "shape: (-1, 2, 2, 2, -1, -1)" in graphs.split("name:")[0]


def test_saved_model_cli_run_uses_the_tensorflow_1_loader(word, processes):
    # The TF1 session loader is what TensorFlow Serving uses: variables must be restored by it.
    processes["run"][0].result()
    work = processes["run"][1]
    expected = _call(word, "serving_default", text=tf.constant(CLI_TEXTS))
    np.testing.assert_allclose(np.load(work / "graphs.npy"), expected["graphs"], rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_array_equal(np.load(work / "token_ids.npy"), expected["token_ids"])
    assert (expected["graphs"] > 0).any()


# ---------------------------------------------------------------------------------- sizes
def _rest_json_bytes(outputs):
    """Bytes of a TensorFlow Serving row-format REST response for one text (floats as the
    shortest decimal that round-trips float32)."""
    def as_json(value):
        if value.dtype.kind == "f":
            flat = value.reshape(-1)
            unique, inverse = np.unique(flat, return_inverse=True)
            shortest = np.array([float(str(np.float32(u))) for u in unique])
            return shortest[inverse.reshape(-1)].reshape(value.shape).tolist()
        if value.dtype.kind in "SO":
            return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(value).tolist()
        return value.tolist()
    row = {name: as_json(value[0]) for name, value in outputs.items()}
    return len(json.dumps({"predictions": [row]}, separators=(",", ":")))


def test_compact_signatures_are_much_smaller_for_long_texts(word, tmp_path):
    tokenizer = word["tokenizer"]
    tokenizer.save(str(tmp_path))
    module = GlomoServingModule(word["predictor"], tokenizer, str(tmp_path), max_length=256,
                                top_k=8)
    text = tf.constant([" ".join(CORPUS * 9)])
    full = {k: v.numpy() for k, v in module.serving_default(text).items()}
    compact = {k: v.numpy() for k, v in module.top_k_edges(text).items()}
    assert full["lengths"].tolist() == [256] and full["truncated"].tolist() == [True]
    full_bytes, compact_bytes = _rest_json_bytes(full), _rest_json_bytes(compact)
    assert compact_bytes * 5 < full_bytes
    # 2 directions x 2 layers x 2 heads of 256 x 256 graphs: over 2 MB of JSON even for this model.
    assert full_bytes > 2_000_000


# ---------------------------------------------------------------------------------- README
def _readme_blocks(language):
    with open(README, encoding="utf-8") as f:
        return re.findall(rf"```{language}\n(.*?)```", f.read(), flags=re.S)


def _predict_bodies():
    bodies = []
    for block in _readme_blocks("bash"):
        for command in block.replace("\\\n", " ").split("\n"):
            match = re.search(r"curl .*-X POST (\S+) +-d '(.*)'", command)
            if match:
                bodies.append((match.group(1), json.loads(match.group(2))))
    return bodies


def test_readme_curl_bodies_run_on_the_export(word):
    bodies = _predict_bodies()
    assert len(bodies) >= 4
    for url, body in bodies:
        assert re.match(r"http://localhost:8501/v1/models/glomo(/versions/\d+)?:predict$", url)
        name = body.get("signature_name", "serving_default")
        input_name = SIGNATURES[name][0]
        values = body["instances"] if "instances" in body else body["inputs"][input_name]
        dtype = tf.string if input_name == "text" else tf.int32
        out = _call(word, name, **{input_name: tf.constant(values, dtype)})
        assert out["lengths"].shape == (len(values),) and (out["lengths"] > 0).all()


def _export_only_cli(monkeypatch):
    """``glomo`` with only the export command registered (other commands are not under test)."""
    from glomo_tf import cli

    build_parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser",
                        lambda: build_parser([("export", "glomo_tf.cli.export")]))


def _fake_prediction_service(loaded, model_name):
    """A PredictionService answering Predict from the loaded SavedModel, like TensorFlow Serving."""
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    class Service(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 (the gRPC method name)
            assert request.model_spec.name == model_name
            function = loaded.signatures[request.model_spec.signature_name or "serving_default"]
            inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
            response = predict_pb2.PredictResponse()
            for key, value in function(**inputs).items():
                response.outputs[key].CopyFrom(tf.make_tensor_proto(value.numpy()))
            return response

    return Service()


def test_readme_grpc_example_runs_against_a_prediction_service(word, capsys):
    from concurrent import futures

    import grpc

    from tensorflow_serving.apis import prediction_service_pb2_grpc

    (example,) = [block for block in _readme_blocks("python") if "PredictionServiceStub" in block]
    assert '"localhost:8500"' in example and 'model_spec.name = "glomo"' in example
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        _fake_prediction_service(word["loaded"], "glomo"), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        exec(compile(example.replace("localhost:8500", f"127.0.0.1:{port}"), "README", "exec"), {})
    finally:
        server.stop(0)
    printed = capsys.readouterr().out.splitlines()
    # One line per unit of the two (lowercased) texts, with its edges to earlier units.
    assert [line.split(" <- ")[0].strip() for line in printed] == (
        "the cat sat on the mat . a dog barked .".split())
    # The edges printed are the heaviest sources in the head-averaged full graphs.
    texts = ["The cat sat on the mat .", "A dog barked ."]
    full = _call(word, "serving_default", text=tf.constant(texts))
    expected = []
    for b, length in enumerate(full["lengths"]):
        words = [t.decode() for t in full["tokens"][b, :length]]
        mean = full["graphs"][b, 0, -1].mean(axis=0)  # forward, last layer, over heads
        for t, unit in enumerate(words):
            order = np.argsort(-mean[t], kind="stable")[:TOP_K]
            edges = [(words[s], round(float(mean[t, s]), 3)) for s in order if mean[t, s] > 0]
            expected.append(f"{unit:>12} <- {edges}")
    assert printed == expected
    assert sum(line.endswith("[]") for line in printed) < len(printed)


# ---------------------------------------------------------------------------------- API errors
def test_export_errors_name_the_problem(word, tmp_path):
    tokenizer, predictor = word["tokenizer"], word["predictor"]
    with pytest.raises(ValueError, match="already exists.*next one \\(2\\)"):
        export_saved_model(predictor, tokenizer, word["export_dir"], "glomo", version=1)
    other = Tokenizer.build(["just three words"])
    with pytest.raises(ValueError, match="Vocabulary mismatch"):
        export_saved_model(predictor, other, tmp_path, "glomo")
    with pytest.raises(ValueError, match="Invalid model name"):
        export_saved_model(predictor, tokenizer, tmp_path, "../escape")
    with pytest.raises(ValueError, match="top_k=20 exceeds max_length=12"):
        export_saved_model(predictor, tokenizer, tmp_path, "glomo", max_length=12, top_k=20)
    with pytest.raises(ValueError, match="version must be a positive integer"):
        export_saved_model(predictor, tokenizer, tmp_path, "glomo", version=0)
    unbuilt = GraphPredictor(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=8)
    with pytest.raises(ValueError, match="no weights yet"):
        export_saved_model(unbuilt, tokenizer, tmp_path, "glomo")
    with pytest.raises(FileNotFoundError, match="No vocabulary"):
        export_saved_model(predictor, str(tmp_path / "nowhere"), tmp_path, "glomo")
    assert not os.path.exists(tmp_path / "glomo")  # nothing written by failed exports


def test_versions_and_model_resolution(tmp_path):
    (tmp_path / "3").mkdir()
    (tmp_path / "10").mkdir()
    (tmp_path / ".11.incomplete-x").mkdir()
    (tmp_path / "notes").mkdir()
    assert next_version(str(tmp_path)) == 11 and next_version(str(tmp_path / "none")) == 1
    pretrainer = GlomoPretrainer.from_sizes(vocabulary_size=20, hidden_dim=8, num_layers=1,
                                            num_heads=2, conv_layers=1, num_positions=2)
    pretrainer(np.ones((1, 4), "int32"))
    assert resolve_graph_predictor(pretrainer) is pretrainer.graph_predictor


# ---------------------------------------------------------------------------------- CLI
def test_cli_export_from_keras_file_auto_increments_the_version(word, tmp_path, capsys,
                                                                monkeypatch):
    _export_only_cli(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_graph_predictor(word["predictor"], str(run_dir / "graph_predictor.keras"))
    word["tokenizer"].save(str(run_dir / "tokenizer"))  # found next to --model
    code = glomo_main(["export", "--model", str(run_dir / "graph_predictor.keras"),
                       "--export-dir", word["export_dir"], "--model-name", "glomo",
                       "--max-length", str(MAX_LENGTH), "--top-k", str(TOP_K)])
    assert code == 0, capsys.readouterr().err
    path = os.path.join(word["export_dir"], "glomo", "2")
    printed = capsys.readouterr().out
    assert path in printed and "stock TensorFlow Serving can load it" in printed
    texts = tf.constant(["the cat sat on the mat .", "a dog"])
    again = tf.saved_model.load(path).signatures["serving_default"](text=texts)
    np.testing.assert_allclose(again["graphs"].numpy(),
                               _call(word, "serving_default", text=texts)["graphs"], rtol=1e-6)


def test_cli_errors(word, tmp_path, capsys, monkeypatch):
    _export_only_cli(monkeypatch)
    model = tmp_path / "graph_predictor.keras"
    save_graph_predictor(word["predictor"], str(model))
    vocab = tmp_path / "vocab"
    word["tokenizer"].save(str(vocab))
    broken = tmp_path / "broken.keras"
    broken.write_bytes(b"not a zip archive")
    small = tmp_path / "small"
    Tokenizer.build(["just three words"]).save(str(small))
    base = ["export", "--export-dir", word["export_dir"], "--model-name", "glomo"]
    cases = [
        (["--model", str(tmp_path / "missing.keras"), "--vocab", str(vocab)], "no model file"),
        (["--model", str(model)], "no --vocab given and no tokenizer/vocab.txt"),
        (["--model", str(model), "--vocab", str(tmp_path / "nope")], "no vocabulary at"),
        (["--model", str(model), "--vocab", str(small)], "Vocabulary mismatch"),
        (["--model", str(model), "--vocab", str(vocab), "--version", "1"], "already exists"),
        (["--model", str(model), "--vocab", str(vocab), "--model-name", "a b"],
         "Invalid model name"),
        (["--model", str(broken), "--vocab", str(vocab)], "Could not load"),
    ]
    for args, message in cases:
        assert glomo_main(base + args) == 2
        err = capsys.readouterr().err
        assert err.startswith("glomo export: error:") and message in err, err
        assert "Traceback" not in err
