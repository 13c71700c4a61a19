"""The transfer harness's length-aware batching: every example once, aligned labels, no batch
padded beyond its longest text, and predictions put back in input order."""

import numpy as np

from glomo_tf.data.batching import (bucketed_training_batches, length_sorted_batches,
                                    sequence_lengths)


def ragged_ids(count=157, width=30, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, count)
    ids = np.zeros((count, width), "int32")
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(1, 50, n)
    ids[3, :] = 0  # an empty text
    lengths[3] = 0
    return ids, lengths


def test_lengths_is_the_last_real_position():
    ids, lengths = ragged_ids()
    np.testing.assert_array_equal(sequence_lengths(ids), lengths)
    np.testing.assert_array_equal(sequence_lengths(np.array([[4, 0, 5, 0]])), [3])  # a hole inside


def test_bucketed_training_batches_cover_every_example_once_per_epoch():
    ids, lengths = ragged_ids()
    labels = np.arange(len(ids))  # the label names the example
    dataset = bucketed_training_batches(ids, labels, batch_size=16, seed=3)
    epochs = []
    assert int(dataset.cardinality()) == len(list(dataset))  # declared count == batches made
    for _ in range(2):
        seen = []
        for x, y in dataset:
            x, y = x.numpy(), y.numpy()
            assert len(y) <= 16 and x.shape[0] == len(y)
            assert x.shape[1] == max(1, lengths[y].max())  # cut to its longest text
            for row, example in zip(x, y):
                n = max(1, lengths[example])
                np.testing.assert_array_equal(row[:n], ids[example, :n])
                assert not row[n:].any()
            seen.extend(y.tolist())
        assert sorted(seen) == list(range(len(ids)))
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # reshuffled every epoch
    widths = [x.shape[1] for x, _ in dataset]
    assert np.mean(widths) < 0.8 * ids.shape[1]  # buckets: most batches shorter than the set


def test_length_sorted_batches_order_maps_back_to_the_input():
    ids, lengths = ragged_ids()
    labels = np.arange(len(ids))
    dataset, order = length_sorted_batches(ids, labels, batch_size=20)
    assert int(dataset.cardinality()) == len(list(dataset)) == 8  # ceil(157 / 20)
    out = np.concatenate([y.numpy() for _, y in dataset])
    np.testing.assert_array_equal(out, order)  # the dataset's examples are ids[order]
    restored = np.empty_like(out)
    restored[order] = out
    np.testing.assert_array_equal(restored, labels)
    for x, y in dataset:
        assert x.shape[1] == max(1, lengths[y.numpy()].max())
