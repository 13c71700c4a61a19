"""Batches of token ids for downstream training and inference, each cut to its longest text."""

import numpy as np


def encode(tokenizer, texts, max_length):
    """int32 ids ``[N, T]``, padded with 0 and trimmed to the longest text (``T <= max_length``)."""
    ids = tokenizer.encode(list(texts), max_length=max_length).numpy().astype("int32")
    longest = max(1, int((ids != 0).sum(axis=1).max())) if len(ids) else 1
    return ids[:, :longest]


def length_sorted_batches(ids, labels, batch_size):
    """``(dataset, order)``: the examples sorted by length, batched, each batch cut to its longest
    text; ``order`` maps the dataset's example order back to the input order (for evaluation, so
    short texts are not padded to the longest one of the whole set)."""
    import tensorflow as tf

    lengths = sequence_lengths(ids)
    order = np.argsort(lengths, kind="stable")
    batches = [(ids[order[i:i + batch_size], :max(1, lengths[order[i:i + batch_size]].max())],
                np.asarray(labels)[order[i:i + batch_size]])
               for i in range(0, len(order), batch_size)]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(batches), output_signature=(
            tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int64)))
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))), order


def bucketed_training_batches(ids, labels, batch_size, seed):
    """Shuffled training batches of similar lengths, each cut to its longest text.

    Every epoch reshuffles the examples (seeded), groups them into length buckets and batches
    each bucket, so a batch of short reviews is not padded to the longest review of the set (the
    graphs cost ``T^2``). Batches are full except the last of each bucket.
    """
    import tensorflow as tf

    lengths = sequence_lengths(ids)
    boundaries = sorted({int(b) for b in np.percentile(lengths, [20, 40, 60, 80]) if b > 1})
    dataset = tf.data.Dataset.from_tensor_slices(
        (ids.astype("int32"), np.asarray(labels, "int64"), lengths.astype("int32")))
    dataset = dataset.shuffle(len(ids), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(lambda x, y, n: (x[:tf.maximum(n, 1)], y))
    edges = [b + 1 for b in boundaries]
    dataset = dataset.bucket_by_sequence_length(
        lambda x, y: tf.shape(x)[0], bucket_boundaries=edges,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1))
    # The buckets' sizes are fixed, so is the number of batches: telling tf.data lets Keras show
    # a full progress bar from the first epoch (and not warn that the data "ran out").
    per_bucket = np.bincount(np.searchsorted(edges, np.maximum(lengths, 1), side="right"),
                             minlength=len(edges) + 1)
    batches = int(sum(-(-n // batch_size) for n in per_bucket))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(2)


def sequence_lengths(ids):
    """Position of the last real unit + 1 of each row of ``ids`` (0 for an empty row)."""
    real = np.asarray(ids) != 0
    return np.where(real.any(axis=1), real.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def pair_training_batches(first, second, labels, batch_size, seed):
    """Shuffled training batches of sentence pairs ``((first, second), labels)``, each side cut
    to its longest sentence in the batch; every epoch reshuffles (seeded)."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(
        (first.astype("int32"), second.astype("int32"), np.asarray(labels, "int64"),
         sequence_lengths(first).astype("int32"), sequence_lengths(second).astype("int32")))
    dataset = dataset.shuffle(len(first), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size).map(
        lambda a, b, y, na, nb: ((a[:, :tf.maximum(tf.reduce_max(na), 1)],
                                  b[:, :tf.maximum(tf.reduce_max(nb), 1)]), y))
    batches = -(-len(first) // batch_size)
    return dataset.apply(tf.data.experimental.assert_cardinality(batches)).prefetch(2)


def pair_sorted_batches(first, second, labels, batch_size):
    """``(dataset, order)`` of sentence pairs sorted by their total length, batched, each side
    cut to its longest sentence in the batch (:func:`length_sorted_batches` for pairs)."""
    import tensorflow as tf

    first_lengths, second_lengths = sequence_lengths(first), sequence_lengths(second)
    order = np.argsort(first_lengths + second_lengths, kind="stable")
    labels = np.asarray(labels, "int64")
    batches = []
    for i in range(0, len(order), batch_size):
        part = order[i:i + batch_size]
        batches.append(((first[part, :max(1, first_lengths[part].max())],
                         second[part, :max(1, second_lengths[part].max())]), labels[part]))
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(batches), output_signature=(
            (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)),
            tf.TensorSpec([None], tf.int64)))
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))), order
