"""The metrics of the project, in one module.

* Downstream results (``glomo transfer``, the ablations): a run is a dict ``{"variant", "seed",
  "accuracy", ...}``; the functions here turn runs into per-seed accuracies, summaries, paired
  comparisons (mean difference, wins/ties/losses, paired t and its two-sided p from
  ``scipy.stats.t``) and Markdown tables.
* Graphs against known edges: the share of planted receivers whose strongest source is the
  planted one (:func:`edge_recovery`, on :mod:`glomo_tf.data.planted`'s corpus;
  :func:`image_edge_recovery` on the planted images), against the best fixed-offset rule and
  chance.
"""

import math

import numpy as np
from scipy import stats

from glomo_tf import hparams

FORWARD, BACKWARD = 0, 1
DIRECTIONS = hparams.DIRECTIONS


def per_seed_accuracy(runs, variant, metric="accuracy"):
    """``{seed: accuracy}`` of a variant (the mean over folds with k-fold splits); ``metric``
    names another figure of the runs (``"f1"``, ``"test_hard_accuracy"``) to read instead."""
    by_seed = {}
    for r in runs:
        if r["variant"] == variant and r.get(metric) is not None:
            by_seed.setdefault(r["seed"], []).append(r[metric])
    return {seed: float(np.mean(values)) for seed, values in by_seed.items()}


def paired_t(differences):
    """Paired t statistic ``mean(d) / (std(d, ddof=1) / sqrt(n))`` of per-seed differences;
    None for fewer than two pairs, +-inf when every difference is the same non-zero value."""
    d = np.asarray(differences, np.float64)
    if d.size < 2:
        return None
    mean, std = d.mean(), d.std(ddof=1)
    if std <= 1e-12 * max(1.0, abs(mean)):  # equal differences, up to round-off
        return 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return float(mean / (std / math.sqrt(d.size)))


def two_sided_p(t, n):
    """Two-sided p-value ``P(|T| >= |t|)`` of a paired t statistic, ``T`` Student's t with
    ``n - 1`` degrees of freedom (``scipy.stats.t``); None when undefined (fewer than two
    pairs, or all differences equal)."""
    if t is None or not math.isfinite(t) or n < 2:
        return None
    return float(2.0 * stats.t.sf(abs(t), n - 1))


def paired_comparison(own, reference):
    """``own`` against ``reference`` (both ``{seed: accuracy}``) over the seeds both have: the
    per-seed differences, their mean, wins/ties/losses, paired t and p; None without a shared
    seed."""
    seeds = sorted(set(own) & set(reference))
    if not seeds:
        return None
    d = np.array([own[s] - reference[s] for s in seeds])
    t = paired_t(d)
    return {"seeds": len(seeds), "mean_difference": float(d.mean()),
            "wins": int((d > 0).sum()), "ties": int((d == 0).sum()), "losses": int((d < 0).sum()),
            "t": t, "p": two_sided_p(t, len(seeds)),
            "differences": {str(s): float(x) for s, x in zip(seeds, d)}}


def accuracy_summary(accuracies):
    """Seeds, mean, std (ddof=1; 0 for one seed), min and max of per-seed accuracies."""
    return {"seeds": len(accuracies), "mean": float(np.mean(accuracies)),
            "std": float(np.std(accuracies, ddof=1)) if len(accuracies) > 1 else 0.0,
            "min": float(np.min(accuracies)), "max": float(np.max(accuracies))}


