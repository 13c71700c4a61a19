"""glomo probe: SentEval's protocol on planted features (a linearly separable task near 100%, the
same task with shuffled labels at chance), the dev-split protocol, the encoders (a trained run,
bag of words and random baselines, GLoMo features) against NumPy, nearest neighbours, the real
MR files with a tiny encoder, and the command line."""

import json
import os
import shutil

import numpy as np
import pytest

from glomo_tf import GraphPredictor, SentencePretrainer
from glomo_tf.experiments import probe
from glomo_tf.data import sentences
from glomo_tf.data.vocabulary import Tokenizer
from _paths import REPO

SHARED = os.path.join(REPO, os.pardir,
                      "shared", "data")
WORDS = ["good", "great", "fine", "bad", "awful", "poor", "the", "film", "plot", "was", "a",
         "story", "actors", "and"]


def planted(n=300, dim=12, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    w = rng.normal(size=dim)
    return x, (x @ w > 0).astype(int)


def test_separable_task_reaches_about_100_percent_and_shuffled_labels_chance():
    x, y = planted()
    result = probe.probe_kfold(x, y, folds=5, inner_folds=3, seed=0)
    assert result["accuracy"] > 0.95
    assert len(result["fold_accuracies"]) == 5 and len(result["c"]) == 5
    assert set(result["c"]) <= set(probe.hparams.PROBE_C_VALUES)
    shuffled = np.random.default_rng(1).permutation(y)
    chance = probe.probe_kfold(x, shuffled, folds=5, inner_folds=3, seed=0)
    assert abs(chance["accuracy"] - 0.5) < 0.1


def test_the_l2_strength_is_chosen_on_validation_folds():
    """With few examples and many noise dimensions, strong L2 (small C) validates best."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 400))
    y = (x[:, 0] > 0).astype(int)
    x[:, 0] *= 0.3
    c, scores = probe.choose_c(x, y, (0.001, 1000.0), inner_folds=3, seed=0)
    assert scores[0] != scores[1] and c == (0.001, 1000.0)[int(np.argmax(scores))]


def test_max_iter_reaches_every_fit():
    """A planted label on a feature 1,000 times smaller than the noise: lbfgs needs tens of
    iterations to find it. Stopped after 2 it is at chance in both protocols, given 1,000 it
    finds it; the setting reaches the fits from ``glomo probe --max-iter``."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 20))
    y = (x[:, 0] > 0).astype(int)
    x[:, 0] *= 0.01
    x[:, 1:] *= 10
    splits = (x[:200], y[:200]), (x[200:300], y[200:300]), (x[300:], y[300:])
    scores = {}
    for max_iter in (2, 1000):
        kfold = probe.probe_kfold(x, y, folds=4, inner_folds=2, c_values=(1e4,), seed=0,
                                  max_iter=max_iter)
        split = probe.probe_split(*splits, c_values=(1e4,), max_iter=max_iter)
        scores[max_iter] = (kfold["accuracy"], split["accuracy"])
    assert max(scores[2]) < 0.6 and min(scores[1000]) > 0.9
    from glomo_tf.cli import build_parser
    args = build_parser().parse_args(["probe", "--run", "r", "--max-iter", "1000"])
    assert args.max_iter == 1000
    with pytest.raises(ValueError, match="`max_iter` must be at least 1"):
        probe.ProbeConfig(runs=[], max_iter=0, tasks=["mr"]).validated()


def test_dev_split_protocol():
    x, y = planted(400)
    result = probe.probe_split((x[:200], y[:200]), (x[200:300], y[200:300]),
                               (x[300:], y[300:]))
    assert result["accuracy"] > 0.9 and result["dev_accuracy"] > 0.9
    noise = np.random.default_rng(3).normal(size=x.shape)
    result = probe.probe_split((noise[:200], y[:200]), (noise[200:300], y[200:300]),
                               (noise[300:], y[300:]))
    assert abs(result["accuracy"] - 0.5) < 0.15


def make_run(tmp_path, name="run", units=6):
    """A tiny SentencePretrainer run directory (model file and tokenizer)."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, 6)) for _ in range(120)]
    tokenizer = sentences.with_mask_unit(Tokenizer.build(lines))
    model = SentencePretrainer(tokenizer.vocabulary_size, sentences.mask_id(tokenizer),
                               embedding_dim=8, units=units, seed=0)
    model.build()
    rng = np.random.default_rng(1)  # word vectors of unit scale, as a training gives them
    for encoder in (model.source_encoder, model.target_encoder):
        encoder.embeddings.assign(rng.normal(0, 1, encoder.embeddings.shape).astype("float32"))
    run_dir = tmp_path / name
    run_dir.mkdir()
    model.save(str(run_dir / probe.MODEL_FILE))
    tokenizer.save(str(run_dir / probe.TOKENIZER_DIR))
    return str(run_dir), model, tokenizer


def write_task(path, n=300, shuffle=False, seed=0):
    """A TSV task: label 1 iff the sentence holds a positive word. In the bag of words' 16
    dimensions the 8 neutral words span 8: the rest separates the 6 sentiment words."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    rows = []
    for label in labels:
        words = list(rng.choice(WORDS[6:], 5))
        words.insert(int(rng.integers(0, 5)), rng.choice(WORDS[:3] if label else WORDS[3:6]))
        rows.append(" ".join(words))
    if shuffle:
        labels = rng.permutation(labels)
    with open(path, "w") as f:
        f.write("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(rows, labels)))
    return str(path)


def test_encoders_against_numpy(tmp_path):
    run_dir, model, tokenizer = make_run(tmp_path)
    encoders = probe.load_encoders([run_dir], ["bow", "random"])
    assert [e.name for e in encoders] == ["run", "bow", "random"]
    texts = ["the film was good", "awful plot", "a story and the actors were fine"]
    ids = tokenizer.encode(texts).to_list()
    trained, bow, random_encoder = (e.encode(texts) for e in encoders)
    for i, row in enumerate(ids):
        padded = np.array([row + [0] * 3], "int32")
        np.testing.assert_allclose(trained[i], model.encode(padded).numpy()[0], atol=1e-5)
        table = np.concatenate([model.source_encoder.embeddings.numpy(),
                                model.target_encoder.embeddings.numpy()], axis=1)
        np.testing.assert_allclose(bow[i], table[row].mean(0), atol=1e-6)
    assert random_encoder.shape == trained.shape
    assert np.abs(random_encoder - trained).max() > 1e-3  # other weights than the trained ones
    with pytest.raises(ValueError, match="`runs`"):
        probe.load_encoders([], ["bow"])
    with pytest.raises(ValueError, match="sentence-pretrain"):
        probe.load_encoders([str(tmp_path)])


def test_pooled_encoders_beside_the_final_states(tmp_path):
    run_dir, model, tokenizer = make_run(tmp_path)
    encoders = probe.load_encoders([run_dir], ["bow", "random"], poolings=("final", "max"))
    assert [e.name for e in encoders] == ["run", "run:max", "bow", "random", "random:max"]
    texts = ["the film was good", "awful plot"]
    final, pooled = encoders[0].encode(texts), encoders[1].encode(texts)
    for i, row in enumerate(tokenizer.encode(texts).to_list()):
        ids = np.array([row], "int32")
        source = model.source_encoder.__class__.from_config(
            {**model.source_encoder.get_config(), "return_sequences": True})
        source(ids)
        source.set_weights(model.source_encoder.get_weights())
        states = np.concatenate([source(ids)["states"].numpy()[0],
                                 model.target_encoder(ids)["states"].numpy()[0]], axis=1)
        np.testing.assert_allclose(pooled[i], states.max(0), atol=1e-5)
        np.testing.assert_allclose(final[i], model.encode(ids).numpy()[0], atol=1e-5)
    assert np.abs(pooled - final).max() > 1e-3
    random_final, random_pooled = encoders[3].encode(texts), encoders[4].encode(texts)
    assert np.abs(random_pooled - random_final).max() > 1e-3
    with pytest.raises(ValueError, match="unknown pooling.*last.*final max mean"):
        probe.load_encoders([run_dir], poolings=("last",))


def test_glomo_features_against_numpy(tmp_path):
    tokenizer = Tokenizer.build([" ".join(WORDS)])
    predictor = GraphPredictor(tokenizer.vocabulary_size, hidden_dim=4, num_layers=2,
                               num_heads=2, conv_layers=1)
    predictor.build((None, None))
    encoder = probe.GlomoFeatures(predictor, tokenizer)
    texts = ["the film was good", "bad"]
    got = encoder.encode(texts)
    ids = np.array([r + [0] * (4 - len(r)) for r in tokenizer.encode(texts).to_list()], "int32")
    out = predictor(ids)
    graphs = out["graphs"].numpy()
    emb = predictor.embed(ids).numpy()
    for b, n in enumerate([4, 1]):
        rows = []
        for t in range(n):
            parts = [emb[b, t]]
            for z in range(2):
                m = graphs[b, z].mean(axis=(0, 1))  # [T, T] averaged over layers and heads
                parts.append(sum(m[t, s] * emb[b, s] for s in range(4)))
            rows.append(np.concatenate(parts))
        np.testing.assert_allclose(got[b], np.mean(rows, axis=0), atol=1e-5)


def test_nearest_sentences_by_cosine():
    class Letters:  # a NumPy encoder: letter counts
        def encode(self, texts):
            return np.array([[t.count(ch) for ch in "abcdefgh"] for t in texts], float)

    pool = ["aaa", "abc", "hhh", "aab", "abc"]
    found = probe.nearest_sentences(Letters(), ["aaa b", "hh"], pool, k=2)
    assert [s for s, _ in found[0][1]] == ["aab", "aaa"]
    assert found[1][1][0] == ("hhh", pytest.approx(1.0))
    assert found[0][1][0][1] >= found[0][1][1][1]
    assert [s for s, _ in probe.nearest_sentences(Letters(), ["abc"], pool, 3)[0][1]] == \
        ["aab", "aaa", "hhh"]  # the query itself left out, the duplicate counted once


def test_a_user_file_planted_and_shuffled(tmp_path):
    run_dir, _, _ = make_run(tmp_path)
    good = write_task(tmp_path / "planted.tsv")
    bad = write_task(tmp_path / "shuffled.tsv", shuffle=True)
    summary = probe.run_probe(probe.ProbeConfig(
        runs=[run_dir], baselines=["bow"], files=[good, bad], folds=4, inner_folds=3,
        c_values=(1.0, 8.0), output_dir=str(tmp_path / "out")), log=lambda *a: None)
    bow = summary["results"]["bow"]
    assert bow["planted"]["accuracy"] > 0.95  # about 100%
    assert abs(bow["shuffled"]["accuracy"] - 0.5) < 0.15
    saved = json.load(open(tmp_path / "out" / probe.RESULTS_FILE))
    assert saved["results"]["bow"]["planted"]["accuracy"] == bow["planted"]["accuracy"]
    table = open(tmp_path / "out" / probe.TABLE_FILE).read()
    assert "| bow |" in table and "planted" in table


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "mr")), reason="no shared MR copy")
def test_real_mr_files_with_a_tiny_encoder(tmp_path):
    run_dir, _, _ = make_run(tmp_path)
    summary = probe.run_probe(probe.ProbeConfig(
        runs=[run_dir], tasks=["mr", "sst2"], max_examples=300, folds=3, inner_folds=2,
        c_values=(0.5, 2.0)), log=lambda *a: None)
    mr = summary["results"]["run"]["mr"]
    assert len(mr["fold_accuracies"]) == 3 and 0.3 < mr["accuracy"] < 0.8  # words unknown
    assert summary["tasks"] == {"mr": "kfold", "sst2": "split"}
    assert 0.3 < summary["results"]["run"]["sst2"]["accuracy"] < 0.8


