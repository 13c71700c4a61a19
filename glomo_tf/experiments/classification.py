"""``glomo transfer`` on single texts: the classifier variants of
:func:`glomo_tf.models.build_classifier` with and without transferred graphs, over paired seeds.

:func:`run_classification` trains every variant of a
:class:`~glomo_tf.experiments.transfer.TransferConfig` on every seed (and fold) with
``model.fit`` (early stopping on validation accuracy, best weights restored) and records the
test accuracy of every run in the comparison's ``results.json`` / ``results.md``
(:class:`~glomo_tf.experiments.runs.Comparison`).

Splits: ``split="seeded"`` (default) holds out a seeded 10% test set and carves a 10% validation
set from the rest; ``split="kfold"`` runs every fold (the seed shuffles the folds and draws the
validation set; a seed's accuracy is the mean over its folds). ``sst2``/``sst5`` use the official
train/dev/test files, ``imdb`` and ``sst2_tfds`` tensorflow-datasets' official test sets.
"""

import functools
import time

import numpy as np

from glomo_tf import hparams
from glomo_tf.data.batching import bucketed_training_batches, encode, length_sorted_batches
from glomo_tf.experiments import runs as scaffolding

TFDS_NAMES = {"imdb": "imdb_reviews", "sst2_tfds": "glue/sst2"}
# Datasets read from files with an official split: train for training, dev for validation.
SST_DATASETS = {"sst2": False, "sst5": True}  # name -> fine_grained
CLASSIFICATION_DATASETS = ("mr", "subj", "sst2", "sst5", "file", "listops", "imdb", "sst2_tfds")
# Datasets whose texts carry their structure: the gold variants' graphs (ListOps' trees).
GOLD_DATASETS = ("listops",)


# ---------------------------------------------------------------------------------- data
def load_task(config):
    """``(texts, labels, class_names, official)`` of ``config.dataset``: ``official`` is None, or
    for datasets with an official split a dict with the test split's ``(texts, labels)`` under
    ``"test"`` and the validation split's under ``"validation"`` (None: carved from the training
    texts)."""
    from glomo_tf.data import labeled

    try:
        if config.dataset in SST_DATASETS:
            fine = SST_DATASETS[config.dataset]
            texts, labels, class_names = labeled.load_sst("train", fine, config.data_dir)
            dev = labeled.load_sst("dev", fine, config.data_dir)[:2]
            test = labeled.load_sst("test", fine, config.data_dir)[:2]
            return texts, labels, class_names, {"test": test, "validation": dev}
        if config.dataset == "mr":
            return (*labeled.load_mr(config.data_dir), None)
        if config.dataset == "subj":
            return (*labeled.load_subj(config.data_dir), None)
        if config.dataset == "file":
            texts, labels, class_names = labeled.load_labeled_text(
                config.file, config.text_column, config.label_column)
            official = None
            if config.test_file:
                test = labeled.load_labeled_text(config.test_file, config.text_column,
                                                 config.label_column, class_names=class_names)
                official = {"test": test[:2], "validation": None}
            return texts, labels, class_names, official
        if config.dataset == "listops":
            texts, labels = listops_texts(config.file)
            official = None
            if config.test_file:
                official = {"test": listops_texts(config.test_file), "validation": None}
            return texts, labels, [str(v) for v in range(10)], official
        name = TFDS_NAMES[config.dataset]
        _, _, train_split, test_split = labeled.TFDS_TEXT_DATASETS[name]
        texts, labels, class_names = labeled.load_tfds_text(name, train_split,
                                                            data_dir=config.data_dir)
        test_texts, test_labels, _ = labeled.load_tfds_text(name, test_split,
                                                            data_dir=config.data_dir)
        return texts, labels, class_names, {"test": (test_texts, test_labels), "validation": None}
    except (FileNotFoundError, ImportError) as error:
        raise ValueError(str(error).replace("\n", " ")) from None


def listops_texts(path):
    """``(texts, labels)`` of a ListOps file: each expression's tokens without the parentheses,
    joined by spaces (the units a tokenizer splits back)."""
    from glomo_tf.data.listops import read_listops

    examples = read_listops(path)
    if not examples:
        raise ValueError(f"{path!r} holds no ListOps example (label<TAB>expression lines).")
    return [" ".join(e.tokens) for e in examples], np.array([e.label for e in examples], np.int64)


def describe_split(config, official):
    """One line saying how the data is split, as results.md writes it."""
    if official is not None and official["validation"] is not None:
        return "official train/dev/test split"
    if official is not None:
        return "official test split, 10% of training for validation"
    if config.split == "kfold":
        return f"{config.folds}-fold cross-validation, mean over folds per seed"
    return "seeded 90/10 split, 10% of training for validation"


