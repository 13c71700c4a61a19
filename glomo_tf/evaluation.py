"""Paired statistics and reports of downstream results (``glomo transfer``, the ablations).

A run is a dict ``{"variant", "seed", "accuracy", ...}``; the functions here turn runs into per-seed
accuracies, summaries, paired comparisons (mean difference, wins/ties/losses, paired t and its
two-sided p from a closed-form Student t) and Markdown tables.
"""

import math

import numpy as np

from glomo_tf import hparams


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
    """Two-sided p-value of a paired t statistic with ``n - 1`` degrees of freedom; None when
    undefined (fewer than two pairs, or all differences equal)."""
    if t is None or not math.isfinite(t) or n < 2:
        return None
    return 1.0 - student_t_central(abs(t), n - 1)


def student_t_central(t, dof):
    """``P(|T| < t)`` for Student's t with an integer ``dof >= 1``, in closed form
    (Abramowitz & Stegun 26.7.3 and 26.7.4): with ``theta = atan(t / sqrt(dof))``,
    odd ``dof``: ``2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))`` (``dof - 3``
    powers), even ``dof``: ``sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)`` (``dof - 2`` powers)."""
    theta = math.atan(t / math.sqrt(dof))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    term, total = 1.0, 1.0
    if dof % 2:
        if dof == 1:
            return 2.0 / math.pi * theta
        for k in range(2, dof - 1, 2):  # 2/3, 2*4/(3*5), ...
            term *= k / (k + 1) * cos2
            total += term
        return 2.0 / math.pi * (theta + sin * math.cos(theta) * total)
    for k in range(1, dof - 2, 2):  # 1/2, 1*3/(2*4), ...
        term *= k / (k + 1) * cos2
        total += term
    return sin * total


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
    # Learned graphs against uniform ones: what the graphs' structure adds over the same fusion.
    uniform = per_seed_accuracy(runs, "uniform", metric) if reference != "uniform" else {}
    for variant in variants:
        if variant in hparams.PREDICTOR_VARIANTS and uniform:
            paired = paired_comparison(per_seed_accuracy(runs, variant, metric), uniform)
            if paired is not None:
                summary.setdefault("paired_with_uniform", {})[variant] = paired
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