def summarize(runs, variants, reference="baseline", metric="accuracy"):
    """Per variant: seeds, mean and std (ddof=1) of the per-seed accuracies; per other variant
    (GLoMo or related model): the paired comparison with ``reference`` over the seeds both have.
    ``metric``: the runs' figure to summarise (default ``"accuracy"``)."""
    summary = {"variants": {}, "paired": {}}
    for variant in variants:
        accuracies = list(per_seed_accuracy(runs, variant, metric).values())
        if accuracies:
            summary["variants"][variant] = accuracy_summary(accuracies)
    reference_accuracy = per_seed_accuracy(runs, reference, metric)
    for variant in variants:
        if variant == reference:
            continue
        paired = paired_comparison(per_seed_accuracy(runs, variant, metric), reference_accuracy)
        if paired is not None:
            summary["paired"][variant] = paired
    # Learned graphs against uniform ones: what the graphs' structure adds over the same fusion;
    # ``uniform`` mixes at the embeddings, ``uniform_rnn`` at glomo_rnn's place.
    for uniform_variant, learned in (("uniform", hparams.PREDICTOR_VARIANTS),
                                     ("uniform_rnn", ("glomo_rnn",))):
        uniform = (per_seed_accuracy(runs, uniform_variant, metric)
                   if reference != uniform_variant else {})
        for variant in variants:
            if variant in learned and uniform:
                paired = paired_comparison(per_seed_accuracy(runs, variant, metric), uniform)
                if paired is not None:
                    summary.setdefault(f"paired_with_{uniform_variant}", {})[variant] = paired
    return summary


def format_t(t):
    if t is None:
        return "n/a"
    if math.isinf(t):
        return "+inf" if t > 0 else "-inf"
    return f"{t:+.2f}"


def format_markdown(summary, dataset, split_description, reference="baseline",
                    metric="accuracy"):
    lines = [f"## {dataset}: test {metric.replace('_', ' ')} ({split_description})", "",
             f"| variant | seeds | {metric.replace('_', ' ')} (mean ± std) | min | max |",
             "|---|---:|---:|---:|---:|"]
    for variant, s in summary["variants"].items():
        lines.append(f"| {variant} | {s['seeds']} | {100 * s['mean']:.2f} ± {100 * s['std']:.2f} "
                     f"| {100 * s['min']:.2f} | {100 * s['max']:.2f} |")
    lines += _paired_table(
        summary["paired"], reference,
        f"Paired with the {reference} on the same seeds and splits (difference in "
        f"{metric.replace('_', ' ')} points; "
        "t = mean(d) / (std(d) / sqrt(n)), n - 1 degrees of freedom):")
    lines += _paired_table(
        summary.get("paired_with_uniform", {}), "uniform",
        "GLoMo variants paired with the uniform graph (the same fusion without learned structure):")
    lines += _paired_table(
        summary.get("paired_with_uniform_rnn", {}), "uniform_rnn",
        "The GLoMo variant on the RNN states paired with the uniform graph at the same place:")
    return "\n".join(lines) + "\n"


def _paired_table(paired, reference, intro):
    if not paired:
        return []
    lines = ["", intro, "", f"| variant - {reference} | seeds | mean difference | "
             "wins / ties / losses | paired t | p (two-sided) |", "|---|---:|---:|---:|---:|---:|"]
    for variant, p in paired.items():
        lines.append(f"| {variant} | {p['seeds']} | {paired_cells(p)} |")
    return lines


def paired_cells(paired):
    """``mean difference | wins / ties / losses | t | p`` of a :func:`paired_comparison`."""
    pvalue = "n/a" if paired["p"] is None else f"{paired['p']:.3f}"
    return (f"{100 * paired['mean_difference']:+.2f} | {paired['wins']} / {paired['ties']} / "
            f"{paired['losses']} | {format_t(paired['t'])} | {pvalue}")


# ---------------------------------------------------------------------- graphs against known edges
# The planted corpus (glomo_tf.data.planted): edges [E, 4] (sequence, direction, receiver, source).
def planted_rows(graphs, edges):
    """The graph rows of the planted receivers: ``[E, ...extra, T]``.

    Args:
        graphs: ``[N, 2, ...extra, T, T]`` array (e.g. ``[N, 2, L, K, T, T]`` from
            ``GlomoPretrainer``), row-stochastic over sources.
        edges: ``[E, 4]`` planted edges ``(sequence, direction, receiver, source)``.
    """
    graphs = np.asarray(graphs)
    edges = np.asarray(edges)
    # Advanced indices separated by the ellipsis: the edge dimension comes first.
    return graphs[edges[:, 0], edges[:, 1], ..., edges[:, 2], :]


