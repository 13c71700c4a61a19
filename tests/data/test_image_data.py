"""glomo_tf.data.images: digits, CIFAR-10 on tfds mock data, the planted corpus and its
recovery measures (against oracle, anti-oracle and random graphs)."""

import numpy as np
import pytest
import tensorflow_datasets as tfds

from glomo_tf.data import images as image_data
from glomo_tf.data.images import (generate_planted_images, key_readers, load_cifar10,
                                  load_digits_images)
from glomo_tf.evaluation import (image_chance_level, image_edge_recovery,
                                 image_positional_baseline, image_recovery_report)


def test_digits_come_scaled_with_their_levels():
    images, labels, levels = load_digits_images()
    assert images.shape == (1797, 8, 8, 1) and images.dtype == np.float32
    assert levels == 17 and images.min() == 0.0 and images.max() == 1.0
    # Every value is one of the 17 levels.
    np.testing.assert_allclose(images * 16, np.round(images * 16), atol=1e-5)
    assert sorted(set(labels.tolist())) == list(range(10))


def test_cifar10_through_tfds_mock_data():
    with tfds.testing.mock_data(num_examples=7):
        images, labels, levels = load_cifar10("train")
    assert images.shape == (7, 32, 32, 3) and images.dtype == np.float32
    assert levels == 256 and 0.0 <= images.min() and images.max() <= 1.0
    np.testing.assert_allclose(images * 255, np.round(images * 255), atol=1e-3)
    assert labels.dtype == np.int64 and set(labels.tolist()) <= set(range(10))


def test_planted_levels_are_distinct():
    vocab = image_data.PlantedImageLevels(num_slots=3, num_values=4, num_fillers=6)
    ids = ([vocab.filler(i) for i in range(6)] + [vocab.marker(j) for j in range(3)]
           + [vocab.key(j, i) for j in range(3) for i in range(4)]
           + [vocab.value(i) for i in range(4)])
    assert sorted(ids) == list(range(vocab.size))
    assert [vocab.name(vocab.key(1, 2)), vocab.name(vocab.marker(0)),
            vocab.name(vocab.value(3))] == ["K2.2", "B1", "v3"]


def test_planted_spans_are_where_the_edges_say():
    corpus = generate_planted_images(40, height=9, width=8, num_slots=3, seed=1)
    vocab, width = corpus.vocabulary, 8
    assert corpus.levels.shape == (40, 9, 8) and len(corpus.edges) == 40 * 3
    assert corpus.one_hot().shape == (40, 9, 8, vocab.size)
    np.testing.assert_array_equal(corpus.one_hot().argmax(-1), corpus.levels)
    for n, direction, receiver, key in corpus.edges:
        tr, tc = divmod(int(receiver), width)
        kr, kc = divmod(int(key), width)
        image = corpus.levels[n]
        name = vocab.name(image[kr, kc])
        assert name.startswith("K")
        slot, value = name[1:].split(".")
        assert vocab.name(image[tr, tc]) == f"v{value}"
        marker_col = tc - 1 if direction == 0 else tc + 1
        assert vocab.name(image[tr, marker_col]) == f"B{slot}"
        assert (kr <= tr - 2) if direction == 0 else (kr >= tr + 2)
    assert set(corpus.edges[:, 1].tolist()) == {0, 1}


def test_key_readers_are_the_pixels_whose_masked_window_holds_the_key():
    from glomo_tf.layers.masked_conv_2d import causal_kernel_mask

    height, width = 5, 6
    for direction, name in enumerate(("forward", "backward")):
        mask = causal_kernel_mask(3, "A", name)
        for key in range(height * width):
            kr, kc = divmod(key, width)
            want = []
            for t in range(height * width):
                tr, tc = divmod(t, width)
                dr, dc = kr - tr + 1, kc - tc + 1  # the key's tap in t's 3x3 window
                if 0 <= dr < 3 and 0 <= dc < 3 and mask[dr, dc]:
                    want.append(t)
            assert sorted(key_readers(key, direction, height, width)) == want


