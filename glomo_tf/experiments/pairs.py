"""``glomo transfer`` on sentence pairs (SICK, MRPC, SNLI, your own pairs): the pair classifier
of :func:`glomo_tf.models.build_pair_classifier` with and without transferred graphs, over
paired seeds, with F1 for binary tasks and accuracy on every extra test split (SNLI's hard
subset)."""

import time

import numpy as np

from glomo_tf.data.batching import encode
from glomo_tf.experiments import runs as scaffolding

PAIR_DATASETS = ("sick", "mrpc", "snli", "pairs")


def load_pair_task(config):
    """The :class:`glomo_tf.data.pairs.PairTask` of a pair ``config.dataset`` (``pairs``:
    ``config.file`` for training, ``config.test_file`` as the test split when given)."""
    from glomo_tf.data import pairs

    try:
        if config.dataset == "sick":
            return pairs.load_sick(config.data_dir)
        if config.dataset == "mrpc":
            return pairs.load_mrpc(config.data_dir)
        if config.dataset == "snli":
            return pairs.load_snli(config.data_dir)
        train, class_names = pairs.load_pairs_file(config.file)
        test = None
        if config.test_file:
            test, _ = pairs.load_pairs_file(config.test_file, class_names=class_names)
        return pairs.PairTask("pairs", class_names, train, test=test)
    except FileNotFoundError as error:
        raise ValueError(str(error).replace("\n", " ")) from None


def describe_pair_split(task):
    """One line saying how a pair task is split, as results.md writes it."""
    if task.validation is not None and task.test is not None:
        return "official train/dev/test split"
    if task.test is not None:
        return "official test split, 10% of training for validation"
    return "seeded 90/10 split, 10% of training for validation"


def pair_splits(task, seed):
    """``(train, validation, test)`` :class:`~glomo_tf.data.pairs.PairSplit` of a pair task for
    one seed: its official splits where it has them; a missing validation split is a seeded
    10% of the training pairs, a missing test split a seeded 10% held out before that."""
    from glomo_tf.data.labeled import seeded_split

    size = len(task.train.labels)
    if task.validation is not None and task.test is not None:
        return task.train, task.validation, task.test
    if task.test is not None:
        keep, held = seeded_split(size, scaffolding.VALIDATION_FRACTION, seed)
        return pair_subset(task.train, keep), pair_subset(task.train, held), task.test
    _, keep, held, tested = scaffolding.split_indices(size, "seeded", 0, seed)[0]
    return tuple(pair_subset(task.train, index) for index in (keep, held, tested))


def pair_subset(split, index):
    """The pairs of ``split`` at ``index``."""
    return type(split)([split.first[i] for i in index], [split.second[i] for i in index],
                       np.asarray(split.labels)[index])


def encode_pairs(split, tokenizer, max_length):
    """``(first ids, second ids, labels)`` of a :class:`~glomo_tf.data.pairs.PairSplit`."""
    return (encode(tokenizer, split.first, max_length), encode(tokenizer, split.second, max_length),
            np.asarray(split.labels, np.int64))


def train_and_evaluate_pairs(model, train, validation, tests, *, learning_rate=1e-3, patience=2,
                             epochs=10, batch_size=50, verbose=1, seed=0):
    """Fits a pair classifier as :func:`~glomo_tf.experiments.classification.train_and_evaluate`
    fits a classifier: ``train`` and ``validation`` are ``(first ids, second ids, labels)``,
    ``tests`` a dict ``{name: (first, second, labels)}``. Returns ``({name: predicted classes},
    epochs run)``."""
    from glomo_tf.data.batching import pair_sorted_batches, pair_training_batches

    inference_batch = 2 * batch_size
    epochs_run = scaffolding.fit_with_early_stopping(
        model, pair_training_batches(*train, batch_size, seed),
        pair_sorted_batches(*validation, inference_batch)[0], learning_rate=learning_rate,
        patience=patience, epochs=epochs, verbose=verbose)
    predictions = {}
    for name, (first, second, labels) in tests.items():
        data, order = pair_sorted_batches(first, second, labels, inference_batch)
        predictions[name] = np.argmax(scaffolding.predict_in_order(model, data, order),
                                      axis=-1).astype(np.int64)
    return predictions, epochs_run


