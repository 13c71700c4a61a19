"""Batches of similar length for ``model.fit``, each padded only to its own longest row."""

import keras
import numpy as np


class LengthBatches(keras.utils.PyDataset):
    """A ``keras.utils.PyDataset`` of ``(inputs, labels)`` batches of similar length.

    The rows are sorted by length (the longest of their inputs' non-padding units) and cut into
    batches of ``batch_size``, each padded only to its own longest row: for recurrences whose
    cost grows with ``T`` (Ordered Memory runs ``T x N`` cells), padding to the longest row of the
    whole set would waste most of the work. The batch order is reshuffled every epoch (seeded)
    when ``shuffle``.

    Args:
        inputs: int ids ``[N, T]`` (0 = padding), or a tuple of such arrays (e.g. the two sides
            of sentence pairs), batched alike.
        labels: ``[N]``.
        batch_size: rows per batch.
        seed: of the per-epoch shuffles.
        shuffle: reshuffle the batch order every epoch.
    """

    def __init__(self, inputs, labels, batch_size, seed, shuffle=True):
        super().__init__()
        parts = inputs if isinstance(inputs, tuple) else (inputs,)
        lengths = np.max([(part > 0).sum(axis=1) for part in parts], axis=0)
        order = np.argsort(lengths, kind="stable")
        self.batches = []
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            width = max(1, int(lengths[rows].max()))
            cut = tuple(part[rows, :width] for part in parts)
            self.batches.append((cut if isinstance(inputs, tuple) else cut[0], labels[rows]))
        self.rng = np.random.default_rng(seed)
        self.shuffle = shuffle
        self.order = np.arange(len(self.batches))
        self.on_epoch_end()

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[self.order[index]]

    def width(self, index):
        """The padded length of batch ``index`` (in the stored order)."""
        inputs = self.batches[index][0]
        return (inputs[0] if isinstance(inputs, tuple) else inputs).shape[1]

    def on_epoch_end(self):
        if self.shuffle:
            self.rng.shuffle(self.order)
        # Keras reads the input signature off the first two batches: give them different widths
        # (when there are two) so that the width is a dynamic axis, not the first batch's.
        widths = [self.width(i) for i in self.order]
        other = next((n for n, w in enumerate(widths) if w != widths[0]), None)
        if other is not None:
            self.order[[1, other]] = self.order[[other, 1]]
