"""``benchmarks/README.md``'s table comes from the recorded benchmark outputs.

Every row of the table is rebuilt here from ``benchmarks/outputs/*.json`` and must appear in the
file verbatim, so a re-run that moves a figure fails this test until the table is updated; every
benchmark script has a row, and every recorded output is quoted by one.
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


def when(result):
    """The table's "recorded" cell: date and machine."""
    recorded = result["recorded"]
    machine = recorded["machine"]
    if isinstance(machine, dict):
        gpus = machine.get("gpus")
        machine = (f"{machine['cpus']} CPUs" + ("" if gpus is None else f", {gpus} GPUs")
                   + (f", TF {machine['tensorflow']}" if "tensorflow" in machine else "")
                   + (f", {machine['cpu']} with {'+'.join(machine['bfloat16_units']) or 'no'}"
                      " bfloat16 units" if "cpu" in machine else ""))
    return f"{recorded['date']}; {machine}"


def spread(values, unit=""):
    return f"{min(values):.1f}-{max(values):.1f}{unit}"


def row(script, output, figures, result):
    command = result.get("command") or result["recorded"]["command"]
    return f"| `{script}` | `{output}.json` | {figures} | {when(result)} | `{command}` |"


def transfer_overhead_row(output):
    r = load(output)
    added = r["added_ms_per_step"]
    cells = [f"MultiHeadAttention +{added['mha']:.1f} ms/step"]
    for variant in r["ratio_added_over_mha_added"]:
        name = {"glomo": "GlomoTransfer", "glomo_fused": "fused normalization",
                "glomo_cached": "cached",
                "glomo_cached_candidates": "cached candidates",
                "glomo_topk": "top-k", "glomo_cached_topk": "cached top-k",
                "glomo_uniform": "uniform graphs"}[variant]
        cells.append(f"{name} +{added[variant]:.1f} ms ({r['ratio_added_over_mha_added'][variant]:.1f}x,"
                     f" rounds {spread(r['ratio_added_over_mha_added_rounds'][variant], 'x')})")
    if "matmul_bound_added_ms" in r:  # the physical limit
        bound = r["matmul_bound_added_ms"]
        cells.append(f"the products alone, at this CPU's {r['matmul_gflop_per_s_n1024']:.0f} "
                     f"GFLOP/s: MultiHeadAttention {bound['mha']:.1f} ms, GlomoTransfer "
                     f"{bound['glomo']:.1f} ms")
    config = r["config"]
    size = (f"B {config['batch']}, T {config['seq']}, d {config['d']}, {config['layers']}x"
            f"{config['heads']} heads, {config['propagation']}"
            + (f", {config['precision']}" if config.get("precision", "float32") != "float32"
               else ""))
    return row("transfer_overhead.py", output, f"{size}: " + "; ".join(cells), r)


def sparse_mixture_row():
    r = load("sparse_mixture")
    res, speedup = r["results"], r["dense_ms_over_form_ms"]["top_k=8"]
    cells = [f"T {t}: dense {res['dense'][t]['ms_median']:.1f} ms, top-8 "
             f"{res['top_k=8'][t]['ms_median']:.1f} ms ({speedup[t]:.2f}x)"
             for t in (str(s) for s in (r["config"]["seq"][0], r["config"]["seq"][-1]))]
    return row("sparse_mixture.py", "sparse_mixture", "; ".join(cells), r)


def serving_latency_row(output="serving_latency"):
    r = load(output)

    def at(run, mode, concurrency):
        return next(x for x in run if x["mode"] == mode and x["concurrency"] == concurrency)

    first, rounds = r["results"], r["rest_vs_in_process"]
    config = r["config"]
    size = (f"d {config['hidden_dim']}, {config['layers']}x{config['heads']} heads, "
            f"{config['words']} words, {config['signature']}")
    figures = (f"{size}: p50 at concurrency 1: in-process {at(first, 'in_process', 1)['p50_ms']:.2f}"
               f" ms, gRPC {at(first, 'grpc', 1)['p50_ms']:.2f}, REST "
               f"{at(first, 'rest', 1)['p50_ms']:.2f}; over {len(r['runs'])} rounds REST adds "
               f"{spread(rounds['concurrency_1']['p50_added_ms'], ' ms')} "
               f"({min(rounds['concurrency_1']['p50_ratio']):.2f}-"
               f"{max(rounds['concurrency_1']['p50_ratio']):.2f}x in-process); REST throughput at "
               f"concurrency 8: {min(rounds['concurrency_8']['throughput_ratio']):.2f}-"
               f"{max(rounds['concurrency_8']['throughput_ratio']):.2f}x in-process")
    decode = r.get("client_decode")
    if decode:
        figures += (f"; the client reads one answer ({decode['answer_bytes'] / 1e3:,.0f} KB) in "
                    f"{decode['simdjson_ms']:.2f} ms (simdjson) against {decode['orjson_ms']:.2f}"
                    " ms (orjson lists)")
    encode = r.get("server_encode")
    if encode:
        figures += f"; the server writes it in {encode['ms']:.2f} ms"
    return row("serving_latency.py", output, figures, r)


