"""A generated corpus with planted long-range dependencies whose true graph is known.

``glomo demo`` pretrains on this corpus and checks that the learned graphs find the planted edges.
Nothing is downloaded or shipped as a data file: the *built-in corpus* is this generator run with
fixed seeds (:data:`BUILTIN_TRAIN_SEED`, :data:`BUILTIN_TEST_SEED`), so every installation produces
the same windows.

Vocabulary (id 0 is padding)::

    B1 .. B{S}                        slot markers, S = num_slots
    K1.00 .. K{S}.{P-1}               keys: key K{j}.{i} belongs to slot j and names value i
    v00 .. v{P-1}                     values (P = num_pairs)
    w00 .. w{F-1}                     filler words (F = num_fillers)

Fillers follow a Zipf law (exponent 1.1) with a little local structure: with probability
``bigram_prob`` the next filler is the fixed successor ``w_{(i+1) mod F}`` of the previous one, so
short-range edges are useful too. A planted dependency is one of two mirror-image spans, with
``gap`` filler units in between (uniform in ``[min_gap, max_gap]``):

* **forward** span ``K{j}.{i}  <gap>  B{j}  v{i}``: to predict ``v{i}`` (the unit after ``B{j}``)
  the forward decoder started at ``B{j}`` needs the key, which only the earlier ``K{j}.{i}`` carries.
  Planted forward edge: receiver ``B{j}`` -> source ``K{j}.{i}``.
* **backward** span ``v{i}  B{j}  <gap>  K{j}.{i}``: to predict ``v{i}`` (the unit before ``B{j}``)
  the backward decoder started at ``B{j}`` needs the later key. Planted backward edge: receiver
  ``B{j}`` -> source ``K{j}.{i}``.

The graph predictor finds the source by content alone: the receiver's query (window ending at
``B{j}``) and the source's key (window ending at ``K{j}.{i}``) share the slot ``j``. Slots and values
are drawn without replacement inside a window, so the slot tells the window's dependencies apart
(the graph predictor has no position encoding), and every window holds keys of other slots as
distractors: a rule that points at "a key" without matching the slot picks the right one only by
luck (:func:`same_type_chance`). The edge goes to the unit whose *embedding* carries the missing
information, because GLoMo's feature predictor propagates ``F^0`` = embeddings.

A rule that always points at a fixed relative offset recovers at most about ``1 / (max_gap -
min_gap + 1)`` of the planted edges; :func:`positional_baseline` computes that bound on the data and
:func:`chance_level` the expected share of a uniformly random admissible source.
"""

import dataclasses

import numpy as np

from glomo_tf import hparams

BUILTIN_TRAIN_SEED = 20180
BUILTIN_TEST_SEED = 20181
FORWARD, BACKWARD = 0, 1
DIRECTIONS = hparams.DIRECTIONS
ZIPF_EXPONENT = 1.1
# Columns of PlantedCorpus.edges.
EDGE_COLUMNS = ("sequence", "direction", "receiver", "source")


@dataclasses.dataclass(frozen=True)
class PlantedVocabulary:
    """Token ids and strings of the planted corpus (see the module docstring for the layout)."""

    num_slots: int
    num_pairs: int
    num_fillers: int

    @property
    def size(self):
        """Number of ids, padding included."""
        return 1 + self.num_slots * (1 + self.num_pairs) + self.num_pairs + self.num_fillers

    def marker(self, slot):
        return 1 + np.asarray(slot)

    def key(self, slot, pair):
        return 1 + self.num_slots + np.asarray(slot) * self.num_pairs + np.asarray(pair)

    def value(self, pair):
        return 1 + self.num_slots * (1 + self.num_pairs) + np.asarray(pair)

    def filler(self, index):
        return 1 + self.num_slots * (1 + self.num_pairs) + self.num_pairs + np.asarray(index)

    def is_key(self, token_ids):
        """Bool array: which of ``token_ids`` are keys."""
        token_ids = np.asarray(token_ids)
        return (token_ids >= self.key(0, 0)) & (token_ids < self.value(0))

    def strings(self):
        """``[size]`` token strings; index 0 is ``"<pad>"``."""
        width = len(str(max(self.num_pairs, self.num_fillers) - 1))
        return (["<pad>"]
                + [f"B{j + 1}" for j in range(self.num_slots)]
                + [f"K{j + 1}.{i:0{width}d}" for j in range(self.num_slots)
                   for i in range(self.num_pairs)]
                + [f"v{i:0{width}d}" for i in range(self.num_pairs)]
                + [f"w{i:0{width}d}" for i in range(self.num_fillers)])

    def decode(self, token_ids):
        """Token strings of one window (padding dropped)."""
        strings = self.strings()
        return [strings[int(i)] for i in np.asarray(token_ids) if i != 0]


