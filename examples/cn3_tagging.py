"""Sequence labelling with CN3 + a linear-chain CRF on a generated task with non-local tags.

The task (:func:`generate_tagging_data`, seeded) is a toy "coreference" tagging problem:

* every sentence opens with one **antecedent marker** per key, ``m<key>_<class>`` (e.g. ``m1_3``:
  key 1, class 3, the class drawn at random), tagged ``O``;
* later, after at least ``min_gap`` other tokens, come one to three **pronouns** ``p<key>``; a pronoun
  is tagged ``P<class>``, the class of the marker with the same key. Its tag depends on a distant
  token that only the key identifies: the **non-local** tokens;
* elsewhere, **name spans** of one to three name words (``n0``, ``n1``, ...) tagged ``B I I`` in
  BIO style (two spans are never adjacent), among filler words ``w0``, ``w1``, ... tagged ``O``.
  The CRF's transitions learn the BIO grammar (``O -> I`` never happens).

Models, each trained with ``model.fit`` and evaluated on a fresh generated test set:

* ``bilstm_crf``: embeddings -> BiLSTM -> per-tag scores -> :class:`glomo_tf.LinearChainCRF`
  (Huang et al., 2015);
* ``cn3_crf``: embeddings -> :class:`glomo_tf.ContextualizedNonLocal` (CN3; its node attributes
  include the same BiLSTM context) -> per-tag scores -> CRF, the node-level model of the CN3 paper
  (its Eq. 7);
* ``cn3_softmax``: the same CN3 encoder with an independent softmax per token instead of the CRF.

The CRF layer returns Viterbi tags from ``call`` and exposes ``log_likelihood`` as the training
objective, so the CRF models are a small ``keras.Model`` subclass (:class:`CRFTagger`) whose
``train_step`` minimises ``-log_likelihood`` and whose ``predict`` returns decoded tags.

Run (about three minutes on two CPU cores)::

    python examples/cn3_tagging.py --graph-png cn3_graph.png

It prints JSON: per model the token accuracy, the accuracy on the non-local (pronoun) tokens --
chance is ``1 / num_classes`` -- and on the local (all other) tokens; with ``--graph-png`` it saves
the CN3 graph of one test sentence, the marker each pronoun refers to outlined in red.

References:
    Liu, Chang, Huang, Tang and Cheung, "Contextualized Non-local Neural Networks for Sequence
    Learning", AAAI 2019; Huang, Xu and Yu, "Bidirectional LSTM-CRF Models for Sequence
    Tagging", 2015.
"""

import argparse
import json
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from glomo_tf import ContextualizedNonLocal, LinearChainCRF

MODELS = ("bilstm_crf", "cn3_crf", "cn3_softmax")
PAD = "<pad>"


# ---------------------------------------------------------------------------------- data
class TaggingData:
    """A generated tagging set.

    Attributes:
        token_ids: int32 ``[n, T]``, 0 = padding (at the end).
        tags: int32 ``[n, T]``, indices into ``tag_names`` (0 = ``O`` at padding too).
        nonlocal_mask: bool ``[n, T]``, ``True`` at the pronouns.
        antecedents: int32 ``[n, T]``, the position of a pronoun's marker, -1 elsewhere.
        vocabulary: list of token strings, index = id (``vocabulary[0]`` is ``"<pad>"``).
        tag_names: list of tag strings: ``O``, ``B``, ``I``, ``P0``, ``P1``, ...
    """

    def __init__(self, token_ids, tags, nonlocal_mask, antecedents, vocabulary, tag_names):
        self.token_ids, self.tags = token_ids, tags
        self.nonlocal_mask, self.antecedents = nonlocal_mask, antecedents
        self.vocabulary, self.tag_names = vocabulary, tag_names

    @property
    def mask(self):
        return self.token_ids > 0

    def tokens(self, index):
        """The token strings of sentence ``index``, padding dropped."""
        return [self.vocabulary[i] for i in self.token_ids[index] if i > 0]