def seed_splits(config, official, num_examples, seed):
    """``[(fold, train, validation, test)]`` of one seed: index arrays into the training texts,
    None for a split the data has officially (:func:`load_task`'s ``official``)."""
    from glomo_tf.data.labeled import seeded_split

    if official is not None and official["validation"] is not None:
        return [(None, np.arange(num_examples), None, None)]
    if official is not None:
        keep, validation = seeded_split(num_examples, scaffolding.VALIDATION_FRACTION, seed)
        return [(None, keep, validation, None)]
    return scaffolding.split_indices(num_examples, config.split, config.folds, seed)


def gold_graphs(texts, ids, form="tree"):
    """The :class:`~glomo_tf.data.graph_cache.GraphCache` of the texts' own structure
    (:mod:`glomo_tf.data.gold_graphs`; ListOps: each expression's tree, ``form`` ``"tree"`` or
    ``"chain"``), over the units of ``ids`` (the texts encoded, each cut to its first
    ``max_length`` units: a ListOps unit's parent comes before it, so a cut tree stays a tree)."""
    from glomo_tf.data import gold_graphs as gold
    from glomo_tf.data.batching import sequence_lengths

    lengths = np.maximum(sequence_lengths(np.asarray(ids)), 1)
    try:
        graphs = {"tree": gold.tree_graphs, "chain": gold.listops_chain_graphs}[form]
        return gold.gold_graph_cache([graphs(gold.listops_parents(text)[:n])
                                      for text, n in zip(texts, lengths)])
    except ValueError as error:
        raise ValueError(f"The gold variants read each text's tree: {error}") from None


# ---------------------------------------------------------------------------------- training
def train_and_evaluate(model, train, validation, test, *, learning_rate=1e-3, patience=2,
                       epochs=10, batch_size=50, verbose=1, seed=0, graphs=None):
    """Compiles and fits ``model`` on ``(ids, labels)`` pairs; returns the test accuracy (the
    fraction of exact argmax hits, so equal counts give equal accuracies) and the epochs run.

    Adam at ``learning_rate``, early stopping on validation accuracy after ``patience`` epochs
    without improvement (best weights restored), at most ``epochs``. Training batches are
    length-bucketed and validation/test batches length-sorted, each cut to its longest text (see
    :func:`glomo_tf.data.batching.bucketed_training_batches`).

    ``graphs``: None (the model runs its GLoMo layers' predictor on every batch); a dict
    ``{"cache": GraphCache of the training ids, "predictor": ..., "top_k": ...}``: the model is
    then trained and evaluated through a :class:`~glomo_tf.models.GraphFedModel`, reading the
    cached training graphs and the validation and test graphs computed once; or ``{"gold":
    (training, validation, test GraphCache)}``: a model on ``(ids, graphs...)`` (the gold
    variants of :func:`glomo_tf.models.build_classifier`) fed the data's own graphs
    (:mod:`glomo_tf.data.gold_graphs`)."""
    from glomo_tf.data import graph_cache

    inference_batch = 2 * batch_size  # no gradients: twice the training batch
    unlabelled = np.zeros(len(test[0]), "int64")
    fitted = model
    if graphs is not None and "gold" in graphs:
        caches = graphs["gold"]
        batches = graph_cache.cached_training_batches(*train, batch_size, seed, caches[0],
                                                      dense=True)
        validation_data = graph_cache.cached_inference_batches(*validation, inference_batch,
                                                               caches[1], dense=True)[0]
        test_data, order = graph_cache.cached_inference_batches(
            test[0], unlabelled, inference_batch, caches[2], dense=True)
    elif graphs is not None:
        from glomo_tf.models import GraphFedModel

        fitted = GraphFedModel(model)
        stage = functools.partial(graph_cache.with_graphs, predictor=graphs["predictor"],
                                  top_k=graphs["top_k"], candidates=graphs["top_k"] is None,
                                  graph_temperature=graphs.get("graph_temperature"))
        batches = graph_cache.cached_training_batches(*train, batch_size, seed, graphs["cache"])
        validation_data = stage(length_sorted_batches(*validation, inference_batch)[0])
        test_data, order = length_sorted_batches(test[0], unlabelled, inference_batch)
        test_data = stage(test_data, cache=None)
    else:
        batches = bucketed_training_batches(*train, batch_size, seed)
        validation_data, _ = length_sorted_batches(*validation, inference_batch)
        test_data, order = length_sorted_batches(test[0], unlabelled, inference_batch)
    epochs_run = scaffolding.fit_with_early_stopping(
        fitted, batches, validation_data, learning_rate=learning_rate, patience=patience,
        epochs=epochs, verbose=verbose)
    probabilities = scaffolding.predict_in_order(fitted, test_data, order)
    accuracy = float(np.mean(np.argmax(probabilities, axis=-1) == np.asarray(test[1])))
    return accuracy, epochs_run