def binary_f1(predicted, labels, positive=1):
    """F1 of the ``positive`` class (GLUE's MRPC figure): ``2 tp / (2 tp + fp + fn)``; 0 when
    there is no positive prediction or label."""
    predicted, labels = np.asarray(predicted), np.asarray(labels)
    tp = int(np.sum((predicted == positive) & (labels == positive)))
    wrong = int(np.sum((predicted == positive) != (labels == positive)))
    return 2 * tp / (2 * tp + wrong) if tp else 0.0


def run_pairs(config, record=None):
    """Runs every variant of a validated sentence-pair ``config`` on every seed, recording each
    run as it ends; returns the Markdown report."""
    task = load_pair_task(config)
    binary = len(task.class_names) == 2
    metrics = (("f1",) if binary else ()) + tuple(f"{name}_accuracy" for name in task.extra_tests)
    comparison = scaffolding.Comparison(config, record, task.class_names,
                                        describe_pair_split(task), metrics=metrics)

    import keras

    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.models.pair_classifier import build_pair_classifier

    predictor, tokenizer = scaffolding.load_pretrained(config)
    sizes = {"train": len(task.train.labels)}
    for name in ("validation", "test"):
        if getattr(task, name) is not None:
            sizes[name] = len(getattr(task, name).labels)
    comparison.announce(config, f"pairs {sizes}, classes {task.class_names}")
    training = scaffolding.training_settings(config)
    for seed in config.seeds:
        if all(comparison.done(variant, seed) for variant in config.variants):
            continue
        train, validation, test = pair_splits(task, seed)
        encoder = tokenizer or Tokenizer.build(list(train.first) + list(train.second))
        train_data = encode_pairs(train, encoder, config.max_length)
        validation_data = encode_pairs(validation, encoder, config.max_length)
        tests = {"test": encode_pairs(test, encoder, config.max_length)}
        tests.update({name: encode_pairs(split, encoder, config.max_length)
                      for name, split in task.extra_tests.items()})
        for variant in config.variants:
            if comparison.done(variant, seed):
                continue
            print(f"\n== {config.dataset} | {variant} | seed {seed}")
            keras.utils.set_random_seed(seed)
            model = build_pair_classifier(
                encoder.vocabulary_size, len(task.class_names), variant,
                graph_predictor=predictor, embedding_dim=config.embedding_dim,
                rnn_units=config.rnn_units, dropout=config.dropout,
                num_mixtures=config.num_mixtures, transfer_dropout=config.transfer_dropout,
                top_k=config.top_k, graph_temperature=config.graph_temperature,
                **config.transfer_form_options())
            scaffolding.initial_embeddings(model, predictor, config)
            start = time.perf_counter()
            predictions, epochs_run = train_and_evaluate_pairs(
                model, train_data, validation_data, tests, seed=seed, **training)
            seconds = time.perf_counter() - start
            run = {"dataset": config.dataset, "variant": variant, "seed": seed, "fold": None,
                   "accuracy": float(np.mean(predictions["test"] == tests["test"][2]))}
            if binary:
                run["f1"] = binary_f1(predictions["test"], tests["test"][2])
            for name in task.extra_tests:
                run[f"{name}_accuracy"] = float(np.mean(predictions[name] == tests[name][2]))
            run.update({"epochs_run": epochs_run, "seconds": round(seconds, 3),
                        "train_examples": len(train_data[2]),
                        "validation_examples": len(validation_data[2]),
                        "test_examples": len(tests["test"][2])})
            print("   " + ", ".join(f"{k} {100 * run[k]:.2f}" for k in ("accuracy", *metrics))
                  + f" after {epochs_run} epoch(s), {seconds:.1f}s")
            if config.save_models:
                scaffolding.save_model(model, config.output_dir, variant, seed, None)
            comparison.add(run)
            del model
    return comparison.write()
