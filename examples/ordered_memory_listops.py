"""ListOps with Ordered Memory vs an LSTM of the same width: accuracy, learning curves, and the
trees Ordered Memory induces compared with the gold trees (bracket F1).

The data are generated (:func:`glomo_tf.data.listops.generate_listops`, seeded; nothing is
downloaded): train, validation and test sets from three seeds, test expressions that also occur
in the training set dropped. Or your own files in the original format (``--train-file``,
``--test-file``, e.g. those of ``examples/listops_graphs.py``, so that Ordered Memory runs beside
its BiGRU classifiers): the validation part is then the seeded 10% of the training file that
``glomo transfer`` carves with the same ``--seed``. Each model is ``Embedding -> encoder -> MLP -> 10 classes``: the
encoder is :class:`glomo_tf.OrderedMemory` (``M^_T^N``) or ``keras.layers.LSTM`` (last state),
both ``--units`` wide; the MLP is one hidden ReLU layer of ``--units`` with Table A.1's *Out*
dropout. Training is ``model.fit`` (Adam, clip norm 1, progress bars) with a checkpoint of the
best validation accuracy under ``--checkpoint-dir``, restored before testing.

Trees: the attention ``p_t`` of every test expression, read by Algorithm 2
(:func:`glomo_tf.trees.induce_trees`), scored against the gold trees of the expressions'
parentheses (:func:`glomo_tf.trees.bracket_f1`, unlabelled spans of length > 1 as Evalb). For
scale, the F1 of the purely left- and right-branching trees is reported too.

The thesis reports 99.9% accuracy and 100 F1 at full size (128 units, 21 slots, about 90k
expressions of up to 20 levels, 50 epochs on a GPU). The defaults here fit a two-core CPU in
about ten minutes: short expressions (``--max-length``, ``--max-depth``), 48 units, 8 slots.

Run::

    python examples/ordered_memory_listops.py --output examples/outputs/ordered_memory_listops.json

It prints and writes JSON: the configuration, the command, the wall time, and per model the
per-epoch learning curve, test accuracy and (Ordered Memory) the induced-tree F1.

References:
    Shen, Tan, Hosseini, Lin, Sordoni and Courville, "Ordered Memory", NeurIPS 2019; Nangia and
    Bowman, "ListOps: A Diagnostic Dataset for Latent Tree Learning", NAACL SRW 2018.
"""

import argparse
import json
import os
import sys
import time

import keras
import numpy as np

from glomo_tf import OrderedMemory
from glomo_tf.data.length_batches import LengthBatches
from glomo_tf.data.labeled import seeded_split
from glomo_tf.data.listops import (VOCABULARY, encode_listops, generate_listops, label_counts,
                                   length_summary, read_listops)
from glomo_tf.layers.related.ordered_memory import released_optimizer
from glomo_tf.trees import bracket_f1, branching_tree, induce_trees

MODELS = ("ordered_memory", "lstm")


def build_model(name, units, slots, dropout, learning_rate, jit_compile,
                attention="stick_breaking", scorer="tanh", optimizer="adam"):
    """``(model, attention_model)``: the classifier and, for Ordered Memory, a model from the
    same inputs to ``p_t`` (None for the LSTM)."""
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedded = keras.layers.Embedding(len(VOCABULARY), units, mask_zero=True)(ids)
    probs = None
    if name == "ordered_memory":
        encoded, probs = OrderedMemory(units, num_slots=slots, input_dropout=dropout,
                                           hidden_dropout=dropout, attention_dropout=dropout,
                                           output_dropout=dropout, return_attention=True,
                                           attention=attention, scorer=scorer,
                                           name="ordered_memory")(embedded)
    else:
        encoded = keras.layers.LSTM(units, name="lstm")(keras.layers.Dropout(dropout)(embedded))
        encoded = keras.layers.Dropout(dropout)(encoded)
    hidden = keras.layers.Dense(units, activation="relu")(encoded)
    logits = keras.layers.Dense(10)(keras.layers.Dropout(dropout)(hidden))
    model = keras.Model(ids, logits, name=name)
    model.compile(released_optimizer(learning_rate) if optimizer == "released"
                  else keras.optimizers.Adam(learning_rate, clipnorm=1.0),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=jit_compile)
    attention_model = None if probs is None else keras.Model(ids, probs)
    return model, attention_model