# ---------------------------------------------------------------------------------- the comparison
def run_classification(config, record=None):
    """Runs every variant of a validated single-text ``config`` on every seed (and fold),
    recording each run as it ends; returns the Markdown report."""
    texts, labels, class_names, official = load_task(config)
    if len(class_names) < 2 or len(np.unique(labels)) < 2:
        raise ValueError(f"The {config.dataset} data holds a single class: a classifier needs "
                         "two.")
    comparison = scaffolding.Comparison(config, record, class_names,
                                        describe_split(config, official))

    import keras

    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.models.classifier import build_classifier

    predictor, tokenizer = scaffolding.load_pretrained(config)
    fixed_ids = encode(tokenizer, texts, config.max_length) if tokenizer else None

    @functools.cache
    def graph_cache():
        """The predictor's graphs of every text, computed when the first run needs them (a
        resumed comparison whose GLoMo runs are all done computes nothing)."""
        from glomo_tf.data.graph_cache import compute_graphs

        start = time.perf_counter()
        # Dense caches hold the candidate matrices the mixtures read (no products per step).
        cache = compute_graphs(predictor, fixed_ids, config.top_k,
                               candidates=config.top_k is None,
                               graph_temperature=config.graph_temperature)
        print(f"Graph cache: {len(cache)} sentences, {cache.nbytes / 2 ** 20:.1f} MiB "
              f"({'candidate matrices' if cache.k is None else f'top-{cache.k}'}, exact: "
              f"{cache.exact}), {time.perf_counter() - start:.1f}s")
        return cache

    comparison.announce(config, f"{len(texts)} examples, classes {class_names}")
    training = scaffolding.training_settings(config)
    for seed in config.seeds:
        for fold, train, validation, test in seed_splits(config, official, len(texts), seed):
            if tokenizer is None:  # no pretraining: the task's own training texts
                split_tokenizer = Tokenizer.build([texts[i] for i in train])
                ids = encode(split_tokenizer, texts, config.max_length)
            else:
                split_tokenizer, ids = None, fixed_ids
            encoder = tokenizer or split_tokenizer

            def part(index, name):
                """``(ids, labels)`` and the texts of one split (``index`` None: official)."""
                if index is None:
                    part_texts, part_labels = official[name]
                    return (encode(encoder, part_texts, config.max_length), part_labels), \
                        part_texts
                return (ids[index], labels[index]), [texts[i] for i in index]

            (validation_data, validation_texts) = part(validation, "validation")
            (test_data, test_texts) = part(test, "test")
            for variant in config.variants:
                if comparison.done(variant, seed, fold):
                    continue
                where = f"seed {seed}" + ("" if fold is None else
                                          f", fold {fold + 1}/{config.folds}")
                print(f"\n== {config.dataset} | {variant} | {where}")
                keras.utils.set_random_seed(seed)
                model = build_classifier(
                    encoder.vocabulary_size, len(class_names), variant, graph_predictor=predictor,
                    embedding_dim=config.embedding_dim, rnn_units=config.rnn_units,
                    attention_heads=config.attention_heads, dropout=config.dropout,
                    num_mixtures=config.num_mixtures, transfer_dropout=config.transfer_dropout,
                    top_k=config.top_k, graph_temperature=config.graph_temperature,
                    gold_form=config.gold_form, **config.transfer_form_options())
                scaffolding.initial_embeddings(model, predictor, config)
                graphs = None
                if variant in hparams.GOLD_VARIANTS:
                    graphs = {"gold": [
                        gold_graphs([texts[i] for i in train], ids[train], config.gold_form),
                        gold_graphs(validation_texts, validation_data[0], config.gold_form),
                        gold_graphs(test_texts, test_data[0], config.gold_form)]}
                elif (predictor is not None and config.graph_cache
                        and variant in hparams.PREDICTOR_VARIANTS):
                    graphs = {"cache": graph_cache().subset(train), "predictor": predictor,
                              "top_k": config.top_k,
                              "graph_temperature": config.graph_temperature}
                start = time.perf_counter()
                accuracy, epochs_run = train_and_evaluate(
                    model, (ids[train], labels[train]), validation_data, test_data, seed=seed,
                    graphs=graphs, **training)
                seconds = time.perf_counter() - start
                print(f"   test accuracy {100 * accuracy:.2f} after {epochs_run} epoch(s), "
                      f"{seconds:.1f}s")
                if config.save_models:
                    scaffolding.save_model(model, config.output_dir, variant, seed, fold,
                                           split_tokenizer)
                comparison.add({"dataset": config.dataset, "variant": variant, "seed": seed,
                                "fold": fold, "accuracy": accuracy, "epochs_run": epochs_run,
                                "seconds": round(seconds, 3), "train_examples": int(len(train)),
                                "validation_examples": int(len(validation_data[1])),
                                "test_examples": int(len(test_data[1]))})
                del model
    return comparison.write()
