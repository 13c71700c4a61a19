"""``glomo transfer``: text classification with and without transferred GLoMo graphs.

The flags of :class:`glomo_tf.experiments.transfer.TransferConfig`, then
:func:`glomo_tf.experiments.transfer.run_transfer`. It trains the classifier variants of
:mod:`glomo_tf.models.classifier` (``baseline``, ``glomo_embeddings``, ``glomo_rnn``,
``uniform``, and the related models ``cn3`` and ``shared_private``) on a labelled dataset for
several seeds, with ``model.fit`` (early stopping on validation accuracy, best weights restored),
and reports test accuracy per variant and a paired comparison of each other variant with the
baseline on the same seeds and splits.

The pretrained graph predictor and its tokenizer come from a preset (``--preset NAME_OR_DIR``: a
built-in one such as ``glomo_books_en``, or ``RUN/preset``), from a ``glomo pretrain`` run
(``--run RUN_DIR``: ``RUN/graph_predictor.keras`` and ``RUN/tokenizer/``) or are given separately
(``--model FILE.keras --tokenizer DIR``). Every variant then reads the pretraining tokenizer's ids.
Without a predictor only ``--variants baseline uniform cn3 shared_private`` can run; the tokenizer
is then built from each split's training texts.

Splits: ``--split seeded`` (default) holds out a seeded 10% test set and carves a 10% validation
set from the rest; ``--split kfold --folds 10`` runs every fold (the seed shuffles the folds and
draws the validation set; a seed's accuracy is the mean over its folds). ``sst2`` and ``sst5`` use
the official train/dev/test files, ``imdb`` and ``sst2_tfds`` tensorflow-datasets' official test
sets (``sst2_tfds``: the GLUE validation split).

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
    glomo transfer --run runs/books --dataset sick --seeds 0 1 2 3 4 5 6 7 8 9 \\
        --output-dir runs/books/sick
    glomo transfer --run runs/listops --dataset listops --file train.tsv --test-file test.tsv \\
        --output-dir runs/listops/transfer

Sentence pairs (``sick``, ``mrpc``, ``snli``, ``pairs``) run the pair classifier of
:mod:`glomo_tf.models.pair_classifier` (a shared encoder per sentence, ESIM-style alignment;
variants ``baseline``, ``glomo_embeddings``, ``glomo_rnn``, ``uniform``); two-class tasks also
report the F1 of the second class (MRPC: paraphrase), SNLI the accuracy on its hard subset.

Reading comprehension (``squad``) runs the BiDAF-style reader of :mod:`glomo_tf.models.reader`
on a SQuAD v1.1 file (default: the shared ``squad/dev-v1.1.json``, split by article;
``--file`` / ``--test-file`` for your own), passages cut to ``--max-length`` units (use about
300), and reports SQuAD's exact match and F1 (:mod:`glomo_tf.experiments.reading`)::

    glomo transfer --run runs/books --dataset squad --max-length 300 --graph-cache \
        --seeds 0 1 2 3 4 --output-dir runs/books/squad
"""

import argparse
import dataclasses
import os

from glomo_tf import hparams
from glomo_tf.cli.common import (HelpFormatter, add_precision_argument, add_pretrained_arguments,
                                 add_verbose_argument, pretrained_paths, resolve_verbose)
from glomo_tf.experiments.transfer import DATASETS, SPLITS, TransferConfig, run_transfer

D = TransferConfig(dataset="", output_dir="")  # the defaults


