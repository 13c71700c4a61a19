"""Images for GLoMo's 2-D path: scikit-learn's digits, CIFAR-10 through tensorflow-datasets, and
a generated planted corpus whose true pixel graph is known.

Every loader returns float32 images ``[N, H, W, C]`` with values in ``[0, 1]`` (what
:class:`~glomo_tf.GraphPredictor2D` and :class:`~glomo_tf.GlomoPretrainer2D` take) and the
number of discrete levels the values come from (the pretrainer's ``levels``).

The planted corpus (:func:`generate_planted_images`). Pixel levels::

    w0 .. w{F-1}           filler (noise) levels, drawn uniformly
    B1 .. B{S}             slot markers
    K1.0 .. K{S}.{P-1}     keys: key K{j}.{i} belongs to slot j and names value i
    v0 .. v{P-1}           values

Each image holds one span per slot (slots and values drawn without replacement), in a random
direction:

* **forward**: ``K{j}.{i}`` somewhere at least two rows *above* the receiver ``t``; ``B{j}`` left
  of ``t`` and ``v{i}`` at ``t``. The forward features at ``t`` see the pixels before ``t`` in
  raster order, the marker included but not the value, which they must predict from the key.
* **backward**: the mirror image: ``K{j}.{i}`` at least two rows *below* ``t``, ``B{j}`` right of
  ``t``, ``v{i}`` at ``t``.

The other spans' keys are distractors: only the slot tells them apart. The planted edge goes from
``t`` to the key; since a unit's features exclude the unit's own pixel (mask ``"A"``), the key's
information lives at the pixels that *read* it with the first masked 3x3 convolution: for the
forward direction ``k + 1``, ``k + W - 1``, ``k + W``, ``k + W + 1`` (right of and below the key),
mirrored backward (:func:`key_readers`). An edge is recovered when the strongest source of the
receiver's row is one of them (:func:`glomo_tf.evaluation.image_edge_recovery`);
:func:`~glomo_tf.evaluation.image_positional_baseline` is the best fixed 2-D offset by the same rule
and :func:`~glomo_tf.evaluation.image_chance_level` a uniformly random
admissible source.

The images come one-hot (``C`` = number of levels, each channel 0 or 1: ``levels=2`` for the
pretrainer), so the masked convolutions tell levels apart by channel, not by intensity.
"""

import dataclasses

import numpy as np

from glomo_tf.data import planted

FORWARD, BACKWARD = 0, 1
DIRECTIONS = planted.DIRECTIONS
# sklearn's digits are counts 0..16 of an 8x8 grid of 4x4 blocks.
DIGIT_LEVELS = 17
CIFAR10_LEVELS = 256
BUILTIN_PLANTED_SEEDS = {"train": 2017, "test": 2018}


