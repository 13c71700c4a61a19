"""Propositional logic (Bowman et al., 2015) with Ordered Memory vs an LSTM of the same width:
train on pairs with at most 6 operators, test on 7 to 12 (length generalisation).

Data: the real files of ``--data`` (``trainK``/``testK``, read by :mod:`glomo_tf.data.logic`;
nothing is downloaded). Training pairs come from ``train0..6`` with every tenth held out for
validation; ``--train-size`` keeps a random subset of the rest (the full 122k pairs do not fit a
CPU budget). Test: ``test7..12``, accuracy per number of operators. ``--brackets`` reads each
formula as written, its brackets as two more tokens, as the released code's ``proplog.py`` does
(without them a formula like ``not e or not c`` does not say which of its two trees it is); by
default the models read the tokens alone.

Each model encodes both formulas with one shared encoder -- :class:`glomo_tf.OrderedMemory`
(``M^_T^N``) or ``keras.layers.LSTM`` of the same width -- and classifies the seven relations with
an MLP on ``(h1, h2, h1 * h2, |h1 - h2|)`` (one hidden ReLU layer, Table A.1's *Out* dropout).
Like the authors' code, Ordered Memory tests with twice its training slots (its weights do not
depend on the number of slots). Training: ``model.fit`` (Adam, clip norm 1, progress bars), the
best validation accuracy checkpointed under ``--checkpoint-dir`` and restored before testing.
Trees: Algorithm 2 on the test formulas, bracket F1 against the formulas' brackets (with
``--brackets``, the induced tree over every token, brackets then dropped from it, as the released
code scores it), beside the purely left- and right-branching trees' F1.

Resumable: each epoch's weights and optimizer state are backed up under ``--checkpoint-dir``
(``keras.callbacks.BackupAndRestore``) and the curve appended to ``{model}.csv``; run the same
command again after a stop and training goes on from the last finished epoch (the learning rate
as it was; ``--halve-after`` counts its epochs again from there); a model whose training
finished is not trained again (its scores are kept in ``{model}.json``), and a larger
``--epochs`` trains it on from where it stopped.

The thesis (Table 4.1, 200 units, 15 slots, the full training set) reports accuracies 98, 97, 96,
94, 94, 92 for 7..12 operators against 88, 84, 80, 78, 71, 69 for the LSTM, and F1 87.9.

Run, and evaluate a run's best model on any file of the data's format::

    python examples/ordered_memory_logic.py --output examples/outputs/ordered_memory_logic.json
    python examples/ordered_memory_logic.py evaluate --run runs/ordered_memory_logic \
        --model ordered_memory --file ../shared/data/propositionallogic/test12

References:
    Shen, Tan, Hosseini, Lin, Sordoni and Courville, "Ordered Memory", NeurIPS 2019; Bowman,
    Manning and Potts, "Tree-structured composition in neural networks without tree-structured
    architectures", 2015.
"""

import argparse
import csv
import json
import os
import sys
import time

import keras
import numpy as np

from glomo_tf import OrderedMemory
from glomo_tf.data.length_batches import LengthBatches
from glomo_tf.data.logic import (BRACKETED_VOCABULARY, RELATIONS, VOCABULARY, encode_logic,
                                 formula_ids, load_logic, train_validation_split)
from glomo_tf.layers.related.ordered_memory import released_optimizer
from glomo_tf.trees import bracket_f1, branching_tree, induce_trees, prune_tree

MODELS = ("ordered_memory", "lstm")
DEFAULT_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                            "shared", "data", "propositionallogic")


class PairBatches(LengthBatches):
    """Batches of pairs of similar length, each padded to its own longest formula; the batch
    order is reshuffled every epoch when ``shuffle``."""

    def __init__(self, left, right, labels, batch_size, seed, shuffle=True):
        super().__init__((left, right), labels, batch_size, seed, shuffle)


