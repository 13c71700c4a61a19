"""SQuAD v1.1: the file reader, article splits, answers as unit spans, the official metrics, span
inference and the reader's attention layers, against hand-made cases and NumPy."""

import itertools
import json
import os
import re

import numpy as np
import pytest

from glomo_tf.data import squad
from glomo_tf.data.labeled import shared_data_dir
from glomo_tf.data.vocabulary import Tokenizer

SHARED_SQUAD = os.path.join(shared_data_dir(), "squad", "dev-v1.1.json")


# ---------------------------------------------------------------------- official metrics
@pytest.mark.parametrize("text, normalised", [
    ("The Denver Broncos", "denver broncos"),          # lower case, article
    ("Denver Broncos.", "denver broncos"),             # punctuation
    ("an  apple,\ta pear", "apple pear"),              # articles, white space
    ("theatre anthem", "theatre anthem"),              # articles only as whole words
    ("U.S.-based", "usbased"),                          # punctuation inside words
])
def test_normalize_answer(text, normalised):
    assert squad.normalize_answer(text) == normalised


def test_exact_match_and_f1_by_hand():
    assert squad.exact_match("the Broncos!", "Broncos") == 1.0
    assert squad.exact_match("Denver Broncos", "Broncos") == 0.0
    # prediction {denver, broncos, team} against {broncos}: precision 1/3, recall 1 -> F1 0.5
    assert squad.f1("Denver Broncos team", "the Broncos") == pytest.approx(0.5)
    # repeated tokens count with multiplicity: {a: 2} & {a: 1} -> 1 common of 2 and 1
    assert squad.f1("one one", "one") == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert squad.f1("Carolina", "Denver") == 0.0
    assert squad.f1("the", "a") == 0.0  # both normalise to nothing


def make_question(answers, context="ctx", qid="q"):
    return squad.Question(qid, "?", context, tuple(answers), tuple(0 for _ in answers), 0)


def test_squad_scores_take_the_best_gold_answer_and_average():
    questions = [make_question(["Denver Broncos", "Broncos"]), make_question(["Santa Clara"])]
    scores = squad.squad_scores(["broncos", "Santa Clara, California"], questions)
    assert scores["exact_match"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * (1.0 + 2 * (2 / 3) / (2 / 3 + 1)) / 2)
    with pytest.raises(ValueError, match="1 predictions for 2 questions"):
        squad.squad_scores(["x"], questions)


# ---------------------------------------------------------------------- the file
def write(tmp_path, document, name="squad.json"):
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def article(title, context, qas):
    return {"title": title, "paragraphs": [{"context": context, "qas": qas}]}


def qa(qid, question, *answers):
    return {"id": qid, "question": question,
            "answers": [{"text": t, "answer_start": s} for t, s in answers]}


def test_load_squad_reads_questions_and_checks_offsets(tmp_path):
    context = "Super Bowl 50 was played in Santa Clara, California."
    path = write(tmp_path, {"version": "1.1", "data": [
        article("a", context, [qa("1", "Where?", ("Santa Clara", 28),
                                  ("Santa Clara, California", 28))]),
        article("b", "Denver won.", [qa("2", "Who won?", ("Denver", 0))])]})
    questions = squad.load_squad(path)
    assert [q.id for q in questions] == ["1", "2"] and [q.article for q in questions] == [0, 1]
    assert questions[0].answers == ("Santa Clara", "Santa Clara, California")
    assert questions[0].starts == (28, 28) and questions[1].context == "Denver won."


@pytest.mark.parametrize("document, fragment", [
    ("{not json", "is not JSON"),
    ({"version": "1.1"}, "needs a top-level \"data\" list"),
    ({"data": [{"title": "a"}]}, "article 0 has no \"paragraphs\" list"),
    ({"data": [{"title": "a", "paragraphs": [{"qas": []}]}]}, "needs a \"context\" string"),
    ({"data": [article("a", "Denver won.", [qa("7", "Who?")])]}, "question 7 has no answers"),
    ({"data": [article("a", "Denver won.", [qa("8", "Who?", ("Denver", 3))])]},
     "is not at its answer_start 3"),
    ({"data": [article("a", "Denver won.", [{"id": "9", "question": "Who?",
                                             "answers": [{"text": "Denver"}]}])]},
     "needs \"text\" and an integer \"answer_start\""),
    ({"data": []}, "holds no questions"),
])
def test_load_squad_bad_files_get_one_line(tmp_path, document, fragment):
    path = write(tmp_path, document)
    with pytest.raises(ValueError) as error:
        squad.load_squad(path)
    message = str(error.value)
    assert fragment in message and path in message and "\n" not in message


