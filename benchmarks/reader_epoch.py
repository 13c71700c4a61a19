"""What cached passage graphs leave of GLoMo's cost in the SQuAD reader: training steps of the
``glomo_rnn`` and ``uniform`` readers against the baseline's, side by side.

The readers of ``glomo transfer --dataset squad`` at the recorded sizes
(``examples/outputs/squad_init_seeds.json``: passages cut to 256 units, embeddings 128 wide (the
books predictor's table), BiGRUs of 32 units, batches of 32), on the shared SQuAD v1.1
development file split by article as the comparison splits it: ``baseline``, ``uniform`` (the
same fusion layers on uniform graphs) and ``glomo_rnn`` with the frozen predictor's passage
graphs computed once (``--graph-cache``: what filling the cache costs is timed apart,
``cache_fill_s``; the questions' graphs are computed per batch, as in the comparison).

Each round runs ``--steps`` training steps (``train_on_batch``) of every reader on the same
batches of the training epoch (after an untimed warm-up that traces the step), the readers
interleaved so they see the same machine load. The JSON holds each reader's seconds per
step round by round and their median, and the ratio to the baseline's step, round by round: the
issue's target is a GLoMo epoch at most twice a baseline epoch.

Run on a quiet machine (nothing else on the cores), one thread as the comparison's runs::

    TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 python benchmarks/reader_epoch.py \\
        --rounds 5 --steps 10 --warmup 3 --output benchmarks/outputs/reader_epoch.json
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("baseline", "uniform", "glomo_rnn")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", default=os.path.join(REPO, os.pardir, "shared", "data", "squad",
                                                  "dev-v1.1.json"))
    p.add_argument("--preset", default="glomo_books_en")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--embedding-dim", type=int, default=128)
    p.add_argument("--rnn-units", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=10, help="timed steps per reader and round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before the rounds")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="also write the JSON here")
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    import keras
    import tensorflow as tf

    import glomo_tf
    from glomo_tf.data import squad
    from glomo_tf.experiments import reading
    from glomo_tf.experiments.runs import initial_embeddings
    from glomo_tf.experiments.transfer import TransferConfig
    from glomo_tf.models.reader import build_reader

    predictor = glomo_tf.GraphPredictor.from_preset(a.preset, trainable=False)
    tokenizer = glomo_tf.Tokenizer.from_preset(a.preset)
    questions = squad.load_squad(a.file)
    _, parts, answered = reading.encode_splits(questions, None, tokenizer, a.max_length)
    started = time.perf_counter()
    cache = reading.passage_graph_cache(predictor, tokenizer, [q.context for q in questions],
                                        a.max_length)
    cache_fill = time.perf_counter() - started
    encoded, train_questions = parts[0]
    rows = reading.np.flatnonzero(encoded.spans[:, 0] >= 0)
    config = TransferConfig(dataset="squad", output_dir="", init_embeddings="predictor",
                            embedding_dim=a.embedding_dim)
    steps = a.warmup + a.rounds * a.steps
    fits = {}
    for variant in VARIANTS:
        keras.utils.set_random_seed(a.seed)
        cached = variant == "glomo_rnn"
        model = build_reader(tokenizer.vocabulary_size, variant, passage_graphs=cached,
                             graph_predictor=predictor, embedding_dim=a.embedding_dim,
                             rnn_units=a.rnn_units, dropout=0.2)
        initial_embeddings(model, predictor, config)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=keras.optimizers.Adam(2e-3), loss=[loss, loss])
        graphs = None
        if cached:
            graphs = cache[0], reading.np.array([cache[1][q.context] for q in train_questions],
                                                "int64")
        # The same batches for every reader (the same seed orders them), read once.
        batches = list(reading._batches(encoded, rows, a.batch_size, a.seed, graphs)[0]
                       .take(steps).as_numpy_iterator())
        fits[variant] = (model, batches)
    for model, batches in fits.values():  # trace every step first
        for x, y in batches[:a.warmup]:
            model.train_on_batch(x, y)
    per_round = {variant: [] for variant in VARIANTS}
    for r in range(a.rounds):
        for variant, (model, batches) in fits.items():
            part = batches[a.warmup + r * a.steps:a.warmup + (r + 1) * a.steps]
            started = time.perf_counter()
            for x, y in part:
                model.train_on_batch(x, y)  # returns the loss as NumPy: the step has finished
            per_round[variant].append((time.perf_counter() - started) / len(part))
    result = {
        "what": "SQuAD reader training steps, seconds per step (median of rounds) and ratio to "
                "the baseline's step round by round; glomo_rnn reads cached passage graphs",
        "settings": {k: getattr(a, k) for k in ("max_length", "embedding_dim", "rnn_units",
                                               "batch_size", "steps", "warmup", "rounds")},
        "training_questions": answered, "cache_fill_s": round(cache_fill, 2),
        "seconds_per_step": {v: round(statistics.median(t), 4) for v, t in per_round.items()},
        "rounds": {v: [round(x, 4) for x in t] for v, t in per_round.items()},
        "ratio_to_baseline": {v: [round(x / b, 3) for x, b in zip(t, per_round["baseline"])]
                              for v, t in per_round.items() if v != "baseline"},
        "threads": {"intra_op": os.environ.get("TF_NUM_INTRAOP_THREADS"),
                    "inter_op": os.environ.get("TF_NUM_INTEROP_THREADS")},
        "recorded": _harness.recorded(tf),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if a.output:
        with open(a.output, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
