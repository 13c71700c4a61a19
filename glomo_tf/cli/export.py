"""``glomo export``: write a SavedModel for TensorFlow Serving (raw text in, latent graphs out).

Writes ``EXPORT_DIR/MODEL_NAME/VERSION/``, the layout TensorFlow Serving polls: the version is an
integer, one more than the newest already there unless ``--version`` is given. Example::

    glomo export --model run/pretrainer.keras --vocab run/tokenizer \\
        --export-dir serving/models --model-name glomo
    glomo export --preset glomo_books_en --export-dir serving/models --model-name glomo

The command parses the flags, then calls :func:`glomo_tf.export.saved_model.export_saved_model`.
"""

import os

from glomo_tf.cli.common import HelpFormatter, UsageError, add_precision_argument

DEFAULT_MAX_LENGTH = 256  # glomo_tf.export.DEFAULT_MAX_LENGTH (not imported: --help stays fast)
DEFAULT_TOP_K = 8


def register(subparsers):
    p = subparsers.add_parser(
        "export", help="export a SavedModel for TensorFlow Serving",
        description=__doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].split(" Example")[0],
        formatter_class=HelpFormatter)
    p.add_argument("--preset", metavar="NAME_OR_DIR",
                   help="a built-in preset (glomo_books_en, ...) or a preset directory (RUN/preset "
                        "of glomo pretrain), instead of --model: its own tokenizer is exported")
    p.add_argument("--model", metavar="PATH",
                   help="the .keras file of a pretrainer or graph predictor (RUN/pretrainer.keras "
                        "or RUN/graph_predictor.keras from glomo pretrain)")
    p.add_argument("--vocab", metavar="DIR",
                   help="the tokenizer directory (vocab.txt + tokenizer.json); default: the "
                        "tokenizer/ directory next to --model")
    p.add_argument("--export-dir", required=True, metavar="DIR",
                   help="the model repository; the export goes to DIR/MODEL_NAME/VERSION")
    p.add_argument("--model-name", required=True, metavar="NAME",
                   help="the served model's name (in /v1/models/NAME)")
    p.add_argument("--version", dest="model_version", type=int, default=None, metavar="N",
                   help="version number (default: one more than the newest existing version)")
    p.add_argument("--max-length", type=int, default=None, metavar="N",
                   help=f"units kept per text, longer texts are truncated (default: the "
                        f"tokenizer's max_length, else {DEFAULT_MAX_LENGTH})")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, metavar="K",
                   help="edges per receiving unit in the top_k_edges signatures")
    p.add_argument("--skip-op-check", action="store_true",
                   help="do not check that stock TensorFlow Serving has every op of the export")
    add_precision_argument(p)
    p.set_defaults(func=run)


def run(args):
    if args.preset:
        if args.model or args.vocab:
            raise UsageError("Give --preset, or --model (and --vocab), not both: a preset holds "
                             "its own tokenizer.")
        from glomo_tf.cli.common import preset_paths
        model_path, vocab = preset_paths(args.preset, "--preset")
        return _export(args, vocab, lambda: _preset_predictor(model_path))
    if not args.model:
        raise UsageError("Say what to export: --preset NAME_OR_DIR, or --model FILE.keras.")
    model_path = os.path.abspath(args.model)
    if not os.path.isfile(model_path):
        raise UsageError(f"no model file at {args.model!r}: pass the .keras file written by glomo "
                         "pretrain (RUN/pretrainer.keras or RUN/graph_predictor.keras).")
    vocab = args.vocab
    if vocab is None:
        vocab = os.path.join(os.path.dirname(model_path), "tokenizer")
        if not os.path.isfile(os.path.join(vocab, "vocab.txt")):
            raise UsageError(f"no --vocab given and no tokenizer/vocab.txt next to {args.model!r}: "
                             "pass --vocab DIR, the directory holding vocab.txt and tokenizer.json "
                             "(glomo pretrain writes RUN/tokenizer).")
    elif not os.path.exists(vocab):
        raise UsageError(f"no vocabulary at {vocab!r}: pass the directory holding vocab.txt and "
                         "tokenizer.json (glomo pretrain writes RUN/tokenizer).")

    return _export(args, vocab, lambda: _keras_file_predictor(model_path))


def _preset_predictor(directory):
    from glomo_tf.layers.graph_predictor import GraphPredictor
    return GraphPredictor.from_preset(directory, trainable=False)


def _keras_file_predictor(model_path):
    from glomo_tf.export import saved_model
    return saved_model.resolve_graph_predictor(saved_model.load_keras_model(model_path))


def _export(args, vocab, load_predictor):
    from glomo_tf.export import saved_model, serving_ops

    try:
        tokenizer = saved_model.resolve_tokenizer(vocab)
        predictor = load_predictor()
        path = saved_model.export_saved_model(
            predictor, tokenizer, args.export_dir, args.model_name, version=args.model_version,
            max_length=args.max_length, top_k=args.top_k, precision=args.precision)
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(str(error)) from None

    print(f"Exported {args.model_name} version {os.path.basename(path)} to {path}")
    options = [f"{tokenizer.splitter} splitter"] + [
        name for name, on in (("lowercase", tokenizer.lowercase), ("WordPiece", tokenizer.subword))
        if on]
    print(f"  vocabulary: {tokenizer.vocabulary_size} units ({', '.join(options)})")
    print("  signatures: " + ", ".join(
        f"{name}({spec[0]})" for name, spec in saved_model.SIGNATURES.items()))
    if not args.skip_op_check:
        missing = serving_ops.unsupported_ops(path)
        if missing:
            raise UsageError(f"the export at {path} uses ops that stock TensorFlow Serving lacks: "
                             f"{', '.join(missing)}. Report this as a glomo_tf bug.")
        text_ops = sorted(set(serving_ops.op_inventory(path))
                          & set(serving_ops.TF_TEXT_SERVING_OPS))
        print(f"  ops: core TensorFlow and {', '.join(text_ops)} only (stock TensorFlow Serving "
              "can load it)")
    print(f"  try: python -m glomo_tf.export.saved_model_cli show --dir {path} --all")
    return 0