def register(subparsers):
    parser = subparsers.add_parser(
        "transfer", help="text classification with and without transferred graphs (results table)",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter)
    add_pretrained_arguments(parser)
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", required=True, metavar="|".join(DATASETS),
                      help="mr, subj (Pang & Lee), sst2, sst5 (SST sentences, official "
                           "train/dev/test), file (your own, --file), listops (a ListOps file, "
                           "--file), imdb, sst2_tfds (tfds); sentence pairs: sick (SemEval "
                           "split), mrpc, snli (1%% train + dev, official test and its hard "
                           "subset), pairs (your own, --file); reading comprehension: "
                           "squad (SQuAD v1.1, split by article)")
    data.add_argument("--data-dir", help="mr/subj/sst2/sst5: the folder holding the files "
                                         "(default: the project's ../shared/data); "
                                         "imdb/sst2_tfds: tfds data_dir")
    data.add_argument("--file", help="--dataset file: a .tsv/.csv file with a header, or a "
                                     "directory with one .txt file or sub-directory per class; "
                                     "--dataset listops: label<TAB>expression lines; --dataset "
                                     "pairs: a SICK or MRPC file as distributed, a .tsv/.csv with "
                                     "sentence1, sentence2 and label columns, or SNLI .jsonl; "
                                     "--dataset squad: a SQuAD v1.1 .json file (default the "
                                     "shared dev-v1.1.json)")
    data.add_argument("--test-file", help="--dataset file/listops/pairs/squad: a test file in "
                                          "--file's format (default: a seeded 10%% of --file; "
                                          "squad: a seeded share of its articles)")
    data.add_argument("--text-column", default=D.text_column,
                      help="text column of --file (default text)")
    data.add_argument("--label-column", default=D.label_column,
                      help="label column of --file (default label)")
    data.add_argument("--max-length", type=int, default=D.max_length,
                      help="units kept per text (default 64; squad: per passage, use about "
                           "300)")
    exp = parser.add_argument_group("experiment")
    exp.add_argument("--variants", nargs="+", default=list(D.variants), metavar="VARIANT",
                     help=f"any of {' '.join(hparams.VARIANTS)} (default {' '.join(D.variants)}); "
                          f"{' and '.join(hparams.PREDICTOR_VARIANTS)} need a pretrained predictor "
                          "(--run, or --model and --tokenizer)")
    exp.add_argument("--seeds", nargs="+", type=int, default=D.seeds,
                     help="seeds to run (each: initial weights, shuffles, and for --split "
                          "seeded the split)")
    exp.add_argument("--split", choices=SPLITS, default=D.split,
                     help="seeded 90/10 test split (default) or k-fold cross-validation")
    exp.add_argument("--folds", type=int, default=D.folds,
                     help="folds of --split kfold (default 10)")
    model = parser.add_argument_group("model and training")
    model.add_argument("--embedding-dim", type=int, default=D.embedding_dim,
                       help="width of the classifier's word embeddings")
    model.add_argument("--rnn-units", type=int, default=D.rnn_units,
                       help="units of each direction of the classifier's GRU")
    model.add_argument("--attention-heads", type=int, default=D.attention_heads,
                       help="heads of the classifier's self-attention")
    model.add_argument("--dropout", type=float, default=D.dropout,
                       help="dropout of the classifier")
    model.add_argument("--num-mixtures", type=int, default=D.num_mixtures,
                       help="graph mixtures of each GlomoTransfer layer")
    model.add_argument("--transfer-dropout", type=float, default=D.transfer_dropout,
                       help="dropout on GlomoTransfer's fused input [H ; M H ...] (GLoMo and "
                            "uniform variants; default 0.0)")
    model.add_argument("--init-embeddings", choices=("predictor",), default=D.init_embeddings,
                       help="predictor: every variant's word embeddings (the baseline's too) "
                            "start from the pretrained predictor's table (--embedding-dim must "
                            "be its width; default: random)")
    model.add_argument("--graph-temperature", type=float, default=D.graph_temperature,
                       metavar="TAU",
                       help="GLoMo variants: raise every row of the predictor's graphs to the "
                            "power 1/TAU and renormalise (below 1 sharper, above 1 flatter; a "
                            "softmax temperature for a softmax predictor; default: the graphs "
                            "as they are)")
    model.add_argument("--epochs", type=int, default=D.epochs,
                       help="most training epochs per run")
    model.add_argument("--patience", type=int, default=D.patience,
                       help="epochs without a better validation accuracy before stopping")
    model.add_argument("--batch-size", type=int, default=D.batch_size,
                       help="examples per training step")
    model.add_argument("--learning-rate", type=float, default=D.learning_rate,
                       help="Adam learning rate")
    speed = parser.add_argument_group("speed")
    speed.add_argument("--graph-cache", action=argparse.BooleanOptionalAction,
                       default=D.graph_cache,
                       help="GLoMo variants: compute the frozen predictor's graphs once per "
                            "sentence and reuse them every epoch instead of running the "
                            "predictor on every batch (outputs and gradients equal up to float "
                            "round-off, about 1e-7, so trained runs are not bit for bit the "
                            "online ones; default off)")
    speed.add_argument("--top-k", type=int, default=D.top_k, metavar="K",
                       help="GLoMo variants: keep the K heaviest sources of every receiving unit "
                            "and mix the graphs in that sparse form (gather + weighted sum); "
                            "exact when K covers every row's sources (default: dense graphs)")
    add_precision_argument(speed)
    parser.add_argument("--output-dir", required=True, help="where results.json/.md are written")
    parser.add_argument("--save-models", action="store_true", default=D.save_models,
                        help="save every trained model as OUTPUT_DIR/models/VARIANT-seedS.keras "
                             "(GLoMo variants with their frozen predictor)")
    parser.add_argument("--resume", action="store_true", default=D.resume,
                        help="keep the runs of --output-dir's results.json (same settings; more "
                             "seeds or variants may be added) and run only the missing ones; "
                             "without it a directory that holds runs is refused, not overwritten")
    add_verbose_argument(parser)
    parser.set_defaults(func=run)
    return parser


def run(args):
    model, tokenizer = pretrained_paths(args)
    names = {field.name for field in dataclasses.fields(TransferConfig)}
    settings = {k: v for k, v in vars(args).items() if k in names and k not in ("model",
                                                                                   "tokenizer")}
    settings["verbose"] = resolve_verbose(settings["verbose"])
    config = TransferConfig(model=model, tokenizer=tokenizer, **settings)
    record = {k: v for k, v in vars(args).items() if k != "func"}  # the flags as given
    markdown = run_transfer(config, record=record)
    print("\n" + markdown)
    print(f"Wrote {os.path.join(config.output_dir, 'results.json')} and results.md")
    return 0