def tagging_vocabulary(num_keys, num_classes, num_fillers, num_names):
    """Token strings, index = id: padding, fillers, names, markers (key-major), pronouns."""
    return ([PAD] + [f"w{i}" for i in range(num_fillers)] + [f"n{i}" for i in range(num_names)]
            + [f"m{k}_{c}" for k in range(num_keys) for c in range(num_classes)]
            + [f"p{k}" for k in range(num_keys)])


def generate_tagging_data(num_sentences, seed=0, num_keys=1, num_classes=4, min_length=16,
                          max_length=28, min_gap=6, num_fillers=30, num_names=10,
                          span_probability=0.15):
    """Generates sentences with antecedent markers, pronouns and name spans (see the module doc).

    Args:
        num_sentences: int, sentences to generate.
        seed: int, seed of the NumPy generator (same seed, same data).
        num_keys: int, markers per sentence (one per key) and pronoun kinds.
        num_classes: int, classes a marker can carry (the pronoun tags ``P0..``).
        min_length, max_length: sentence lengths, drawn uniformly in ``[min_length, max_length]``.
        min_gap: int, the last marker and the first pronoun are at least this many positions apart.
        num_fillers, num_names: sizes of the filler and name word sets.
        span_probability: probability that a name span starts at a free position.

    Returns:
        A :class:`TaggingData`, padded to ``max_length``.
    """
    if min_length < num_keys + min_gap + 3 or max_length < min_length:
        raise ValueError(f"Lengths [{min_length}, {max_length}] leave no room for {num_keys} "
                         f"markers, a gap of {min_gap} and the pronouns.")
    rng = np.random.default_rng(seed)
    vocabulary = tagging_vocabulary(num_keys, num_classes, num_fillers, num_names)
    index = {token: i for i, token in enumerate(vocabulary)}
    tag_names = ["O", "B", "I"] + [f"P{c}" for c in range(num_classes)]
    shape = (num_sentences, max_length)
    token_ids = np.zeros(shape, np.int32)
    tags = np.zeros(shape, np.int32)
    nonlocal_mask = np.zeros(shape, bool)
    antecedents = np.full(shape, -1, np.int32)
    for n in range(num_sentences):
        length = int(rng.integers(min_length, max_length + 1))
        # Markers in the first positions, in random order of keys; pronouns after the gap.
        marker_zone = num_keys + int(rng.integers(0, 3))
        marker_positions = np.sort(rng.choice(marker_zone, num_keys, replace=False))
        classes = rng.integers(0, num_classes, size=num_keys)
        keys = rng.permutation(num_keys)
        first_pronoun = int(marker_positions[-1]) + min_gap + 1
        num_pronouns = int(rng.integers(1, 4))
        pronoun_positions = np.sort(rng.choice(np.arange(first_pronoun, length),
                                               min(num_pronouns, length - first_pronoun),
                                               replace=False))
        fixed = {}
        for position, key in zip(marker_positions, keys):
            fixed[int(position)] = (index[f"m{key}_{classes[key]}"], 0)
        marker_of_key = {int(key): int(position) for position, key in zip(marker_positions, keys)}
        for position in pronoun_positions:
            key = int(rng.integers(0, num_keys))
            fixed[int(position)] = (index[f"p{key}"], 3 + int(classes[key]))
            nonlocal_mask[n, position] = True
            antecedents[n, position] = marker_of_key[key]
        span_left, previous_is_name = 0, False
        for t in range(length):
            if t in fixed:
                token_ids[n, t], tags[n, t] = fixed[t]
                span_left, previous_is_name = 0, False
            elif span_left > 0:  # inside a name span
                token_ids[n, t], tags[n, t] = index[f"n{rng.integers(num_names)}"], 2
                span_left -= 1
                previous_is_name = True
            elif not previous_is_name and rng.random() < span_probability:  # a span begins
                token_ids[n, t], tags[n, t] = index[f"n{rng.integers(num_names)}"], 1
                span_left = int(rng.integers(0, 3))  # spans of 1 to 3 names
                previous_is_name = True
            else:
                token_ids[n, t], tags[n, t] = index[f"w{rng.integers(num_fillers)}"], 0
                previous_is_name = False
    return TaggingData(token_ids, tags, nonlocal_mask, antecedents, vocabulary, tag_names)


