"""ListOps, where the answer is known: graphs pretrained on unlabelled expressions, checked
against the gold trees, and transferred into a classifier of the expressions' values.

Steps (each resumable: a finished step is read back, an interrupted one continues):

1. **Data** (:func:`glomo_tf.data.listops.generate_listops`, seeded; nothing is downloaded), at
   the sizes ``examples/ordered_memory_listops.py`` trains on (up to 4 levels, 40 units):
   ``--pretrain-size`` unlabelled expressions (one line of tokens each, no parentheses) for
   pretraining, ``--train-size`` labelled ones and ``--test-size`` held-out ones in the original
   format (``label<TAB>expression``); the three sets are drawn with different seeds and test
   expressions seen in training are dropped.
2. **Pretraining**: ``glomo pretrain``'s run (:func:`glomo_tf.experiments.pretraining.run_pretraining`) on the
   unlabelled lines, the paper's form by default (``--composition``, ``--normalization``,
   ``--entmax-alpha`` for the options).
3. **Graphs against the gold trees**: the predictor's forward graphs on every test expression,
   scored by :func:`glomo_tf.data.listops.parent_agreement`: the share of units whose strongest
   source is their parent operator (each argument the ``[OP`` opening its list, each ``]`` its own
   ``[OP``), per head, for the heads averaged, for the best fixed-offset rule and for chance.
4. **Transfer**: ``glomo transfer --dataset listops`` (:func:`glomo_tf.experiments.transfer.run_transfer`):
   BiGRU ``baseline``, ``glomo_embeddings``, ``glomo_rnn``, ``uniform`` over ``--seeds``, with
   the trained classifiers saved (``--save-models``).

Run (the recorded output: about an hour on one core, most of it the 30 transfer runs)::

    python examples/listops_graphs.py --run-dir runs/listops --output examples/outputs/listops_graphs.json

Evaluate a saved classifier on any ListOps file in the original format::

    python examples/listops_graphs.py evaluate --model examples/outputs/listops_models/glomo_rnn-seed0.keras \\
        --tokenizer examples/outputs/listops_models/tokenizer --file test.tsv
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

DEFAULTS = dict(pretrain_size=40_000, train_size=12_000, test_size=1_000, max_depth=4,
                max_length=40)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", default="runs/listops", help="data, runs and checkpoints")
    parser.add_argument("--output", help="write the JSON results here")
    parser.add_argument("--models-dir", help="copy the seed-0 classifiers and the tokenizer here")
    parser.add_argument("--pretrain-size", type=int, default=DEFAULTS["pretrain_size"])
    parser.add_argument("--train-size", type=int, default=DEFAULTS["train_size"])
    parser.add_argument("--test-size", type=int, default=DEFAULTS["test_size"])
    parser.add_argument("--max-depth", type=int, default=DEFAULTS["max_depth"])
    parser.add_argument("--max-length", type=int, default=DEFAULTS["max_length"])
    parser.add_argument("--hidden-dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--composition", default="gru", help="the paper's gru, or projected")
    parser.add_argument("--normalization", default="squared_relu",
                        help="the paper's squared_relu, or softmax / entmax15 / entmax")
    parser.add_argument("--entmax-alpha", type=float, default=1.5,
                        help="alpha of --normalization entmax, in (1, 2]")
    parser.add_argument("--pretrain-epochs", type=int, default=3)
    parser.add_argument("--conv-layers", type=int, default=2,
                        help="causal convolutions of the key and query networks")
    parser.add_argument("--kernel-size", type=int, default=3,
                        help="their width: a query sees conv-layers * (kernel-size - 1) + 1 units")
    parser.add_argument("--context-length", type=int, default=3,
                        help="units the decoder predicts past each position")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--variants", nargs="+",
                        default=["baseline", "glomo_embeddings", "glomo_rnn", "uniform"])
    parser.add_argument("--units", type=int, default=64, help="classifier embedding and GRU width")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--skip-transfer", action="store_true",
                        help="stop after the graphs' agreement with the gold trees")
    parser.add_argument("--verbose", type=int, default=2)
    return parser.parse_args(argv)


def make_data(args, data_dir):
    """Writes ``pretrain.txt``, ``train.tsv`` and ``test.tsv`` once; returns their paths."""
    from glomo_tf.data.listops import generate_listops, write_listops

    paths = {name: os.path.join(data_dir, name)
             for name in ("pretrain.txt", "train.tsv", "test.tsv")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    os.makedirs(data_dir, exist_ok=True)
    shape = dict(max_depth=args.max_depth, max_length=args.max_length)
    train = generate_listops(args.train_size, seed=0, **shape)
    pretrain = generate_listops(args.pretrain_size, seed=1, **shape)
    seen = {e.expression for e in train}
    test = [e for e in generate_listops(2 * args.test_size, seed=2, **shape)
            if e.expression not in seen][:args.test_size]
    with open(paths["pretrain.txt"], "w", encoding="utf-8") as handle:
        handle.writelines(" ".join(e.tokens) + "\n" for e in pretrain)
    write_listops(paths["train.tsv"], train)
    write_listops(paths["test.tsv"], test)
    return paths


def pretrain(args, paths, run_dir):
    from glomo_tf.experiments.pretraining import PretrainingConfig, run_pretraining

    if not os.path.exists(os.path.join(run_dir, "metrics.json")):
        run_pretraining(PretrainingConfig(
            output_dir=run_dir, train=[paths["pretrain.txt"]], validation_fraction=0.05,
            window=64, shift=64, hidden_dim=args.hidden_dim, num_layers=args.layers,
            num_heads=args.heads, conv_layers=args.conv_layers,
            kernel_size=args.kernel_size, context_length=args.context_length, decoder_layers=1,
            num_positions=20, composition=args.composition, normalization=args.normalization,
            entmax_alpha=args.entmax_alpha,
            optimizer="adam", learning_rate=0.002, clipnorm=1.0, batch_size=32,
            epochs=args.pretrain_epochs, precision=args.precision, seed=0,
            verbose=args.verbose))
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as handle:
        return json.load(handle)


def agreement(run_dir, test_path, batch_size=256):
    """The forward graphs of the test expressions scored against their gold parents."""
    from glomo_tf.data.batching import encode
    from glomo_tf.data.listops import parent_agreement, read_listops
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    predictor = load_graph_predictor(os.path.join(run_dir, "graph_predictor.keras"))
    tokenizer = Tokenizer.load(os.path.join(run_dir, "tokenizer"))
    examples = read_listops(test_path)
    ids = encode(tokenizer, [" ".join(e.tokens) for e in examples], 1_000)
    unknown = int(np.sum(ids == 1))  # id 1 is <unk>
    graphs = np.concatenate([predictor(ids[i:i + batch_size])["graphs"][:, 0].numpy()
                             for i in range(0, len(ids), batch_size)])
    result = parent_agreement(graphs, [len(e.tokens) for e in examples],
                              [e.tokens for e in examples])
    result["unknown_units"] = unknown
    return result


def transfer(args, paths, run_dir, output_dir):
    from glomo_tf.experiments.transfer import TransferConfig, run_transfer

    run_transfer(TransferConfig(
        dataset="listops", file=paths["train.tsv"], test_file=paths["test.tsv"],
        output_dir=output_dir, model=os.path.join(run_dir, "graph_predictor.keras"),
        tokenizer=os.path.join(run_dir, "tokenizer"), max_length=args.max_length,
        variants=args.variants, seeds=args.seeds, embedding_dim=args.units,
        rnn_units=args.units, epochs=args.epochs, precision=args.precision, save_models=True,
        graph_cache=True,
        resume=True, verbose=args.verbose))
    with open(os.path.join(output_dir, "results.json"), encoding="utf-8") as handle:
        return json.load(handle)


def save_models(args, output_dir, run_dir, test_path):
    """Copies the seed-0 classifiers (without optimizer state: they are for evaluation), the
    tokenizer and the test file to ``args.models_dir``."""
    import keras

    import glomo_tf  # noqa: F401  (registers the layers)

    os.makedirs(args.models_dir, exist_ok=True)
    for variant in args.variants:
        model = keras.models.load_model(
            os.path.join(output_dir, "models", f"{variant}-seed0.keras"), compile=False)
        model.save(os.path.join(args.models_dir, f"{variant}-seed0.keras"))
    shutil.copytree(os.path.join(run_dir, "tokenizer"),
                    os.path.join(args.models_dir, "tokenizer"), dirs_exist_ok=True)
    shutil.copy(test_path, os.path.join(args.models_dir, "test.tsv"))


def operator_depth(tokens):
    """How deep the operators of an expression's tokens nest: 0 for a bare digit, 1 for
    ``[MAX 2 9 ]``, 2 for ``[SM [MIN 1 2 ] 3 ]``."""
    depth = deepest = 0
    for token in tokens:
        depth += token.startswith("[") - (token == "]")
        deepest = max(deepest, depth)
    return deepest


def breakdown(examples, correct):
    """Accuracy by the expression's outermost operator (``digit`` for a bare one), by how deep
    its operators nest, and by both: ``{"by_operator": {op: {"examples", "accuracy"}},
    "by_depth": {depth: ...}, "by_operator_and_depth": {"op depth": ...}}``, each group's share
    of ``correct`` (a bool per example). An operator's accuracy at depth 1 (a flat list of
    digits) is how well a model composes it once."""
    groups = {"by_operator": {}, "by_depth": {}, "by_operator_and_depth": {}}
    for example, right in zip(examples, correct):
        root = example.tokens[0] if example.tokens[0].startswith("[") else "digit"
        depth = str(operator_depth(example.tokens))
        for kind, key in (("by_operator", root), ("by_depth", depth),
                          ("by_operator_and_depth", f"{root} {depth}")):
            groups[kind].setdefault(key, []).append(bool(right))
    return {kind: {key: {"examples": len(hits), "accuracy": round(sum(hits) / len(hits), 4)}
                   for key, hits in sorted(found.items())} for kind, found in groups.items()}


def evaluate(argv):
    """``evaluate --model M.keras --tokenizer DIR --file F``: a saved classifier's accuracy on a
    ListOps file in the original format (a gold variant's is given each expression's tree), in
    all and by outermost operator and nesting depth (:func:`breakdown`)."""
    parser = argparse.ArgumentParser(description=evaluate.__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--max-length", type=int, default=1_000)
    parser.add_argument("--output", help="also keep the result in this JSON, under --name "
                        "(the file's other results are kept)")
    parser.add_argument("--name", help="--output's key for this model (default: its path)")
    args = parser.parse_args(argv)
    import keras

    import glomo_tf  # noqa: F401  (registers the layers)
    from glomo_tf.data.batching import encode
    from glomo_tf.data.listops import read_listops
    from glomo_tf.data.vocabulary import Tokenizer

    examples = read_listops(args.file)
    tokenizer = Tokenizer.load(args.tokenizer)
    texts = [" ".join(e.tokens) for e in examples]
    ids = encode(tokenizer, texts, args.max_length)
    model = keras.models.load_model(args.model)
    if len(model.inputs) == 2:  # a gold variant: the expressions' own trees as its graphs
        from glomo_tf import hparams
        from glomo_tf.data.graph_cache import cached_inference_batches
        from glomo_tf.experiments.classification import gold_graphs

        heads = model.inputs[1].shape[3]  # the form the model was trained on, by its heads
        form = next(f for f, k in hparams.GOLD_FORMS.items() if k == heads)
        data, order = cached_inference_batches(ids, np.zeros(len(ids), "int64"), 256,
                                               gold_graphs(texts, ids, form), dense=True)
        predicted = np.empty(len(ids), np.int64)
        predicted[order] = np.argmax(model.predict(data, verbose=0), axis=-1)
    else:
        predicted = np.argmax(model.predict(ids, batch_size=256, verbose=0), axis=-1)
    labels = np.array([e.label for e in examples])
    result = {"model": args.model, "file": args.file, "examples": len(examples),
              "accuracy": round(float(np.mean(predicted == labels)), 4),
              **breakdown(examples, predicted == labels)}
    print(json.dumps(result))
    if args.output:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _records import read_record, write_record

        record = read_record(args.output, {"evaluations": {}})
        record["evaluations"][args.name or args.model] = {
            "command": "python examples/listops_graphs.py evaluate " + " ".join(argv), **result}
        write_record(args.output, record)
    return result


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["evaluate"]:
        return evaluate(argv[1:])
    args = parse_args(argv)
    from glomo_tf.precision import cpu_description

    started = time.perf_counter()
    paths = make_data(args, os.path.join(args.run_dir, "data"))
    form = f"{args.composition}_{args.normalization}"
    if args.normalization == "entmax":
        form += f"{args.entmax_alpha:g}"
    if (args.conv_layers, args.kernel_size) != (2, 3):
        form += f"_conv{args.conv_layers}x{args.kernel_size}"
    form += "".join(f"_{tag}{value}" for tag, value, default in (
        ("hidden", args.hidden_dim, 64), ("context", args.context_length, 3)) if value != default)
    run_dir = os.path.join(args.run_dir, f"pretrain_{form}")
    results = {"command": "python examples/listops_graphs.py " + " ".join(argv),
               "machine": {"cpus": os.cpu_count(), **cpu_description()},
               "config": {k: v for k, v in vars(args).items()
                          if k not in ("output", "models_dir", "verbose")}}
    results["pretraining"] = pretrain(args, paths, run_dir)
    results["agreement"] = agreement(run_dir, paths["test.tsv"])
    print(json.dumps({k: results["agreement"][k] for k in
                      ("best_head", "best_heads_averaged", "best_offset", "chance")}))
    if not args.skip_transfer:
        output_dir = os.path.join(args.run_dir, f"transfer_{form}")
        transferred = transfer(args, paths, run_dir, output_dir)
        results["transfer"] = {"summary": transferred["summary"], "runs": transferred["runs"]}
        if args.models_dir:
            save_models(args, output_dir, run_dir, paths["test.tsv"])
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return results


if __name__ == "__main__":
    main()
