"""A directory laid out like a ``glomo pretrain`` run, for the tests of the commands that read one.

``pretrained_run(directory, lines, seed, sharpen=None, **sizes)`` writes ``tokenizer/`` (built from
``lines``) and ``graph_predictor.keras`` (a fresh :class:`glomo_tf.GraphPredictor` of ``sizes``,
seeded, its query kernel times ``sharpen`` when given, for graphs with structure to check) and
returns ``(tokenizer, predictor)``.
"""

import keras

from glomo_tf import save_graph_predictor
from glomo_tf.layers import graph_predictor
from glomo_tf.data.vocabulary import Tokenizer


def pretrained_run(directory, lines, seed, sharpen=None, **sizes):
    keras.utils.set_random_seed(seed)
    tokenizer = Tokenizer.build(lines)
    tokenizer.save(directory / "tokenizer")
    predictor = graph_predictor(tokenizer.vocabulary_size, **sizes)
    predictor.build((None, None))
    if sharpen is not None:
        predictor.scorer.query_kernel.assign(predictor.scorer.query_kernel * sharpen)
    save_graph_predictor(predictor, str(directory / "graph_predictor.keras"))
    return tokenizer, predictor
