"""``benchmarks/README.md``: every benchmark script has a row of its table, every recorded output
is quoted by one, and the figures of its "When and how they were recorded" section come from
their JSON.

The table's rows themselves are rendered from ``benchmarks/outputs/*.json`` by
``examples/results_tables.py`` (``<!-- benchmarks table -->``) and checked by
``tests/test_results_tables.py``.
"""

import glob
import json
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(REPO, "benchmarks")
OUTPUTS = os.path.join(BENCHMARKS, "outputs")


def load(name):
    with open(os.path.join(OUTPUTS, name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def spread(values, unit=""):
    return f"{min(values):.1f}-{max(values):.1f}{unit}"


@pytest.fixture(scope="module")
def table():
    with open(os.path.join(BENCHMARKS, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def test_every_script_and_every_output_is_in_the_table(table):
    scripts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCHMARKS, "*.py"))
                     if not os.path.basename(p).startswith("_"))
    for script in scripts:
        assert f"| `{script}` |" in table, f"{script} has no row in benchmarks/README.md"
    for path in glob.glob(os.path.join(OUTPUTS, "*.json")):
        name = os.path.basename(path)
        assert f"`{name}`" in table, f"{name} is quoted by no row of benchmarks/README.md"
        assert "recorded" in load(name[:-5]), f"{name} has no recorded block (date, machine)"


def test_the_serving_clients_side_by_side_figures_come_from_their_runs(table):
    """The paragraph setting ServingClient on http.client (commit 75a8449) beside httptools."""
    flat = " ".join(table.split())

    def figures(output):
        rounds = load(output)["rest_vs_in_process"]
        added, ratio = rounds["concurrency_1"]["p50_added_ms"], rounds["concurrency_8"][
            "throughput_ratio"]
        return spread(added), f"{min(ratio):.2f}-{max(ratio):.2f}x"

    (old_added, old_ratio), (new_added, new_ratio) = (
        figures("serving_candidates/latency_http_client"), figures("serving_latency"))
    under = "every round under 1 ms" if max(load("serving_latency")["rest_vs_in_process"][
        "concurrency_1"]["p50_added_ms"]) < 1 else "not every round under 1 ms"
    assert (f"REST added {old_added} ms to the p50 there against {new_added} ms ({under}) with "
            f"httptools, and kept {old_ratio} of in-process throughput at concurrency 8 against "
            f"{new_ratio}") in flat


def test_the_pretraining_runs_of_the_amd_session_come_from_their_json(table):
    """The paragraph on the 2026-11-28 AMD EPYC recordings: the two earlier runs of the
    pretraining command (``pretrain_runs/``) and the peer's step in the recorded run."""
    flat = " ".join(table.split())

    def ratios(r):
        best, rounds = r["best_mode"], r["ratio_best_vs_peer_best_rounds"]
        f32 = r["ratio_vs_peers_rounds"]["float32"][best]
        return (f"{r['ratio_best_vs_peer_best']:.2f}x", f"{min(rounds):.2f}-{max(rounds):.2f}x",
                f"{r['ratio_vs_peers']['float32'][best]:.2f}x", f"{min(f32):.2f}-{max(f32):.2f}x")

    guard, first = load("pretrain_runs/before_xla_guard"), load("pretrain_runs/before_fused_batch_norm")
    at_best, spread, f32, f32_spread = ratios(guard)
    assert (f"measured {at_best} against the peer at its best (rounds {spread}) and {f32} against "
            f"its float32 ({f32_spread})") in flat
    peer = lambda r: f"{r['peers']['mixed_bfloat16']['ms_per_iter_median']:,.0f} ms"  # noqa: E731
    recorded = load("pretrain_runs/before_gather_then_cast")  # the 06:22 recording
    assert (f"the peer's bfloat16 step then {peer(guard)} against "
            f"{peer(recorded)} in the 06:22 run") in flat
    at_best, spread, f32, _ = ratios(first)
    assert f"measured {at_best} (rounds {spread}) and {f32}." in flat
    assert (f"({guard['matmul_gflop_per_step']:.0f} instead of "
            f"{recorded['matmul_gflop_per_step']:.0f})") in flat
    # The later recordings, each against the one before: after the transfer path's changes
    # (08:19), after the feature predictor's head messages (19:04), then, on 2026-11-29's
    # machine, after the word transposes (the recorded run).
    ours = lambda r: f"{r['ms_per_iter_median'][r['best_mode']]:,.0f} ms"  # noqa: E731
    runs = [(recorded, "06:22"), (load("pretrain_runs/before_head_messages"), "08:19"),
            (load("pretrain_runs/before_transpose_rows"), "19:04 on 2026-11-28"),
            (load("pretrain_throughput"), None)]
    for (before, when), (after, _) in zip(runs, runs[1:]):
        at_best, spread, f32, f32_spread = ratios(after)
        assert (f"measured {at_best} against the peer at its best (rounds {spread}) and {f32} "
                f"against its float32 ({f32_spread}): glomo_tf's bfloat16 step {ours(after)} "
                f"against {ours(before)} at {when} ({before['ratio_best_vs_peer_best']:.2f}x), "
                f"the peer's {peer(after)} against {peer(before)}") in flat


def test_the_recordings_of_2026_11_29_come_from_their_json(table):
    """The paragraph on 2026-11-29's machine: the same pretraining command at the commit before
    the word transposes, the transposes' profile in both runs, and the serving runs kept aside
    (the last one within issue 35's bar in every round, as the page says)."""
    flat = " ".join(table.split())
    before = load("pretrain_runs/before_transpose_rows_same_machine")
    after = load("pretrain_throughput")
    assert before["recorded"]["code"] == "commit 40b4cb4"
    assert before["recorded"]["command"] == after["recorded"]["command"]
    best, rounds = before["best_mode"], before["ratio_best_vs_peer_best_rounds"]
    f32 = before["ratio_vs_peers_rounds"]["float32"][best]
    assert (f"measured {before['ratio_best_vs_peer_best']:.2f}x against the peer at its best "
            f"(rounds {min(rounds):.2f}-{max(rounds):.2f}x) and "
            f"{before['ratio_vs_peers']['float32'][best]:.2f}x against its float32 "
            f"({min(f32):.2f}-{max(f32):.2f}x)") in flat
    transposes = lambda r, mode: r["profile_ms_per_step"][mode]["_MklTranspose"]  # noqa: E731
    assert (f"transposes at {transposes(after, 'function_bf16'):.1f} ms in bfloat16 and "
            f"{transposes(after, 'function'):.1f} in float32") in flat
    assert (f"its transposes {transposes(before, 'function_bf16'):.1f} and "
            f"{transposes(before, 'function'):.1f} ms") in flat
    for name, text in (("serving_runs/latency_2026-11-29", "REST adding {added} ms to the p50 "
                        "and keeping {ratio} of in-process throughput"),
                       ("serving_runs/latency_large_2026-11-29", "{added} ms and {ratio}"),
                       ("serving_runs/latency_2026-11-29_b", "REST adding {added} ms to the p50 "
                        "and keeping {ratio} of in-process throughput at concurrency 8: issue "
                        "35's bar")):
        rounds = load(name)["rest_vs_in_process"]
        added = rounds["concurrency_1"]["p50_added_ms"]
        ratio = rounds["concurrency_8"]["throughput_ratio"]
        assert text.format(added=spread(added), ratio=f"{min(ratio):.2f}-{max(ratio):.2f}x") in flat
    quiet = load("serving_runs/latency_2026-11-29_b")["rest_vs_in_process"]
    assert max(quiet["concurrency_1"]["p50_added_ms"]) <= 1.0
    assert min(quiet["concurrency_8"]["throughput_ratio"]) >= 0.7

