"""SQuAD v1.1 reading comprehension: the file format, article-level splits, answers as unit spans,
and the official exact-match and F1 metrics.

* :func:`load_squad`: any SQuAD-v1.1-format JSON file (``{"data": [{"title", "paragraphs":
  [{"context", "qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}``), as
  :class:`Question` records; a file that is not one gets a one-line ``ValueError`` naming the
  file, the place and the fix.
* :func:`split_articles`: a seeded split by article (no passage in two splits); the shared
  development file's 48 articles give 36 / 4 / 8 for training / development / test.
* :func:`encode_questions`: passages and questions as the predictor's tokenizer's ids, each
  unit's character span in the passage (the same tensorflow-text kernel as
  :class:`~glomo_tf.data.vocabulary.Tokenizer`), and each first gold answer as a ``[start, end]``
  unit span, with counts of the answers a tokenisation cannot represent exactly and of those
  beyond the passage cap.
* :func:`exact_match`, :func:`f1`, :func:`squad_scores`: the official v1.1 evaluation script's
  normalisation (lower case, punctuation, the articles a / an / the, white space) and the maximum
  over the gold answers.
"""

import collections
import dataclasses
import json
import re
import string

import numpy as np

__all__ = ["Question", "Encoded", "load_squad", "split_articles", "encode_questions",
           "best_spans", "normalize_answer", "exact_match", "f1", "squad_scores",
           "SPLIT_FRACTIONS"]

SPLIT_FRACTIONS = (0.75, 1 / 12)  # training, development; the rest tests (36 / 4 / 8 of 48)


@dataclasses.dataclass(frozen=True)
class Question:
    """One question of a SQuAD file: ``answers`` are the gold texts (``starts`` their character
    offsets in ``context``), ``article`` the index of its article in the file."""

    id: str
    question: str
    context: str
    answers: tuple
    starts: tuple
    article: int