@dataclasses.dataclass(frozen=True)
class PlantedCorpus:
    """Windows of token ids with their planted dependencies.

    Attributes:
        token_ids: int32 ``[N, T]``, no padding (every window is full).
        edges: int32 ``[E, 4]``, rows ``(sequence, direction, receiver, source)``: in window
            ``sequence``, the graph of ``direction`` (0 forward, 1 backward) should have its strongest
            edge from ``receiver`` (the ``B`` marker) to ``source`` (its key).
        spans: int32 ``[N, deps, 5]``, rows ``(direction, slot, pair, marker, key)``: the span's
            direction, ``B{slot}`` at position ``marker``, ``K{slot}.{pair}`` at ``key`` and
            ``v{pair}`` next to the marker (after it forward, before it backward); sorted by the
            span's first position.
        vocabulary: the :class:`PlantedVocabulary`.
    """

    token_ids: np.ndarray
    edges: np.ndarray
    spans: np.ndarray
    vocabulary: PlantedVocabulary

    def tokens(self, index):
        """Token strings of window ``index``."""
        return self.vocabulary.decode(self.token_ids[index])

    def edges_of(self, index, direction):
        """``[n, 2]`` (receiver, source) planted in window ``index`` for ``direction``."""
        rows = self.edges[(self.edges[:, 0] == index) & (self.edges[:, 1] == direction)]
        return rows[:, 2:]


def generate_planted_corpus(num_sequences, seq_len=48, deps_per_sequence=6, num_slots=6,
                            num_pairs=8, num_fillers=40, min_gap=2, max_gap=12, bigram_prob=0.5,
                            seed=0):
    """Generates :class:`PlantedCorpus` windows deterministically from ``seed`` (numpy).

    Args:
        num_sequences: int, windows to generate.
        seq_len: int, units per window ``T``.
        deps_per_sequence: int, planted dependencies per window, half of them forward (the odd one
            out drawn at random); at most ``num_slots`` and ``num_pairs``, and they must fit:
            ``3 * deps <= seq_len`` and ``max_gap + 3 <= seq_len``.
        num_slots, num_pairs, num_fillers: vocabulary sizes (see the module docstring).
        min_gap, max_gap: int, range of the number of fillers between a key and its marker.
        bigram_prob: float in ``[0, 1]``, probability that a filler is its predecessor's successor.
        seed: int, the generator's seed.

    Returns:
        A :class:`PlantedCorpus`.
    """
    if not 1 <= deps_per_sequence <= min(num_slots, num_pairs):
        raise ValueError(f"deps_per_sequence must be in [1, min(num_slots, num_pairs)], got "
                         f"{deps_per_sequence}.")
    if not 0 <= min_gap <= max_gap:
        raise ValueError(f"Need 0 <= min_gap <= max_gap, got {min_gap}, {max_gap}.")
    if 3 * deps_per_sequence > seq_len or max_gap + 3 > seq_len:
        raise ValueError(f"{deps_per_sequence} dependencies with gaps up to {max_gap} do not fit "
                         f"in windows of {seq_len} units.")
    if num_fillers < 1 or not 0.0 <= bigram_prob <= 1.0:
        raise ValueError("Need num_fillers >= 1 and bigram_prob in [0, 1].")
    vocab = PlantedVocabulary(num_slots, num_pairs, num_fillers)
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, num_fillers + 1) ** ZIPF_EXPONENT
    zipf /= zipf.sum()

    token_ids = np.zeros((num_sequences, seq_len), np.int32)
    spans = np.zeros((num_sequences, deps_per_sequence, 5), np.int32)
    for n in range(num_sequences):
        # Fillers everywhere first, then the spans written over them.
        fillers = rng.choice(num_fillers, size=seq_len, p=zipf)
        follow = rng.random(seq_len) < bigram_prob
        for t in range(1, seq_len):
            if follow[t]:
                fillers[t] = (fillers[t - 1] + 1) % num_fillers
        token_ids[n] = vocab.filler(fillers)
        slots = rng.choice(num_slots, size=deps_per_sequence, replace=False)
        pairs = rng.choice(num_pairs, size=deps_per_sequence, replace=False)
        directions = rng.permutation(np.arange(deps_per_sequence) % 2)
        placed = _place_spans(rng, seq_len, directions, min_gap, max_gap)
        for d, (direction, start) in enumerate(placed):
            length = 3 + int(start[1])
            if direction == FORWARD:  # K <gap> B v
                key, marker = start[0], start[0] + length - 2
                token_ids[n, marker + 1] = vocab.value(pairs[d])
            else:  # v B <gap> K
                marker, key = start[0] + 1, start[0] + length - 1
                token_ids[n, marker - 1] = vocab.value(pairs[d])
            token_ids[n, marker] = vocab.marker(slots[d])
            token_ids[n, key] = vocab.key(slots[d], pairs[d])
            spans[n, d] = (direction, slots[d], pairs[d], marker, key)
    return PlantedCorpus(token_ids, edges_from_spans(spans), spans, vocab)


