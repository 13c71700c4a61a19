"""Vocabulary and Tokenizer: building, round trips, saved form, SavedModel ops, bad inputs."""

import collections
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.core.protobuf import saved_model_pb2

from glomo_tf.data.vocabulary import (PAD, UNK, Tokenizer, Vocabulary, check_vocabulary_matches,
                                      split_words)

CORPUS = [
    "the cat sat on the mat",
    "the dog ate the hat , and the cat ran",
    "a dog and a cat",
    "<unk> words stay <unk>",
    "",
]
# Unicode whitespace (tab, no-break space, ideographic space, line separator) and non-ASCII words.
MESSY = ["  Ünïcode\twörds\u00a0split\u3000here  ", "naïve café\u2028Straße", "x"]
SERVING_OPS = {"WhitespaceTokenizeWithOffsets", "UnicodeScriptTokenizeWithOffsets",
               "WordpieceTokenizeWithOffsets"}


def _python_counts(lines):
    return collections.Counter(word for line in lines for word in line.split())


def _saved_model_ops(directory):
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(directory, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    ops = set()
    for graph in saved.meta_graphs:
        ops.update(node.op for node in graph.graph_def.node)
        for function in graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


# ---------------------------------------------------------------------------------- vocabulary
def test_vocabulary_build_orders_by_count_then_alphabet():
    vocab = Vocabulary.build(CORPUS)
    counts = _python_counts(CORPUS)
    del counts[UNK]
    expected = sorted(counts, key=lambda w: (-counts[w], w))
    assert vocab.tokens == [PAD, UNK] + expected
    assert vocab.tokens[2] == "the" and vocab.counts["the"] == 5
    assert len(vocab) == len(expected) + 2
    assert vocab.lookup("cat") == vocab.tokens.index("cat")
    assert vocab.lookup(["never-seen", UNK, PAD]) == [1, 1, 0]
    assert vocab.tokens_for([0, 1, 2, 10_000]) == [PAD, UNK, "the", UNK]
    assert vocab.tokens_for(np.array([[2, 3]])) == [["the", expected[1]]]


def test_vocabulary_max_size_and_min_count():
    counts = _python_counts(CORPUS)
    capped = Vocabulary.build(CORPUS, max_size=5)
    assert len(capped) == 5 and capped.tokens[:2] == [PAD, UNK]
    assert capped.tokens[2:] == Vocabulary.build(CORPUS).tokens[2:5]
    frequent = Vocabulary.build(CORPUS, min_count=2)
    assert set(frequent.tokens[2:]) == {w for w, c in counts.items() if c >= 2 and w != UNK}


def test_vocabulary_build_from_dataset_and_token_lists_agree():
    from_lines = Vocabulary.build(CORPUS)
    from_lists = Vocabulary.build([line.split() for line in CORPUS])
    dataset = tf.data.Dataset.from_tensor_slices(CORPUS).map(tf.strings.split)  # ragged elements
    from_dataset = Vocabulary.build(dataset)
    assert from_lines == from_lists == from_dataset


def test_vocabulary_save_load_round_trip(tmp_path):
    vocab = Vocabulary.build(CORPUS + ["Straße naïve 東京"])
    path = vocab.save(tmp_path / "tok")
    assert path == str(tmp_path / "tok" / "vocab.txt")
    lines = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert lines[:-1] == vocab.tokens and lines[-1] == ""
    settings = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())
    assert settings["vocabulary_size"] == len(vocab) and settings["splitter"] == "whitespace"
    assert Vocabulary.load(tmp_path / "tok") == vocab
    assert Vocabulary.load(path) == vocab
    assert "東京" in Vocabulary.load(path)


# ---------------------------------------------------------------------------------- splitting
def test_whitespace_splitting_matches_python_split():
    words = split_words(tf.constant(MESSY)).to_list()
    assert [[w.decode() for w in row] for row in words] == [s.split() for s in MESSY]


def test_whitespace_splitting_matches_python_split_on_random_text():
    # Python's str.split() also splits on U+001C..U+001F, which are not Unicode White_Space.
    alphabet = list("ab é東.'") + ["\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\u00a0",
                                    "\u1680", "\u2003", "\u2028", "\u2029", "\u202f", "\u205f",
                                    "\u3000", "\u200b", "\ufeff", " ", " "]
    rng = np.random.default_rng(0)
    for _ in range(50):
        batch = ["".join(rng.choice(alphabet, size=rng.integers(0, 15)))
                 for _ in range(rng.integers(0, 6))]
        words = split_words(tf.constant(batch, tf.string)).to_list()
        assert [[w.decode() for w in row] for row in words] == [s.split() for s in batch]