def build_models(name, units, slots, test_slots, dropout, learning_rate,
                 attention="stick_breaking", scorer="tanh", optimizer="adam", brackets=False):
    """``(train_model, test_model, attention_model)`` sharing their layers; the test model runs
    Ordered Memory with ``test_slots``; the attention model maps one formula to ``p_t``."""
    left = keras.Input((None,), dtype="int32", name="left")
    right = keras.Input((None,), dtype="int32", name="right")
    vocabulary = BRACKETED_VOCABULARY if brackets else VOCABULARY
    embedding = keras.layers.Embedding(len(vocabulary), units, mask_zero=True)
    if name == "ordered_memory":
        encoder = OrderedMemory(units, num_slots=slots, input_dropout=dropout,
                                hidden_dropout=dropout, attention_dropout=dropout,
                                output_dropout=dropout, return_attention=True,
                                attention=attention, scorer=scorer,
                                name="ordered_memory")
    else:
        lstm = keras.layers.LSTM(units, name="lstm")
        in_drop, out_drop = keras.layers.Dropout(dropout), keras.layers.Dropout(dropout)
    hidden = keras.layers.Dense(units, activation="relu")
    drop = keras.layers.Dropout(dropout)
    logits = keras.layers.Dense(len(RELATIONS))

    def encode(ids, num_slots=None):
        x = embedding(ids)
        if name == "ordered_memory":
            return encoder(x, num_slots=num_slots)[0]
        return out_drop(lstm(in_drop(x)))

    def classify(num_slots=None):
        h1, h2 = encode(left, num_slots), encode(right, num_slots)
        features = keras.layers.Concatenate()(
            [h1, h2, keras.layers.Multiply()([h1, h2]),
             keras.layers.Lambda(lambda a: keras.ops.abs(a[0] - a[1]))([h1, h2])])
        return logits(drop(hidden(features)))

    train_model = keras.Model([left, right], classify(), name=f"{name}_train")
    train_model.compile(released_optimizer(learning_rate) if optimizer == "released"
                        else keras.optimizers.Adam(learning_rate, clipnorm=1.0),
                        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        metrics=["accuracy"])
    if name != "ordered_memory":
        return train_model, train_model, None
    test_model = keras.Model([left, right], classify(test_slots), name=f"{name}_test")
    attention_model = keras.Model(left, encoder(embedding(left), num_slots=test_slots)[1])
    return train_model, test_model, attention_model


def learning_curve(csv_path):
    """The epochs logged in ``csv_path`` (keras.callbacks.CSVLogger's file, appended over
    restarts), the last line of each epoch kept."""
    keys = ("loss", "accuracy", "val_loss", "val_accuracy")
    with open(csv_path, encoding="utf-8") as handle:
        rows = {int(row["epoch"]): row for row in csv.DictReader(handle)}
    return [{"epoch": e + 1, **{k: round(float(rows[e][k]), 4) for k in keys if rows[e].get(k)}}
            for e in sorted(rows)]


def tree_scores(attention_model, test, brackets):
    """Bracket F1 of the trees Algorithm 2 induces on up to 200 test formulas per side and
    number of operators (three units or more), against the formulas' own trees, beside the
    purely left- and right-branching trees'."""
    formulas = [(p.left, p.left_bracketed, p.left_tree) for pairs in test.values()
                for p in pairs[:200]]
    formulas += [(p.right, p.right_bracketed, p.right_tree) for pairs in test.values()
                 for p in pairs[:200]]
    formulas = [f for f in formulas if len(f[0]) > 2]
    if not formulas:
        return {}
    read = [written if brackets else tokens for tokens, written, _ in formulas]
    ids = np.zeros((len(read), max(map(len, read))), np.int32)
    for n, tokens in enumerate(read):
        ids[n, :len(tokens)] = formula_ids(tokens, brackets)
    probs = attention_model.predict(ids, batch_size=256, verbose=0)
    trees = induce_trees(probs, ids > 0)
    if brackets:  # the tree over every token, seen over the formula's units
        trees = [prune_tree(tree, lambda t, tokens=tokens: tokens[t] not in "()")
                 for tree, tokens in zip(trees, read)]
    gold = [tree for _, _, tree in formulas]
    lengths = [len(tokens) for tokens, _, _ in formulas]

    def f1(predicted):
        return round(100 * bracket_f1(predicted, gold)["f1"], 2)

    return {"tree_f1": f1(trees), "tree_f1_formulas": len(formulas),
            "branching_f1": {"left": f1([branching_tree(n, True) for n in lengths]),
                             "right": f1([branching_tree(n, False) for n in lengths])}}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--data", default=DEFAULT_DATA, help="directory of trainK/testK")
    parser.add_argument("--train-size", type=int, default=20000,
                        help="training pairs kept from train0..6 after the validation split "
                             "(0: all)")
    parser.add_argument("--validation-size", type=int, default=2000,
                        help="validation pairs kept from the held-out tenth (0: all)")
    parser.add_argument("--test-per-operators", type=int, default=0,
                        help="test pairs kept per number of operators (0: all)")
    parser.add_argument("--units", type=int, default=48, help="slot width D and LSTM width")
    parser.add_argument("--slots", type=int, default=8, help="Ordered Memory's slots N in "
                        "training; tests use twice as many")
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
    parser.add_argument("--brackets", action="store_true",
                        help="read each formula as written, its brackets as tokens (the "
                             "released code's input); default: the tokens alone")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="runs/ordered_memory_logic",
                        help="where the best weights of each model, its epoch backups, curve "
                             "and finished scores are kept (the run resumes from them)")
    parser.add_argument("--output", default=None, help="also write the JSON results here")
    parser.add_argument("--verbose", type=int, default=None,
                        help="Keras fit verbosity (default: progress bars on a terminal, one "
                             "line per epoch otherwise)")
    args = parser.parse_args(argv)
    args.models = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown or not args.models:
        parser.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    if args.verbose is None:
        args.verbose = 1 if sys.stdout.isatty() else 2
    return args