def graphs_pointing_at(corpus, pick):
    """One-hot graphs ``[N, 2, 1, 1, T, T]`` whose planted rows point at ``pick(edge)``."""
    n, (height, width) = len(corpus.levels), corpus.shape
    length = height * width
    graphs = np.zeros((n, 2, 1, 1, length, length), np.float32)
    for edge in corpus.edges:
        graphs[edge[0], edge[1], 0, 0, edge[2], pick(edge)] = 1.0
    return graphs


def test_recovery_of_oracle_and_wrong_graphs():
    corpus = generate_planted_images(30, seed=2)
    height, width = corpus.shape
    oracle = graphs_pointing_at(corpus, lambda e: key_readers(e[3], e[1], height, width)[-1])
    np.testing.assert_array_equal(image_edge_recovery(oracle, corpus), [[[1.0]], [[1.0]]])
    on_key = graphs_pointing_at(corpus, lambda e: e[3])  # the key itself: its own features
    np.testing.assert_array_equal(image_edge_recovery(on_key, corpus), [[[0.0]], [[0.0]]])
    empty = np.zeros_like(oracle)
    np.testing.assert_array_equal(image_edge_recovery(empty, corpus), [[[0.0]], [[0.0]]])


def test_positional_baseline_is_the_best_offset_by_brute_force():
    corpus = generate_planted_images(50, seed=3)
    height, width = corpus.shape
    result = image_positional_baseline(corpus)
    for direction, name in enumerate(("forward", "backward")):
        edges = corpus.edges[corpus.edges[:, 1] == direction]
        best = 0.0
        for dr in range(-height, height + 1):
            for dc in range(-width, width + 1):
                hits = 0
                for _, _, receiver, key in edges:
                    tr, tc = divmod(int(receiver), width)
                    r, c = tr + dr, tc + dc
                    hits += (0 <= r < height and 0 <= c < width
                             and r * width + c in key_readers(key, direction, height, width))
                best = max(best, hits / len(edges))
        assert result[name]["share"] == pytest.approx(best)
        dr, dc = result[name]["offset"]
        assert (dr < 0) if direction == 0 else (dr > 0)


def test_chance_is_the_mean_recovery_of_random_graphs():
    corpus = generate_planted_images(30, seed=4)
    height, width = corpus.shape
    length = height * width
    rng = np.random.default_rng(0)
    lower = np.tril(np.ones((length, length), np.float32), -1)
    admissible = np.stack([lower, lower.T])[None, :, None, None]  # [1, 2, 1, 1, T, T]
    draws = rng.uniform(size=(len(corpus.levels), 2, 1, 60, length, length)).astype(np.float32)
    recovered = image_edge_recovery(draws * admissible, corpus)[:, 0]  # [2, 60]
    chance = image_chance_level(corpus)
    for z, name in enumerate(("forward", "backward")):
        assert recovered[z].mean() == pytest.approx(chance[name], abs=0.015)


def test_report_names_the_best_head():
    corpus = generate_planted_images(10, seed=5)
    height, width = corpus.shape
    oracle = graphs_pointing_at(corpus, lambda e: key_readers(e[3], e[1], height, width)[0])
    graphs = np.concatenate([np.zeros_like(oracle), oracle], axis=3)  # head 2 is the oracle
    report = image_recovery_report(graphs, corpus)
    assert report["forward"]["best_head"] == {"layer": 1, "head": 2, "share": 1.0}
    assert report["backward"]["share_per_layer_head"] == [[0.0, 1.0]]
    assert 0 < report["forward"]["chance"] < report["forward"]["positional_baseline"]["share"]


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="5 rows"):
        generate_planted_images(2, height=4)
    with pytest.raises(ValueError, match="num_values"):
        generate_planted_images(2, num_slots=5, num_values=3)
    with pytest.raises(ValueError, match="split"):
        image_data.builtin_planted_images("valid")
