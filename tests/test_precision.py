"""``--precision`` / the Keras dtype policy everywhere a user trains or runs graphs.

The layers' own bfloat16 audit (outputs within a tolerance of float32, gradients finite and
float32, variables float32) is check 3 of ``tests/layer_harness.py``, run by every layer's test.
Here: the policy scope, running a saved float32 predictor in bfloat16, and the option on every
command that trains or runs graphs (pretrain, sentence-pretrain, transfer, extract, export, demo),
each compared with its float32 run.
"""

import argparse
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from _run_dirs import pretrained_run
from glomo_tf import GraphPredictor, cli, hparams
from glomo_tf.precision import check_precision, precision_scope
from glomo_tf.saving import load_graph_predictor, with_dtype_policy

LINES = ["the cat sat on the mat", "a dog ran in the park", "the dog sat on a cat",
         "a cat ran to the dog in the park"]
IDS = np.array([[2, 5, 6, 3, 2, 7, 0, 0], [4, 8, 9, 10, 2, 11, 5, 3]], "int32")


def assert_rows_stochastic(graphs, ids, atol):
    """Every real unit's row of ``graphs [B, 2, L, K, T, T]`` sums to 1 (within ``atol``), or to
    0 where it has no source (the first unit forward, the last real unit backward)."""
    graphs = np.asarray(graphs, "float64")
    real = ids != 0
    lengths = real.sum(1)
    sums = graphs.sum(-1)
    for b, length in enumerate(lengths):
        for t in range(length):  # real receivers (padded ones are masked downstream)
            for z, has_source in ((0, t > 0), (1, t < length - 1)):
                want = 1.0 if has_source else 0.0
                np.testing.assert_allclose(sums[b, z, ..., t], want, atol=atol)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A glomo-pretrain-like run directory: a float32 graph_predictor.keras and tokenizer/."""
    directory = tmp_path_factory.mktemp("run")
    tokenizer, predictor = pretrained_run(directory, LINES, seed=3, sharpen=20.0, hidden_dim=16,
                                          num_layers=2, num_heads=2, conv_layers=2)
    return directory, tokenizer, predictor


def test_precision_scope_sets_and_restores_the_policy():
    assert keras.config.dtype_policy().name == "float32"
    with precision_scope("mixed_bfloat16"):
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
        assert GraphPredictor(10, 8, num_heads=2).compute_dtype == "bfloat16"
    assert keras.config.dtype_policy().name == "float32"
    with pytest.raises(RuntimeError, match="inside"):
        with precision_scope("mixed_bfloat16"):
            raise RuntimeError("inside")
    assert keras.config.dtype_policy().name == "float32"  # restored after an error too
    with pytest.raises(ValueError, match="`precision` must be one of float32, mixed_bfloat16"):
        check_precision("float16")
    assert hparams.PRECISIONS == ("float32", "mixed_bfloat16")


def test_a_float32_predictor_runs_in_bfloat16(run_dir, tmp_path):
    directory, _, predictor = run_dir
    reference = predictor(IDS)["graphs"].numpy()
    assert with_dtype_policy(predictor, "float32") is predictor  # nothing to change
    for loaded, trainable in ((with_dtype_policy(predictor, "mixed_bfloat16"), True),
                              (load_graph_predictor(directory, dtype="mixed_bfloat16"), False)):
        assert loaded.dtype_policy.name == "mixed_bfloat16" and loaded.compute_dtype == "bfloat16"
        assert {w.dtype for w in loaded.weights} == {"float32"}
        assert loaded.trainable == trainable  # kept by the copy; loading freezes
        graphs = loaded(IDS)["graphs"]
        assert graphs.dtype == tf.bfloat16
        graphs = tf.cast(graphs, tf.float32).numpy()
        # bfloat16 keeps 8 bits of mantissa: the weights agree to a few hundredths of their scale
        assert np.max(np.abs(graphs - reference)) < 0.05
        assert np.mean(np.abs(graphs - reference)) < 0.005
        assert_rows_stochastic(graphs, IDS, atol=2e-2)
    # and back: a bfloat16 copy made float32 again gives the float32 graphs exactly
    back = with_dtype_policy(with_dtype_policy(predictor, "mixed_bfloat16"), "float32")
    np.testing.assert_array_equal(back(IDS)["graphs"].numpy(), reference)
    with pytest.raises(ValueError, match="built GraphPredictor"):
        with_dtype_policy(GraphPredictor(10, 8, num_heads=2), "mixed_bfloat16")


def commands():
    from glomo_tf.cli import demo, export, extract, pretrain, sentence_pretrain, transfer

    subparsers = argparse.ArgumentParser().add_subparsers()
    for module in (pretrain, sentence_pretrain, transfer, extract, export, demo):
        module.register(subparsers)
    return subparsers.choices


def test_every_command_that_trains_or_runs_graphs_takes_precision():
    for name, parser in commands().items():
        actions = {a.dest: a for a in parser._actions}
        assert "precision" in actions, f"glomo {name} has no --precision"
        assert tuple(actions["precision"].choices) == hparams.PRECISIONS
        assert actions["precision"].default == "float32", name


def test_configs_check_precision_and_resume_older_runs():
    from glomo_tf.experiments import pretraining, sentence_pretraining
    from glomo_tf.experiments.transfer import TransferConfig

    for config in (pretraining.PretrainingConfig(output_dir="x", train=["a"], precision="half"),
                   sentence_pretraining.SentencePretrainingConfig(output_dir="x", train=["a"],
                                                                  precision="half"),
                   TransferConfig(dataset="mr", output_dir="x", variants=["baseline"],
                                  precision="half")):
        with pytest.raises(ValueError, match="`precision` must be one of"):
            config.validated()
    current = {"precision": "float32", "epochs": 3}
    # run directories written before --precision: float32, or the old --mixed-precision flag
    pretraining.check_resumable({"epochs": 1, "mixed_precision": False}, current)
    pretraining.check_resumable({"epochs": 1}, current)
    with pytest.raises(ValueError, match="precision: 'mixed_bfloat16' -> 'float32'"):
        pretraining.check_resumable({"epochs": 1, "mixed_precision": True}, current)
    sentence_pretraining.check_resumable({"epochs": 1}, current)
    with pytest.raises(ValueError, match="precision"):
        sentence_pretraining.check_resumable({"precision": "mixed_bfloat16"}, current)


def test_glomo_extract_in_bfloat16_matches_float32(run_dir, tmp_path, capsys):
    directory = run_dir[0]
    graphs = {}
    for precision in hparams.PRECISIONS:
        out = tmp_path / f"{precision}.json"
        assert cli.main(["extract", "--run", str(directory), "--text", LINES[3], "--text",
                         LINES[1], "--json", str(out), "--top-k", "0",
                         "--precision", precision]) == 0
        with open(out, encoding="utf-8") as handle:
            graphs[precision] = [np.array(item["graphs"]) for item in json.load(handle)]
    capsys.readouterr()
    for want, got in zip(graphs["float32"], graphs["mixed_bfloat16"]):
        assert want.shape == got.shape
        assert 0 < np.max(np.abs(got - want)) < 0.05  # computed in bfloat16; rounded to 1e-5
        np.testing.assert_allclose(got.sum(-1)[..., 1:-1], 1.0, atol=2e-2)
    assert keras.config.dtype_policy().name == "float32"


def test_export_in_bfloat16_serves_float32_outputs_close_to_float32(run_dir, tmp_path):
    from glomo_tf.export import export_saved_model
    from glomo_tf.export.saved_model import METADATA_FILE

    directory, tokenizer, predictor = run_dir
    path = export_saved_model(predictor, tokenizer, str(tmp_path), "glomo", max_length=12,
                              precision="mixed_bfloat16")
    with open(f"{path}/assets/{METADATA_FILE}", encoding="utf-8") as handle:
        assert json.load(handle)["precision"] == "mixed_bfloat16"
    loaded = tf.saved_model.load(path)
    out = loaded.signatures["serving_default"](text=tf.constant(LINES))
    assert out["graphs"].dtype == tf.float32
    ids = out["token_ids"].numpy()
    real = (ids != 0).astype("float32")[:, None, None, None, :, None]  # served rows of real units
    want = predictor(ids)["graphs"].numpy() * real  # the float32 layer on the same ids
    got = out["graphs"].numpy()
    assert np.array_equal(got * real, got)  # padded receivers' rows are served as zeros
    assert 0 < np.max(np.abs(got - want)) < 0.01  # computed in bfloat16, close to float32
    assert_rows_stochastic(got, ids, atol=2e-2)
    with pytest.raises(ValueError, match="`precision` must be one of"):
        export_saved_model(predictor, tokenizer, str(tmp_path), "other", precision="fp16")


def test_demo_model_in_bfloat16_trains_as_a_tf_function():
    from glomo_tf.experiments import demo

    model = demo.build_model(20, precision="mixed_bfloat16")
    assert model.compute_dtype == "bfloat16" and model.graph_predictor.compute_dtype == "bfloat16"
    assert not model.jit_compile  # XLA's CPU backend does not use the bfloat16 units
    assert demo.build_model(20).jit_compile
    ids = np.random.default_rng(0).integers(1, 20, (4, 12)).astype("int32")
    history = model.fit(ids, epochs=2, batch_size=4, verbose=0).history
    assert np.all(np.isfinite(history["loss"])) and history["loss"][1] < history["loss"][0]
    assert keras.config.dtype_policy().name == "float32"


def test_glomo_transfer_in_bfloat16_learns_the_planted_task(tmp_path, capsys):
    from _tiny_runs import TRANSFER_TINY as TINY, planted_rows

    data = tmp_path / "planted.tsv"
    rows = planted_rows()
    data.write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows),
                    encoding="utf-8")
    run_dir = tmp_path / "run"
    pretrained_run(run_dir, [text for text, _ in rows], seed=1234, hidden_dim=8, num_layers=2,
                   num_heads=2, conv_layers=1)
    out = tmp_path / "out"
    assert cli.main(["transfer", "--run", str(run_dir), "--dataset", "file", "--file", str(data),
                     "--variants", "baseline", "glomo_rnn", "--seeds", "0", "--epochs", "3",
                     "--max-length", "16", "--precision", "mixed_bfloat16",
                     "--output-dir", str(out), *TINY]) == 0
    capsys.readouterr()
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["config"]["precision"] == "mixed_bfloat16"
    accuracy = {r["variant"]: r["accuracy"] for r in results["runs"]}
    assert min(accuracy.values()) > 0.8, accuracy  # the planted word decides the class
    assert keras.config.dtype_policy().name == "float32"
    # resuming with another precision is refused: the runs would not be comparable
    assert cli.main(["transfer", "--run", str(run_dir), "--dataset", "file", "--file", str(data),
                     "--variants", "baseline", "--seeds", "1", "--epochs", "3", "--max-length",
                     "16", "--resume", "--output-dir", str(out), *TINY]) == 2
    assert "precision: 'mixed_bfloat16' -> 'float32'" in capsys.readouterr().err


def test_cpu_bfloat16_units_are_read_from_the_cpu_flags(tmp_path):
    from glomo_tf.precision import cpu_has_bfloat16_units

    for flags, expected in (("fpu avx2 avx512f avx512_bf16", True), ("fpu amx_tile amx_bf16", True),
                            ("fpu avx2 avx512f avx512_vnni", False)):
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nmodel name\t: X\nflags\t\t: {flags}\n\n")
        assert cpu_has_bfloat16_units(str(path)) is expected
    assert cpu_has_bfloat16_units(str(tmp_path / "missing")) is False


def test_cpu_description_names_the_first_processor_and_its_bfloat16_units(tmp_path):
    from glomo_tf.precision import cpu_description

    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu amx_bf16 "
                    "avx512_bf16 amx_tile\n\nprocessor\t: 1\nmodel name\t: Other\n")
    assert cpu_description(str(path)) == {"cpu": "Intel(R) Xeon(R)",
                                          "bfloat16_units": ["amx_bf16", "avx512_bf16"]}
    path.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2\n")
    assert cpu_description(str(path)) == {"cpu": "AMD EPYC", "bfloat16_units": []}
    assert cpu_description(str(tmp_path / "missing")) == {}
