"""``GlomoTokenizer``: the :class:`~glomo_tf.data.Tokenizer` as a Keras preprocessing layer.

Strings in, the predictor's int32 ids out, inside ``tf.data.Dataset.map``, a functional model and
its SavedModel export alike (keras-hub's tokenizers take the same place in a model)::

    tokenizer = GlomoTokenizer.from_preset("glomo_books_en", sequence_length=64)
    text = keras.Input((), dtype="string")
    ids = tokenizer(text)                                   # [batch, 64], 0 = padding
    h = GlomoTransfer.from_preset("glomo_books_en")([keras.layers.Embedding(...)(ids), ids])

The vocabulary travels with a ``.keras`` file as the layer's assets (``vocab.txt`` and
``tokenizer.json``, the files :meth:`Tokenizer.save` writes), not in its config.
"""

import os

import keras
import tensorflow as tf

from glomo_tf import presets
from glomo_tf.data.vocabulary import PAD_ID, Tokenizer, Vocabulary


@keras.saving.register_keras_serializable(package="glomo_tf")
class GlomoTokenizer(keras.layers.Layer):
    """Maps strings to the ids of a vocabulary: ``[batch]`` strings -> ``[batch, T]`` int32.

    The splitting, lowercasing and WordPiece steps are :class:`~glomo_tf.data.Tokenizer`'s
    (TensorFlow ops only). With ``sequence_length`` every row is cut or padded with 0 to that
    length; without it, the batch is padded to its longest row.

    Args:
        vocabulary: the units, ``<pad>`` and ``<unk>`` first (a list of strings, a
            :class:`~glomo_tf.data.Vocabulary`, or the path of a ``vocab.txt`` or of a
            directory a :class:`~glomo_tf.data.Tokenizer` was saved to, whose
            ``tokenizer.json`` then gives the settings below); None only while a ``.keras``
            file is loaded (the vocabulary comes from its assets).
        sequence_length: None or the int length of every output row.
        splitter: ``"whitespace"`` or ``"unicode_script"`` (see
            :class:`~glomo_tf.data.Tokenizer`); default: the saved directory's, else
            ``"whitespace"``.
        lowercase: bool; default: the saved directory's, else False.
        subword: bool, WordPiece units; default: the saved directory's, else False.
        **kwargs: a layer's ``name`` and ``dtype``.

    Example:

    >>> tokenizer = GlomoTokenizer(["<pad>", "<unk>", "the", "cat", "sat"])
    >>> tokenizer(["the cat sat", "the dog"]).numpy().tolist()
    [[2, 3, 4], [2, 1, 0]]
    >>> tokenizer.detokenize([[2, 3, 4], [2, 1, 0]]).numpy().tolist()
    [b'the cat sat', b'the <unk>']
    """

    #: The built-in presets with a tokenizer, ``{name: metadata}``.
    presets = presets.BuiltinPresets(needs_tokenizer=True)

    def __init__(self, vocabulary=None, sequence_length=None, splitter=None, lowercase=None,
                 subword=None, **kwargs):
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        if sequence_length is not None and (not isinstance(sequence_length, int)
                                            or sequence_length < 1):
            raise ValueError(f"sequence_length must be a positive int or None, got "
                             f"{sequence_length!r}.")
        self.sequence_length = sequence_length
        self._settings = {k: v for k, v in dict(splitter=splitter, lowercase=lowercase,
                                                 subword=subword).items() if v is not None}
        self.tokenizer = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    # ------------------------------------------------------------------ the vocabulary
    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary (the forms ``vocabulary`` takes in the constructor)."""
        settings = dict(Tokenizer.DEFAULTS)
        if isinstance(vocabulary, Tokenizer):
            settings.update(vocabulary.get_config())
            vocabulary = vocabulary.vocabulary
        elif isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = Vocabulary.load(vocabulary)
            settings.update({k: v for k, v in (vocabulary.settings or {}).items()
                             if k in settings})
        elif not isinstance(vocabulary, Vocabulary):
            tokens = list(vocabulary)
            if not all(isinstance(t, str) for t in tokens):
                raise TypeError("vocabulary must be strings (a list of units), a Vocabulary or "
                                "the path of a saved tokenizer.")
            vocabulary = Vocabulary(tokens)
        settings.update(self._settings)
        settings.update(max_length=None)
        self.tokenizer = Tokenizer(vocabulary, **settings)

    def _check_vocabulary(self):
        if self.tokenizer is None:
            raise ValueError("This GlomoTokenizer has no vocabulary yet: pass `vocabulary` or "
                             "call set_vocabulary() first.")

    def get_vocabulary(self):
        """The units, by id."""
        self._check_vocabulary()
        return list(self.tokenizer.vocabulary.tokens)

    def vocabulary_size(self):
        """Number of ids, ``<pad>`` and ``<unk>`` included (the predictor's
        ``vocabulary_size``)."""
        self._check_vocabulary()
        return self.tokenizer.vocabulary_size

    def id_to_token(self, id):
        """The unit of one id."""
        tokens = self.get_vocabulary()
        if not 0 <= int(id) < len(tokens):
            raise ValueError(f"id {id} is outside the vocabulary (0 to {len(tokens) - 1}).")
        return tokens[int(id)]

    def token_to_id(self, token):
        """The id of one unit (``<unk>``'s, 1, for a unit outside the vocabulary)."""
        self._check_vocabulary()
        return int(self.tokenizer.lookup_units(tf.constant([token])).numpy()[0])

    # ------------------------------------------------------------------ the layer
    def __call__(self, inputs, *args, **kwargs):
        # Python strings and lists of them are welcome, as in keras-hub's tokenizers.
        if isinstance(inputs, (str, bytes, list, tuple)) or (
                hasattr(inputs, "dtype") and not isinstance(inputs, (tf.Tensor, keras.KerasTensor,
                                                                     tf.RaggedTensor))):
            inputs = tf.convert_to_tensor(inputs, tf.string)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs):
        self._check_vocabulary()
        ids = self.tokenizer.encode_ragged(tf.reshape(tf.convert_to_tensor(inputs, tf.string),
                                                      [-1]))
        if self.sequence_length is None:
            return ids.to_tensor(default_value=PAD_ID)
        return ids[:, :self.sequence_length].to_tensor(default_value=PAD_ID,
                                                       shape=[None, self.sequence_length])

    def tokenize(self, inputs):
        """The same as calling the layer."""
        return self(inputs)

    def detokenize(self, ids):
        """Text of id rows (padding dropped, ``##`` pieces glued): ``[batch, T]`` ->
        ``[batch]`` strings."""
        self._check_vocabulary()
        return self.tokenizer.decode(ids)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((inputs.shape[0], self.sequence_length), dtype="int32")

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.sequence_length)

    # ------------------------------------------------------------------ saving
    def get_config(self):
        config = super().get_config()
        config.update(sequence_length=self.sequence_length)
        if self.tokenizer is not None:
            config.update({k: getattr(self.tokenizer, k)
                           for k in ("splitter", "lowercase", "subword")})
        return config

    def save_assets(self, dir_path):
        self._check_vocabulary()
        self.tokenizer.save(dir_path)

    def load_assets(self, dir_path):
        self.set_vocabulary(dir_path)

    @classmethod
    def from_preset(cls, preset, sequence_length=None, **kwargs):
        """The tokenizer of ``preset`` as a layer: a built-in name (``GlomoTokenizer.presets``),
        a preset directory, or an ``hf://`` / ``kaggle://`` handle (the ``hub`` extra)."""
        return cls(Tokenizer.from_preset(preset), sequence_length=sequence_length, **kwargs)

    def save_to_preset(self, preset_dir):
        """Writes the vocabulary and its settings into the preset ``preset_dir``, whose
        predictor is written first (:meth:`glomo_tf.GraphPredictor.save_to_preset`); returns
        ``preset_dir`` (:meth:`Tokenizer.save_to_preset`)."""
        self._check_vocabulary()
        return self.tokenizer.save_to_preset(preset_dir)
