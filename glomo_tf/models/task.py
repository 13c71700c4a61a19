"""``GlomoClassifier``: a text classifier on raw strings, from a preset, in keras-hub's shape.

    classifier = glomo_tf.GlomoClassifier.from_preset("glomo_books_en", num_classes=2)
    classifier.fit(train_texts, train_labels, validation_data=(dev_texts, dev_labels), epochs=3)
    classifier.evaluate(test_texts, test_labels)

Inside: the preset's :class:`~glomo_tf.GlomoTokenizer`, then :func:`build_classifier`'s model
(``Embedding -> [GlomoTransfer] -> BiGRU -> [GlomoTransfer] -> self-attention -> softmax``) with the
preset's frozen :class:`~glomo_tf.GraphPredictor` giving the graphs where ``transfer_at`` says.
``transfer_at=None`` is the same model without graphs, the comparison to make.
"""

import keras
import numpy as np
import tensorflow as tf

from glomo_tf import preset_tasks, presets
from glomo_tf.layers.graph_predictor import GraphPredictor
from glomo_tf.models.classifier import build_classifier
from glomo_tf.models.pair_classifier import build_pair_classifier
from glomo_tf.preprocessing import GlomoTokenizer

# Where the graphs are transferred -> build_classifier's variant.
TRANSFER_AT = {"embeddings": "glomo_embeddings", "rnn": "glomo_rnn", None: "baseline"}