# ---------------------------------------------------------------------------------- real images
def load_digits_images():
    """scikit-learn's 1,797 handwritten digits (they ship with scikit-learn: no download).

    Returns:
        ``(images, labels, levels)``: float32 ``[1797, 8, 8, 1]`` in ``[0, 1]`` (value / 16),
        int64 ``[1797]`` classes 0-9, and ``17`` (:data:`DIGIT_LEVELS`).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("The digits come from scikit-learn: pip install glomo_tf[sklearn]  "
                          "(or: pip install scikit-learn).") from None
    digits = load_digits()
    images = (digits.images / (DIGIT_LEVELS - 1)).astype("float32")[..., None]
    return images, digits.target.astype("int64"), DIGIT_LEVELS


def load_cifar10(split="train", data_dir=None, download=True):
    """A CIFAR-10 split through tensorflow-datasets, read into memory.

    Args:
        split: a tfds split of ``cifar10``: ``"train"``, ``"test"``, ``"train[:42000]"``, ...
        data_dir: tfds data directory (tfds' default when None).
        download: let tfds download and prepare the data when missing.

    Returns:
        ``(images, labels, levels)``: float32 ``[N, 32, 32, 3]`` in ``[0, 1]`` (value / 255),
        int64 ``[N]`` classes 0-9, and ``256`` (:data:`CIFAR10_LEVELS`).
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ImportError(
            "Reading CIFAR-10 needs tensorflow-datasets: pip install glomo_tf[datasets]  "
            "(or: pip install tensorflow-datasets==4.9.10).") from None
    dataset = tfds.load("cifar10", split=split, data_dir=data_dir, download=download,
                        as_supervised=True, shuffle_files=False)
    images, labels = [], []
    for batch_images, batch_labels in dataset.batch(1024).as_numpy_iterator():
        images.append(batch_images)
        labels.append(batch_labels)
    images = np.concatenate(images) if images else np.zeros((0, 32, 32, 3), np.uint8)
    labels = np.concatenate(labels) if labels else np.zeros((0,), np.int64)
    return ((images.astype("float32") / (CIFAR10_LEVELS - 1)), labels.astype("int64"),
            CIFAR10_LEVELS)


# ---------------------------------------------------------------------------------- planted
@dataclasses.dataclass(frozen=True)
class PlantedImageLevels:
    """The level ids of the planted corpus (see the module docstring for the layout)."""

    num_slots: int
    num_values: int
    num_fillers: int

    @property
    def size(self):
        return self.num_fillers + self.num_slots * (1 + self.num_values) + self.num_values

    def filler(self, i):
        return i

    def marker(self, slot):
        return self.num_fillers + slot

    def key(self, slot, value):
        return self.num_fillers + self.num_slots + slot * self.num_values + value

    def value(self, value):
        return self.num_fillers + self.num_slots * (1 + self.num_values) + value

    def name(self, level):
        level = int(level)
        if level < self.num_fillers:
            return f"w{level}"
        level -= self.num_fillers
        if level < self.num_slots:
            return f"B{level + 1}"
        level -= self.num_slots
        if level < self.num_slots * self.num_values:
            return f"K{level // self.num_values + 1}.{level % self.num_values}"
        return f"v{level - self.num_slots * self.num_values}"


@dataclasses.dataclass(frozen=True)
class PlantedImages:
    """A planted image corpus.

    Attributes:
        levels: int ``[N, H, W]`` level ids.
        edges: int32 ``[E, 4]`` planted edges ``(image, direction, receiver, key)``, the receiver
            and key as raster indices ``r * W + c``.
        vocabulary: the :class:`PlantedImageLevels`.
    """

    levels: np.ndarray
    edges: np.ndarray
    vocabulary: PlantedImageLevels

    @property
    def shape(self):
        return self.levels.shape[1:]

    def one_hot(self):
        """float32 ``[N, H, W, levels]``: the images the predictor and pretrainer take."""
        return np.eye(self.vocabulary.size, dtype="float32")[self.levels]


def generate_planted_images(num_images, height=10, width=10, num_slots=3, num_values=4,
                            num_fillers=6, seed=0):
    """Images with one planted span per slot (see the module docstring).

    Raises ``ValueError`` when the sizes leave no room: at least 5 rows, 4 columns, and
    ``num_values >= num_slots`` (values are drawn without replacement).
    """
    if height < 5 or width < 4:
        raise ValueError(f"planted images need at least 5 rows and 4 columns, got "
                         f"{height}x{width}.")
    if num_slots < 1 or num_fillers < 1 or num_values < num_slots:
        raise ValueError(f"need num_slots >= 1, num_fillers >= 1 and num_values >= num_slots "
                         f"(values are drawn without replacement); got {num_slots}, "
                         f"{num_fillers}, {num_values}.")
    vocabulary = PlantedImageLevels(num_slots, num_values, num_fillers)
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, num_fillers, (num_images, height, width))
    edges = []
    for n in range(num_images):
        taken = np.zeros((height, width), bool)  # special pixels and their 8-neighbourhoods
        values = rng.choice(num_values, num_slots, replace=False)
        for slot in range(num_slots):
            direction = int(rng.integers(2))
            key, receiver = _place_span(rng, taken, direction)
            (kr, kc), (tr, tc) = key, receiver
            marker_col = tc - 1 if direction == FORWARD else tc + 1
            levels[n, kr, kc] = vocabulary.key(slot, values[slot])
            levels[n, tr, marker_col] = vocabulary.marker(slot)
            levels[n, tr, tc] = vocabulary.value(values[slot])
            for r, c in (key, receiver, (tr, marker_col)):
                taken[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2] = True
            edges.append((n, direction, tr * width + tc, kr * width + kc))
    edges = np.array(edges, np.int32).reshape(-1, 4)
    order = np.lexsort((edges[:, 2], edges[:, 1], edges[:, 0]))
    return PlantedImages(levels, edges[order], vocabulary)


def builtin_planted_images(split="train", num_images=None, **kwargs):
    """The planted corpus with a fixed seed per split (``"train"``: 2048 images by default,
    ``"test"``: 256, a different seed); other arguments go to :func:`generate_planted_images`."""
    if split not in BUILTIN_PLANTED_SEEDS:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    if num_images is None:
        num_images = 2048 if split == "train" else 256
    return generate_planted_images(num_images, seed=BUILTIN_PLANTED_SEEDS[split], **kwargs)


def _place_span(rng, taken, direction, attempts=1000):
    """Free positions ``(key, receiver)`` of a span; the key two or more rows away."""
    height, width = taken.shape
    for _ in range(attempts):
        tr = int(rng.integers(height))
        tc = int(rng.integers(1, width)) if direction == FORWARD else int(rng.integers(width - 1))
        rows = np.arange(0, tr - 1) if direction == FORWARD else np.arange(tr + 2, height)
        if not len(rows):
            continue
        kr, kc = int(rng.choice(rows)), int(rng.integers(width))
        marker_col = tc - 1 if direction == FORWARD else tc + 1
        if not (taken[kr, kc] or taken[tr, tc] or taken[tr, marker_col]):
            return (kr, kc), (tr, tc)
    raise ValueError(f"could not place a span in a {height}x{width} image; use larger images "
                     "or fewer slots.")


# ---------------------------------------------------------------------------------- recovery
def key_readers(key, direction, height, width):
    """Raster indices of the pixels whose first masked 3x3 convolution reads pixel ``key``.

    Forward (mask ``"A"`` reads the row above and the left neighbour): ``key + 1``, and the three
    pixels below it; backward: the mirror image. Pixels outside the image are left out.
    """
    r, c = divmod(int(key), width)
    sign = 1 if direction == FORWARD else -1
    cells = [(r, c + sign)] + [(r + sign, c + dc) for dc in (-1, 0, 1)]
    return [rr * width + cc for rr, cc in cells if 0 <= rr < height and 0 <= cc < width]
