"""``glomo transfer --dataset squad``: the reader of :mod:`glomo_tf.models.reader` with and without
transferred graphs on SQuAD v1.1, over paired seeds, resumable, with the official EM and F1.

The data is one SQuAD-v1.1-format file (default: the shared ``squad/dev-v1.1.json``) split by
article (:func:`glomo_tf.data.squad.split_articles` with :data:`SPLIT_SEED`: 75% training, 1/12
development, the rest testing; one split for every seed, so that a predictor can be pretrained on
the training articles' passages alone, :func:`training_passages`), or a training file and a
``--test-file`` (the training file's articles then split 90 / 10 into training and
development). The seeds vary the initial weights and the order of the batches. Passages are
cut to ``--max-length`` units; training uses each question's first gold answer (answers past
the cap are left out of training and counted); the development F1 chooses the epoch (early
stopping with ``--patience``); test answers are the best spans (``s <= e < s + 30``) scored
against every gold answer. Each run records five answered test questions and, with a
predictor, the strongest sources of their answers' units in its graphs
(:func:`answer_graph_rows`).

``--graph-cache``: the GLoMo variants read the frozen predictor's graphs of the fixed passages,
computed once for every passage of the file(s) (:func:`glomo_tf.data.graph_cache.compute_graphs`,
dense), through the reader's ``passage_graphs`` input; the questions' graphs are computed on
every batch (they are short). Results agree with the online path to float round-off.
"""

import functools
import os
import time

import numpy as np

from glomo_tf import hparams
from glomo_tf.data import squad
from glomo_tf.experiments.runs import (Comparison, fit_with_early_stopping, initial_embeddings,
                                       load_pretrained, save_model, training_settings)

READING_DATASETS = ("squad",)
QUESTION_UNITS = 48
SPLIT_SEED = 0
MAX_ANSWER_UNITS = 30
PRIMARY, METRICS = "exact_match", ("f1",)


def load_reading_task(config):
    """``(questions, test_questions or None)`` of a squad ``config``."""
    from glomo_tf.data.labeled import shared_data_dir

    path = config.file or os.path.join(config.data_dir or os.path.join(shared_data_dir(), "squad"),
                                       "dev-v1.1.json")
    if not os.path.exists(path):
        raise ValueError(f"SQuAD file {path} not found: pass `file` PATH (a SQuAD v1.1 JSON "
                         "file) or `data_dir` holding dev-v1.1.json.")
    questions = squad.load_squad(path)
    test = squad.load_squad(config.test_file) if config.test_file else None
    return questions, test


def reading_splits(questions, test):
    """``(train, development, test)`` question lists (the article split of :data:`SPLIT_SEED`)."""
    if test is None:
        parts = squad.split_articles(questions, SPLIT_SEED)
        return tuple([questions[i] for i in part] for part in parts)
    train, development = squad.split_articles(questions, SPLIT_SEED, fractions=(0.9,))
    return [questions[i] for i in train], [questions[i] for i in development], test


def training_passages(path, test_file=None):
    """The distinct passages of the training articles of ``path`` (the split
    :func:`run_reading` trains on), in file order: the unlabelled text a predictor for this task
    may be pretrained on without seeing a development or test passage."""
    questions = squad.load_squad(path)
    test = squad.load_squad(test_file) if test_file else None
    return list(dict.fromkeys(q.context for q in reading_splits(questions, test)[0]))


def answer_texts(encoded, questions, spans):
    """The passage text of each predicted unit span (the characters from the first unit's start
    to the last unit's end)."""
    return [q.context[encoded.offsets[i, s, 0]:encoded.offsets[i, e, 1]]
            for i, (q, (s, e)) in enumerate(zip(questions, spans))]