@keras.saving.register_keras_serializable(package="glomo_tf")
class GlomoClassifier(keras.Model):
    """Strings ``[batch]`` -> class probabilities ``[batch, num_classes]``.

    Compiled on creation (Adam at ``1e-3``, sparse categorical cross-entropy on the
    probabilities, accuracy); call :meth:`compile` again to change that. :meth:`fit`,
    :meth:`evaluate` and :meth:`predict` take Python lists of strings, NumPy string arrays,
    string tensors or a ``tf.data.Dataset`` of ``(strings, labels)`` batches.

    Args:
        tokenizer: a :class:`~glomo_tf.GlomoTokenizer` (its vocabulary is the predictor's).
        graph_predictor: a :class:`~glomo_tf.GraphPredictor` reading the tokenizer's ids, or
            None with ``transfer_at=None``. It stays frozen (:class:`GlomoTransfer`'s default).
        num_classes: int >= 2.
        transfer_at: ``"rnn"`` (default: the graphs mixed into the BiGRU's states),
            ``"embeddings"`` (into the word embeddings) or None (no graphs: the plain model).
        embedding_dim: int, word-embedding width.
        rnn_units: int, GRU units per direction.
        dropout: float.
        vocabulary_size: int, default the tokenizer's (a loaded model states it before its
            tokenizer's vocabulary is read from the file's assets).
        **kwargs: :func:`build_classifier`'s other arguments (``num_mixtures``,
            ``transfer_form``, ``propagation_steps``, ...), and a model's ``name``.

    Example:

    >>> import glomo_tf
    >>> tokenizer = glomo_tf.GlomoTokenizer(["<pad>", "<unk>", "good", "bad", "film"])
    >>> classifier = GlomoClassifier(tokenizer, num_classes=2, transfer_at=None,
    ...                              embedding_dim=4, rnn_units=4)
    >>> classifier.predict(["good film", "bad film"], verbose=0).shape
    (2, 2)
    """

    default_name = "glomo_classifier"
    #: The built-in presets it is built on (those with a tokenizer), ``{name: metadata}``.
    presets = presets.BuiltinPresets(needs_tokenizer=True)

    def __init__(self, tokenizer, graph_predictor=None, num_classes=2, transfer_at="rnn",
                 embedding_dim=128, rnn_units=128, dropout=0.3, vocabulary_size=None, **kwargs):
        name = kwargs.pop("name", None)
        kwargs.pop("trainable", None)
        if transfer_at not in TRANSFER_AT:
            raise ValueError(f"transfer_at must be 'rnn', 'embeddings' or None, got "
                             f"{transfer_at!r}.")
        if transfer_at is not None and graph_predictor is None:
            raise ValueError(f"transfer_at={transfer_at!r} needs a graph_predictor: pass one, "
                             "use GlomoClassifier.from_preset, or transfer_at=None for the "
                             "plain model.")
        if not isinstance(tokenizer, GlomoTokenizer):
            raise TypeError(f"tokenizer must be a GlomoTokenizer, got "
                            f"{type(tokenizer).__name__} (GlomoTokenizer(Tokenizer) wraps one).")
        vocabulary_size = vocabulary_size or tokenizer.vocabulary_size()
        inputs, outputs = self._build(
            tokenizer, vocabulary_size, TRANSFER_AT[transfer_at],
            graph_predictor if transfer_at else None, num_classes,
            dict(embedding_dim=embedding_dim, rnn_units=rnn_units, dropout=dropout), kwargs)
        super().__init__(inputs, outputs, name=name or self.default_name)
        self.tokenizer = tokenizer
        self.graph_predictor = graph_predictor if transfer_at else None
        self.num_classes = num_classes
        self.transfer_at = transfer_at
        self.embedding_dim = embedding_dim
        self.rnn_units = rnn_units
        self.dropout = dropout
        self.vocabulary_size = vocabulary_size
        self.classifier_options = dict(kwargs)
        self.compile()

    def _build(self, tokenizer, vocabulary_size, variant, graph_predictor, num_classes, sizes,
               options):
        """The functional graph: ``(inputs, outputs)``."""
        core = build_classifier(vocabulary_size, num_classes, variant,
                                graph_predictor=graph_predictor, name="classifier", **sizes,
                                **options)
        text = keras.Input((), dtype="string", name="text")
        return text, core(tokenizer(text))

    @classmethod
    def from_preset(cls, preset, num_classes=None, transfer_at="rnn", sequence_length=None,
                    **kwargs):
        """A classifier from ``preset``: a built-in name (``GlomoClassifier.presets``), a preset
        directory, or an ``hf://`` / ``kaggle://`` handle (the ``hub`` extra; downloaded once).

        With ``num_classes``, a new classifier on the preset's tokenizer and graph predictor
        (which :class:`~glomo_tf.GlomoTransfer` freezes; ``transfer_at=None`` leaves it out),
        its other sizes from ``kwargs``. Without, the classifier saved in the preset by
        :meth:`save_to_preset`, with its weights (``transfer_at``, ``sequence_length`` and
        ``kwargs`` are then the saved ones). ``sequence_length`` cuts every text to that many
        units (default: none, each batch padded to its longest).
        """
        directory = presets.preset_directory(preset)
        if num_classes is None:
            if not preset_tasks.has_task(directory):
                raise ValueError(f"{cls.__name__}.from_preset({preset!r}) needs num_classes: "
                                 "the preset holds no saved classifier.")
            if kwargs or sequence_length is not None:
                raise ValueError("the preset's saved classifier keeps its own settings: pass "
                                 "num_classes for a new one with other settings.")
            task = preset_tasks.read_task(directory, cls)
            task.tokenizer.load_assets(presets.tokenizer_directory(directory))
            shared = [task.graph_predictor] if task.graph_predictor is not None else []
            preset_tasks.load_task_weights(directory, task, shared)
            if shared:  # the preset's own predictor weights, stored once
                presets.load_layer_weights(directory, task.graph_predictor)
            return task
        tokenizer = GlomoTokenizer.from_preset(directory, sequence_length=sequence_length)
        predictor = (GraphPredictor.from_preset(directory, trainable=False)
                     if transfer_at is not None else None)
        return cls(tokenizer, predictor, num_classes=num_classes, transfer_at=transfer_at,
                   **kwargs)

    def save_to_preset(self, preset_dir, metadata=None, weights_dtype="float32"):
        """Writes the classifier as a preset (replacing a preset there): its graph predictor
        (:meth:`GraphPredictor.save_to_preset`, none for ``transfer_at=None``), its tokenizer,
        the model itself (``task.json``, and ``task.weights.h5`` with every weight but the
        predictor's, which its own file holds) and the model card; returns its path.
        ``from_preset(preset_dir)`` gives it back, weights and all; the predictor and the
        tokenizer load from it on their own too.

        Args:
            preset_dir: where to write.
            metadata: a dict merged into ``metadata.json`` (``description``, ``corpus``,
                ``data_licence``, ...: what the model card says).
            weights_dtype: the predictor's weights file, ``"float32"`` or ``"float16"``.
        """
        with presets.writing(preset_dir) as directory:
            if self.graph_predictor is not None:
                self.graph_predictor.save_to_preset(directory, metadata=metadata,
                                                    weights_dtype=weights_dtype)
            else:
                presets.write_metadata(directory, {
                    "class_name": None, "vocabulary_size": int(self.vocabulary_size),
                    "tokenizer": None, **(metadata or {})})
            self.tokenizer.save_to_preset(directory)
            preset_tasks.write_task(directory, self, {
                "class_name": type(self).__name__, "num_classes": int(self.num_classes),
                "transfer_at": self.transfer_at},
                shared=[self.graph_predictor] if self.graph_predictor is not None else [])
        return str(preset_dir)

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """keras.Model.compile, with this task's defaults for ``"auto"``: Adam (``1e-3``),
        sparse categorical cross-entropy on probabilities, accuracy."""
        super().compile(
            optimizer=keras.optimizers.Adam(1e-3) if optimizer == "auto" else optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy() if loss == "auto" else loss,
            metrics=["accuracy"] if metrics == "auto" else metrics, **kwargs)

    def compile_from_config(self, config):
        """Compiles as the saved model was compiled (and builds the optimizer, so that its saved
        state loads)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def fit(self, x=None, y=None, validation_data=None, **kwargs):
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            validation_data = (_strings(validation_data[0]), *map(_labels,
                                                                  validation_data[1:]))
        return super().fit(_strings(x), _labels(y), validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, **kwargs):
        return super().evaluate(_strings(x), _labels(y), **kwargs)

    def predict(self, x, **kwargs):
        return super().predict(_strings(x), **kwargs)

    def get_config(self):
        return {"name": self.name,
                "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "graph_predictor": (None if self.graph_predictor is None else
                                    keras.saving.serialize_keras_object(self.graph_predictor)),
                "num_classes": self.num_classes, "transfer_at": self.transfer_at,
                "embedding_dim": self.embedding_dim, "rnn_units": self.rnn_units,
                "dropout": self.dropout, "vocabulary_size": self.vocabulary_size,
                **self.classifier_options}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        if config.get("graph_predictor") is not None:
            config["graph_predictor"] = keras.saving.deserialize_keras_object(
                config["graph_predictor"])
        return cls(**config)


def _strings(x):
    """Python strings and NumPy string arrays as a string tensor (a pair of them as a pair of
    tensors); other inputs as they are."""
    if (isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], (str, bytes))
            and _strings(x[0]) is not x[0]):
        return (_strings(x[0]), _strings(x[1]))
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], (str, bytes)):
        return tf.constant(list(x), tf.string)
    if isinstance(x, np.ndarray) and x.dtype.kind in "USO":
        return tf.constant(x.astype(str) if x.dtype.kind == "U" else x, tf.string)
    return x


def _labels(y):
    return np.asarray(y) if isinstance(y, (list, tuple)) else y


@keras.saving.register_keras_serializable(package="glomo_tf")
class GlomoPairClassifier(GlomoClassifier):
    """Pairs of strings ``([batch], [batch])`` -> class probabilities: :class:`GlomoClassifier`
    for sentence pairs (SICK, MRPC, SNLI), on :func:`build_pair_classifier`'s model (one shared
    encoder, the graphs computed per sentence, an ESIM-style soft alignment).

    :meth:`fit`, :meth:`evaluate` and :meth:`predict` take ``x`` as a tuple ``(first texts,
    second texts)``. The arguments are :class:`GlomoClassifier`'s, ``**kwargs`` going to
    :func:`build_pair_classifier`.

    Example:

    >>> import glomo_tf
    >>> tokenizer = glomo_tf.GlomoTokenizer(["<pad>", "<unk>", "a", "man", "dog", "runs"])
    >>> pairs = GlomoPairClassifier(tokenizer, num_classes=3, transfer_at=None,
    ...                             embedding_dim=4, rnn_units=4)
    >>> pairs.predict((["a man runs"], ["a dog runs"]), verbose=0).shape
    (1, 3)
    """

    default_name = "glomo_pair_classifier"

    def _build(self, tokenizer, vocabulary_size, variant, graph_predictor, num_classes, sizes,
               options):
        core = build_pair_classifier(vocabulary_size, num_classes, variant,
                                     graph_predictor=graph_predictor, name="pair_classifier",
                                     **sizes, **options)
        first = keras.Input((), dtype="string", name="first_text")
        second = keras.Input((), dtype="string", name="second_text")
        return [first, second], core([tokenizer(first), tokenizer(second)])