# ---------------------------------------------------------------------------------- models
class CRFTagger(keras.Model):
    """An encoder (token ids -> per-tag scores) topped by :class:`glomo_tf.LinearChainCRF`.

    ``fit`` minimises the CRF's negative log-likelihood of the gold tags (``train_step``);
    ``evaluate`` also reports the token accuracy of the Viterbi tags; ``predict`` (``call``)
    returns the Viterbi tags, 0 at padding. Token id 0 is padding.

    Args:
        encoder: a ``keras.Model`` mapping int ``[batch, T]`` token ids to ``[batch, T, N]``
            emission scores.
        num_tags: int, ``N``.
    """

    def __init__(self, encoder, num_tags, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.crf = LinearChainCRF(num_tags, name="crf")
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy_tracker = keras.metrics.Mean(name="token_accuracy")

    def call(self, token_ids, training=False):
        emissions = self.encoder(token_ids, training=training)
        return self.crf(emissions, mask=token_ids > 0)

    def negative_log_likelihood(self, token_ids, tags, training):
        """Mean ``-log p(tags | tokens)`` over the batch, and the emissions."""
        emissions = self.encoder(token_ids, training=training)
        log_likelihood = self.crf.log_likelihood(emissions, tags, token_ids > 0)
        return -tf.reduce_mean(log_likelihood), emissions

    def train_step(self, data):
        token_ids, tags = data
        with tf.GradientTape() as tape:
            loss, _ = self.negative_log_likelihood(token_ids, tags, training=True)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    def test_step(self, data):
        token_ids, tags = data
        loss, emissions = self.negative_log_likelihood(token_ids, tags, training=False)
        mask = token_ids > 0
        predicted = self.crf.decode(emissions, mask)[0]
        correct = tf.cast(tf.equal(predicted, tf.cast(tags, tf.int32)), "float32")
        self.loss_tracker.update_state(loss)
        self.accuracy_tracker.update_state(correct, sample_weight=tf.cast(mask, "float32"))
        return {"loss": self.loss_tracker.result(),
                "token_accuracy": self.accuracy_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy_tracker]


def embed(token_ids, vocabulary_size, embedding_dim):
    return keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True,
                                  name="embedding")(token_ids)


