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
