"""The sentence encoders ``glomo probe`` probes: texts -> frozen vectors ``[len(texts), dim]``.

Encoders (:func:`load_encoders`): a :class:`~glomo_tf.SentencePretrainer` run directory
(``[Enc_src(s) ; Enc_trg(s)]``: each encoder's last states, as the thesis; with ``pooling`` ``max``
or ``mean`` also its states pooled over the positions, as ``NAME:max``), and the baselines of the
same table: ``bow``, the mean of the run's
trained word embeddings (both encoders' tables, concatenated); ``random``, an untrained
:class:`~glomo_tf.SentencePretrainer` of the run's configuration (same sizes, fresh weights); and
GLoMo features of a ``glomo pretrain`` run (:class:`GlomoFeatures`).
"""

import abc
import os

import numpy as np

from glomo_tf import hparams

MODEL_FILE = "sentence_pretrainer.keras"
TOKENIZER_DIR = "tokenizer"


class _TokenEncoder(abc.ABC):
    """Shared batching: texts -> ids with the run's tokenizer, in batches sorted by length."""

    name = "encoder"

    def __init__(self, tokenizer, batch_size=256, max_length=None):
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        self.max_length = max_length

    def encode(self, texts):
        """``[len(texts), dim]`` float32 vectors (in the order of ``texts``)."""
        texts = list(texts)
        if not texts:
            raise ValueError("no sentence to encode.")
        ids = self.tokenizer.encode(texts)  # ragged
        lengths = ids.row_lengths().numpy()
        order = np.argsort(lengths, kind="stable")
        rows = ids.to_list()
        out = None
        for start in range(0, len(texts), self.batch_size):
            chosen = order[start:start + self.batch_size]
            width = max(1, int(lengths[chosen].max()))
            if self.max_length:
                width = min(width, self.max_length)
            batch = np.zeros((len(chosen), width), "int32")
            for k, i in enumerate(chosen):
                row = rows[i][:width]
                batch[k, :len(row)] = row
            vectors = np.asarray(self._vectors(batch), np.float32)
            if out is None:
                out = np.zeros((len(texts), vectors.shape[1]), np.float32)
            out[chosen] = vectors
        return out

    @abc.abstractmethod
    def _vectors(self, ids):
        """The sentence vectors ``[B, D]`` of a padded id batch ``[B, T]`` (each encoder's own)."""