@pytest.mark.parametrize("splitter", ["whitespace", "unicode_script"])
@pytest.mark.parametrize("batch", [[], [""], ["", "  \t "]])
def test_batches_without_any_word(splitter, batch):
    # tf-text's whitespace kernel crashes the process on a batch without a word; the tokenizer
    # must not (a serving request of blank strings is valid).
    words = split_words(tf.constant(batch, tf.string), splitter).to_list()
    assert words == [[] for _ in batch]
    tokenizer = Tokenizer.build(CORPUS * 3, splitter=splitter, subword=True, max_size=40)
    ids = tokenizer.encode(tf.constant(batch, tf.string), max_length=3).numpy()
    assert ids.shape == (len(batch), 3) and not ids.any()


def test_whitespace_splitting_matches_tf_text_on_ascii():
    text = tf.constant(["a  b\tc", " lead and trail ", "", "one"])
    expected = tf_text.WhitespaceTokenizer().tokenize(text).to_list()
    assert split_words(text).to_list() == expected


def test_unicode_script_splitting_and_lowercase_match_tf_text():
    text = ["Don't STOP, 累計7239人!", "ÉCOLE Straße ÄÖÜ-42"]
    ours = split_words(tf.constant(text), "unicode_script", lowercase=True).to_list()
    reference = tf_text.UnicodeScriptTokenizer().tokenize([t.lower() for t in text]).to_list()
    assert ours == reference
    assert ours[0][:4] == [b"don", b"'", b"t", b"stop"]