def load_squad(path, require_answers=True):
    """The questions of a SQuAD v1.1 JSON file, in file order.

    ``require_answers`` (default True, as a training or evaluation file needs): a question
    without any answer is an error. Raises ``ValueError`` (one line: file, place, fix) when the
    file cannot be read as SQuAD v1.1, or when an answer's ``answer_start`` does not point at its
    ``text`` in the passage."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except OSError as error:
        raise ValueError(f"Cannot read the SQuAD file {path}: {error.strerror or error}.") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not JSON ({str(error).splitlines()[0]}): pass a SQuAD v1.1 "
                         "file (train-v1.1.json / dev-v1.1.json format).") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise ValueError(f"{path} is not a SQuAD v1.1 file: it needs a top-level \"data\" list of "
                         "articles (train-v1.1.json / dev-v1.1.json format).")
    questions = []
    for a, article in enumerate(document["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise ValueError(f"{path}: article {a} has no \"paragraphs\" list: every article is "
                             "{\"title\", \"paragraphs\": [...]} in SQuAD v1.1.")
        for p, paragraph in enumerate(paragraphs):
            where = f"{path}: article {a}, paragraph {p}"
            if (not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str)
                    or not isinstance(paragraph.get("qas"), list)):
                raise ValueError(f"{where} needs a \"context\" string and a \"qas\" list.")
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                questions.append(_question(qa, context, a, where, require_answers))
    if not questions:
        raise ValueError(f"{path} holds no questions: pass a SQuAD v1.1 file with articles.")
    return questions


def _question(qa, context, article, where, require_answers):
    if not isinstance(qa, dict) or not isinstance(qa.get("question"), str) or "id" not in qa:
        raise ValueError(f"{where}: a question needs an \"id\" and a \"question\" string.")
    where = f"{where}, question {qa['id']}"
    answers = qa.get("answers", [])
    if not isinstance(answers, list) or (require_answers and not answers):
        raise ValueError(f"{where} has no answers: a training or evaluation file gives each "
                         "question at least one {\"text\", \"answer_start\"}.")
    texts, starts = [], []
    for answer in answers:
        try:
            text, start = answer["text"], int(answer["answer_start"])
        except (TypeError, KeyError, ValueError):
            raise ValueError(f"{where}: an answer needs \"text\" and an integer "
                             "\"answer_start\".") from None
        if not isinstance(text, str) or context[start:start + len(text)] != text:
            raise ValueError(f"{where}: the answer {text!r} is not at its answer_start {start} "
                             "in the passage; fix the offset or the text.")
        texts.append(text)
        starts.append(start)
    return Question(str(qa["id"]), qa["question"], context, tuple(texts), tuple(starts), article)


def split_articles(questions, seed, fractions=SPLIT_FRACTIONS):
    """Index arrays into ``questions``, one per part, split by article (a seeded permutation of
    the articles), so that no passage appears in two parts: ``fractions`` are the shares of the
    articles in every part but the last, which holds the rest (default: training, development,
    test); every part gets at least one article."""
    articles = sorted({q.article for q in questions})
    parts = len(fractions) + 1
    if len(articles) < parts:
        raise ValueError(f"Splitting by article needs at least {parts} articles; the file has "
                         f"{len(articles)}: pass separate training and test files.")
    order = np.random.default_rng(seed).permutation(articles)
    bounds, start = [], 0
    for i, fraction in enumerate(fractions):
        left = len(order) - start - (parts - 1 - i)  # the most this part may take
        start += min(max(1, round(fraction * len(order))), left)
        bounds.append(start)
    article_of = np.array([q.article for q in questions])
    return tuple(np.flatnonzero(np.isin(article_of, part)) for part in np.split(order, bounds))


@dataclasses.dataclass
class Encoded:
    """Questions as arrays: ``passages [N, max_passage]`` and ``questions [N, max_question]``
    ids (0-padded), ``offsets [N, max_passage, 2]`` each unit's ``[start, end)`` characters in
    its passage, ``spans [N, 2]`` the first gold answer's units (``-1`` where it has none inside
    the cap), and the counts ``inexact`` (answers whose characters do not begin and end on unit
    boundaries, spans widened to the units they touch) and ``beyond`` (answers past the cap)."""

    passages: np.ndarray
    questions: np.ndarray
    offsets: np.ndarray
    spans: np.ndarray
    inexact: int
    beyond: int


def encode_questions(tokenizer, questions, max_passage, max_question=48):
    """:class:`Encoded` arrays of ``questions`` with the word-level ``tokenizer`` (the graph
    predictor's): passage ids equal ``tokenizer.encode(context)`` cut to ``max_passage``."""
    if tokenizer.subword:
        raise ValueError("The reader maps answers to word units: use a word-level tokenizer "
                         "(a predictor pretrained on whole words, not subword units).")
    contexts = list(dict.fromkeys(q.context for q in questions))
    units = _units_with_offsets(tokenizer, contexts)
    question_ids = tokenizer.encode([q.question for q in questions], max_length=max_question)
    n = len(questions)
    passages = np.zeros((n, max_passage), "int32")
    offsets = np.zeros((n, max_passage, 2), "int64")
    spans = np.full((n, 2), -1, "int64")
    inexact = beyond = 0
    for i, q in enumerate(questions):
        ids, starts, ends = units[q.context]
        kept = min(len(ids), max_passage)
        passages[i, :kept] = ids[:kept]
        offsets[i, :kept, 0], offsets[i, :kept, 1] = starts[:kept], ends[:kept]
        if not q.answers:
            continue
        first = q.starts[0]
        last = first + len(q.answers[0])
        # the units the answer's characters touch
        touching = np.flatnonzero((ends > first) & (starts < last))
        if not len(touching):
            inexact += 1
            continue
        start, end = int(touching[0]), int(touching[-1])
        inexact += int(starts[start] != first or ends[end] != last)
        if end >= max_passage:
            beyond += 1
            continue
        spans[i] = start, end
    return Encoded(passages, np.asarray(question_ids, "int32"), offsets, spans, inexact, beyond)


def _units_with_offsets(tokenizer, contexts, batch_size=256):
    """``{context: (ids, starts, ends)}``: each passage's unit ids and their character spans."""
    from glomo_tf.data.vocabulary import split_words_with_offsets

    out = {}
    for i in range(0, len(contexts), batch_size):
        part = contexts[i:i + batch_size]
        words, starts, ends = split_words_with_offsets(part, tokenizer.splitter,
                                                       tokenizer.lowercase)
        ids = tokenizer.lookup_units(words)
        for j, context in enumerate(part):
            out[context] = (ids[j].numpy(), starts[j].numpy(), ends[j].numpy())
    return out


def best_spans(start_probabilities, end_probabilities, max_answer_units=30):
    """``[N, 2]`` the span ``(s, e)`` of each row maximising ``p_start[s] p_end[e]`` with
    ``s <= e < s + max_answer_units`` (BiDAF's inference)."""
    start_probabilities = np.asarray(start_probabilities, "float64")
    end_probabilities = np.asarray(end_probabilities, "float64")
    length = start_probabilities.shape[1]
    outer = start_probabilities[:, :, None] * end_probabilities[:, None, :]
    i, j = np.indices((length, length))
    allowed = (j >= i) & (j < i + max_answer_units)
    outer = np.where(allowed[None], outer, -1.0)
    flat = outer.reshape(len(outer), -1).argmax(axis=1)
    return np.stack([flat // length, flat % length], axis=1)


# ------------------------------------------------------------------------------ official metrics
def normalize_answer(text):
    """SQuAD v1.1's answer normalisation: lower case, punctuation removed, the articles a / an /
    the removed, white space collapsed."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction, gold):
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction, gold):
    """Token-level F1 of the normalised answers (bag of tokens)."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = collections.Counter(predicted) & collections.Counter(expected)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions, questions):
    """``{"exact_match", "f1"}`` in percent: each metric's maximum over a question's gold
    answers, averaged over ``questions`` (``predictions[i]`` is the answer text of
    ``questions[i]``), as the official evaluation script computes them."""
    if len(predictions) != len(questions) or not questions:
        raise ValueError(f"{len(predictions)} predictions for {len(questions)} questions.")
    em = [max(exact_match(p, g) for g in q.answers) for p, q in zip(predictions, questions)]
    f = [max(f1(p, g) for g in q.answers) for p, q in zip(predictions, questions)]
    return {"exact_match": 100.0 * float(np.mean(em)), "f1": 100.0 * float(np.mean(f))}