def bilstm_encoder(vocabulary_size, num_tags, embedding_dim, units):
    """Token ids -> embeddings -> BiLSTM -> per-tag scores."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = embed(token_ids, vocabulary_size, embedding_dim)
    x = keras.layers.Bidirectional(keras.layers.LSTM(units, return_sequences=True),
                                   name="bilstm")(x)
    return keras.Model(token_ids, keras.layers.Dense(num_tags, name="emissions")(x),
                       name="bilstm_encoder")


class RelativeDirection(keras.layers.Layer):
    """Edge attributes of CN3 (its ``e_ik``): a one-hot of the direction from receiver ``t`` to
    source ``s`` -- source before (``s < t``), itself (``s = t``), after (``s > t``) --
    ``[batch, T, T, 3]`` from token ids ``[batch, T]``."""

    def call(self, token_ids):
        positions = tf.range(tf.shape(token_ids)[1])
        difference = positions[None, :] - positions[:, None]  # s - t, [T(receiver), T(source)]
        direction = tf.sign(difference) + 1  # 0: before, 1: itself, 2: after
        edges = tf.one_hot(direction, 3, dtype=self.compute_dtype)
        return tf.broadcast_to(edges[None], tf.concat([tf.shape(token_ids)[:1], tf.shape(edges)],
                                                      axis=0))

    def compute_output_shape(self, token_ids_shape):
        return (token_ids_shape[0], token_ids_shape[1], token_ids_shape[1], 3)


def cn3_encoder(vocabulary_size, num_tags, embedding_dim, units, num_layers, context="cnn",
                softmax=False):
    """Token ids -> embeddings -> CN3 (edge attributes: :class:`RelativeDirection`) -> per-tag
    scores (or probabilities, ``softmax=True``).

    Returns ``(encoder, graph_model)``; ``graph_model`` maps the same ids to CN3's graphs
    ``[batch, num_layers, T, T]`` (shared weights).
    """
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = embed(token_ids, vocabulary_size, embedding_dim)
    edges = RelativeDirection(name="edge_direction")(token_ids)
    states, graphs = ContextualizedNonLocal(units, num_layers=num_layers, context=context,
                                            edge_dim=3, return_graphs=True,
                                            name="cn3")(x, edge_features=edges)
    outputs = keras.layers.Dense(num_tags, activation="softmax" if softmax else None,
                                 name="tag_probabilities" if softmax else "emissions")(states)
    return (keras.Model(token_ids, outputs, name="cn3_encoder"),
            keras.Model(token_ids, graphs, name="cn3_graphs"))


def build_model(name, vocabulary_size, num_tags, embedding_dim, units, cn3_layers,
                learning_rate, cn3_context="cnn"):
    """A compiled model named in :data:`MODELS`, and its CN3 graph model (None for the BiLSTM)."""
    optimizer = keras.optimizers.Adam(learning_rate, clipnorm=5.0)
    if name == "bilstm_crf":
        model, graphs = CRFTagger(bilstm_encoder(vocabulary_size, num_tags, embedding_dim, units),
                                  num_tags, name=name), None
    elif name == "cn3_crf":
        encoder, graphs = cn3_encoder(vocabulary_size, num_tags, embedding_dim, units, cn3_layers,
                                      cn3_context)
        model = CRFTagger(encoder, num_tags, name=name)
    elif name == "cn3_softmax":
        model, graphs = cn3_encoder(vocabulary_size, num_tags, embedding_dim, units, cn3_layers,
                                    cn3_context, softmax=True)
        model.compile(optimizer, "sparse_categorical_crossentropy")  # masked at padding
        return model, graphs
    else:
        raise ValueError(f"Unknown model {name!r}; choose from {MODELS}.")
    model(np.ones((1, 2), np.int32))  # builds the CRF's weights before fit
    model.compile(optimizer)
    return model, graphs


def predict_tags(model, token_ids, batch_size):
    """Decoded tags ``[n, T]``: the CRF's Viterbi path, or the softmax's arg max."""
    outputs = model.predict(token_ids, batch_size=batch_size, verbose=0)
    return outputs if outputs.ndim == 2 else np.argmax(outputs, axis=-1)


def tag_accuracies(predicted, data):
    """Token accuracy over real tokens, over the non-local (pronoun) tokens, and the rest."""
    correct = predicted == data.tags
    local = data.mask & ~data.nonlocal_mask
    return {"token_accuracy": float(correct[data.mask].mean()),
            "nonlocal_accuracy": float(correct[data.nonlocal_mask].mean()),
            "local_accuracy": float(correct[local].mean())}


# ---------------------------------------------------------------------------------- graphs
def save_graph_png(graph_model, data, index, path):
    """Saves the layer-1 CN3 graph of test sentence ``index`` with the pronoun -> marker cells
    outlined; returns the weight each pronoun puts on its marker (mean)."""
    from glomo_tf import viz

    tokens = data.tokens(index)
    length = len(tokens)
    graph = graph_model.predict(data.token_ids[index:index + 1, :length], verbose=0)[0, 0]
    marks = [(int(t), int(data.antecedents[index, t]))
             for t in np.flatnonzero(data.nonlocal_mask[index])]
    title = "CN3 layer-1 graph (red: pronoun -> its marker)"
    viz.figure_to_png(viz.graph_figure(graph, tokens, title=title, marks=marks), path)
    return float(np.mean([graph[t, s] for t, s in marks]))


def antecedent_attention(graph_model, data, batch_size):
    """Mean weight that a pronoun puts on its own marker in CN3's layer-1 graph (uniform
    attention would give about ``1 / length``)."""
    graphs = graph_model.predict(data.token_ids, batch_size=batch_size, verbose=0)[:, 0]
    rows, cols = np.nonzero(data.nonlocal_mask)
    return float(graphs[rows, cols, data.antecedents[rows, cols]].mean())


# ---------------------------------------------------------------------------------- main
def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--train-size", type=int, default=2000, help="generated sentences")
    parser.add_argument("--test-size", type=int, default=500, help="generated test sentences")
    parser.add_argument("--num-keys", type=int, default=1, help="markers (keys) per sentence")
    parser.add_argument("--num-classes", type=int, default=4, help="classes of a marker")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--embedding-dim", type=int, default=32)
    parser.add_argument("--units", type=int, default=32, help="LSTM / CN3 width")
    parser.add_argument("--cn3-layers", type=int, default=1, help="CN3 message-passing layers")
    parser.add_argument("--cn3-context", choices=("cnn", "lstm"), default="cnn",
                        help="CN3's local context; with 'lstm' its graphs collapsed onto the "
                             "pronouns in our runs and it stayed at chance on them")
    parser.add_argument("--learning-rate", type=float, default=5e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graph-png", default=None,
                        help="save the CN3 graph of one test sentence to this PNG file")
    parser.add_argument("--verbose", type=int, default=2, help="Keras fit verbosity")
    args = parser.parse_args(argv)
    args.models = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown or not args.models:
        parser.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    return args


def main(argv=None):
    """Generates the data, trains and evaluates the models; prints and returns the results."""
    args = parse_args(argv)
    shape = dict(num_keys=args.num_keys, num_classes=args.num_classes)
    train = generate_tagging_data(args.train_size, seed=args.seed, **shape)
    test = generate_tagging_data(args.test_size, seed=args.seed + 10_000, **shape)
    vocabulary_size, num_tags = len(train.vocabulary), len(train.tag_names)
    results = {"config": {k: v for k, v in vars(args).items() if k != "verbose"},
               "nonlocal_chance": 1.0 / args.num_classes,
               "test_nonlocal_tokens": int(test.nonlocal_mask.sum()),
               "test_tokens": int(test.mask.sum()), "models": {}}
    for name in args.models:
        keras.utils.set_random_seed(args.seed)
        model, graph_model = build_model(name, vocabulary_size, num_tags, args.embedding_dim,
                                         args.units, args.cn3_layers, args.learning_rate,
                                         args.cn3_context)
        start = time.perf_counter()
        history = model.fit(train.token_ids, train.tags, batch_size=args.batch_size,
                            epochs=args.epochs, shuffle=True, verbose=args.verbose)
        seconds = time.perf_counter() - start
        scores = tag_accuracies(predict_tags(model, test.token_ids, args.batch_size), test)
        scores.update(train_seconds=round(seconds, 1),
                      final_train_loss=float(history.history["loss"][-1]),
                      parameters=int(sum(np.prod(w.shape) for w in model.trainable_weights)))
        if graph_model is not None:
            scores["antecedent_attention"] = antecedent_attention(graph_model, test,
                                                                  args.batch_size)
            if args.graph_png and "graph_png" not in results:
                index = int(np.argmax(test.nonlocal_mask.sum(1)))  # most pronouns
                save_graph_png(graph_model, test, index, args.graph_png)
                results["graph_png"] = args.graph_png
                results["graph_model"] = name
        results["models"][name] = scores
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