def recovery_from_rows(rows, sources):
    """Per-edge hits: ``[E, ...extra]`` bool, True where a row's strongest source is the planted one.

    A row with no weight at all (no admissible source with positive score) counts as a miss.
    """
    rows = np.asarray(rows)
    sources = np.asarray(sources).reshape((-1,) + (1,) * (rows.ndim - 2))
    strongest = np.argmax(rows, axis=-1)
    return (strongest == sources) & (rows.max(axis=-1) > 0)


def edge_recovery(graphs, edges):
    """Share of planted receivers whose strongest edge points at the planted source.

    Args:
        graphs: ``[N, 2, ...extra, T, T]`` (e.g. ``[N, 2, L, K, T, T]``).
        edges: ``[E, 4]`` planted edges.

    Returns:
        ``[2, ...extra]`` float array: the share per direction (and layer, head, ...). A direction
        with no planted edge gets NaN.
    """
    edges = np.asarray(edges)
    hits = recovery_from_rows(planted_rows(graphs, edges), edges[:, 3])
    return shares_by_direction(hits, edges)


def shares_by_direction(hits, edges):
    """``[2, ...]`` mean of per-edge ``hits [E, ...]`` within each direction (NaN if none)."""
    hits = np.asarray(hits, np.float64)
    out = []
    for direction in (FORWARD, BACKWARD):
        chosen = hits[np.asarray(edges)[:, 1] == direction]
        out.append(chosen.mean(axis=0) if len(chosen) else np.full(hits.shape[1:], np.nan))
    return np.stack(out)


def positional_baseline(edges):
    """The best share any fixed-offset rule achieves, per direction.

    A positional rule points every receiver ``t`` at ``t + offset``; the best offset is the most
    common planted ``source - receiver``, so its share is an upper bound for every rule of that kind
    (chosen on the very data it is scored on).

    Returns:
        ``{"forward": {"offset": int, "share": float}, "backward": {...}}``.
    """
    edges = np.asarray(edges)
    result = {}
    for direction, name in enumerate(DIRECTIONS):
        offsets = edges[edges[:, 1] == direction, 3] - edges[edges[:, 1] == direction, 2]
        if not len(offsets):
            result[name] = {"offset": None, "share": float("nan")}
            continue
        values, counts = np.unique(offsets, return_counts=True)
        best = int(np.argmax(counts))
        result[name] = {"offset": int(values[best]), "share": float(counts[best] / len(offsets))}
    return result


def chance_level(edges, padding_mask):
    """Expected share of a rule that picks a uniformly random admissible source, per direction.

    The mean over planted receivers of ``1 / #admissible sources`` (forward: real ``s < t``,
    backward: real ``s > t``).

    Args:
        edges: ``[E, 4]`` planted edges.
        padding_mask: bool ``[N, T]``, True at real units.
    """
    return _uniform_pick_share(edges, padding_mask)


def same_type_chance(edges, token_ids, vocabulary):
    """Expected share of a rule that knows which units are keys but not which key: per direction.

    The rule picks a uniformly random *key* among the admissible sources; its share is the mean over
    planted receivers of ``1 / #keys on the admissible side``. A graph above this level matches the
    slot, not just the kind of unit.
    """
    return _uniform_pick_share(edges, vocabulary.is_key(token_ids))


def _uniform_pick_share(edges, candidates):
    """Mean over edges of ``1 / #candidates`` on the admissible side of the receiver."""
    edges = np.asarray(edges)
    candidates = np.asarray(candidates, bool)
    positions = np.arange(candidates.shape[1])
    result = {}
    for direction, name in enumerate(DIRECTIONS):
        chosen = edges[edges[:, 1] == direction]
        if not len(chosen):
            result[name] = float("nan")
            continue
        side = (positions[None] < chosen[:, 2:3] if direction == FORWARD
                else positions[None] > chosen[:, 2:3])
        counts = (candidates[chosen[:, 0]] & side).sum(axis=1)
        result[name] = float(np.mean(1.0 / np.maximum(counts, 1)))
    return result