def serving_soak_rows(output="serving_soak", long_text=True):
    r = load(output)
    mixed, large = r["mixed"], r["large_requests"]
    requests = sum(v["requests"] for v in mixed["latency"].values())
    figures = (f"{mixed['minutes']:.0f} min of mixed good and bad traffic at concurrency "
               f"{mixed['concurrency']}: {requests:,} requests, {mixed['unexpected']} unexpected "
               f"answers, {r['server_log']['tracebacks']} tracebacks, RSS {mixed['rss_mb']['start']}"
               f" -> max {mixed['rss_mb']['max']} -> {mixed['rss_mb']['end']} MB; "
               f"{large['requests']} requests of {large['body_mb']} MB: RSS +{large['growth_mb']} MB")
    if not long_text:
        return [row("serving_soak.py", output, figures, r)]
    long_text = load("serving_soak_long_text")
    text = long_text["long_text"]
    long_figures = (f"one {text['mb']:.0f} MB text request answered in {text['seconds']:.2f} s "
                    f"(cut before tokenisation), RSS {text['rss_after_mb']} MB after")
    return [row("serving_soak.py", output, figures, r),
            row("serving_soak.py", "serving_soak_long_text", long_figures, long_text)]


# The REST front-end candidates measured beside glomo serve's (aiohttp): uvicorn with httptools.
SERVING_CANDIDATES = ("serving_candidates/latency_uvicorn", "serving_candidates/latency_http_client",
                      "serving_candidates/latency_large_uvicorn")


def serving_memory_row(output):
    """Resident memory over a stream of large requests: the highest reading of each stretch of
    30 requests (the allocator's swing has that period here)."""
    r = load(output)
    large = r["large_requests"]
    curve = large["rss_every_10_mb"]
    peaks = [max(curve[i:i + 3]) for i in range(0, len(curve), 3)]
    figures = (f"{large['requests']} requests of {large['body_mb']} MB, one after another: RSS "
               f"{large['rss_after_first_mb']} MB after the first, highest of each 30: "
               f"{', '.join(str(p) for p in peaks)} MB ({r['note'].split(':')[0]})")
    return row("serving_soak.py", output, figures, r)


SERVING_MEMORY = ("serving_memory/aiohttp_arena_cap", "serving_memory/aiohttp_no_arena_cap",
                  "serving_memory/aiohttp_no_arena_cap_earlier",
                  "serving_memory/aiohttp_arena_cap_with_trim")


def ordered_memory_rows():
    rows = []
    for output in ("ordered_memory_speed", "ordered_memory_speed_batch1"):
        r = load(output)
        med, spreads = r["ms_per_step_median"], r["ms_per_step_spread"]
        cells = [f"{mode} {med[mode]:.1f} ms ({spread(spreads[mode])})" for mode in med]
        batch = r["config"]["batch"]
        rows.append(row("ordered_memory_speed.py", output,
                        f"batch {batch}, ms/step (rounds): " + ", ".join(cells), r))
    return rows


def top_k_accuracy_row(task="mr", label="MR"):
    name = f"top_k_accuracy_{task}"
    r = load(name)
    diffs = r["top8_minus_dense_points"]
    paired = r.get("paired_top8_vs_dense")
    test = (f"; {paired['wins']} / {paired['ties']} / {paired['losses']} seeds up / even / down, "
            f"paired t p {paired['p']:.2f}" if paired else "")
    figures = (f"{label}, glomo_embeddings, {len(diffs)} seeds: top-8 minus dense "
               f"{r['mean_top8_minus_dense_points']:+.2f} points (per seed "
               + ", ".join(f"{d:+.2f}" for d in diffs)
               + f"{test}); top-8 keeps {r['graph_mass_kept_by_top8']:.0%} of the graph mass")
    return (f"| `glomo transfer --top-k` | `{name}.json` | {figures} | {when(r)} | "
            f"`{r['commands']['top8']}` |")