def _place_spans(rng, seq_len, directions, min_gap, max_gap, attempts=1000):
    """Non-overlapping spans: ``[(direction, (start, gap))]`` sorted by start.

    A span covers ``gap + 3`` units; only its three planted units must be free, so spans may
    interleave (one can open inside another one's gap). Each is placed uniformly among the starts
    still free for a gap drawn uniformly from ``[min_gap, max_gap]``.
    """
    for _ in range(attempts):
        free = np.ones(seq_len, bool)
        placed = []
        for direction in directions:
            gap = int(rng.integers(min_gap, max_gap + 1))
            starts = np.arange(seq_len - gap - 2)
            # forward: K at s, B at s+gap+1, v at s+gap+2; backward: v at s, B at s+1, K at s+gap+2.
            offsets = (0, gap + 1, gap + 2) if direction == FORWARD else (0, 1, gap + 2)
            ok = np.logical_and.reduce([free[starts + o] for o in offsets])
            if not ok.any():
                break
            s = int(rng.choice(starts[ok]))
            free[[s + o for o in offsets]] = False
            placed.append((int(direction), (s, gap)))
        if len(placed) == len(directions):
            return sorted(placed, key=lambda item: item[1][0])
    raise ValueError(f"Could not place {len(directions)} dependencies with gaps in [{min_gap}, "
                     f"{max_gap}] in windows of {seq_len} units; use fewer or shorter ones.")


def edges_from_spans(spans):
    """``[E, 4]`` planted edges ``(sequence, direction, receiver, source)`` of ``[N, deps, 5]`` spans.

    Each span gives one edge in its own direction: its marker ``B`` (receiver) -> its key (source).
    Sorted by sequence, then direction, then receiver.
    """
    rows = [(n, direction, marker, key)
            for n, window in enumerate(np.asarray(spans))
            for direction, _, _, marker, key in window]
    edges = np.array(rows, np.int32).reshape(-1, 4)
    order = np.lexsort((edges[:, 2], edges[:, 1], edges[:, 0]))
    return edges[order]


def builtin_corpus(split="train", num_sequences=None, **kwargs):
    """The corpus that ships with the package: the generator with a fixed seed per split.

    ``split`` is ``"train"`` (default 2048 windows) or ``"test"`` (default 256 windows, a different
    seed, so held out). Other keyword arguments go to :func:`generate_planted_corpus`.
    """
    seeds = {"train": BUILTIN_TRAIN_SEED, "test": BUILTIN_TEST_SEED}
    if split not in seeds:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    if num_sequences is None:
        num_sequences = 2048 if split == "train" else 256
    return generate_planted_corpus(num_sequences, seed=seeds[split], **kwargs)
