"""Why do GLoMo's graphs (not) find the planted edges?  Three diagnostics on the demo's corpus.

``glomo demo`` trains the unsupervised model and scores its graphs against the planted edges.
This script takes the problem apart, each part measured on its own (JSON to stdout and ``--output``):

``capacity``
    The graph predictor alone, trained with the planted edges as *supervised* targets
    (``-log G[receiver, source]`` for every head): can Eq. 1 at the demo's sizes represent the
    right-key graph at all?  Reports recovery on held-out windows against steps.
``value-path``
    The feature predictor and decoders trained with an *oracle* graph in one head (the planted
    edges; every other row and head uniform over the admissible sources): once the graph is right,
    how many steps until the decoder predicts the planted value (cross-entropy < 0.1)?  Run it for
    the paper's composition and the alternatives (``--set composition=residual`` ...).
``curve``
    The unsupervised run itself, with recovery and the planted-value cross-entropy recorded every
    ``--eval-every`` steps, up to ``--steps``: is it a matter of steps or of design?

Every run starts from the demo's sizes and corpus (``glomo_tf.experiments.demo``) with the *paper's* choices
(:data:`PAPER`: the reference code's GRU composition, Eq. 1's squared ReLU, a constant learning
rate) and changes what ``--set name=value`` says (model arguments, ``learning_rate``,
``embedding_scale``, ``schedule``, ``warmup``...). ``glomo demo``'s own settings are
``--set composition=projected --set schedule=cosine``.
Nothing here ever feeds the planted edges to the unsupervised model; the oracle and the supervised
targets exist only in the first two diagnostics.

Examples::

    python examples/planted_diagnostics.py capacity --steps 1500
    python examples/planted_diagnostics.py value-path --set composition=gru --set embedding_scale=0.1
    python examples/planted_diagnostics.py curve --steps 12000 --eval-every 600
"""

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np


def parse_value(text):
    """``--set`` values: ints, floats, booleans, None, or strings."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_overrides(pairs):
    overrides = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SystemExit(f"--set takes name=value, got {pair!r}.")
        name, value = pair.split("=", 1)
        overrides[name.strip()] = parse_value(value.strip())
    return overrides


# ---------------------------------------------------------------------- the oracle
def planted_edge_matrix(token_ids, vocabulary):
    """``[B, T, T]`` float: 1 where unit ``s`` is the key of the slot whose marker is at ``t``.

    Every slot appears at most once in a window of the planted corpus, so the marker ``B{j}`` and
    the key ``K{j}.*`` identify each other; the edge belongs to the forward graph when the key comes
    first and to the backward graph otherwise (the admissibility masks sort that out).
    """
    import tensorflow as tf

    ids = tf.cast(token_ids, tf.int32)
    first_key = int(vocabulary.key(0, 0))
    first_value = int(vocabulary.value(0))
    marker_slot = tf.where((ids >= 1) & (ids <= vocabulary.num_slots), ids - 1, -1)
    key_slot = tf.where((ids >= first_key) & (ids < first_value),
                        (ids - first_key) // vocabulary.num_pairs, -2)
    match = tf.equal(marker_slot[:, :, None], key_slot[:, None, :])
    return tf.cast(match, tf.float32)


def oracle_graphs(token_ids, vocabulary, num_layers, num_heads, oracle_head=(0, 0)):
    """``[B, 2, L, K, T, T]``: uniform graphs with the planted edges in one (layer, head).

    In the oracle head, the rows of planted receivers are one-hot on their source; every other row
    of every head is uniform over the admissible sources.
    """
    import tensorflow as tf

    from glomo_tf import ops

    padding_mask = ops.padding_mask_from_ids(token_ids)
    uniform = ops.uniform_graphs(padding_mask)  # [B, 2, T, T]
    admissible = ops.admissible_sources(padding_mask)[:, :, 0, 0]
    planted_rows = planted_edge_matrix(token_ids, vocabulary)[:, None] * admissible
    has_edge = tf.reduce_sum(planted_rows, axis=-1, keepdims=True) > 0
    oracle = tf.where(has_edge, planted_rows, uniform)
    layer, head = oracle_head
    cells = [[oracle if (l, k) == (layer, head) else uniform for k in range(num_heads)]
             for l in range(num_layers)]
    return tf.stack([tf.stack(row, axis=2) for row in cells], axis=2)


def check_oracle(corpus):
    """The TF oracle must give exactly the corpus' planted edges (fails loudly otherwise)."""
    import tensorflow as tf

    from glomo_tf import ops

    ids = corpus.token_ids[:64]
    admissible = ops.admissible_sources(ops.padding_mask_from_ids(ids))[:, :, 0, 0]
    matrix = (planted_edge_matrix(ids, corpus.vocabulary)[:, None] * admissible).numpy()
    found = np.argwhere(matrix > 0)  # rows (sequence, direction, receiver, source)
    expected = corpus.edges[corpus.edges[:, 0] < 64]
    order = np.lexsort((found[:, 2], found[:, 1], found[:, 0]))
    np.testing.assert_array_equal(found[order], expected)
    del tf