# ---------------------------------------------------------------------------------- tokenizer
def test_encode_matches_vocabulary_lookup_and_pads():
    tokenizer = Tokenizer.build(CORPUS)
    text = ["the cat ate a zebra", "dog", ""]
    expected = [tokenizer.vocabulary.lookup(s.split()) for s in text]
    assert tokenizer.encode(text).to_list() == expected
    assert tokenizer.encode(text).dtype == tf.int32
    padded = tokenizer.encode(text, max_length=3).numpy()
    assert padded.dtype == np.int32 and padded.shape == (3, 3)
    np.testing.assert_array_equal(padded, [expected[0][:3], expected[1] + [0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(tokenizer.encode("dog cat"), tokenizer.vocabulary.lookup(
        ["dog", "cat"]))
    truncating = Tokenizer(tokenizer.vocabulary, max_length=2)
    np.testing.assert_array_equal(truncating.encode(text), padded[:, :2])
    np.testing.assert_array_equal(truncating.encode(text, max_length=3), padded)


def test_tokenize_decode_round_trip_word_level():
    tokenizer = Tokenizer.build(CORPUS)
    text = ["the  cat\tsat on the mat", "a zebra ran"]
    assert tokenizer.tokenize(text).to_list() == [[w.encode() for w in s.split()] for s in text]
    decoded = tokenizer.decode(tokenizer.encode(text)).numpy().tolist()
    assert decoded == [b"the cat sat on the mat", b"a <unk> ran"]
    dense = tokenizer.decode(tokenizer.encode(text, max_length=8)).numpy().tolist()
    assert dense == decoded
    assert tokenizer.decode(tokenizer.encode("cat sat")).numpy() == b"cat sat"


def test_ids_to_tokens_dense_and_ragged():
    tokenizer = Tokenizer.build(CORPUS)
    tokens = tokenizer.vocabulary.tokens
    dense = tokenizer.ids_to_tokens([[2, 3], [0, 999]]).numpy().tolist()
    assert dense == [[tokens[2].encode(), tokens[3].encode()], [PAD.encode(), UNK.encode()]]
    ragged = tokenizer.ids_to_tokens(tf.ragged.constant([[4], [2, -1]])).to_list()
    assert ragged == [[tokens[4].encode()], [tokens[2].encode(), UNK.encode()]]


def test_subword_round_trip_and_matches_tf_text_wordpiece(tmp_path):
    corpus = ["the unbelievable players played and replayed the playful plays"] * 3 + [
        "believers believe unbelievably"] * 2
    tokenizer = Tokenizer.build(corpus, max_size=60, subword=True)
    vocab = tokenizer.vocabulary
    assert len(vocab) <= 60 and vocab.tokens[:2] == [PAD, UNK]
    assert any(t.startswith("##") for t in vocab.tokens)
    text = ["the players replays", "unbelievable believer"]  # unseen words: split
    pieces = tokenizer.tokenize(text).to_list()
    glued = [" ".join(p.decode() for p in row).replace(" ##", "") for row in pieces]
    assert glued == text
    assert any(len(row) > len(s.split()) for row, s in zip(pieces, text))  # words were split
    ids = tokenizer.encode(text)
    assert ids.to_list() == [vocab.lookup([p.decode() for p in row]) for row in pieces]
    assert tokenizer.decode(ids).numpy().tolist() == [t.encode() for t in text]
    # An independent WordPiece over the saved vocab.txt (file-initialised table) agrees.
    reference = tf_text.WordpieceTokenizer(vocab.save(tmp_path), unknown_token=UNK,
                                           token_out_type=tf.int64)
    words = tf.strings.split(tf.constant(text + ["zzz the"]))
    expected = reference.tokenize(words).merge_dims(1, 2).to_list()
    assert tokenizer.encode(text + ["zzz the"]).to_list() == expected
    assert tokenizer.encode("zzz").numpy().tolist() == [1]  # unknown characters -> <unk>


def test_subword_long_words_and_min_count():
    corpus = ["aaaa bb bb ab"] * 3 + ["rare"]
    tokenizer = Tokenizer.build(corpus, max_size=30, subword=True, max_bytes_per_word=3)
    assert "r" in tokenizer.vocabulary and "a" in tokenizer.vocabulary  # "rare" taught "r"
    tokenizer = Tokenizer.build(corpus, max_size=30, subword=True, min_count=2,
                                max_bytes_per_word=3)
    assert "r" not in tokenizer.vocabulary  # words seen once taught no piece
    bb = tokenizer.encode("bb").numpy().tolist()
    assert 1 not in bb
    # A word of more than max_bytes_per_word bytes is <unk>, even if spelled with known pieces.
    assert tokenizer.encode("aaaa bb").numpy().tolist() == [1] + bb
    assert Tokenizer(tokenizer.vocabulary, subword=True).encode("aaaa").numpy().tolist() != [1]


def test_build_batch_size_does_not_change_the_vocabulary():
    dataset = tf.data.Dataset.from_tensor_slices(CORPUS)
    assert Tokenizer.build(dataset, batch_size=2).vocabulary == Tokenizer.build(
        dataset).vocabulary == Vocabulary.build(CORPUS)


def test_tokenizer_save_load_round_trip(tmp_path):
    tokenizer = Tokenizer.build(CORPUS + ["Don't SHOUT!"], splitter="unicode_script",
                                lowercase=True, max_length=6)
    tokenizer.save(tmp_path)
    loaded = Tokenizer.load(tmp_path)
    assert loaded.get_config() == tokenizer.get_config()
    assert loaded.vocabulary == tokenizer.vocabulary
    text = ["DON'T shout at the cat!", "a dog"]
    np.testing.assert_array_equal(loaded.encode(text), tokenizer.encode(text))
    assert loaded.encode(text).shape == (2, 6)
    assert check_vocabulary_matches(tmp_path, loaded.vocabulary_size) == len(tokenizer)


def test_undecodable_bytes_are_replaced_not_fatal():
    tokenizer = Tokenizer.build(CORPUS)
    tokens = tokenizer.tokenize(tf.constant([b"caf\xe9 cat", b"\xff\xfe"])).to_list()
    assert tokens == [["caf\ufffd".encode(), b"cat"], ["\ufffd\ufffd".encode()]]
    assert tokenizer.encode(tf.constant([b"caf\xe9 cat"])).to_list() == [
        [1, tokenizer.vocabulary.lookup("cat")]]


def test_tokenizer_in_tf_data_and_tf_function():
    tokenizer = Tokenizer.build(CORPUS)
    text = ["the cat", "a dog ran fast"]
    dataset = tf.data.Dataset.from_tensor_slices(text).batch(2).map(
        lambda s: tokenizer.encode(s, max_length=4))
    graph_encode = tf.function(lambda s: tokenizer.encode(s, max_length=4))
    eager = tokenizer.encode(text, max_length=4).numpy()
    np.testing.assert_array_equal(next(iter(dataset)).numpy(), eager)
    np.testing.assert_array_equal(graph_encode(tf.constant(text)).numpy(), eager)


@pytest.mark.parametrize("splitter,subword", [("whitespace", False), ("unicode_script", True)])
def test_saved_model_serves_raw_strings_with_serving_ops_only(tmp_path, splitter, subword):
    tokenizer = Tokenizer.build(CORPUS * 4, splitter=splitter, subword=subword, lowercase=True,
                                max_size=40)

    class Serve(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            ids = self.tokenizer.encode(text, max_length=7)
            return {"ids": ids, "tokens": self.tokenizer.ids_to_tokens(ids),
                    "text": self.tokenizer.decode(ids)}

    module = Serve(tokenizer)
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    ops = _saved_model_ops(tmp_path)
    non_core = {op for op in ops if not hasattr(tf.raw_ops, op)}
    splitter_op = ("WhitespaceTokenizeWithOffsets" if splitter == "whitespace"
                   else "UnicodeScriptTokenizeWithOffsets")
    assert non_core == {splitter_op} | ({"WordpieceTokenizeWithOffsets"} if subword else set())
    assert non_core <= SERVING_OPS
    assert not {"NormalizeUTF8", "CaseFoldUTF8"} & ops
    served = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    text = tf.constant(["The CAT sat on the MAT , and ran", "zebra", ""])
    out = served(text)
    np.testing.assert_array_equal(out["ids"].numpy(), tokenizer.encode(text, max_length=7))
    np.testing.assert_array_equal(out["text"].numpy(),
                                  tokenizer.decode(tokenizer.encode(text, max_length=7)))


# ---------------------------------------------------------------------------------- bad inputs
def test_load_missing_vocabulary_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No vocabulary at .*nowhere.*Tokenizer\.save"):
        Tokenizer.load(tmp_path / "nowhere")


@pytest.mark.parametrize("content,message", [
    ("the\ncat\n", r"must start with \['<pad>', '<unk>'\]"),
    ("<pad>\n<unk>\ncat\ncat\n", r"'cat' appears twice"),
    ("<pad>\n<unk>\n\ncat\n", r"unit 2 is empty"),
])
def test_load_malformed_vocabulary(tmp_path, content, message):
    (tmp_path / "vocab.txt").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        Vocabulary.load(tmp_path)


def test_load_vocabulary_and_settings_that_disagree(tmp_path):
    Tokenizer.build(CORPUS).save(tmp_path)
    with open(tmp_path / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("extra\n")
    with pytest.raises(ValueError, match=r"holds \d+ units but .*tokenizer.json says"):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Tokenizer.load(tmp_path)


def test_check_vocabulary_matches_model():
    from glomo_tf import GlomoPretrainer
    tokenizer = Tokenizer.build(CORPUS)
    model = GlomoPretrainer.from_sizes(vocabulary_size=len(tokenizer), hidden_dim=8, num_layers=1,
                                       num_heads=2, conv_layers=1)
    assert check_vocabulary_matches(tokenizer, model) == len(tokenizer)
    assert check_vocabulary_matches(tokenizer.vocabulary, model.graph_predictor) == len(tokenizer)
    other = GlomoPretrainer.from_sizes(vocabulary_size=len(tokenizer) + 3, hidden_dim=8,
                                       num_layers=1, num_heads=2, conv_layers=1)
    with pytest.raises(ValueError, match=rf"has {len(tokenizer)} ids but the model .* built with "
                                         rf"vocabulary_size={len(tokenizer) + 3}"):
        check_vocabulary_matches(tokenizer, other)
    with pytest.raises(TypeError, match="Cannot tell the vocabulary size"):
        check_vocabulary_matches(tokenizer, object())


def test_bad_arguments_are_named():
    vocab = Vocabulary.build(CORPUS)
    with pytest.raises(ValueError, match="splitter must be one of"):
        Tokenizer(vocab, splitter="bpe")
    with pytest.raises(ValueError, match="max_length must be a positive int"):
        Tokenizer(vocab, max_length=0)
    with pytest.raises(TypeError, match="takes strings"):
        Tokenizer(vocab).encode([1, 2])
    with pytest.raises(ValueError, match="reshape to"):
        Tokenizer(vocab).encode([["a"], ["b"]])
    with pytest.raises(TypeError, match="got one string"):
        Tokenizer.build("the cat sat")
    with pytest.raises(ValueError, match="max_size=2 leaves no room"):
        Vocabulary.build(CORPUS, max_size=2)
    with pytest.raises(ValueError, match="no unit seen at least min_count=99"):
        Vocabulary.build(CORPUS, min_count=99)
    with pytest.raises(ValueError, match="no word seen at least min_count=1"):
        Tokenizer.build(["", "   "], subword=True, max_size=10)