def answer_graph_rows(predictor, encoded, questions, spans, count=5, units=5, top=3):
    """What the graphs say about the answers: for the first ``count`` questions, each unit of
    the predicted answer (its first ``units``) with its ``top`` strongest sources in the
    predictor's graphs of the passage (the first layer, its heads averaged), per direction:
    ``[[{"unit", "forward": [[source, weight], ...], "backward": [...]}, ...], ...]``."""
    out = []
    for i in range(min(count, len(questions))):
        n = max(1, int((encoded.passages[i] != 0).sum()))
        graphs = predictor(encoded.passages[i:i + 1, :n], training=False)["graphs"]
        mean = np.asarray(graphs, "float32")[0, :, 0].mean(axis=1)  # [2, n, n]
        context, offsets = questions[i].context, encoded.offsets[i]
        start, end = (int(x) for x in spans[i])
        rows = []
        for t in range(start, min(end, start + units - 1, n - 1) + 1):
            row = {"unit": context[offsets[t, 0]:offsets[t, 1]]}
            for z, direction in enumerate(("forward", "backward")):
                row[direction] = [
                    [context[offsets[u, 0]:offsets[u, 1]], round(float(mean[z, t, u]), 3)]
                    for u in np.argsort(-mean[z, t], kind="stable")[:top] if mean[z, t, u] > 0]
            rows.append(row)
        out.append(rows)
    return out


