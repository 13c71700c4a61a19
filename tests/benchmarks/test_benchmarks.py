"""The transfer benchmarks run end to end at the smallest sizes and print the JSON they document.

Both scripts run once, side by side, as subprocesses (``transfer_cost.py`` itself starts one
subprocess per method and sequence length); timings are not checked, only the JSON's shape and that
the chained mixture and the explicit ``T x T`` products give the same output.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from _paths import REPO

BENCHMARKS = os.path.join(REPO, "benchmarks")
SEQS = (16, 32)
COST_ARGS = ["--seq", *map(str, SEQS), "--batch", "2", "--d", "8", "--layers", "2", "--heads", "2",
             "--mixtures", "2", "--iters", "1", "--warmup", "0", "--rounds", "1"]
OVERHEAD_ARGS = ["--batch", "2", "--seq", "16", "--d", "8", "--vocab", "50", "--layers", "1",
                 "--propagation", "explicit",
                 "--heads", "2", "--conv-layers", "1", "--iters", "1", "--warmup", "0",
                 "--rounds", "1"]


def start(script, args):
    return subprocess.Popen([sys.executable, os.path.join(BENCHMARKS, script), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def finish(proc):
    out, err = proc.communicate(timeout=600)  # a guard against a hang, not a timing
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


@pytest.fixture(scope="module")
def outputs():
    procs = {"cost": start("transfer_cost.py", COST_ARGS),
             "overhead": start("transfer_overhead.py", OVERHEAD_ARGS)}
    return {name: finish(proc) for name, proc in procs.items()}


@pytest.mark.slow
def test_transfer_cost_json(outputs):
    result = outputs["cost"]
    assert result["errors"] == {} and result["skipped"] == {}
    assert result["config"]["seq"] == list(SEQS)
    setting = result["results"]["function/forward"]
    assert set(result["results"]) == {"function/forward"}
    for method in ("chained", "explicit"):
        out = setting[method]
        for key in ("ms_median", "peak_mb", "ms_rounds", "first_call_s"):
            assert set(out[key]) == {str(t) for t in SEQS}, (method, key)
        assert all(v > 0 for v in out["ms_median"].values())
        assert all(v >= 0 for v in out["peak_mb"].values())
        assert isinstance(out["loglog_slope"], float)
        assert out["loglog_slope_largest_3"] is None  # only two lengths
    assert set(setting["explicit_over_chained_ms"]) == {str(t) for t in SEQS}
    diffs = result["max_abs_diff_chained_vs_explicit"]["function/forward"]
    assert set(diffs) == {str(t) for t in SEQS}
    assert all(d["output"] < 1e-4 for d in diffs.values())
    assert result["max_abs_diff_output"] < 1e-4
    # d=8, L=2, K=2, 2 mixtures, 8 candidates, 2 chains: explicit is cheaper while
    # 2 T < (4 + 2) * 8 - 2 * (8 + 8) = 16, so never at these lengths.
    assert result["auto_choice"] == {"16": "chained", "32": "chained"}


@pytest.mark.slow
def test_transfer_overhead_json(outputs):
    result = outputs["overhead"]
    variants = {"none", "glomo", "mha"}
    assert set(result["ms_per_step_median"]) == variants
    assert all(v > 0 for v in result["ms_per_step_median"].values())
    assert all(len(v) == 1 for v in result["ms_per_step_rounds"].values())
    assert set(result["added_ms_per_step"]) == {"glomo", "mha"}
    assert "ratio_glomo_added_over_mha_added" in result
    assert len(result["ratio_glomo_added_over_mha_added_rounds"]) == 1
    assert result["predictor_frozen_and_unchanged"] is True
    assert result["config"]["propagation"] == "explicit"
    assert result["parameters"]["glomo"]["non_trainable"] > 0  # the frozen predictor
    assert result["parameters"]["mha"]["non_trainable"] == 0
    # The physical limit: self-attention's added products counted by hand. Forward: the four
    # [B T, d] x [d, d] projections and the two [T, T] x [T, d / heads] products per head;
    # backward twice that (every operand needs its gradient: the embeddings train).
    B, T, d = 2, 16, 8
    forward = 4 * 2 * B * T * d * d + 2 * 2 * B * T * T * d
    flops = result["matmul_flops_per_step"]
    assert flops["mha"] - flops["none"] == 3 * forward
    assert result["matmul_gflop_per_s_n1024"] > 0
    assert result["matmul_bound_added_ms"]["mha"] == pytest.approx(
        3 * forward / (result["matmul_gflop_per_s_n1024"] * 1e9) * 1e3, abs=0.006)
    # GlomoTransfer adds more products than self-attention (compared in FLOPs: at these tiny
    # sizes both bounds round to 0.00 ms on a fast enough CPU)
    assert flops["glomo"] > flops["mha"]
    assert result["matmul_bound_added_ms"]["glomo"] >= result["matmul_bound_added_ms"]["mha"]


def test_explicit_skipped_beyond_max_t():
    spec = importlib.util.spec_from_file_location(
        "transfer_cost", os.path.join(BENCHMARKS, "transfer_cost.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a = module.parse_args(["--seq", "64", "128", "--max-explicit-T", "64"])
    assert module.explicit_skip_reason(a, 64, "forward") is None
    assert "--max-explicit-T 64" in module.explicit_skip_reason(a, 128, "forward")
    huge = module.parse_args(["--batch", "4096", "--heads", "64"])  # ~ petabytes of products
    assert "exceeds" in module.explicit_skip_reason(huge, 1024, "forward_backward")


@pytest.mark.slow
def test_transfer_overhead_cache_and_top_k_modes():
    """--fused-normalization --cache --top-k --uniform add glomo_fused, glomo_cached,
    glomo_cached_candidates, glomo_topk, glomo_cached_topk and glomo_uniform beside the three
    models, each with its added cost's ratio to self-attention's, and the caches' filling cost."""
    result = finish(start("transfer_overhead.py", [*OVERHEAD_ARGS, "--fused-normalization",
                                                   "--cache", "--top-k", "2", "--uniform"]))
    variants = {"none", "glomo", "mha", "glomo_fused", "glomo_cached", "glomo_cached_candidates",
                "glomo_topk", "glomo_cached_topk", "glomo_uniform"}
    assert set(result["ms_per_step_median"]) == variants
    assert all(v > 0 for v in result["ms_per_step_median"].values())
    assert set(result["ratio_added_over_mha_added"]) == variants - {"none", "mha"}
    assert all(len(r) == 1 for r in result["ratio_added_over_mha_added_rounds"].values())
    assert result["ratio_added_over_mha_added"]["glomo"] == \
        result["ratio_glomo_added_over_mha_added"]
    fill = result["cache_fill"]
    assert set(fill) == {"glomo_cached", "glomo_cached_candidates", "glomo_cached_topk"}
    assert fill["glomo_cached"]["exact"] is True and fill["glomo_cached"]["ms_total"] > 0
    assert fill["glomo_cached"]["batches"] == 1
    assert (result["config"]["cache"], result["config"]["top_k"]) == (True, 2)
    assert result["config"]["uniform"] is True and result["config"]["fused_normalization"]
    # The fused normalisation computes the same graphs from the same weights: the same first loss.
    assert result["first_step_loss"]["glomo_fused"] == pytest.approx(
        result["first_step_loss"]["glomo"], abs=1e-3)
    assert result["parameters"]["glomo_uniform"]["non_trainable"] == 0  # no predictor
    # Fresh weights: the cached model starts from the online one's, so the first losses agree.
    assert result["first_step_loss"]["glomo_cached"] == pytest.approx(
        result["first_step_loss"]["glomo"], abs=1e-3)


