"""``examples/graph_sources.py``'s statistics on graphs whose answers are worked out by hand."""

import importlib.util
import os

import numpy as np
import pytest
from _paths import REPO

PATH = os.path.join(REPO, "examples", "graph_sources.py")
spec = importlib.util.spec_from_file_location("graph_sources", PATH)
graph_sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(graph_sources)


def test_word_information_is_the_smoothed_log_ratio():
    ids = np.array([[1, 2, 0], [1, 3, 3]])
    labels = np.array([0, 1])
    info = graph_sources.word_information(ids, labels, 4)
    # counts + 1: class 0: [1, 2, 2, 1] (sum 6), class 1: [1, 2, 1, 3] (sum 7)
    p0, p1 = np.array([1, 2, 2, 1]) / 6, np.array([1, 2, 1, 3]) / 7
    np.testing.assert_allclose(info, np.abs(np.log(p0) - np.log(p1)))


def test_source_statistics_of_a_one_hot_and_a_spread_row():
    ids = np.array([[1, 2, 3]])
    information = np.array([0.0, 1.0, 2.0, 4.0])
    frequent = np.array([False, True, False, False])
    graphs = np.zeros((1, 2, 1, 1, 3, 3), np.float32)
    graphs[0, 0, 0, 0, 1, 0] = 1.0  # unit 2 <- unit 1 (word 1)
    graphs[0, 0, 0, 0, 2, :2] = [0.25, 0.25]  # unit 3 <- half each of words 1 and 2 (sum 0.5)
    graphs[0, 1, 0, 0, 0, 2] = 1.0  # backward: unit 1 <- unit 3 (word 3)
    stats = graph_sources.SourceStatistics(2, 1, 4)
    stats.update(graphs, ids, information, frequent)
    forward, backward = (layers[0] for layers in stats.result(["<pad>", "a", "b", "c"], 2))
    assert forward["rows"] == 2 and backward["rows"] == 1  # rows without weight are left out
    # Rows are renormalised: unit 3's row is [0.5, 0.5] over words 1 and 2.
    assert forward["label_information"] == pytest.approx((1.0 + (0.5 * 1 + 0.5 * 2)) / 2)
    assert forward["frequent_share"] == pytest.approx((1.0 + 0.5) / 2)
    assert forward["sources"] == pytest.approx((1 + 2) / 2)
    assert forward["self_token_share"] == 0
    assert [w for w, _ in forward["top_sources"]] == ["a", "b"]
    assert forward["top_sources"][0][1] == pytest.approx(1.5 / 2)
    assert backward["label_information"] == pytest.approx(4.0)