def _batches(encoded, rows, batch_size, seed=None, graphs=None):
    """``tf.data`` batches ``((passages, questions), (starts, ends))`` of ``rows``, each cut to its
    longest passage and question; with ``seed`` shuffled into length-sorted chunks anew every
    epoch, without it in length order (returns ``(dataset, order)``). ``graphs``: None, or
    ``(cache, passage_rows)``, a dense graph cache of the passages and each question's row in it:
    the batches then hold ``(passages, questions, passage graphs)``."""
    import tensorflow as tf

    from glomo_tf.data.batching import sequence_lengths
    from glomo_tf.data.graph_cache import batch_of

    p_lengths = np.maximum(sequence_lengths(encoded.passages[rows]), 1)
    q_lengths = np.maximum(sequence_lengths(encoded.questions[rows]), 1)
    rng = np.random.default_rng(seed)

    def order():
        if seed is None:
            return [np.argsort(p_lengths, kind="stable")]
        shuffled = rng.permutation(len(rows))
        chunk = 20 * batch_size
        return [part[np.argsort(p_lengths[part], kind="stable")]
                for part in np.array_split(shuffled, max(1, -(-len(rows) // chunk)))]

    def batches():
        cut = [o[i:i + batch_size] for o in order() for i in range(0, len(o), batch_size)]
        if seed is not None:
            cut = [cut[i] for i in rng.permutation(len(cut))]
        for part in cut:
            index = rows[part]
            width = p_lengths[part].max()
            texts = (encoded.passages[index, :width],
                     encoded.questions[index, :q_lengths[part].max()])
            if graphs is not None:
                cache, passage_rows = graphs
                texts += (batch_of(cache, passage_rows[index], width),)
            yield texts, (encoded.spans[index, 0], encoded.spans[index, 1])

    text_spec = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32))
    if graphs is not None:
        text_spec += (tf.TensorSpec([None, *graphs[0].shape, None, None], tf.float32),)
    spec = (text_spec, (tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64)))
    count = -(-len(rows) // batch_size) if seed is None else sum(
        -(-len(part) // batch_size) for part in np.array_split(
            np.arange(len(rows)), max(1, -(-len(rows) // (20 * batch_size)))))
    dataset = tf.data.Dataset.from_generator(batches, output_signature=spec)
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    return dataset.prefetch(2), (order()[0] if seed is None else None)


def predict_spans(model, encoded, batch_size, graphs=None):
    """``[N, 2]`` best unit spans of every question of ``encoded`` (``graphs``: as
    :func:`_batches`', for a reader with the ``passage_graphs`` input)."""
    def softmax(logits):  # padding at -1e9 gets 0
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    rows = np.arange(len(encoded.passages))
    data, order = _batches(encoded, rows, batch_size, graphs=graphs)
    spans = np.zeros((len(rows), 2), "int64")
    done = 0
    for texts, _ in data:
        start, end = model.predict_on_batch(list(texts))
        part = order[done:done + len(start)]
        spans[part] = squad.best_spans(softmax(start), softmax(end), MAX_ANSWER_UNITS)
        done += len(start)
    return spans


def train_and_evaluate_reader(model, train, development, test, *, learning_rate=1e-3,
                              patience=2, epochs=10, batch_size=32, verbose=1, seed=0,
                              graphs=None):
    """Fits ``model`` on ``train`` (``(Encoded, questions)``; questions with an answer inside the
    cap), early-stopped on the development F1; returns ``({"exact_match", "f1"} of the test
    questions as fractions, epochs run, predicted test spans)``. ``graphs``: None, or
    ``(cache, {context: row})`` for a reader with the ``passage_graphs`` input."""
    import keras

    def fed(part):
        if graphs is None:
            return None
        cache, row_of = graphs
        return cache, np.array([row_of[q.context] for q in part[1]], "int64")

    encoded, _ = train
    rows = np.flatnonzero(encoded.spans[:, 0] >= 0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    class DevelopmentScores(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            dev_encoded, dev_questions = development
            texts = answer_texts(dev_encoded, dev_questions,
                                 predict_spans(self.model, dev_encoded, 2 * batch_size,
                                               fed(development)))
            scores = squad.squad_scores(texts, dev_questions)
            logs["val_exact_match"], logs["val_f1"] = scores["exact_match"], scores["f1"]
            if verbose:
                print(f"   development EM {scores['exact_match']:.2f}, F1 {scores['f1']:.2f}")

    # The batches reshuffle themselves every epoch; the development F1 chooses the epoch.
    epochs_run = fit_with_early_stopping(
        model, _batches(encoded, rows, batch_size, seed, fed(train))[0], None,
        learning_rate=learning_rate, patience=patience, epochs=epochs, verbose=verbose,
        monitor="val_f1", loss=[loss, loss], metrics=(), callbacks=[DevelopmentScores()])
    test_encoded, test_questions = test
    spans = predict_spans(model, test_encoded, 2 * batch_size, fed(test))
    scores = squad.squad_scores(answer_texts(test_encoded, test_questions, spans), test_questions)
    return {k: v / 100.0 for k, v in scores.items()}, epochs_run, spans


def encode_splits(questions, test_questions, tokenizer, max_length):
    """``(tokenizer, [(Encoded, questions)] * 3, answered)``: the training, development and test
    splits encoded (``tokenizer`` None: one built from the training passages and questions), and
    the training questions whose answer lies inside ``max_length`` units."""
    from glomo_tf.data.vocabulary import Tokenizer

    splits = reading_splits(questions, test_questions)
    tokenizer = tokenizer or Tokenizer.build(
        list(dict.fromkeys(q.context for q in splits[0])) + [q.question for q in splits[0]],
        splitter="unicode_script", lowercase=True)
    parts = [(squad.encode_questions(tokenizer, part, max_length, QUESTION_UNITS), part)
             for part in splits]
    train = parts[0][0]
    answered = int((train.spans[:, 0] >= 0).sum())
    if not answered:
        raise ValueError(f"No training answer lies inside `max_length` {max_length} units of its "
                         "passage: raise `max_length` (SQuAD's passages need about 300).")
    print(f"{' / '.join(str(len(p)) for p in splits)} questions; {answered} training answers "
          f"inside {max_length} units ({train.beyond} beyond the cap, left out; {train.inexact} "
          "not on unit boundaries, widened to the units they touch)")
    return tokenizer, parts, answered


def passage_graph_cache(predictor, tokenizer, contexts, max_length):
    """``(cache, {context: row})``: the predictor's dense graphs of each distinct passage."""
    from glomo_tf.data.graph_cache import compute_graphs

    start = time.perf_counter()
    contexts = list(dict.fromkeys(contexts))
    cache = compute_graphs(predictor, tokenizer.encode(contexts, max_length=max_length).numpy())
    print(f"Graph cache: {len(cache)} passages, {cache.nbytes / 2 ** 20:.1f} MiB, "
          f"{time.perf_counter() - start:.1f}s")
    return cache, {context: row for row, context in enumerate(contexts)}


def run_reading(config, record=None):
    """Runs every variant of a validated ``config`` of the dataset ``squad`` on every seed,
    recording each run as it ends; returns the Markdown report."""
    import keras

    from glomo_tf.models.reader import build_reader

    questions, test_questions = load_reading_task(config)
    split_description = ("a training file (90 / 10 by article) and a test file" if test_questions
                         else f"split by article (seed {SPLIT_SEED}: 75% / 1/12 / rest)")
    comparison = Comparison(config, record, [], split_description, metrics=METRICS,
                            primary=PRIMARY)
    predictor, tokenizer = load_pretrained(config)
    comparison.announce(
        config, f"{len(questions)} questions, {len({q.article for q in questions})} articles")
    training = training_settings(config)
    # Computed when the first run needs them: a resumed comparison with every run done reads none.
    data = functools.cache(lambda: encode_splits(questions, test_questions, tokenizer,
                                                 config.max_length))
    graphs = functools.cache(lambda: passage_graph_cache(
        predictor, tokenizer, [q.context for q in questions + (test_questions or [])],
        config.max_length))
    settings = dict(graph_predictor=predictor, embedding_dim=config.embedding_dim,
                    rnn_units=config.rnn_units, dropout=config.dropout,
                    num_mixtures=config.num_mixtures, transfer_dropout=config.transfer_dropout,
                    top_k=config.top_k, graph_temperature=config.graph_temperature)

    for seed, variant in ((s, v) for s in config.seeds for v in config.variants):
        if comparison.done(variant, seed):
            continue
        encoder, parts, answered = data()
        print(f"\n== squad | {variant} | seed {seed}")
        keras.utils.set_random_seed(seed)
        cached = (config.graph_cache and predictor is not None
                  and variant in hparams.PREDICTOR_VARIANTS)
        model = build_reader(encoder.vocabulary_size, variant, passage_graphs=cached, **settings)
        initial_embeddings(model, predictor, config)
        start = time.perf_counter()
        scores, epochs_run, spans = train_and_evaluate_reader(
            model, *parts, seed=seed, graphs=graphs() if cached else None, **training)
        seconds = time.perf_counter() - start
        (test_encoded, test_questions_run), shown = parts[2], slice(0, 5)
        examples = [{"id": q.id, "question": q.question, "predicted": text,
                     "gold": list(q.answers)} for q, text in zip(
                         test_questions_run[shown],
                         answer_texts(test_encoded, test_questions_run[shown], spans[shown]))]
        if predictor is not None:
            for example, rows in zip(examples, answer_graph_rows(
                    predictor, test_encoded, test_questions_run, spans)):
                example["graph_rows"] = rows
        print(f"   test EM {100 * scores['exact_match']:.2f}, F1 {100 * scores['f1']:.2f} "
              f"after {epochs_run} epoch(s), {seconds:.1f}s")
        comparison.add({"dataset": "squad", "variant": variant, "seed": seed, "fold": None,
                        **scores, "epochs_run": epochs_run, "seconds": round(seconds, 3),
                        "train_examples": answered, "validation_examples": len(parts[1][1]),
                        "test_examples": len(test_questions_run), "examples": examples})
        if config.save_models:
            if cached:  # the saved reader computes its own graphs from token ids
                online = build_reader(encoder.vocabulary_size, variant, **settings)
                online.set_weights(model.get_weights())
                model = online
            save_model(model, config.output_dir, variant, seed, None)
    return comparison.write()