def test_load_squad_missing_file(tmp_path):
    with pytest.raises(ValueError, match="Cannot read the SQuAD file"):
        squad.load_squad(str(tmp_path / "absent.json"))


def test_split_articles_keeps_each_article_in_one_split():
    questions = [squad.Question(f"{a}-{i}", "?", f"context {a}", ("x",), (0,), a)
                 for a in range(48) for i in range(a % 3 + 1)]
    train, development, test = squad.split_articles(questions, seed=4)
    articles = [{questions[i].article for i in part} for part in (train, development, test)]
    assert [len(a) for a in articles] == [36, 4, 8]
    assert not (articles[0] & articles[1] or articles[0] & articles[2]
                or articles[1] & articles[2])
    assert sorted(np.concatenate([train, development, test]).tolist()) == list(
        range(len(questions)))
    again = squad.split_articles(questions, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(again, (train, development, test)))
    assert not np.array_equal(squad.split_articles(questions, seed=5)[2], test)
    with pytest.raises(ValueError, match="at least 3 articles"):
        squad.split_articles(questions[:3], seed=0)
    # two parts (a training file beside a test file of its own): 90 / 10, at least one each
    train, development = squad.split_articles(questions, seed=4, fractions=(0.9,))
    assert [len({questions[i].article for i in p}) for p in (train, development)] == [43, 5]
    two_articles = [q for q in questions if q.article < 2]
    assert [len(p) > 0 for p in squad.split_articles(two_articles, 0, (0.9,))] == [True, True]


# ---------------------------------------------------------------------- units and spans
def test_encode_questions_maps_answers_to_units():
    context = "The Broncos beat the Panthers 24-10 in 2016, at Levi's Stadium."
    tokenizer = Tokenizer.build([context, "who won"], splitter="unicode_script", lowercase=True)
    questions = [
        squad.Question("a", "who won", context, ("Broncos",), (4,), 0),        # one unit
        squad.Question("b", "who", context, ("Levi's Stadium",), (48,), 0),    # four units
        squad.Question("c", "when", context, ("2016",), (39,), 0),             # "2016," is a unit
        squad.Question("d", "score", context, ("Panthers 24-10 in",), (21,), 0),
    ]
    assert all(context[q.starts[0]:q.starts[0] + len(q.answers[0])] == q.answers[0]
               for q in questions)
    encoded = squad.encode_questions(tokenizer, questions, max_passage=12, max_question=4)
    words = [context[s:e] for s, e in encoded.offsets[0] if e > s]
    assert words[:8] == ["The", "Broncos", "beat", "the", "Panthers", "24-10", "in", "2016,"]
    assert encoded.spans.tolist() == [[1, 1], [-1, -1], [7, 7], [4, 6]]
    assert (encoded.inexact, encoded.beyond) == (1, 1)  # "2016" inside "2016,"; Levi's past 12
    expected_ids = tokenizer.encode([context], max_length=12).numpy()[0]
    np.testing.assert_array_equal(encoded.passages[0], expected_ids)
    np.testing.assert_array_equal(encoded.questions[0],
                                  tokenizer.encode(["who won"], max_length=4).numpy()[0])


@pytest.mark.skipif(not os.path.exists(SHARED_SQUAD), reason="needs ../shared/data/squad")
def test_shared_squad_passages_encode_as_the_tokenizer_and_spans_hold_the_answers():
    """The first 150 questions of the shared development file: passage ids equal the tokenizer's
    own encoding, and every answer on unit boundaries is exactly its span's text."""
    questions = squad.load_squad(SHARED_SQUAD)[:150]
    contexts = list(dict.fromkeys(q.context for q in questions))
    tokenizer = Tokenizer.build(contexts, splitter="unicode_script", lowercase=True)
    encoded = squad.encode_questions(tokenizer, questions, max_passage=400)
    expected = tokenizer.encode([q.context for q in questions], max_length=400).numpy()
    np.testing.assert_array_equal(encoded.passages, expected)
    exact = 0
    for i, q in enumerate(questions):
        start, end = encoded.spans[i]
        text = q.context[encoded.offsets[i, start, 0]:encoded.offsets[i, end, 1]]
        if text == q.answers[0]:
            exact += 1
        else:
            assert q.answers[0] in text  # widened to the units it touches
    assert exact == len(questions) - encoded.inexact and exact > 0.8 * len(questions)


