"""``glomo transfer``: text classification with and without transferred GLoMo graphs.

Trains the classifier variants of :mod:`glomo_tf.models.classifier` (``baseline``,
``glomo_embeddings``, ``glomo_rnn``, ``uniform``, and the related models ``cn3`` and
``shared_private``) on a labelled dataset for several seeds, with ``model.fit`` (early stopping on
validation accuracy, best weights restored), and reports test accuracy per variant and a paired
comparison of each other variant with the baseline on the same seeds and splits.

The pretrained graph predictor and its tokenizer come from a ``glomo pretrain`` run
(``--run RUN_DIR``: ``RUN/graph_predictor.keras`` and ``RUN/tokenizer/``) or are given separately
(``--model FILE.keras --tokenizer DIR``). Every variant then reads the pretraining tokenizer's ids.
Without a predictor only ``--variants baseline uniform cn3 shared_private`` can run; the tokenizer
is then built from each split's training texts.

Splits: ``--split seeded`` (default) holds out a seeded 10% test set and carves a 10% validation
set from the rest; ``--split kfold --folds 10`` runs every fold (the seed shuffles the folds and
draws the validation set; a seed's accuracy is the mean over its folds). ``imdb`` and ``sst2`` use
their official test sets (SST-2: the GLUE validation split).

Outputs in ``--output-dir``: ``results.json`` (every run: dataset, variant, seed, fold, accuracy,
epochs run, seconds) and ``results.md`` (mean ± std accuracy per variant, paired comparison per
seed with the baseline: mean difference, wins/ties/losses, paired t statistic).

Examples::

    glomo transfer --run runs/wiki --dataset mr --seeds 0 1 2 3 4 --output-dir runs/wiki/mr
    glomo transfer --dataset subj --variants baseline uniform --split kfold --output-dir subj
    glomo transfer --dataset mr --variants baseline cn3 shared_private --seeds 0 1 2 3 4 \\
        --output-dir mr-related
    glomo transfer --run runs/wiki --dataset file --file reviews.tsv --text-column review \\
        --label-column stars --output-dir runs/wiki/reviews
"""

import json
import math
import os
import time

import numpy as np

from glomo_tf.cli import UsageError, add_pretrained_arguments, pretrained_paths

DATASETS = ("mr", "subj", "sst2", "sst5", "file", "imdb", "sst2_tfds")
TFDS_NAMES = {"imdb": "imdb_reviews", "sst2_tfds": "glue/sst2"}
# Datasets read from files with an official split: train for training, dev for validation.
SST_DATASETS = {"sst2": False, "sst5": True}  # name -> fine_grained
VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform", "cn3", "shared_private")
# Run when --variants is not given: the GLoMo comparison (the related models only on request).
DEFAULT_VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform")
PREDICTOR_VARIANTS = ("glomo_embeddings", "glomo_rnn")
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1