def test_command_line(tmp_path, capsys):
    from glomo_tf import cli

    run_dir, _, _ = make_run(tmp_path)
    task = write_task(tmp_path / "planted.tsv")
    pool = tmp_path / "pool.txt"
    pool.write_text("the film was good\nthe plot was awful\na great story\n")
    code = cli.main(["probe", "--run", run_dir, "--baselines", "bow", "--file", task,
                     "--folds", "3", "--inner-folds", "2", "--c-values", "1", "--max-examples",
                     "60", "--neighbours", "a good film",
                     "--pool", str(pool), "--k", "2", "--output-dir", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 0
    assert "| bow |" in out and "Query: a good film" in out and "N2 (" in out
    assert json.load(open(tmp_path / "o" / "probe.json"))["neighbours"][0]["query"] == \
        "a good film"
    for argv, message in [
            (["probe", "--run", run_dir, "--neighbours", "x"], "--pool"),
            (["probe", "--file", task], "nothing to probe"),
            (["probe", "--run", str(tmp_path / "nope"), "--file", task], "not a run directory"),
            (["probe", "--run", run_dir, "--file", task, "--folds", "1"], "--folds")]:
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
    damaged = tmp_path / "damaged"
    shutil.copytree(run_dir, damaged)
    (damaged / "sentence_pretrainer.keras").write_bytes(b"not a zip file")
    assert cli.main(["probe", "--run", str(damaged), "--file", task]) == 2
    err = capsys.readouterr().err
    assert "Could not load" in err and "sentence-pretrain" in err and len(err.splitlines()) == 1


def test_glomo_preset_features_equal_the_predictors(tmp_path, capsys):
    """--glomo-preset: the preset's predictor and tokenizer give the features of the originals;
    an unknown preset is one line that lists the built-in ones."""
    from glomo_tf import cli
    from glomo_tf.presets import save_preset

    tokenizer = Tokenizer.build([" ".join(WORDS)])
    predictor = GraphPredictor(tokenizer.vocabulary_size, hidden_dim=4, num_layers=2,
                               num_heads=2, conv_layers=1)
    predictor.build((None, None))
    preset = save_preset(predictor, tokenizer, tmp_path / "preset")
    (encoder,) = probe.load_encoders(glomo_presets=[preset])
    texts = ["the film was good", "bad"]
    np.testing.assert_allclose(encoder.encode(texts),
                               probe.GlomoFeatures(predictor, tokenizer).encode(texts), atol=1e-6)
    task = write_task(tmp_path / "planted.tsv")
    assert cli.main(["probe", "--glomo-preset", preset, "--file", task, "--folds", "3",
                     "--inner-folds", "2", "--c-values", "1", "--max-examples", "60"]) == 0
    assert "| glomo:preset |" in capsys.readouterr().out
    assert cli.main(["probe", "--glomo-preset", "nope", "--file", task]) == 2
    err = capsys.readouterr().err
    assert "no preset 'nope'" in err and "glomo_books_en" in err and len(err.splitlines()) == 1