def test_best_spans_brute_force(rng):
    start = rng.dirichlet(np.ones(9), size=20)
    end = rng.dirichlet(np.ones(9), size=20)
    got = squad.best_spans(start, end, max_answer_units=3)
    for row in range(20):
        best = max(((s, e) for s, e in itertools.product(range(9), range(9)) if s <= e < s + 3),
                   key=lambda se: start[row, se[0]] * end[row, se[1]])
        assert tuple(got[row]) == best


# ---------------------------------------------------------------------- the reader's layers
def test_bi_attention_matches_numpy(rng):
    from glomo_tf.models.reader import BiAttention

    p = rng.normal(size=(2, 5, 3)).astype("float32")
    q = rng.normal(size=(2, 4, 3)).astype("float32")
    p_ids = np.array([[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]], "int32")
    q_ids = np.array([[1, 2, 0, 0], [1, 2, 3, 4]], "int32")
    layer = BiAttention()
    out = layer([p, q, p_ids, q_ids]).numpy()
    w = layer.similarity.numpy()
    for b in range(2):
        qv = q[b][q_ids[b] != 0]
        scores = np.array([[w[0] @ pt + w[1] @ qj + w[2] @ (pt * qj) for qj in qv] for pt in p[b]])
        a = np.exp(scores - scores.max(1, keepdims=True))
        c2q = (a / a.sum(1, keepdims=True)) @ qv
        m = scores.max(1)[p_ids[b] != 0]
        beta = np.exp(m - m.max()) / np.exp(m - m.max()).sum()
        q2c = beta @ p[b][p_ids[b] != 0]
        expected = np.concatenate([p[b], c2q, p[b] * c2q, p[b] * q2c], axis=-1)
        np.testing.assert_allclose(out[b], expected, rtol=1e-4, atol=1e-5)


def test_passage_self_attention_matches_numpy(rng):
    from glomo_tf.models.reader import PassageSelfAttention

    x = rng.normal(size=(2, 4, 3)).astype("float32")
    ids = np.array([[1, 2, 3, 4], [1, 2, 0, 0]], "int32")
    layer = PassageSelfAttention()
    out = layer([x, ids]).numpy()
    w = layer.kernel.numpy()
    for b, t in itertools.product(range(2), range(4)):
        sources = [s for s in range(4) if ids[b, s] and s != t]
        scores = np.array([x[b, t] @ w @ x[b, s] for s in sources])
        weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        expected = x[b, t] + weights @ x[b, sources]
        np.testing.assert_allclose(out[b, t], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", ["baseline", "glomo_embeddings", "glomo_rnn", "uniform",
                                     "uniform_rnn"])
def test_reader_logits_mask_padding_and_take_gradients(variant):
    import keras
    import tensorflow as tf

    from glomo_tf import GraphPredictor
    from glomo_tf.models.reader import build_reader

    predictor = GraphPredictor(30, 8, num_layers=2, num_heads=2, conv_layers=1)
    model = build_reader(30, variant, graph_predictor=predictor, embedding_dim=6, rnn_units=4)
    passages = np.array([[3, 4, 5, 6, 7], [8, 9, 2, 0, 0]], "int32")
    questions = np.array([[10, 11, 0], [12, 13, 14]], "int32")
    with tf.GradientTape() as tape:
        start, end = model([passages, questions], training=True)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(np.array([1, 2]),
                                                                           start)
    assert start.shape == end.shape == (2, 5)
    np.testing.assert_array_equal(start.numpy()[1, 3:], -1e9)
    assert np.all(np.abs(start.numpy()[passages != 0]) < 1e3)
    grads = tape.gradient(loss, model.trainable_weights)
    assert all(g is not None and np.isfinite(np.asarray(tf.convert_to_tensor(g))).all()
               for g, w in zip(grads, model.trainable_weights) if not w.path.startswith("end"))
    if variant in ("glomo_embeddings", "glomo_rnn"):
        assert not any("graph_predictor" in w.path for w in model.trainable_weights)
    if variant in ("uniform", "uniform_rnn"):
        # Where the uniform graphs mix: before the BiGRU (its 2 x 4 states) or after (8 -> 16).
        from glomo_tf.models.pair_classifier import shared_text_encoder

        encode = shared_text_encoder(30, variant, None, 6, 4, 0.0, 2, 0.0, None, None)
        width = encode(keras.Input((None,), dtype="int32")).shape[-1]
        assert width == {"uniform": 8, "uniform_rnn": 16}[variant]