def register(subparsers):
    parser = subparsers.add_parser(
        "transfer", help="text classification with and without transferred graphs (results table)",
        description=__doc__.split("\n\n")[0])
    add_pretrained_arguments(parser)
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", required=True, metavar="|".join(DATASETS),
                      help="mr, subj (Pang & Lee), sst2, sst5 (SST sentences, official "
                           "train/dev/test), file (your own, --file), imdb, sst2_tfds (tfds)")
    data.add_argument("--data-dir", help="mr/subj/sst2/sst5: the folder holding the files "
                                         "(default: the project's ../shared/data); "
                                         "imdb/sst2_tfds: tfds data_dir")
    data.add_argument("--file", help="--dataset file: a .tsv/.csv file with a header, or a "
                                     "directory with one .txt file or sub-directory per class")
    data.add_argument("--text-column", default="text", help="text column of --file (default text)")
    data.add_argument("--label-column", default="label",
                      help="label column of --file (default label)")
    data.add_argument("--max-length", type=int, default=64, help="units kept per text (default 64)")
    exp = parser.add_argument_group("experiment")
    exp.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), metavar="VARIANT",
                     help=f"any of {' '.join(VARIANTS)} (default {' '.join(DEFAULT_VARIANTS)}); "
                          f"{' and '.join(PREDICTOR_VARIANTS)} need a pretrained predictor "
                          "(--run, or --model and --tokenizer)")
    exp.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    exp.add_argument("--split", choices=("seeded", "kfold"), default="seeded",
                     help="seeded 90/10 test split (default) or k-fold cross-validation")
    exp.add_argument("--folds", type=int, default=10, help="folds of --split kfold (default 10)")
    model = parser.add_argument_group("model and training")
    model.add_argument("--embedding-dim", type=int, default=128)
    model.add_argument("--rnn-units", type=int, default=128)
    model.add_argument("--attention-heads", type=int, default=4)
    model.add_argument("--dropout", type=float, default=0.3)
    model.add_argument("--num-mixtures", type=int, default=2)
    model.add_argument("--transfer-dropout", type=float, default=0.0,
                       help="dropout on GlomoTransfer's fused input [H ; M H ...] (GLoMo and "
                            "uniform variants; default 0.0)")
    model.add_argument("--epochs", type=int, default=10)
    model.add_argument("--patience", type=int, default=2,
                       help="epochs without a better validation accuracy before stopping")
    model.add_argument("--batch-size", type=int, default=50)
    model.add_argument("--learning-rate", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument("--output-dir", required=True, help="where results.json/.md are written")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                        help="model.fit verbosity (1: progress bar)")
    parser.set_defaults(func=run)
    return parser


