"""The tiny settings and planted data several test modules run the commands with."""

import functools
import random

import numpy as np

from glomo_tf import cli

# ``glomo pretrain``: a tiny model and data setting; --positions all and no dropout make every
# step deterministic.
PRETRAIN_TINY = ["--window", "12", "--shift", "6", "--hidden-dim", "8", "--layers", "2",
                 "--heads", "2", "--conv-layers", "1", "--decoder-layers", "1",
                 "--context-length", "2", "--positions", "all", "--batch-size", "4", "--seed", "3"]
PROBE = "the cat sees the dog"

# ``glomo transfer``: a tiny classifier.
TRANSFER_TINY = ["--embedding-dim", "16", "--rnn-units", "8", "--attention-heads", "2",
                 "--num-mixtures", "1", "--dropout", "0.1", "--batch-size", "16",
                 "--learning-rate", "0.02", "--verbose", "2"]
FILLER = "the a film movie story actor plot scene was is and of it this that very quite".split()
CLASS_WORDS = {"neg": "awful", "pos": "great"}


def write_corpus(path, lines=80, seed=1):
    """Repeated short sentences of a small vocabulary, one per line; returns the path."""
    rng = random.Random(seed)
    nouns = ["cat", "dog", "bird", "tree", "house", "car", "river", "road"]
    verbs = ["sees", "likes", "finds", "follows", "passes"]
    adjectives = ["big", "small", "red", "old", "quick"]
    with open(path, "w") as f:
        for _ in range(lines):
            sentence = ["the", rng.choice(adjectives), rng.choice(nouns), rng.choice(verbs),
                        "the", rng.choice(nouns), "."]
            f.write(" ".join(sentence * 2) + "\n")
    return str(path)


def glomo_pretrain(*argv):
    """``glomo pretrain ARGV`` in this process (``cli.main``, a parser holding only pretrain)."""
    original = cli.build_parser
    cli.build_parser = functools.partial(original, [("pretrain", "glomo_tf.cli.pretrain")])
    try:
        return cli.main(["pretrain", *argv])
    finally:
        cli.build_parser = original


def planted_rows(count=198, seed=0):
    """Short sentences of filler words; one planted word ("great"/"awful") decides the class."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        label = ("neg", "pos")[i % 2]
        words = list(rng.choice(FILLER, size=int(rng.integers(4, 9))))
        words.insert(int(rng.integers(0, len(words) + 1)), CLASS_WORDS[label])
        rows.append((" ".join(words), label))
    return rows
