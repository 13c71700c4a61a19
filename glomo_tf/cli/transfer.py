"""``glomo transfer``: text classification with and without transferred GLoMo graphs.

The flags of :class:`glomo_tf.experiments.transfer.TransferConfig`, then
:func:`glomo_tf.experiments.transfer.run_transfer`. It trains the classifier variants of
:mod:`glomo_tf.models.classifier` (``baseline``, ``glomo_embeddings``, ``glomo_rnn``,
``uniform``, ``uniform_rnn`` (uniform graphs at ``glomo_rnn``'s place), and the related
models ``cn3`` and ``shared_private``) on a labelled dataset for several seeds, with
``model.fit`` (early stopping on validation accuracy, best weights restored), and reports test
accuracy per variant and a paired comparison of each other variant with the baseline on the same
seeds and splits.

The pretrained graph predictor and its tokenizer come from a preset (``--preset NAME_OR_DIR``: a
built-in one such as ``glomo_books_en``, or ``RUN/preset``), from a ``glomo pretrain`` run
(``--run RUN_DIR``: ``RUN/graph_predictor.keras`` and ``RUN/tokenizer/``) or are given separately
(``--model FILE.keras --tokenizer DIR``). Every variant then reads the pretraining tokenizer's ids.
Without a predictor only ``--variants baseline uniform uniform_rnn cn3 shared_private`` can
run; the tokenizer is then built from each split's training texts.

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
variants ``baseline``, ``glomo_embeddings``, ``glomo_rnn``, ``uniform``, ``uniform_rnn``);
two-class tasks also report the F1 of the second class (MRPC: paraphrase), SNLI the accuracy on
its hard subset.

Reading comprehension (``squad``) runs the BiDAF-style reader of :mod:`glomo_tf.models.reader`
on a SQuAD v1.1 file (default: the shared ``squad/dev-v1.1.json``, split by article;
``--file`` / ``--test-file`` for your own), passages cut to ``--max-length`` units (use about
300), and reports SQuAD's exact match and F1 (:mod:`glomo_tf.experiments.reading`)::

    glomo transfer --run runs/books --dataset squad --max-length 300 --graph-cache \
        --seeds 0 1 2 3 4 --output-dir runs/books/squad
"""

import os

from glomo_tf.cli.common import add_command, config_from, pretrained_paths
from glomo_tf.experiments.transfer import TransferConfig, run_transfer


def register(subparsers):
    return add_command(
        subparsers, "transfer", TransferConfig, run, pretrained=True,
        help="text classification with and without transferred graphs (results table)",
        description=__doc__.split("\n\n")[0])


def run(args):
    model, tokenizer = pretrained_paths(args)
    config = config_from(args, TransferConfig, model=model, tokenizer=tokenizer)
    record = {k: v for k, v in vars(args).items() if k not in ("func", "flags")}  # as given
    markdown = run_transfer(config, record=record)
    print("\n" + markdown)
    print(f"Wrote {os.path.join(config.output_dir, 'results.json')} and results.md")
    return 0
