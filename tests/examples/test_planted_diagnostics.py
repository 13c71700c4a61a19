"""examples/planted_diagnostics.py: its oracle against the planted edges, and each diagnostic run."""

import importlib.util
import json
import os

import numpy as np
import pytest

from glomo_tf.experiments import demo
from glomo_tf.data import planted
from _paths import REPO

EXAMPLE = os.path.join(REPO, "examples", "planted_diagnostics.py")
SMALL = ["--set", "train_windows=64", "--set", "test_windows=16", "--set", "batch_size=8"]


@pytest.fixture(scope="module")
def diagnostics():
    spec = importlib.util.spec_from_file_location("planted_diagnostics", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_oracle_graph_is_the_planted_edges_in_one_head(diagnostics):
    corpus = planted.builtin_corpus("test", 12, **demo.CORPUS)
    diagnostics.check_oracle(corpus)  # raises unless the TF oracle gives exactly corpus.edges
    graphs = diagnostics.oracle_graphs(corpus.token_ids, corpus.vocabulary, 2, 3,
                                       oracle_head=(1, 2)).numpy()
    assert graphs.shape == (12, 2, 2, 3, 48, 48)
    e = corpus.edges
    np.testing.assert_array_equal(graphs[e[:, 0], e[:, 1], 1, 2, e[:, 2], e[:, 3]], 1.0)
    # Every other head, and the oracle head's other rows, are uniform over the admissible sources:
    # forward row t spreads 1/t over s < t.
    np.testing.assert_allclose(graphs[:, 0, 0, 0, 5, :5], 1 / 5)
    assert graphs[:, 0, 0, 0, 5, 5:].sum() == 0.0
    np.testing.assert_allclose(graphs.sum(-1)[:, 0, :, :, 1:], 1.0, rtol=1e-6)


def test_parse_curriculum_and_overrides(diagnostics):
    assert diagnostics.parse_curriculum("seq_len=16,max_gap=5:600;seq_len=32:100") == [
        ({"seq_len": 16, "max_gap": 5}, 600), ({"seq_len": 32}, 100)]
    assert diagnostics.parse_overrides(["learning_rate=1e-2", "composition=projected",
                                        "coupled=true"]) == {
        "learning_rate": 0.01, "composition": "projected", "coupled": True}
    model, training = diagnostics.demo_settings({"learning_rate": 0.01, "num_heads": 2})
    assert training["learning_rate"] == 0.01 and model["num_heads"] == 2
    assert model["composition"] == "gru"  # the paper's choices are the starting point


@pytest.mark.parametrize("argv", [
    ["capacity", "--steps", "2", "--eval-every", "1"],
    ["value-path", "--steps", "2", "--eval-every", "1", "--set", "composition=projected"],
    ["curve", "--steps", "4", "--eval-every", "2", "--curriculum", "seq_len=16,deps_per_sequence=2,"
     "max_gap=5:2"],
])
def test_each_diagnostic_runs_and_writes_its_json(diagnostics, argv, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert diagnostics.main([*argv, *SMALL, "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result == json.loads(capsys.readouterr().out)
    assert result["diagnostic"] == argv[0]
    steps = [row["step"] for row in result["curve"]]
    assert steps == sorted(steps) and steps[-1] == result["final"]["step"]
    if argv[0] == "capacity":
        assert set(result["final"]["best_head"]) == {"forward", "backward"}
    else:
        for value in result["final"]["value_cross_entropy"].values():
            assert 0.0 < value < 10.0
    if argv[0] == "curve":
        assert result["curriculum"] == [{"corpus": {"seq_len": 16, "deps_per_sequence": 2,
                                                    "max_gap": 5}, "steps": 2}]
