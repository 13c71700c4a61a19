"""``glomo transfer --dataset squad`` end to end on a planted SQuAD file, resumed, and its usage
errors."""

import json

import numpy as np
import pytest

from _run_dirs import pretrained_run
from glomo_tf import cli

FILLER = "the a old city river film story was is and of it this that near long".split()
NAMES = "alice bruno chen dara emil farah gita hugo ines jonas kira lars".split()
TINY = ["--embedding-dim", "16", "--rnn-units", "8", "--num-mixtures", "1", "--dropout", "0.0",
        "--batch-size", "8", "--learning-rate", "0.01", "--verbose", "2"]


def planted_squad(path, articles=12, seed=0):
    """A SQuAD v1.1 file whose every answer is the name after "by" ("... made by NAME ...")."""
    rng = np.random.default_rng(seed)
    data = []
    for a in range(articles):
        paragraphs = []
        for p in range(3):
            words = list(rng.choice(FILLER, size=int(rng.integers(8, 16))))
            name = str(rng.choice(NAMES))
            at = int(rng.integers(0, len(words)))
            words[at:at] = ["made", "by", name]
            context = " ".join(words) + " ."
            start = context.index(f"made by {name}") + len("made by ")
            qas = [{"id": f"{a}-{p}-{i}", "question": question,
                    "answers": [{"text": name, "answer_start": start}]}
                   for i, question in enumerate(("who made it ?", "by whom was it made ?"))]
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"article {a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return [p["context"] for article in data for p in article["paragraphs"]]


@pytest.fixture(scope="module")
def reading_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("reading")
    contexts = planted_squad(root / "planted.json")
    run_dir = root / "run"
    pretrained_run(run_dir, contexts, seed=5, hidden_dim=8, num_layers=2, num_heads=2,
                   conv_layers=1)
    return root, run_dir


@pytest.mark.slow
def test_squad_end_to_end_learns_the_planted_answers_and_resumes(reading_task, capsys):
    root, run_dir = reading_task
    out = root / "out"
    argv = ["transfer", "--run", str(run_dir), "--dataset", "squad", "--file",
            str(root / "planted.json"), "--max-length", "40", "--variants", "baseline",
            "glomo_rnn", "--seeds", "0", "--epochs", "8", "--patience", "8",
            "--output-dir", str(out), *TINY]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert [(r["variant"], r["seed"]) for r in results["runs"]] == [("baseline", 0),
                                                                     ("glomo_rnn", 0)]
    for run in results["runs"]:
        # 8 test articles' questions or fewer: 72 training questions of 9 articles
        assert run["train_examples"] == 54 and run["test_examples"] == 12
        assert 0.0 <= run["exact_match"] <= run["f1"] <= 1.0
        assert [e["gold"] for e in run["examples"]][0][0] in NAMES
        rows = run["examples"][0]["graph_rows"]  # the predictor's sources of the answer's units
        assert rows and all(row["unit"] in run["examples"][0]["predicted"] for row in rows)
    baseline = results["runs"][0]
    assert baseline["exact_match"] >= 0.5  # the answer is the name after "by": learnable
    assert "development EM" in printed and "test EM" in printed
    assert "## squad: test exact match" in (out / "results.md").read_text()
    assert results["summary"]["metrics"]["f1"]["variants"]["baseline"]["seeds"] == 1
    # resumed with every run done: nothing trains again
    assert cli.main([*argv, "--resume"]) == 0
    assert "== squad" not in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["runs"] == results["runs"]
    # the passages' graphs cached: the online run's scores and epochs (float round-off apart)
    cached_out = root / "cached"
    cached_argv = [a for a in argv if a != "baseline"]
    cached_argv[cached_argv.index(str(out))] = str(cached_out)
    assert cli.main([*cached_argv, "--graph-cache", "--save-models"]) == 0
    assert "Graph cache: 36 passages" in capsys.readouterr().out
    cached_run, = json.loads((cached_out / "results.json").read_text())["runs"]
    online_run = results["runs"][1]
    for key in ("exact_match", "f1", "epochs_run"):
        assert cached_run[key] == pytest.approx(online_run[key], abs=1e-9), key
    # the saved reader computes its own graphs: two inputs, token ids only
    import keras

    saved = keras.saving.load_model(cached_out / "models" / "glomo_rnn-seed0.keras")
    assert [tuple(i.shape) for i in saved.inputs] == [(None, None), (None, None)]


@pytest.mark.parametrize("argv, fragment", [
    (["--variants", "cn3"], "is reading comprehension: its variants are"),
    (["--variants", "baseline", "--split", "kfold"], "runs --split seeded only"),
    (["--variants", "baseline", "--file", "MISSING"], "SQuAD file MISSING not found"),
    (["--variants", "baseline", "--file", "NOTJSON"], "is not JSON"),
    (["--variants", "baseline", "--file", "PLANTED", "--max-length", "2"],
     "No training answer lies inside --max-length 2 units"),
])
def test_squad_bad_inputs_exit_2_with_one_line(tmp_path, capsys, argv, fragment):
    (tmp_path / "notjson.json").write_text("{oops")
    planted_squad(tmp_path / "planted.json")
    argv = [a.replace("NOTJSON", str(tmp_path / "notjson.json")).replace(
        "PLANTED", str(tmp_path / "planted.json")) for a in argv]
    assert cli.main(["transfer", "--dataset", "squad", *argv,
                     "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1


def test_training_passages_hold_the_training_articles_only(reading_task, tmp_path):
    """examples/squad_passages.py writes the passages of the articles glomo transfer trains on:
    every training question's passage, no development or test passage."""
    import importlib.util

    from glomo_tf.experiments import reading
    from glomo_tf.data import squad

    root, _ = reading_task
    path = str(root / "planted.json")
    spec = importlib.util.spec_from_file_location("squad_passages",
                                                  "examples/squad_passages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--file", path, "--output", str(tmp_path / "p.txt")]) == 0
    written = (tmp_path / "p.txt").read_text().splitlines()
    train, development, test = reading.reading_splits(squad.load_squad(path), None)
    assert written == list(dict.fromkeys(q.context for q in train)) and len(written) == 27
    held_out = {q.context for q in development + test}
    assert held_out and not held_out & set(written)
    assert module.main(["--file", str(tmp_path / "p.txt"), "--output", str(tmp_path / "q")]) == 2


def test_a_test_file_is_the_test_split_and_the_training_file_splits_90_10(tmp_path):
    from glomo_tf.experiments import reading
    from glomo_tf.data import squad

    planted_squad(tmp_path / "train.json", articles=10, seed=1)
    planted_squad(tmp_path / "test.json", articles=2, seed=2)
    questions, test = squad.load_squad(str(tmp_path / "train.json")), squad.load_squad(
        str(tmp_path / "test.json"))
    train, development, tested = reading.reading_splits(questions, test)
    assert tested == test
    assert [len({q.article for q in part}) for part in (train, development)] == [9, 1]
    assert not {q.context for q in train} & {q.context for q in development}