def subset(items, size, rng):
    if not size or size >= len(items):
        return items
    keep = np.sort(rng.choice(len(items), size, replace=False))
    return [items[i] for i in keep]


def accuracy_on(test_model, pairs, brackets):
    """The share of ``pairs`` whose relation ``test_model`` predicts."""
    batches = PairBatches(*encode_logic(pairs, brackets=brackets), 256, 0, shuffle=False)
    correct = 0
    for (left, right), labels in batches.batches:
        predicted = np.argmax(test_model.predict_on_batch([left, right]), -1)
        correct += int(np.sum(predicted == labels))
    return round(correct / len(pairs), 4)


def evaluate(argv):
    """``evaluate --run DIR --file F [F ...]``: the accuracy (and Ordered Memory's tree F1) of a
    trained model of ``DIR`` (a ``--checkpoint-dir``: ``{model}.json`` and its best weights) on
    files in the data's format (``relation<TAB>formula<TAB>formula``)."""
    parser = argparse.ArgumentParser(description=evaluate.__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="the model's --checkpoint-dir")
    parser.add_argument("--model", choices=MODELS, default="ordered_memory")
    parser.add_argument("--file", nargs="+", required=True)
    args = parser.parse_args(argv)
    from glomo_tf.data.logic import read_logic_file

    paths = [os.path.join(args.run, f"{args.model}{end}") for end in (".json", ".weights.h5")]
    missing = [path for path in paths + args.file if not os.path.exists(path)]
    if missing:
        sys.exit(f"ordered_memory_logic evaluate: error: {missing[0]} does not exist; pass the "
                 "--checkpoint-dir of a run (its {model}.json and {model}.weights.h5) and "
                 "files in the data's format.")
    with open(paths[0], encoding="utf-8") as handle:
        setting = json.load(handle)["config"]
    brackets = setting.get("brackets", False)
    train_model, test_model, attention_model = build_models(
        args.model, setting["units"], setting["slots"], 2 * setting["slots"], setting["dropout"],
        setting["learning_rate"], setting["attention"], setting["scorer"], setting["optimizer"],
        brackets)
    train_model.optimizer.build(train_model.trainable_variables)  # the file holds its state too
    train_model.load_weights(paths[1])  # the layers test_model shares
    result = {"run": args.run, "model": args.model, "files": {}}
    for path in args.file:
        try:
            pairs = read_logic_file(path)
        except ValueError as error:
            sys.exit(f"ordered_memory_logic evaluate: error: {path}: {error}")
        scores = {"pairs": len(pairs), "accuracy": accuracy_on(test_model, pairs, brackets)}
        if attention_model is not None:
            scores.update(tree_scores(attention_model, {0: pairs}, brackets))
        result["files"][path] = scores
    print(json.dumps(result, indent=1))
    return result


