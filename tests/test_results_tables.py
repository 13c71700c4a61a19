"""Tables of the results pages rendered again from their recorded JSON and compared: a table
sits under an HTML comment naming it (``<!-- NAME table -->``) and ends at the first blank line."""

import json
import os

import pytest

from _examples import load_example

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def table_under(page, marker):
    """The lines of ``page`` (a path in the repository) after ``<!-- marker -->``, to the first
    blank line."""
    with open(os.path.join(REPO, page), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = lines.index(f"<!-- {marker} -->") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


def recorded(name):
    with open(os.path.join(REPO, "examples", "outputs", name), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.mark.parametrize("page, marker, example, output", [
    ("docs/results/where-graphs-pay.md", "ud heads table", "ud_heads", "ud_heads.json"),
    ("docs/results/where-graphs-pay.md", "listops ceiling table", "listops_ceiling",
     "listops_ceiling.json"),
])
def test_the_table_is_its_json_rendered(page, marker, example, output):
    assert table_under(page, marker) == load_example(example).render_table(recorded(output))


def test_the_ud_heads_json_holds_the_whole_yardstick():
    for name, result in recorded("ud_heads.json")["predictors"].items():
        layers, heads = len(result["per_head"]), len(result["per_head"][0])
        best = result["best_head"]
        assert result["per_head"][best["layer"] - 1][best["head"] - 1] == best["share"]
        assert best["share"] == max(max(row) for row in result["per_head"])
        assert len(result["heads_averaged"]) == layers and heads >= 1
        assert result["chance"] < result["adjacent"] <= result["best_offset_rule"]["share"]
        assert result["command"].startswith("python examples/ud_heads.py")


def test_the_ceiling_json_pairs_every_row_with_its_baseline_seed_by_seed():
    rows = recorded("listops_ceiling.json")["rows"]
    for entry in rows.values():
        if entry["row"] == "baseline":
            continue
        baseline = rows[f"{entry['size']} | baseline"]["accuracy_by_seed"]
        paired = entry["paired_with_baseline"]
        shared = sorted(set(entry["accuracy_by_seed"]) & set(baseline))
        assert paired["seeds"] == len(shared)
        assert abs(paired["mean_difference"] - sum(entry["accuracy_by_seed"][s] - baseline[s]
                                                   for s in shared) / len(shared)) < 1e-12
        assert "--seeds" in entry["command"]


def test_every_table_under_examples_outputs_is_its_json_rendered():
    """Each ``examples/outputs/*.md`` equals its JSON rendered again (``python
    examples/render_outputs.py`` rewrites them)."""
    tables = load_example("render_outputs").rendered()
    assert "listops_results.md" in tables and "ablations_mr.md" in tables
    for name, markdown in tables.items():
        with open(os.path.join(REPO, "examples", "outputs", name), encoding="utf-8") as handle:
            assert handle.read() == markdown, f"{name}: run python examples/render_outputs.py"


def test_a_results_table_moves_with_its_runs(tmp_path):
    """The renderer reads the runs: changing one run's accuracy changes the table."""
    module = load_example("render_outputs")
    record = recorded("mr_results.json")
    table = module.render_results(record)
    from glomo_tf import evaluation

    runs = [dict(r) for r in record["runs"]]
    runs[0]["accuracy"] -= 0.2
    variants = list(record["summary"]["variants"])
    changed = dict(record, runs=runs, summary=evaluation.summarize(runs, variants))
    assert module.render_results(changed) != table
