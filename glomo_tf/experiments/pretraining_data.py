"""A pretraining run's data: its corpus, its tokenizer, and epochs that a resumed run reads again.

Each epoch's shuffle order is a function of the seed and the epoch number (:func:`epoch_stream`),
so a run resumed after a crash sees exactly the batches it would have seen; ``glomo
sentence-pretrain`` reads its epochs the same way.
"""

import os
import time

from glomo_tf.experiments.runs import RunDirectory


def load_corpus(s, check_encoding=True):
    """The lines of the run's corpus (``train`` files or ``tfds``); with ``check_encoding``, files
    whose share of lines with invalid UTF-8 exceeds ``max_undecodable`` are refused (see
    :func:`check_decodable`: one more pass over the files, which a resumed run skips)."""
    from glomo_tf.data import corpus
    try:
        if s.tfds:
            return corpus.tfds_lines(s.tfds, s.tfds_split, text_key=s.tfds_text_key)
        lines = corpus.text_lines(s.train)
        if check_encoding:
            check_decodable(s.train, s.max_undecodable)
        return lines
    except (ValueError, FileNotFoundError, ImportError, TypeError) as error:
        raise ValueError(str(error)) from None


def check_decodable(patterns, max_share):
    """Counts the lines of ``patterns`` that are not valid UTF-8: says how many when some are
    (they are read with U+FFFD in place of the bad bytes) and raises ``ValueError`` when their
    share exceeds ``max_share`` (binary files, another encoding)."""
    from glomo_tf.data import corpus

    found = corpus.count_undecodable(patterns)
    if not found.lines_with_errors:
        return found
    share = found.lines_with_errors / max(found.lines, 1)
    summary = (f"{found.lines_with_errors} of {found.lines} lines ({100 * share:.1f}%) hold bytes "
               f"that are not UTF-8 ({found.replaced_characters} replaced by U+FFFD)")
    if share > max_share:
        raise ValueError(f"{summary}: is the corpus text in UTF-8? Convert it (e.g. iconv -t "
                         f"UTF-8), or pass `max_undecodable` {share:.2f} to train on it anyway.")
    print(f"Note: {summary}.", flush=True)
    return found


def load_or_build_tokenizer(s, lines, run_dir):
    """The run's tokenizer: the saved one when resuming, else ``--vocab``, else built (and saved
    by the chief; other workers build the same one from the same corpus, and never read a
    directory the chief may be writing)."""
    from glomo_tf import training
    from glomo_tf.data.vocabulary import Tokenizer
    saved = os.path.join(run_dir, "tokenizer")
    resumed = RunDirectory(run_dir).resuming and os.path.isfile(os.path.join(saved, "vocab.txt"))
    source = saved if resumed else s.vocab
    if source:
        try:
            tokenizer = Tokenizer.load(source)
        except (ValueError, FileNotFoundError, OSError) as error:
            raise ValueError(f"cannot load the tokenizer from {source}: {error}") from None
        if not resumed and training.is_chief():  # the run holds its tokenizer, as when built
            tokenizer.save(saved)
        return tokenizer
    print(f"Building the vocabulary (at most {s.vocab_size} units) ...", flush=True)
    start = time.perf_counter()
    tokenizer = Tokenizer.build(lines, max_size=s.vocab_size, min_count=s.min_count,
                                splitter=s.splitter, lowercase=s.lowercase,
                                subword=s.subword)
    where = ""
    if training.is_chief():
        tokenizer.save(saved)
        where = f" -> {saved}"
    print(f"  {tokenizer.vocabulary_size} units in {time.perf_counter() - start:.1f}s{where}")
    return tokenizer


# Examples in the shuffle buffer of each epoch (epoch_stream).
SHUFFLE_BUFFER = 10_000


def epochs_to_read(count, per_epoch, global_batch):
    """How many epochs of ``per_epoch`` examples read a corpus of ``count`` when they are shorter
    than it (less a partial batch) and :func:`epoch_stream` reads it part after part; ``None``
    when each epoch is the whole corpus (or ``count`` is unknown)."""
    if not count or per_epoch + global_batch > count:
        return None
    return -(-count // per_epoch)


def epoch_stream(examples, global_batch, steps_per_epoch, seed, first_epoch, last_epoch,
                 skip_batches=0, count=None):
    """Batches of epochs ``first_epoch .. last_epoch - 1``, each shuffled by ``(seed, epoch)``.

    An epoch of ``S`` steps of ``B`` examples as long as the corpus (``count`` examples, or the
    dataset's cardinality when known), less a partial batch, or longer, is the corpus shuffled in
    a buffer of ``SHUFFLE_BUFFER`` examples (and repeated as needed). A shorter epoch ``e`` holds
    the examples ``e S B .. (e + 1) S B - 1`` of the corpus repeated end to end (modulo
    ``count``), shuffled in the same buffer: such epochs walk through the corpus one after the
    other, so every example is trained on before any comes back. Each epoch depends only on the
    seed and its number, so a resumed run sees exactly the batches it would have seen; the first
    ``skip_batches`` batches (already trained on) are skipped.
    """
    import tensorflow as tf

    per_epoch = steps_per_epoch * global_batch
    if count is None:
        known = int(examples.cardinality().numpy())
        count = known if known > 0 else None

    whole = count is not None and epochs_to_read(count, per_epoch, global_batch) is None

    def one_epoch(epoch):
        def shuffled(dataset):
            return dataset.shuffle(SHUFFLE_BUFFER, seed=seed * 100_003 + epoch,
                                   reshuffle_each_iteration=False)

        if whole:  # an epoch is the corpus (less a partial batch): all of it, each time
            return shuffled(examples).repeat().batch(global_batch, drop_remainder=True) \
                .take(steps_per_epoch)
        start = epoch * per_epoch % count if count else epoch * per_epoch
        part = examples.repeat().skip(start).take(per_epoch)
        return shuffled(part).batch(global_batch, drop_remainder=True)

    stream = one_epoch(first_epoch)
    for epoch in range(first_epoch + 1, last_epoch):
        stream = stream.concatenate(one_epoch(epoch))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    # The trailing repeat() is never consumed (fit takes exactly the steps asked for); it keeps
    # Keras from reporting the end of a finite dataset as running out of data.
    return stream.skip(skip_batches).repeat().prefetch(tf.data.AUTOTUNE).with_options(options)