def peer_row(script, output):
    """A benchmark timed beside the PyTorch peer: tokens/s of both and the ratio per round; with
    both precisions, every mode's tokens/s, the peer in each precision, and glomo_tf's best over
    the peer at its best and over the peer in float32."""
    r = load(output)
    best = r["best_mode"]
    rounds = r["ratio_vs_peer_rounds"][best]
    config = r["config"]
    size = f"B {config['batch']}, T {config['seq']}, d {config['d']}"
    if "peers" not in r:
        figures = (f"{size}: glomo_tf {best} {r['tokens_per_s'][best]:,.0f} tokens/s, peer "
                   f"{r['peer']['tokens_per_s']:,.0f}: {r['ratio_best_vs_peer']:.2f}x (rounds "
                   f"{min(rounds):.2f}-{max(rounds):.2f}x)")
        return row(script, output, figures, r)
    modes = ", ".join(f"{mode} {tokens:,.0f}" for mode, tokens in r["tokens_per_s"].items())
    peers = ", ".join(f"{p} {v['tokens_per_s']:,.0f}" for p, v in r["peers"].items())
    at_best = r["ratio_best_vs_peer_best_rounds"]
    f32 = r["ratio_vs_peers_rounds"]["float32"][best]
    figures = (f"{size}: glomo_tf tokens/s {modes}; peer {peers}; best ({best}) over the peer at "
               f"its best ({r['best_peer']}) {r['ratio_best_vs_peer_best']:.2f}x (rounds "
               f"{min(at_best):.2f}-{max(at_best):.2f}x), over the peer in float32 "
               f"{r['ratio_vs_peers']['float32'][best]:.2f}x (rounds {min(f32):.2f}-"
               f"{max(f32):.2f}x)")
    return row(script, output, figures, r)


PEER_OUTPUTS = (("extract_throughput.py", "extract_throughput"),
                ("extract_throughput.py", "extract_throughput_features"),
                ("extract_throughput.py", "extract_throughput_t512_top8"),
                ("pretrain_throughput.py", "pretrain_throughput"))


def transfer_cost_row():
    r = load("transfer_cost")
    ratio = r["results"]["function/forward_backward"]["explicit_over_chained_ms"]
    figures = ("forward+backward, explicit / chained time: "
               + ", ".join(f"{ratio[t]:.2f} at T {t}" for t in ratio)
               + f"; outputs equal to {r['max_abs_diff_output']:.0e}")
    return row("transfer_cost.py", "transfer_cost", figures, r)


def preset_load_row():
    r = load("preset_load")
    m, rounds = r["median_s"], r["rounds_s"]
    names = {"import_s": "import glomo_tf", "load_preset_s": "load_preset",
             "first_graphs_s": "first graphs"}
    figures = f"{r['preset']}, {r['rounds']} fresh interpreters: " + ", ".join(
        f"{names[k]} {m[k]:.2f} s (rounds {min(rounds[k]):.2f}-{max(rounds[k]):.2f})"
        for k in names)
    return row("preset_load.py", "preset_load", figures, r)


def reader_epoch_row():
    r = load("reader_epoch")
    m, ratios = r["seconds_per_step"], r["ratio_to_baseline"]
    figures = (f"SQuAD reader, passages of {r['settings']['max_length']} units, batches of "
               f"{r['settings']['batch_size']}, one thread: s/step baseline {m['baseline']:.3f}, "
               f"uniform {m['uniform']:.3f} ({spread(ratios['uniform'], 'x')}), glomo_rnn with "
               f"cached passage graphs {m['glomo_rnn']:.3f} ({spread(ratios['glomo_rnn'], 'x')}); "
               f"cache fill {r['cache_fill_s']:.0f} s")
    return row("reader_epoch.py", "reader_epoch", figures, r)


def all_rows():
    return [transfer_overhead_row(name) for name in (
        "transfer_overhead", "transfer_overhead_chained", "transfer_overhead_cache_topk",
        "transfer_overhead_cache_topk_bf16", "transfer_overhead_bf16_fused",
        "transfer_overhead_cache_topk_large")] + [
        sparse_mixture_row(), serving_latency_row(), serving_latency_row("serving_latency_large"),
        *serving_soak_rows(), *(serving_latency_row(name) for name in SERVING_CANDIDATES),
        *serving_soak_rows("serving_candidates/soak_uvicorn", long_text=False),
        *(serving_memory_row(name) for name in SERVING_MEMORY),
        *ordered_memory_rows(), top_k_accuracy_row(), top_k_accuracy_row("sst2", "SST-2"),
        *(peer_row(*args) for args in PEER_OUTPUTS), transfer_cost_row(), preset_load_row(),
        reader_epoch_row()]


@pytest.fixture(scope="module")
def table():
    with open(os.path.join(BENCHMARKS, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def test_every_row_is_rebuilt_from_its_json(table):
    for expected in all_rows():
        assert expected in table, f"benchmarks/README.md lacks (or has a stale) row:\n{expected}"


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