# ---------------------------------------------------------------------------------- inputs
def _check_arguments(args):
    if args.dataset not in DATASETS:
        raise UsageError(f"Unknown --dataset {args.dataset!r}; choose one of {', '.join(DATASETS)}.")
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        raise UsageError(f"Unknown variant(s) {', '.join(unknown)}; choose from "
                         f"{' '.join(VARIANTS)}.")
    args.variants = list(dict.fromkeys(args.variants))
    args.seeds = list(dict.fromkeys(args.seeds))
    if args.dataset == "file" and not args.file:
        raise UsageError("--dataset file needs --file PATH (a .tsv/.csv file or a directory).")
    if args.file and args.dataset != "file":
        raise UsageError("--file is read with --dataset file only.")
    if args.split == "kfold" and (args.dataset in TFDS_NAMES or args.dataset in SST_DATASETS):
        raise UsageError(f"--dataset {args.dataset} has an official test set; use --split seeded.")
    if args.split == "kfold" and args.folds < 2:
        raise UsageError("--folds must be >= 2.")
    for flag in ("max_length", "epochs", "batch_size", "embedding_dim", "rnn_units",
                 "attention_heads", "num_mixtures"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1.")
    if args.patience < 0 or not 0.0 <= args.dropout < 1.0 or args.learning_rate <= 0:
        raise UsageError("--patience must be >= 0, --dropout in [0, 1), --learning-rate > 0.")
    if not 0.0 <= args.transfer_dropout < 1.0:
        raise UsageError(f"--transfer-dropout must be in [0, 1), got {args.transfer_dropout}.")


def _pretrained_paths(args):
    """``(model_path, tokenizer_path)`` or ``(None, None)`` without a pretraining run."""
    model, tokenizer = pretrained_paths(args)
    needing = [v for v in args.variants if v in PREDICTOR_VARIANTS]
    if model is None and needing:
        raise UsageError(f"The variant(s) {' '.join(needing)} need a pretrained graph "
                         "predictor: pass --run RUN_DIR (or --model and --tokenizer), or run "
                         "only --variants baseline uniform cn3 shared_private.")
    return model, tokenizer


def load_task(args):
    """``(texts, labels, class_names, official)``: ``official`` is None, or for datasets with an
    official split a dict with the test split's ``(texts, labels)`` under ``"test"`` and the
    validation split's under ``"validation"`` (None: carved from the training texts)."""
    from glomo_tf.data import labeled

    try:
        if args.dataset in SST_DATASETS:
            fine = SST_DATASETS[args.dataset]
            texts, labels, class_names = labeled.load_sst("train", fine, args.data_dir)
            dev = labeled.load_sst("dev", fine, args.data_dir)[:2]
            test = labeled.load_sst("test", fine, args.data_dir)[:2]
            return texts, labels, class_names, {"test": test, "validation": dev}
        if args.dataset == "mr":
            return (*labeled.load_mr(args.data_dir), None)
        if args.dataset == "subj":
            return (*labeled.load_subj(args.data_dir), None)
        if args.dataset == "file":
            return (*labeled.load_labeled_text(args.file, args.text_column, args.label_column),
                    None)
        name = TFDS_NAMES[args.dataset]
        _, _, train_split, test_split = labeled.TFDS_TEXT_DATASETS[name]
        texts, labels, class_names = labeled.load_tfds_text(name, train_split,
                                                            data_dir=args.data_dir)
        test_texts, test_labels, _ = labeled.load_tfds_text(name, test_split,
                                                            data_dir=args.data_dir)
        return texts, labels, class_names, {"test": (test_texts, test_labels), "validation": None}
    except (FileNotFoundError, ValueError, ImportError) as error:
        raise UsageError(str(error).replace("\n", " ")) from None


def splits(num_examples, split, folds, seed):
    """``[(fold, train, validation, test)]`` index arrays for one seed (``fold`` None when
    seeded); the validation set is carved from the training part."""
    from glomo_tf.data.labeled import kfold_splits, seeded_split

    if split == "kfold":
        parts = [(fold, train, test) for fold, (train, test)
                 in enumerate(kfold_splits(num_examples, folds, seed))]
    else:
        train, test = seeded_split(num_examples, TEST_FRACTION, seed)
        parts = [(None, train, test)]
    out = []
    for fold, train, test in parts:
        keep, validation = seeded_split(len(train), VALIDATION_FRACTION, seed)
        out.append((fold, train[keep], train[validation], test))
    return out


# ---------------------------------------------------------------------------------- training
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

    lengths = _lengths(ids)
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

    lengths = _lengths(ids)
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


def _lengths(ids):
    """Position of the last real unit + 1 of each row of ``ids`` (0 for an empty row)."""
    real = np.asarray(ids) != 0
    return np.where(real.any(axis=1), real.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def train_and_evaluate(model, train, validation, test, args, seed=0):
    """Compiles and fits ``model`` on ``(ids, labels)`` pairs; returns the test accuracy (the
    fraction of exact argmax hits, so equal counts give equal accuracies) and the epochs run.

    Training batches are length-bucketed and validation/test batches length-sorted, each cut to
    its longest text (see :func:`bucketed_training_batches`)."""
    import keras

    model.compile(optimizer=keras.optimizers.Adam(args.learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    stop = keras.callbacks.EarlyStopping(monitor="val_accuracy", mode="max",
                                         patience=args.patience, restore_best_weights=True)
    # Inference needs no gradients: twice the training batch (fewer steps, fewer partial batches).
    inference_batch = 2 * args.batch_size
    validation_data, _ = length_sorted_batches(*validation, inference_batch)
    history = model.fit(bucketed_training_batches(*train, args.batch_size, seed),
                        validation_data=validation_data, epochs=args.epochs,
                        shuffle=False,  # the bucketed dataset reshuffles itself every epoch
                        callbacks=[stop], verbose=args.verbose)
    test_data, order = length_sorted_batches(test[0], np.zeros(len(test[0]), "int64"),
                                             inference_batch)
    probabilities = np.empty((len(order), model.output_shape[-1]), "float32")
    probabilities[order] = model.predict(test_data, verbose=0)
    accuracy = float(np.mean(np.argmax(probabilities, axis=-1) == np.asarray(test[1])))
    return accuracy, len(history.history["loss"])


# ---------------------------------------------------------------------------------- report
def per_seed_accuracy(runs, variant):
    """``{seed: accuracy}`` of a variant (the mean over folds with k-fold splits)."""
    by_seed = {}
    for r in runs:
        if r["variant"] == variant:
            by_seed.setdefault(r["seed"], []).append(r["accuracy"])
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


def _two_sided_p(t, n):
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
            "t": t, "p": _two_sided_p(t, len(seeds)),
            "differences": {str(s): float(x) for s, x in zip(seeds, d)}}


def accuracy_summary(accuracies):
    """Seeds, mean, std (ddof=1; 0 for one seed), min and max of per-seed accuracies."""
    return {"seeds": len(accuracies), "mean": float(np.mean(accuracies)),
            "std": float(np.std(accuracies, ddof=1)) if len(accuracies) > 1 else 0.0,
            "min": float(np.min(accuracies)), "max": float(np.max(accuracies))}


def summarize(runs, variants, reference="baseline"):
    """Per variant: seeds, mean and std (ddof=1) of the per-seed accuracies; per other variant
    (GLoMo or related model): the paired comparison with ``reference`` over the seeds both have."""
    summary = {"variants": {}, "paired": {}}
    for variant in variants:
        accuracies = list(per_seed_accuracy(runs, variant).values())
        if accuracies:
            summary["variants"][variant] = accuracy_summary(accuracies)
    reference_accuracy = per_seed_accuracy(runs, reference)
    for variant in variants:
        if variant == reference:
            continue
        paired = paired_comparison(per_seed_accuracy(runs, variant), reference_accuracy)
        if paired is not None:
            summary["paired"][variant] = paired
    # Learned graphs against uniform ones: what the graphs' structure adds over the same fusion.
    uniform = per_seed_accuracy(runs, "uniform") if reference != "uniform" else {}
    for variant in variants:
        if variant in PREDICTOR_VARIANTS and uniform:
            paired = paired_comparison(per_seed_accuracy(runs, variant), uniform)
            if paired is not None:
                summary.setdefault("paired_with_uniform", {})[variant] = paired
    return summary


def format_t(t):
    if t is None:
        return "n/a"
    if math.isinf(t):
        return "+inf" if t > 0 else "-inf"
    return f"{t:+.2f}"


def format_markdown(summary, dataset, split_description, reference="baseline"):
    lines = [f"## {dataset}: test accuracy ({split_description})", "",
             "| variant | seeds | accuracy (mean ± std) | min | max |",
             "|---|---:|---:|---:|---:|"]
    for variant, s in summary["variants"].items():
        lines.append(f"| {variant} | {s['seeds']} | {100 * s['mean']:.2f} ± {100 * s['std']:.2f} "
                     f"| {100 * s['min']:.2f} | {100 * s['max']:.2f} |")
    lines += _paired_table(
        summary["paired"], reference,
        f"Paired with the {reference} on the same seeds and splits (difference in accuracy points; "
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


def _write_results(output_dir, config, runs, variants, split_description):
    summary = summarize(runs, variants)
    with open(os.path.join(output_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump({"config": config, "runs": runs, "summary": summary}, handle, indent=2)
    markdown = format_markdown(summary, config["dataset"], split_description)
    with open(os.path.join(output_dir, "results.md"), "w", encoding="utf-8") as handle:
        handle.write(markdown)
    return markdown


# ---------------------------------------------------------------------------------- main
def run(args):
    _check_arguments(args)
    model_path, tokenizer_path = _pretrained_paths(args)
    texts, labels, class_names, official = load_task(args)
    if len(class_names) < 2 or len(np.unique(labels)) < 2:
        raise UsageError(f"The {args.dataset} data holds a single class: a classifier needs two.")
    try:
        os.makedirs(args.output_dir, exist_ok=True)
    except OSError as error:
        raise UsageError(f"Cannot create --output-dir {args.output_dir!r}: {error}") from None

    import keras

    from glomo_tf.data.vocabulary import Tokenizer, check_vocabulary_matches
    from glomo_tf.models.classifier import build_classifier
    from glomo_tf.saving import load_graph_predictor

    predictor = tokenizer = None
    if model_path:
        try:
            tokenizer = Tokenizer.load(tokenizer_path)
            predictor = load_graph_predictor(model_path)
            check_vocabulary_matches(tokenizer.vocabulary, predictor)
        except (ValueError, FileNotFoundError) as error:
            raise UsageError(str(error).replace("\n", " ")) from None
    fixed_ids = encode(tokenizer, texts, args.max_length) if tokenizer else None
    if official is not None and official["validation"] is not None:
        split_description = "official train/dev/test split"
    elif official is not None:
        split_description = "official test split, 10% of training for validation"
    elif args.split == "kfold":
        split_description = f"{args.folds}-fold cross-validation, mean over folds per seed"
    else:
        split_description = "seeded 90/10 split, 10% of training for validation"
    print(f"{args.dataset}: {len(texts)} examples, classes {class_names}; variants "
          f"{' '.join(args.variants)}; seeds {' '.join(map(str, args.seeds))}; {split_description}")
    config = {k: v for k, v in vars(args).items() if k != "func"}
    config["class_names"] = class_names
    runs = []
    for seed in args.seeds:
        if official is not None and official["validation"] is not None:
            seed_splits = [(None, np.arange(len(texts)), None, None)]
        elif official is not None:
            keep, validation = seeded_split_indices(len(texts), seed)
            seed_splits = [(None, keep, validation, None)]
        else:
            try:
                seed_splits = splits(len(texts), args.split, args.folds, seed)
            except ValueError as error:
                raise UsageError(str(error)) from None
        for fold, train, validation, test in seed_splits:
            if tokenizer is None:  # no pretraining: the task's own training texts
                split_tokenizer = Tokenizer.build([texts[i] for i in train])
                ids = encode(split_tokenizer, texts, args.max_length)
                vocabulary_size = split_tokenizer.vocabulary_size
            else:
                ids, vocabulary_size = fixed_ids, tokenizer.vocabulary_size
            test_data = (official_split(official["test"], tokenizer or split_tokenizer, args)
                         if test is None else (ids[test], labels[test]))
            validation_data = (
                official_split(official["validation"], tokenizer or split_tokenizer, args)
                if validation is None else (ids[validation], labels[validation]))
            for variant in args.variants:
                where = f"seed {seed}" + ("" if fold is None else f", fold {fold + 1}/{args.folds}")
                print(f"\n== {args.dataset} | {variant} | {where}")
                keras.utils.set_random_seed(seed)
                model = build_classifier(
                    vocabulary_size, len(class_names), variant, graph_predictor=predictor,
                    embedding_dim=args.embedding_dim, rnn_units=args.rnn_units,
                    attention_heads=args.attention_heads, dropout=args.dropout,
                    num_mixtures=args.num_mixtures, transfer_dropout=args.transfer_dropout)
                start = time.perf_counter()
                accuracy, epochs_run = train_and_evaluate(
                    model, (ids[train], labels[train]), validation_data, test_data, args,
                    seed=seed)
                seconds = time.perf_counter() - start
                print(f"   test accuracy {100 * accuracy:.2f} after {epochs_run} epoch(s), "
                      f"{seconds:.1f}s")
                runs.append({"dataset": args.dataset, "variant": variant, "seed": seed,
                             "fold": fold, "accuracy": accuracy, "epochs_run": epochs_run,
                             "seconds": round(seconds, 3), "train_examples": int(len(train)),
                             "validation_examples": int(len(validation_data[1])),
                             "test_examples": int(len(test_data[1]))})
                markdown = _write_results(args.output_dir, config, runs, args.variants,
                                          split_description)
                del model
    print("\n" + markdown)
    print(f"Wrote {os.path.join(args.output_dir, 'results.json')} and results.md")
    return 0


def official_split(split, tokenizer, args):
    """``(ids, labels)`` of an official ``(texts, labels)`` split, encoded like the training texts."""
    texts, labels = split
    return encode(tokenizer, texts, args.max_length), labels


def seeded_split_indices(num_examples, seed):
    """``(train, validation)`` of a dataset whose test set is separate."""
    from glomo_tf.data.labeled import seeded_split

    return seeded_split(num_examples, VALIDATION_FRACTION, seed)