# ---------------------------------------------------------------------- shared pieces
# The paper's choices at the demo's sizes: the starting point of every diagnostic run.
PAPER = dict(composition="gru", normalization="squared_relu")


def demo_settings(overrides):
    """The demo's sizes with the paper's choices, and training settings, ``overrides`` applied."""
    from glomo_tf.experiments import demo

    model = dict(demo.MODEL, **PAPER)
    training = dict(learning_rate=demo.LEARNING_RATE, clipnorm=demo.CLIP_NORM,
                    embedding_scale=demo.EMBEDDING_SCALE, batch_size=demo.DEFAULTS["batch_size"],
                    train_windows=demo.DEFAULTS["train_windows"],
                    test_windows=demo.DEFAULTS["test_windows"], schedule="constant", warmup=0,
                    initial_threshold=-1.0)
    for name, value in overrides.items():
        if name in training:
            training[name] = value
        else:
            model[name] = value
    return model, training


def optimizer_for(training, total_steps):
    import keras

    lr = training["learning_rate"]
    if training["schedule"] == "cosine":
        lr = keras.optimizers.schedules.CosineDecay(
            0.0 if training["warmup"] else lr, total_steps - training["warmup"],
            warmup_target=lr if training["warmup"] else None,
            warmup_steps=training["warmup"], alpha=0.05)
    elif training["schedule"] != "constant":
        raise SystemExit(f"schedule must be constant or cosine, got {training['schedule']!r}.")
    return keras.optimizers.Adam(lr, global_clipnorm=training["clipnorm"])


def corpora(training):
    from glomo_tf.experiments import demo
    from glomo_tf.data import planted

    train = planted.builtin_corpus("train", training["train_windows"], **demo.CORPUS)
    test = planted.builtin_corpus("test", training["test_windows"], **demo.CORPUS)
    return train, test


def parse_curriculum(text):
    """``"seq_len=16,max_gap=5:600;seq_len=32:600"`` -> ``[({"seq_len": 16, ...}, 600), ...]``:
    stages of training windows (the demo corpus with these changes) run before the demo's own."""
    stages = []
    for stage in filter(None, (part.strip() for part in (text or "").split(";"))):
        changes, _, steps = stage.rpartition(":")
        corpus = parse_overrides(changes.split(",")) if changes else {}
        stages.append((corpus, int(steps)))
    return stages


def curriculum_dataset(train, training, stages, seed):
    """The demo's repeated training batches, preceded by ``stages`` of other windows."""
    from glomo_tf.experiments import demo
    from glomo_tf.data import planted

    dataset = None
    for number, (changes, steps) in enumerate(stages):
        corpus = planted.generate_planted_corpus(
            training["train_windows"], seed=planted.BUILTIN_TRAIN_SEED + 1000 * (number + 1),
            **dict(demo.CORPUS, **changes))
        stage = demo.training_dataset(corpus.token_ids, training["batch_size"], seed).take(steps)
        dataset = stage if dataset is None else dataset.concatenate(stage)
    main = demo.training_dataset(train.token_ids, training["batch_size"], seed)
    return main if dataset is None else dataset.concatenate(main)


def pretrainer(vocabulary_size, model_args, training, seed):
    import keras

    from glomo_tf.models import GlomoPretrainer

    keras.utils.set_random_seed(seed)
    model = GlomoPretrainer.from_sizes(
        vocabulary_size, seed=seed, initial_threshold=training["initial_threshold"], **model_args)
    return model