@pytest.mark.slow
def test_sparse_mixture_json():
    args = ["--seq", "8", "12", "--batch", "2", "--d", "4", "--layers", "2", "--heads", "2",
            "--support", "3", "--top-k", "2", "3", "--iters", "1", "--warmup", "0", "--rounds",
            "1"]
    result = finish(start("sparse_mixture.py", args))
    forms = {"dense", "dense_chained", "top_k=2", "top_k=3"}
    assert set(result["results"]) == forms
    for form in forms:
        for t in ("8", "12"):
            out = result["results"][form][t]
            assert out["ms_median"] > 0 and out["peak_mb"] >= 0 and out["input_mb"] > 0
    diffs = result["max_abs_diff_vs_dense"]
    # k >= the rows' support holds the graphs exactly; k below it drops sources.
    assert all(diffs[form][t] < 1e-5 for form in ("dense_chained", "top_k=3") for t in ("8", "12"))
    assert all(diffs["top_k=2"][t] > 1e-3 for t in ("8", "12"))
    assert result["results"]["top_k=2"]["12"]["input_mb"] < result["results"]["dense"]["12"][
        "input_mb"]


def _serving_latency():
    spec = importlib.util.spec_from_file_location(
        "serving_latency", os.path.join(BENCHMARKS, "serving_latency.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_serving_latency_modes_take_turns_block_by_block():
    """Each mode's requests go in blocks, the modes alternating with their order rotated, every
    request index sent once per mode; at concurrency 8 a block keeps at least MIN_PER_THREAD
    requests a thread (fewer blocks), and one block is the old one-mode-at-a-time order."""
    module = _serving_latency()
    sent = []

    def maker(mode):
        return lambda: (lambda i: sent.append((mode, i)))

    makers = {mode: maker(mode) for mode in ("a", "b", "c")}
    summaries = module.time_modes(makers, 1, 40, 3, blocks=4)
    timed = sent[9:]  # after 3 warm-up calls per mode
    assert sent[:9] == [(m, 0) for m in "aaabbbccc"]
    runs = [timed[i][0] for i in range(0, len(timed), 10)]
    assert runs == list("abc" "bca" "cab" "abc")  # blocks of 10, order rotated every block
    for mode in "abc":
        assert sorted(i for m, i in timed if m == mode) == list(range(40))
        assert summaries[mode]["requests"] == 40

    sent.clear()
    module.time_modes(makers, 8, 200, 0, blocks=4)  # 200 // (10 * 8) = 2 blocks of 100
    modes = [m for m, _ in sent[3 * 8:]]
    changes = [i for i in range(1, len(modes)) if modes[i] != modes[i - 1]]
    assert len(modes) == 600 and changes == [100, 200, 300, 400, 500]

    sent.clear()
    module.time_modes(makers, 1, 30, 0, blocks=1)
    assert [m for m, _ in sent[3:]] == ["a"] * 30 + ["b"] * 30 + ["c"] * 30


def _harness():
    spec = importlib.util.spec_from_file_location("_harness", os.path.join(BENCHMARKS,
                                                                           "_harness.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_matmul_flops_counts_products_and_their_gradients():
    import tensorflow as tf

    harness = _harness()
    x, w = tf.ones([3, 5, 7]), tf.Variable(tf.ones([7, 11]))
    kernel = tf.Variable(tf.ones([3, 7, 4]))  # conv1d: width 3, 7 -> 4 channels

    def step(x):
        with tf.GradientTape() as tape:
            y = tf.matmul(tf.reshape(x, [15, 7]), w)  # 2 * 15 * 11 * 7
            z = tf.einsum("bti,io->bto", x, w)  # 2 * 3 * 5 * 7 * 11
            c = tf.nn.conv1d(x, kernel, 1, "VALID")  # [3, 3, 4]: 2 * 36 * 3 * 7
            loss = tf.reduce_sum(y) + tf.reduce_sum(z) + tf.reduce_sum(c)
        return loss, tape.gradient(loss, [w, kernel])

    forward = 2 * (15 * 11 * 7) * 2 + 2 * 36 * 3 * 7
    graph = tf.function(step).get_concrete_function(x).graph
    # each product's gradient with respect to w is one more product of its size, the
    # convolution's filter gradient one more convolution's worth; the gradients with respect to
    # the constant x, which the gradient functions also build, never run and are not counted
    assert harness.matmul_flops(graph) == 2 * forward
    only_gradients = tf.function(lambda x: step(x)[1]).get_concrete_function(x).graph
    assert harness.matmul_flops(only_gradients) == forward  # the sums need no forward product

    def conditional(x):  # a product in a tf.cond: its forward and its gradient branch's
        with tf.GradientTape() as tape:
            y = tf.cond(tf.reduce_all(x > 0), lambda: tf.matmul(tf.reshape(x, [15, 7]), w),
                        lambda: 2.0 * tf.matmul(tf.reshape(x, [15, 7]), w))
            loss = tf.reduce_sum(y)
        return loss, tape.gradient(loss, w)

    graph = tf.function(conditional).get_concrete_function(x).graph
    # the gradient branch returns (and computes) the gradients of all its inputs, x's too
    assert harness.matmul_flops(graph) == 3 * (2 * 15 * 11 * 7)
    assert harness.PRECISIONS == __import__("glomo_tf").hparams.PRECISIONS


def test_peer_commands_and_mode_keys_per_precision():
    import argparse

    harness = _harness()
    parser = argparse.ArgumentParser()
    harness.add_model_arguments(parser)
    harness.add_timing_arguments(parser)
    parser.add_argument("--mode", nargs="+", default=["function", "xla"])
    a = harness.check_arguments(parser, parser.parse_args(
        ["--precision", "float32", "mixed_bfloat16", "--peer", sys.executable,
         "--peer-script", __file__]))
    assert harness.timed_modes(a) == [("function", "function", "float32"),
                                      ("xla", "xla", "float32"),
                                      ("function_bf16", "function", "mixed_bfloat16"),
                                      ("xla_bf16", "xla", "mixed_bfloat16")]
    cmds = harness.peer_commands(a, "train")
    assert "--autocast-bf16" not in cmds["float32"]
    assert cmds["mixed_bfloat16"][-1] == "--autocast-bf16"
    assert cmds["mixed_bfloat16"][:-1] == cmds["float32"]


def test_summary_compares_with_the_peer_at_its_best():
    import argparse

    harness = _harness()
    a = argparse.Namespace(precision=["float32", "mixed_bfloat16"])
    per_round = {"xla": [2.0, 2.0, 2.2], "function_bf16": [1.0, 1.1, 1.0]}
    peer_rounds = {"float32": [{"ms_per_iter_median": 3000.0}] * 3,
                   "mixed_bfloat16": [{"ms_per_iter_median": 1500.0}, {"ms_per_iter_median":
                                                                         1650.0},
                                      {"ms_per_iter_median": 1500.0}]}
    cmds = {"float32": ["peer"], "mixed_bfloat16": ["peer", "--autocast-bf16"]}
    import keras
    import tensorflow as tf
    result = harness.summary(a, 100, per_round, peer_rounds, cmds, tf, keras)
    assert result["best_mode"] == "function_bf16" and result["best_peer"] == "mixed_bfloat16"
    assert result["ratio_best_vs_peer"] == 3.0  # against the first precision's peer (float32)
    assert result["ratio_best_vs_peer_best"] == 1.5
    assert result["ratio_best_vs_peer_best_rounds"] == [1.5, 1.5, 1.5]
    assert result["peers"]["mixed_bfloat16"]["tokens_per_s"] == round(100 / 1.5, 1)
    assert result["ratio_vs_peers"]["float32"]["xla"] == 1.5


@pytest.mark.slow
def test_pretrain_and_extract_throughput_in_both_precisions():
    tiny = ["--batch", "2", "--seq", "8", "--d", "8", "--vocab", "30", "--layers", "2",
            "--heads", "2", "--conv-layers", "1", "--iters", "1", "--warmup", "0", "--rounds",
            "1", "--precision", "float32", "mixed_bfloat16", "--mode", "function", "xla"]
    pretrain = finish(start("pretrain_throughput.py", [*tiny, "--positions", "3", "--profile"]))
    extract = finish(start("extract_throughput.py", tiny))
    keys = {"function", "xla", "function_bf16", "xla_bf16"}
    for result in (pretrain, extract):
        assert set(result["tokens_per_s"]) == keys
        assert result["config"]["precision"] == ["float32", "mixed_bfloat16"]
        assert "bfloat16_units" in result["recorded"]["machine"]
    assert set(pretrain["first_step_loss"]) == keys
    losses = list(pretrain["first_step_loss"].values())
    assert max(losses) - min(losses) < 0.05  # the same model in either precision
    assert pretrain["matmul_flops_per_step"] > 0
    assert set(pretrain["matmul_bound_share_of_step"]) == keys
    assert set(pretrain["profile_ms_per_step"]) == keys
    assert extract["max_abs_diff_vs_function"]["xla"] < 1e-4  # float32 modes agree
    assert extract["max_abs_diff_vs_function"]["function_bf16"] < 0.05  # bfloat16 is close