def test_reader_module_example_runs():
    import doctest

    from glomo_tf.models import reader

    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(reader):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 4 and result.failed == 0


@pytest.mark.parametrize("variant", ["glomo_embeddings", "glomo_rnn"])
def test_reader_fed_passage_graphs_matches_the_online_reader(variant):
    """passage_graphs=True: the predictor's passage graphs as an input give the online reader's
    outputs, its weights carried over by set_weights (questions' graphs still computed)."""
    from glomo_tf import GraphPredictor
    from glomo_tf.models.reader import build_reader

    predictor = GraphPredictor(30, 8, num_layers=2, num_heads=2, conv_layers=1)
    online = build_reader(30, variant, graph_predictor=predictor, embedding_dim=6, rnn_units=4,
                          graph_temperature=0.5)
    fed = build_reader(30, variant, graph_predictor=predictor, embedding_dim=6, rnn_units=4,
                       graph_temperature=0.5, passage_graphs=True)
    def layout(model):  # paths without Keras' automatic numbering, and shapes
        return [(re.sub(r"_\d+", "", w.path), tuple(w.shape)) for w in model.weights]

    assert layout(fed) == layout(online)
    fed.set_weights(online.get_weights())
    passages = np.array([[3, 4, 5, 6, 7, 8], [8, 9, 2, 0, 0, 0]], "int32")
    questions = np.array([[10, 11, 0], [12, 13, 14]], "int32")
    graphs = predictor(passages, training=False)["graphs"].numpy()
    assert np.count_nonzero(graphs)
    for got, expected in zip(fed([passages, questions, graphs]), online([passages, questions])):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    # other graphs move the outputs: the fed graphs are used
    other = np.random.default_rng(0).uniform(0.1, 1.0, graphs.shape) * (graphs > 0)
    other = (other / np.maximum(other.sum(-1, keepdims=True), 1e-9)).astype("float32")
    assert not np.allclose(fed([passages, questions, other])[0].numpy(),
                           online([passages, questions])[0].numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="passage_graphs feeds a predictor's graphs"):
        build_reader(30, "uniform", passage_graphs=True)


def test_answer_graph_rows_list_each_answer_units_strongest_sources():
    """answer_graph_rows: for each answer unit, the sources of the first layer's heads averaged,
    strongest first (NumPy from the predictor's graphs), as words of the passage."""
    from glomo_tf import GraphPredictor
    from glomo_tf.experiments.reading import answer_graph_rows

    context = "alpha beta gamma delta epsilon zeta"
    tokenizer = Tokenizer.build([context, "which"])
    question = squad.Question("q", "which", context, ("gamma delta",), (11,), 0)
    encoded = squad.encode_questions(tokenizer, [question], max_passage=8)
    predictor = GraphPredictor(tokenizer.vocabulary_size, 8, num_layers=2, num_heads=2,
                               conv_layers=1)
    rows, = answer_graph_rows(predictor, encoded, [question], np.array([[2, 3]]), top=2)
    graphs = predictor(encoded.passages[:, :6], training=False)["graphs"].numpy()[0, :, 0]
    mean = graphs.mean(axis=1)  # [2, 6, 6]
    words = context.split()
    assert [row["unit"] for row in rows] == ["gamma", "delta"]
    for row, t in zip(rows, (2, 3)):
        for z, direction in enumerate(("forward", "backward")):
            expected = [words[u] for u in np.argsort(-mean[z, t], kind="stable")[:2]
                        if mean[z, t, u] > 0]
            assert [source for source, _ in row[direction]] == expected
            sources = [words.index(source) for source, _ in row[direction]]
            assert all(u < t for u in sources) if z == 0 else all(u > t for u in sources)
    assert rows[1]["forward"]  # delta has earlier units to draw from