def scale_embeddings(predictor, scale, seed):
    rng = np.random.default_rng(seed)
    predictor.embeddings.assign(
        rng.uniform(-scale, scale, predictor.embeddings.shape).astype("float32"))


def evaluate(model, test, with_recovery=True):
    """Recovery (best head, heads averaged) and the planted-value cross-entropy per direction."""
    from glomo_tf.experiments import demo

    row = {"value_cross_entropy": demo.planted_value_cross_entropy(model, test)}
    if with_recovery:
        report = demo.recovery_report(demo.predict_graphs(model, test.token_ids), test)
        row["best_head"] = {z: round(report[z]["best_head"]["share"], 4) for z in report}
        row["heads_averaged"] = {z: round(report[z]["best_layer_head_average"]["share"], 4)
                                 for z in report}
    return row


def fit_with_curve(model, train, training, steps, eval_every, seed, measure, stop=None,
                   stages=()):
    """``model.fit`` in chunks of ``eval_every`` steps; ``measure()`` after each chunk."""
    import keras

    curve, start = [], time.time()

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            row = {"step": (epoch + 1) * eval_every, "seconds": round(time.time() - start, 1),
                   "loss": round(float(logs["loss"]), 4), **measure()}
            curve.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if stop is not None and stop(row):
                self.model.stop_training = True

    model.fit(curriculum_dataset(train, training, stages, seed),
              epochs=max(1, steps // eval_every), steps_per_epoch=eval_every, verbose=0,
              shuffle=False,  # the dataset shuffles itself
              callbacks=[Record()])
    return curve


# ---------------------------------------------------------------------- diagnostics
def run_capacity(args, model_args, training):
    """Supervised graph predictor: ``-log G[receiver, source]`` on the planted edges, every head."""
    import keras
    import tensorflow as tf

    from glomo_tf import ops
    from glomo_tf.experiments import demo
    from glomo_tf.layers import graph_predictor

    train, test = corpora(training)
    check_oracle(test)
    keras.utils.set_random_seed(args.seed)
    graph_args = {k: v for k, v in model_args.items()
                  if k not in ("context_length", "decoder_layers", "num_positions")}
    predictor = graph_predictor(train.vocabulary.size, initial_threshold=training["initial_threshold"],
                                **graph_args)
    predictor.build((None, None))
    scale_embeddings(predictor, training["embedding_scale"], args.seed)
    optimizer = optimizer_for(training, args.steps)
    vocab = train.vocabulary

    @tf.function(jit_compile=True)
    def step(ids):
        with tf.GradientTape() as tape:
            out = predictor(ids, training=True)
            graphs = out["graphs"]  # [B, 2, L, K, T, T]
            admissible = ops.admissible_sources(out["padding_mask"])
            target = planted_edge_matrix(ids, vocab)[:, None, None, None] * admissible
            rows = tf.reduce_sum(target, axis=-1)  # [B, 2, 1, 1, T]: 1 at planted receivers
            on_source = tf.reduce_sum(graphs * target, axis=-1)  # [B, 2, L, K, T]
            nll = -tf.math.log(on_source + 1e-6) * rows
            loss = tf.reduce_sum(nll) / (tf.reduce_sum(rows) * graphs.shape[2] * graphs.shape[3])
            if predictor.losses:
                loss = loss + tf.add_n(predictor.losses)
        variables = predictor.trainable_variables
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    dataset = iter(demo.training_dataset(train.token_ids, training["batch_size"], args.seed))
    curve, start = [], time.time()
    for done in range(1, args.steps + 1):
        loss = step(next(dataset))
        if done % args.eval_every == 0 or done == args.steps:
            graphs = np.concatenate([
                predictor(test.token_ids[i:i + 128], training=False)["graphs"].numpy()
                for i in range(0, len(test.token_ids), 128)])
            report = demo.recovery_report(graphs, test)
            shares = {z: np.asarray(report[z]["share_per_layer_head"]) for z in report}
            row = {"step": done, "seconds": round(time.time() - start, 1),
                   "loss": round(float(loss), 4),
                   "best_head": {z: round(float(s.max()), 4) for z, s in shares.items()},
                   "worst_head": {z: round(float(s.min()), 4) for z, s in shares.items()},
                   "mean_head": {z: round(float(s.mean()), 4) for z, s in shares.items()}}
            curve.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {"curve": curve, "final": curve[-1]}


def run_value_path(args, model_args, training):
    """Oracle graph in head (1, 1): steps until the planted value's cross-entropy is below 0.1."""
    import tensorflow as tf

    from glomo_tf.layers import GraphPredictor
    from glomo_tf.layers.graph_predictor import flat_settings

    train, test = corpora(training)
    check_oracle(test)
    vocab = train.vocabulary
    layers, heads = model_args["num_layers"], model_args["num_heads"]

    class OracleGraphs(GraphPredictor):
        """The demo's predictor with its graphs replaced by the oracle (its embeddings still used)."""

        def call(self, token_ids, training=False):
            token_ids = tf.convert_to_tensor(token_ids)
            return {"graphs": oracle_graphs(token_ids, vocab, layers, heads),
                    "padding_mask": tf.not_equal(token_ids, 0)}

    model = pretrainer(train.vocabulary.size, model_args, training, args.seed)
    model.graph_predictor = OracleGraphs(
        train.vocabulary.size, **flat_settings({
            "initial_threshold": training["initial_threshold"],
            **{k: v for k, v in model_args.items()
               if k not in ("context_length", "decoder_layers", "num_positions", "composition")}}),
        name="graph_predictor")
    model.build()
    scale_embeddings(model.graph_predictor, training["embedding_scale"], args.seed)
    model.compile(optimizer=optimizer_for(training, args.steps), jit_compile=True)
    # The oracle replaces the predictor's graphs, so its CNN and projections get no gradient (only
    # its embeddings do): expected here, not worth Keras' warning.
    warnings.filterwarnings("ignore", message="Gradients do not exist for variables")

    def solved(row):
        return max(row["value_cross_entropy"].values()) < args.solved_below

    curve = fit_with_curve(model, train, training, args.steps, args.eval_every, args.seed,
                           lambda: evaluate(model, test, with_recovery=False), stop=solved)
    hit = next((row["step"] for row in curve if solved(row)), None)
    return {"curve": curve, "steps_to_solve": hit, "solved_below": args.solved_below,
            "final": curve[-1]}


def run_curve(args, model_args, training):
    """The unsupervised demo model, measured every ``eval_every`` steps."""
    import keras

    train, test = corpora(training)
    model = pretrainer(train.vocabulary.size, model_args, training, args.seed)
    model.build()
    scale_embeddings(model.graph_predictor, training["embedding_scale"], args.seed)
    model.compile(optimizer=optimizer_for(training, args.steps), jit_compile=True)
    del keras

    def reached(row):
        return args.stop_at is not None and min(row["best_head"].values()) >= args.stop_at

    stages = parse_curriculum(args.curriculum)
    curve = fit_with_curve(model, train, training, args.steps, args.eval_every, args.seed,
                           lambda: evaluate(model, test), stop=reached, stages=stages)
    return {"curriculum": [{"corpus": c, "steps": n} for c, n in stages], "curve": curve,
            "final": curve[-1]}


RUNS = {"capacity": run_capacity, "value-path": run_value_path, "curve": run_curve}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("diagnostic", choices=sorted(RUNS))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--eval-every", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="change one of the demo's model or training settings")
    parser.add_argument("--solved-below", type=float, default=0.1,
                        help="value-path: cross-entropy that counts as solved (default 0.1)")
    parser.add_argument("--stop-at", type=float, default=None,
                        help="curve: stop once both directions' best head reach this share")
    parser.add_argument("--curriculum", metavar="STAGES",
                        help="curve: training stages before the demo's windows, e.g. "
                             "'seq_len=16,deps_per_sequence=2,max_gap=5:600;seq_len=32:600' "
                             "(corpus changes:steps; held-out windows stay the demo's)")
    parser.add_argument("--output", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.eval_every < 1:
        parser.error("--steps and --eval-every must be at least 1.")
    overrides = parse_overrides(args.set)
    model_args, training = demo_settings(overrides)
    start = time.time()
    result = RUNS[args.diagnostic](args, model_args, training)
    result = {"diagnostic": args.diagnostic, "overrides": overrides, "model": model_args,
              "training": training, "steps": args.steps, "seed": args.seed,
              "wall_seconds": round(time.time() - start, 1), **result}
    text = json.dumps(result, indent=1)
    print(text)
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