# ---------------------------------------------------------------------- the planted images
# glomo_tf.data.images: a receiver's graph row hits when its strongest source reads the key.
def _reader_mask(edges, height, width):
    """bool ``[E, T]``: the readers of each edge's key."""
    from glomo_tf.data.images import key_readers

    mask = np.zeros((len(edges), height * width), bool)
    for e, (_, direction, _, key) in enumerate(np.asarray(edges)):
        mask[e, key_readers(key, direction, height, width)] = True
    return mask


def image_edge_recovery(graphs, corpus):
    """Share of planted receivers whose strongest source reads the planted key.

    Args:
        graphs: ``[N, 2, ...extra, T, T]`` (e.g. ``[N, 2, L, K, T, T]``).
        corpus: the :class:`~glomo_tf.data.images.PlantedImages` the graphs were computed on.

    Returns:
        ``[2, ...extra]`` shares per direction (NaN for a direction without planted edges).
    """
    height, width = corpus.shape
    rows = planted_rows(graphs, corpus.edges)  # [E, ...extra, T]
    readers = _reader_mask(corpus.edges, height, width)
    strongest = np.argmax(rows, axis=-1)  # [E, ...extra]
    hit = np.take_along_axis(readers, strongest.reshape(len(readers), -1), axis=1)
    hit = hit.reshape(strongest.shape)
    return shares_by_direction(hit & (rows.max(axis=-1) > 0), corpus.edges)


def image_positional_baseline(corpus):
    """The best share a fixed 2-D offset rule achieves, per direction.

    A positional rule points every receiver ``(r, c)`` at ``(r + dr, c + dc)``; the best offset,
    chosen on the corpus itself, is an upper bound for every rule of that kind.

    Returns:
        ``{"forward": {"offset": [dr, dc], "share": float}, "backward": {...}}``.
    """
    from glomo_tf.data.images import key_readers

    height, width = corpus.shape
    result = {}
    for direction, name in enumerate(DIRECTIONS):
        edges = corpus.edges[corpus.edges[:, 1] == direction]
        counts = {}
        for _, _, receiver, key in edges:
            tr, tc = divmod(int(receiver), width)
            for reader in key_readers(key, direction, height, width):
                rr, rc = divmod(reader, width)
                counts[(rr - tr, rc - tc)] = counts.get((rr - tr, rc - tc), 0) + 1
        if not counts:
            result[name] = {"offset": None, "share": float("nan")}
            continue
        offset = max(sorted(counts), key=counts.get)
        result[name] = {"offset": list(offset), "share": counts[offset] / len(edges)}
    return result


def image_chance_level(corpus):
    """Expected share of a uniformly random admissible source (forward ``s < t``, backward
    ``s > t``): the mean over planted receivers of ``#readers / #admissible``, per direction."""
    height, width = corpus.shape
    length = height * width
    readers = _reader_mask(corpus.edges, height, width).sum(axis=1)
    receivers = corpus.edges[:, 2]
    admissible = np.where(corpus.edges[:, 1] == FORWARD, receivers, length - 1 - receivers)
    share = readers / np.maximum(admissible, 1)
    return {name: float(share[corpus.edges[:, 1] == z].mean())
            for z, name in enumerate(DIRECTIONS)}


def image_recovery_report(graphs, corpus):
    """Recovery of ``graphs [N, 2, L, K, T, T]`` on ``corpus``, per direction: the share per
    (layer, head), the best head, the positional bound and chance (layers, heads from 1)."""
    per_head = image_edge_recovery(graphs, corpus)  # [2, L, K]
    positional = image_positional_baseline(corpus)
    chance = image_chance_level(corpus)
    report = {}
    for z, name in enumerate(DIRECTIONS):
        layer, head = np.unravel_index(int(np.nanargmax(per_head[z])), per_head[z].shape)
        report[name] = {
            "planted_edges": int(np.sum(corpus.edges[:, 1] == z)),
            "share_per_layer_head": np.round(per_head[z], 4).tolist(),
            "best_head": {"layer": int(layer) + 1, "head": int(head) + 1,
                          "share": float(per_head[z, layer, head])},
            "positional_baseline": positional[name],
            "chance": chance[name],
        }
    return report