class SentenceRunEncoder(_TokenEncoder):
    """``[Enc_src(s) ; Enc_trg(s)]`` of a trained :class:`~glomo_tf.SentencePretrainer`, each
    encoder's vector pooled by ``pooling`` (``"final"``: the thesis'; ``"max"``, ``"mean"``)."""

    def __init__(self, model, tokenizer, name="run", pooling="final", **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.model, self.name, self.pooling = model, name, pooling

    def _vectors(self, ids):
        return self.model.encode(ids, pooling=self.pooling).numpy()


class BagOfWords(_TokenEncoder):
    """The mean of a trained model's word embeddings over a sentence's units (both encoders'
    tables, concatenated): the bag-of-words baseline of the thesis' Table 3.1."""

    def __init__(self, model, tokenizer, name="bow", **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.name = name
        self.table = np.concatenate([model.source_encoder.embeddings.numpy(),
                                     model.target_encoder.embeddings.numpy()], axis=1)

    def _vectors(self, ids):
        real = (ids != 0).astype(np.float32)[:, :, None]
        return (self.table[ids] * real).sum(1) / np.maximum(real.sum(1), 1.0)


class GlomoFeatures(_TokenEncoder):
    """Frozen GLoMo features of a ``glomo pretrain`` run's graph predictor: the mean over a
    sentence's units of ``[E ; M_fw E ; M_bw E]``, where ``E`` are the predictor's embeddings and
    ``M`` a direction's graphs averaged over its layers and heads (Eq. 1's graphs, no training)."""

    def __init__(self, predictor, tokenizer, name="glomo", **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.predictor, self.name = predictor, name

    def _vectors(self, ids):
        out = self.predictor(ids, training=False)
        embedded = self.predictor.embed(ids).numpy().astype(np.float32)
        graphs = out["graphs"].numpy().astype(np.float32).mean(axis=(2, 3))  # [B, 2, T, T]
        mixed = np.einsum("bzts,bsd->bztd", graphs, embedded)
        features = np.concatenate([embedded, mixed[:, 0], mixed[:, 1]], axis=-1)
        real = (ids != 0).astype(np.float32)[:, :, None]
        return (features * real).sum(1) / np.maximum(real.sum(1), 1.0)


def load_sentence_run(run_dir):
    """``(model, tokenizer)`` of a ``glomo sentence-pretrain`` run directory."""
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_keras_file

    path = os.path.join(run_dir, MODEL_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"no {MODEL_FILE} in {run_dir!r}: pass the `output_dir` of a finished "
                         "glomo sentence-pretrain run.")
    try:
        model = load_keras_file(path, compile=False)
    except Exception as error:  # a damaged file, or one from another library version
        raise ValueError(f"Could not load {path!r} ({type(error).__name__}: "
                         f"{str(error).splitlines()[0][:300]}). Pass the `output_dir` of a "
                         "finished glomo sentence-pretrain run.") from error
    return model, Tokenizer.load(os.path.join(run_dir, TOKENIZER_DIR))


def random_like(model, seed=0):
    """An untrained :class:`~glomo_tf.SentencePretrainer` of ``model``'s configuration."""
    import keras

    from glomo_tf.models.sentence_pretrainer import SentencePretrainer
    keras.utils.set_random_seed(seed)
    fresh = SentencePretrainer.from_config(model.get_config())
    fresh.build()
    if model.graph_predictor is not None:  # the frozen graphs are the run's, not random
        fresh.source_encoder.graph_predictor.set_weights(
            model.source_encoder.graph_predictor.get_weights())
        fresh.target_encoder.graph_predictor.set_weights(
            model.target_encoder.graph_predictor.get_weights())
    return fresh


def load_encoders(runs=(), baselines=(), glomo_runs=(), batch_size=256, seed=0,
                  glomo_presets=(), poolings=("final",)):
    """The encoders to probe: each run of ``runs``, and the ``random`` baseline, once per pooling
    of ``poolings`` (named ``NAME:max``, ``NAME:mean`` beside the thesis' ``final``); the ``bow``
    baseline built from the first run; a :class:`GlomoFeatures` per ``glomo pretrain`` run of
    ``glomo_runs`` and per preset (a built-in name or a directory) of ``glomo_presets``."""
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    unknown = [b for b in baselines if b not in hparams.PROBE_BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {', '.join(unknown)}; choose from "
                         f"{' '.join(hparams.PROBE_BASELINES)}.")
    if baselines and not runs:
        raise ValueError("the baselines bow and random are built from a trained run's "
                         "vocabulary and sizes: give `runs` DIR too.")
    if not runs and not glomo_runs and not glomo_presets:
        raise ValueError("nothing to probe: give `runs` DIR (a glomo sentence-pretrain run) "
                         "and/or `glomo_runs` DIR (a glomo pretrain run) or `glomo_presets` NAME.")
    unknown = [p for p in poolings if p not in hparams.SENTENCE_POOLINGS]
    if unknown or not poolings:
        raise ValueError(f"unknown pooling(s) {', '.join(unknown) or '(none given)'}; choose "
                         f"from {' '.join(hparams.SENTENCE_POOLINGS)}.")
    encoders, names = [], set()

    def add(encoder):
        base, k = encoder.name, 2
        while encoder.name in names:
            encoder.name, k = f"{base}-{k}", k + 1
        names.add(encoder.name)
        encoders.append(encoder)

    first = None
    for run_dir in runs:
        model, tokenizer = load_sentence_run(run_dir)
        first = first or (model, tokenizer)
        for pooling in poolings:
            add(SentenceRunEncoder(model, tokenizer, pooled_name(_run_name(run_dir), pooling),
                                   pooling, batch_size=batch_size))
    for baseline in baselines:
        model, tokenizer = first
        if baseline == "bow":
            add(BagOfWords(model, tokenizer, batch_size=batch_size))
        else:
            fresh = random_like(model, seed)
            for pooling in poolings:
                add(SentenceRunEncoder(fresh, tokenizer, pooled_name("random", pooling), pooling,
                                       batch_size=batch_size))
    for run_dir in glomo_runs:
        model_path = os.path.join(run_dir, "graph_predictor.keras")
        if not os.path.isfile(model_path):
            raise ValueError(f"no graph_predictor.keras in {run_dir!r}: pass the `output_dir` "
                             "of a finished glomo pretrain run.")
        add(GlomoFeatures(load_graph_predictor(model_path),
                          Tokenizer.load(os.path.join(run_dir, TOKENIZER_DIR)),
                          f"glomo:{_run_name(run_dir)}", batch_size=batch_size))
    for preset in glomo_presets:
        from glomo_tf.saving import load_preset
        predictor, tokenizer = load_preset(preset)
        if tokenizer is None:
            raise ValueError(f"the preset {preset!r} has no tokenizer: it cannot read sentences.")
        add(GlomoFeatures(predictor, tokenizer, f"glomo:{_run_name(preset)}",
                          batch_size=batch_size))
    return encoders


def pooled_name(name, pooling):
    """The name an encoder ``name`` is probed under with ``pooling``."""
    return name if pooling == "final" else f"{name}:{pooling}"


def _run_name(run_dir):
    return os.path.basename(os.path.normpath(run_dir)) or "run"