def with_tokens(tree, tokens):
    """An induced tree (positions) with the tokens at its leaves."""
    if isinstance(tree, tuple):
        return tuple(with_tokens(child, tokens) for child in tree)
    return tokens[tree]


def learning_curve(history):
    keys = ("loss", "accuracy", "val_loss", "val_accuracy")
    epochs = len(history.history["loss"])
    return [{"epoch": e + 1, **{k: round(float(history.history[k][e]), 4) for k in keys
                                if k in history.history}} for e in range(epochs)]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--train-size", type=int, default=6000, help="generated expressions")
    parser.add_argument("--validation-size", type=int, default=500)
    parser.add_argument("--train-file", help="train on this ListOps file (label<TAB>expression) "
                        "instead of generated expressions; 10%% of it validates")
    parser.add_argument("--test-file", help="test on this ListOps file (with --train-file)")
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=40,
                        help="tokens per expression, parentheses excluded")
    parser.add_argument("--max-depth", type=int, default=4, help="levels of nesting (20 in "
                        "the original)")
    parser.add_argument("--units", type=int, default=48, help="slot width D and LSTM width")
    parser.add_argument("--slots", type=int, default=8, help="Ordered Memory's slots N")
    parser.add_argument("--dropout", type=float, default=0.1, help="Table A.1's four rates")
    parser.add_argument("--attention", choices=("stick_breaking", "softmax"),
                        default="stick_breaking",
                        help="Ordered Memory's attention normalisation (the thesis' stick-breaking "
                             "or the released code's masked softmax)")
    parser.add_argument("--scorer", choices=("tanh", "layer_norm"), default="tanh",
                        help="Ordered Memory's attention scores (Eq. 4.8, or the released "
                             "code's layer-normed query and key)")
    parser.add_argument("--optimizer", choices=("adam", "released"), default="adam",
                        help="adam: Adam, each gradient clipped to norm 1; released: the "
                             "released code's Adam (beta_1 0, epsilon 1e-9, global norm 1)")
    parser.add_argument("--halve-after", type=int, default=0,
                        help="halve the learning rate after this many epochs without a better "
                             "validation accuracy, as the released code does with 2 (0: never)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--jit-compile", action="store_true",
                        help="train with XLA (on two CPU cores it compiled for 20 s and was "
                             "no faster per step)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="runs/ordered_memory_listops",
                        help="where the best weights of each model are kept")
    parser.add_argument("--output", default=None, help="also write the JSON results here")
    parser.add_argument("--verbose", type=int, default=None,
                        help="Keras fit verbosity (default: progress bars on a terminal, one "
                             "line per epoch otherwise)")
    args = parser.parse_args(argv)
    args.models = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown or not args.models:
        parser.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    if bool(args.train_file) != bool(args.test_file):
        parser.error("--train-file and --test-file go together: give both, or neither to "
                     "generate the data")
    if args.verbose is None:
        args.verbose = 1 if sys.stdout.isatty() else 2
    return args


