"""The planted corpus and its recovery metrics, checked against the definitions by hand."""

import numpy as np
import pytest

from glomo_tf import evaluation
from glomo_tf.data import planted


@pytest.fixture(scope="module")
def corpus():
    return planted.generate_planted_corpus(64, seq_len=40, deps_per_sequence=3, num_slots=5,
                                           num_pairs=10, num_fillers=12, min_gap=2, max_gap=8,
                                           seed=3)


def test_same_seed_same_windows_other_seed_other_windows(corpus):
    again = planted.generate_planted_corpus(64, seq_len=40, deps_per_sequence=3, num_slots=5,
                                            num_pairs=10, num_fillers=12, min_gap=2, max_gap=8,
                                            seed=3)
    other = planted.generate_planted_corpus(64, seq_len=40, deps_per_sequence=3, num_slots=5,
                                            num_pairs=10, num_fillers=12, min_gap=2, max_gap=8,
                                            seed=4)
    np.testing.assert_array_equal(corpus.token_ids, again.token_ids)
    np.testing.assert_array_equal(corpus.edges, again.edges)
    assert not np.array_equal(corpus.token_ids, other.token_ids)


def test_spans_hold_the_planted_tokens(corpus):
    vocab = corpus.vocabulary
    strings = vocab.strings()
    for n in range(len(corpus.token_ids)):
        ids = corpus.token_ids[n]
        assert np.all(ids > 0)
        slots_seen, pairs_seen, directions = set(), set(), []
        for direction, slot, pair, marker, key in corpus.spans[n]:
            assert strings[ids[marker]] == f"B{slot + 1}"
            assert strings[ids[key]] == f"K{slot + 1}.{pair:02d}"
            if direction == planted.FORWARD:  # K <gap> B v
                assert 2 <= marker - key - 1 <= 8
                assert strings[ids[marker + 1]] == f"v{pair:02d}"
            else:  # v B <gap> K
                assert 2 <= key - marker - 1 <= 8
                assert strings[ids[marker - 1]] == f"v{pair:02d}"
            slots_seen.add(slot)
            pairs_seen.add(pair)
            directions.append(direction)
        assert len(slots_seen) == len(pairs_seen) == 3  # distinct inside a window
        assert sorted(directions) in ([0, 0, 1], [0, 1, 1])  # both kinds in every window
        # Every marker, key and value in the window belongs to a span.
        special = np.sum(ids < vocab.filler(0))
        assert special == 3 * 3


def test_edges_point_from_marker_to_key_of_the_same_slot(corpus):
    strings = corpus.vocabulary.strings()
    assert corpus.edges.shape == (64 * 3, 4)
    for n, z, receiver, source in corpus.edges:
        ids = corpus.token_ids[n]
        assert (receiver > source) if z == planted.FORWARD else (receiver < source)
        marker, key = strings[ids[receiver]], strings[ids[source]]
        assert marker.startswith("B") and key.startswith("K")
        assert key[1:].split(".")[0] == marker[1:]
        # The value the decoder must predict sits next to the receiver, on the predicted side.
        value = strings[ids[receiver + 1 if z == planted.FORWARD else receiver - 1]]
        assert value == "v" + key.split(".")[1]


def test_random_key_rule_counts_the_keys_on_the_admissible_side():
    vocab = planted.PlantedVocabulary(num_slots=2, num_pairs=3, num_fillers=4)
    w, m = int(vocab.filler(0)), int(vocab.marker(0))
    ids = np.full((1, 10), w)
    ids[0, [1, 3, 8]] = vocab.key(np.array([0, 1, 1]), np.array([0, 2, 1]))
    ids[0, 5] = m
    edges = np.array([[0, 0, 5, 1], [0, 1, 5, 8]], np.int32)
    chance = evaluation.same_type_chance(edges, ids, vocab)
    assert chance == {"forward": pytest.approx(1 / 2), "backward": pytest.approx(1.0)}


def test_perfect_graph_recovers_everything_and_empty_rows_miss(corpus):
    n, t = corpus.token_ids.shape
    graphs = np.zeros((n, 2, 1, 2, t, t), np.float32)  # one layer, two heads
    e = corpus.edges
    graphs[e[:, 0], e[:, 1], 0, 0, e[:, 2], e[:, 3]] = 0.6
    graphs[e[:, 0], e[:, 1], 0, 0, e[:, 2], np.where(e[:, 1] == 0, 0, t - 1)] += 0.4
    share = evaluation.edge_recovery(graphs, e)
    assert share.shape == (2, 1, 2)
    np.testing.assert_allclose(share[:, 0, 0], 1.0)
    np.testing.assert_allclose(share[:, 0, 1], 0.0)  # all-zero rows are misses, not argmax 0


def test_positional_rule_scores_its_bound():
    # Hand-made edges: offsets -3, -3, -5 forward; +2, +4, +4 backward.
    edges = np.array([[0, 0, 10, 7], [0, 0, 20, 17], [1, 0, 9, 4],
                      [0, 1, 7, 9], [0, 1, 17, 21], [1, 1, 4, 8]], np.int32)
    bound = evaluation.positional_baseline(edges)
    assert bound["forward"] == {"offset": -3, "share": pytest.approx(2 / 3)}
    assert bound["backward"] == {"offset": 4, "share": pytest.approx(2 / 3)}
    # A graph that always points at t - 3 (forward) and t + 4 (backward) scores exactly that.
    t = 24
    graphs = np.zeros((2, 2, t, t), np.float32)
    for r in range(t):
        if r - 3 >= 0:
            graphs[:, 0, r, r - 3] = 1.0
        if r + 4 < t:
            graphs[:, 1, r, r + 4] = 1.0
    np.testing.assert_allclose(evaluation.edge_recovery(graphs, edges), [2 / 3, 2 / 3])


def test_chance_counts_admissible_real_sources():
    edges = np.array([[0, 0, 4, 1], [0, 1, 4, 6]], np.int32)
    mask = np.ones((1, 8), bool)
    mask[0, 7] = False  # padding is not a source
    chance = evaluation.chance_level(edges, mask)
    assert chance["forward"] == pytest.approx(1 / 4)  # s in {0, 1, 2, 3}
    assert chance["backward"] == pytest.approx(1 / 2)  # s in {5, 6}


def test_impossible_settings_are_refused():
    with pytest.raises(ValueError, match="deps_per_sequence"):
        planted.generate_planted_corpus(2, deps_per_sequence=7, num_slots=6, num_pairs=8)
    with pytest.raises(ValueError, match="do not fit"):
        planted.generate_planted_corpus(2, seq_len=20, deps_per_sequence=3, max_gap=30)
    with pytest.raises(ValueError, match="do not fit"):
        planted.generate_planted_corpus(2, seq_len=10, deps_per_sequence=4)
    with pytest.raises(ValueError, match="split"):
        planted.builtin_corpus("validation", 2)