def train_and_test(name, args, encoded_train, encoded_val, test):
    """Trains one model (resuming from its last backed-up epoch), restores its best validation
    epoch and returns its scores."""
    keras.utils.set_random_seed(args.seed)
    train_model, test_model, attention_model = build_models(
        name, args.units, args.slots, 2 * args.slots, args.dropout, args.learning_rate,
        args.attention, args.scorer, args.optimizer, args.brackets)
    checkpoint = os.path.join(args.checkpoint_dir, f"{name}.weights.h5")
    log = os.path.join(args.checkpoint_dir, f"{name}.csv")
    best = max((c["val_accuracy"] for c in learning_curve(log)), default=None) \
        if os.path.exists(log) else None
    callbacks = [
        keras.callbacks.ModelCheckpoint(checkpoint, monitor="val_accuracy", save_best_only=True,
                                        save_weights_only=True, initial_value_threshold=best),
        keras.callbacks.CSVLogger(log, append=True)]
    if args.halve_after:
        callbacks.append(keras.callbacks.ReduceLROnPlateau(
            "val_accuracy", factor=0.5, patience=args.halve_after, mode="max"))
    # Last, so that an epoch backed up has its checkpoint and its line in the log.
    callbacks.append(keras.callbacks.BackupAndRestore(
        os.path.join(args.checkpoint_dir, f"{name}-backup"), delete_checkpoint=False))
    start = time.perf_counter()
    train_model.fit(
        PairBatches(*encoded_train, args.batch_size, args.seed), epochs=args.epochs,
        validation_data=PairBatches(*encoded_val, 256, 0, shuffle=False),
        callbacks=callbacks, verbose=args.verbose)
    seconds = time.perf_counter() - start
    train_model.load_weights(checkpoint)  # the best validation epoch (shared layers)
    accuracy = {str(k): accuracy_on(test_model, pairs, args.brackets) for k, pairs in test.items()}
    curve = learning_curve(log)
    scores = {"test_accuracy": accuracy,
              "best_val_accuracy": max(c["val_accuracy"] for c in curve),
              "train_seconds": round(seconds, 1),
              "parameters": int(sum(np.prod(w.shape) for w in train_model.trainable_weights)),
              "curve": curve}
    if attention_model is not None:
        scores.update(tree_scores(attention_model, test, args.brackets))
    return scores


def main(argv=None):
    """Reads the data, trains and evaluates the models; prints and returns the results."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["evaluate"]:
        return evaluate(argv[1:])
    started = time.perf_counter()
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    train, validation = train_validation_split(load_logic(args.data, "train", range(7)))
    train = subset(train, args.train_size, rng)
    validation = subset(validation, args.validation_size, rng)
    test = {k: subset(load_logic(args.data, "test", [k]), args.test_per_operators, rng)
            for k in range(7, 13)}
    encoded_train = encode_logic(train, brackets=args.brackets)
    encoded_val = encode_logic(validation, brackets=args.brackets)
    counts = np.bincount(encoded_train[2], minlength=len(RELATIONS))
    majority = int(np.argmax(counts))
    config = {k: v for k, v in vars(args).items() if k not in ("verbose", "output", "data")}
    results = {
        "command": "python examples/ordered_memory_logic.py " + " ".join(argv),
        "config": config,
        "data": {"train": len(train), "validation": len(validation),
                 "test": {str(k): len(v) for k, v in test.items()},
                 "majority_relation": RELATIONS[majority],
                 "majority_test_accuracy": {
                     str(k): round(float(np.mean([p.relation == majority for p in v])), 4)
                     for k, v in test.items()}},
        "models": {}}
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    # What a model's run depends on (more epochs extend a run; the directory may move).
    setting = {k: v for k, v in config.items()
               if k not in ("models", "epochs", "checkpoint_dir")}
    for name in args.models:
        state = os.path.join(args.checkpoint_dir, f"{name}.json")
        kept = {"config": setting}
        if os.path.exists(state):
            with open(state, encoding="utf-8") as handle:
                kept = json.load(handle)
            changed = sorted(k for k in setting if kept["config"].get(k) != setting[k])
            if changed:
                sys.exit(f"ordered_memory_logic: error: {args.checkpoint_dir} holds a run of "
                         f"{name} with other settings ({', '.join(changed)}); pass a new "
                         "--checkpoint-dir, or the same settings to resume it.")
        else:
            with open(state, "w", encoding="utf-8") as handle:
                json.dump(kept, handle, indent=1)
        if kept.get("epochs") != args.epochs:
            kept["scores"] = train_and_test(name, args, encoded_train, encoded_val, test)
            kept["epochs"] = args.epochs
            with open(state, "w", encoding="utf-8") as handle:
                json.dump(kept, handle, indent=1)
        results["models"][name] = kept["scores"]
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