def make_data(args):
    """``(train, validation, test)`` lists of ListOps examples, generated or read."""
    if args.train_file:
        given, test = read_listops(args.train_file), read_listops(args.test_file)
        for path, examples in ((args.train_file, given), (args.test_file, test)):
            if not examples:
                raise SystemExit(f"{path}: no ListOps example (label<TAB>expression lines).")
        keep, validation = seeded_split(len(given), 0.1, args.seed)
        return [given[i] for i in keep], [given[i] for i in validation], test
    shape = dict(max_depth=args.max_depth, max_length=args.max_length)
    train = generate_listops(args.train_size, seed=args.seed, **shape)
    seen = {e.expression for e in train}
    held_out = [e for e in generate_listops(2 * (args.validation_size + args.test_size),
                                            seed=args.seed + 10_000, **shape)
                if e.expression not in seen]
    validation = held_out[:args.validation_size]
    test = held_out[args.validation_size:args.validation_size + args.test_size]
    return train, validation, test


def main(argv=None):
    """Generates the data, trains and evaluates the models; prints and returns the results."""
    started = time.perf_counter()
    args = parse_args(argv)
    train, validation, test = make_data(args)
    width = None if args.train_file else args.max_length  # a file's examples keep their length
    x_train, y_train = encode_listops(train, width)
    x_val, y_val = encode_listops(validation, width)
    x_test, y_test = encode_listops(test, width)
    counts = label_counts(train)
    majority = int(np.argmax(counts))
    gold = [e.tree for e in test]
    lengths = [len(e.tokens) for e in test]
    results = {
        "command": "python examples/ordered_memory_listops.py " + " ".join(argv or sys.argv[1:]),
        "config": {k: v for k, v in vars(args).items() if k not in ("verbose", "output")},
        "data": {"train": len(train), "validation": len(validation), "test": len(test),
                 "train_lengths": length_summary(train), "test_lengths": length_summary(test),
                 "majority_class": majority,
                 "majority_test_accuracy": round(float(np.mean(y_test == majority)), 4)},
        "branching_f1": {
            "left": round(100 * bracket_f1([branching_tree(n, True) for n in lengths],
                                           gold)["f1"], 2),
            "right": round(100 * bracket_f1([branching_tree(n, False) for n in lengths],
                                            gold)["f1"], 2)},
        "models": {}}
    for name in args.models:
        keras.utils.set_random_seed(args.seed)
        model, attention_model = build_model(name, args.units, args.slots, args.dropout,
                                             args.learning_rate, args.jit_compile,
                                             args.attention, args.scorer, args.optimizer)
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        checkpoint = os.path.join(args.checkpoint_dir, f"{name}.weights.h5")
        callbacks = [keras.callbacks.ModelCheckpoint(checkpoint, monitor="val_accuracy",
                                                     save_best_only=True,
                                                     save_weights_only=True)]
        if args.halve_after:
            callbacks.append(keras.callbacks.ReduceLROnPlateau(
                "val_accuracy", factor=0.5, patience=args.halve_after, mode="max"))
        start = time.perf_counter()
        history = model.fit(LengthBatches(x_train, y_train, args.batch_size, args.seed),
                            epochs=args.epochs, callbacks=callbacks, verbose=args.verbose,
                            validation_data=LengthBatches(x_val, y_val, 256, 0, False))
        seconds = time.perf_counter() - start
        model.load_weights(checkpoint)  # the best validation epoch
        logits = model.predict(x_test, batch_size=256, verbose=0)  # one width: order kept
        scores = {"test_accuracy": round(float(np.mean(np.argmax(logits, -1) == y_test)), 4),
                  "best_val_accuracy": round(float(max(history.history["val_accuracy"])), 4),
                  "train_seconds": round(seconds, 1),
                  "parameters": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
                  "curve": learning_curve(history)}
        if attention_model is not None:
            probs = attention_model.predict(x_test, batch_size=256, verbose=0)
            trees = induce_trees(probs, x_test > 0)
            f1 = bracket_f1(trees, gold)
            scores["tree_f1"] = round(100 * f1["f1"], 2)
            index = int(np.argmax([min(n, 16) for n in lengths]))  # one of 16+ tokens
            scores["example_tree"] = {"gold": str(gold[index]),
                                      "induced": str(with_tokens(trees[index],
                                                                 test[index].tokens))}
        results["models"][name] = scores
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
