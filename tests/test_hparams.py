"""glomo_tf.hparams is the one source of every default and choice list: the constructors, the
command line and the tuner agree with it."""

import inspect

from glomo_tf import FeaturePredictor, GlomoPretrainer, GraphPredictor, hparams


def defaults(callable_):
    return {name: p.default for name, p in inspect.signature(callable_).parameters.items()
            if p.default is not inspect.Parameter.empty}


def test_layer_and_model_signatures_hold_the_hparams_defaults():
    predictor = defaults(GraphPredictor.__init__)
    expected = {k: v for k, v in hparams.GRAPH_PREDICTOR.items() if k != "hidden_dim"}
    assert {k: predictor[k] for k in expected} == expected
    assert "hidden_dim" not in predictor  # the one size a user must choose
    assert defaults(GlomoPretrainer.from_sizes)["hidden_dim"] == hparams.GRAPH_PREDICTOR[
        "hidden_dim"]
    pretrainer = defaults(GlomoPretrainer.__init__)
    assert {k: pretrainer[k] for k in hparams.PRETRAINER} == hparams.PRETRAINER
    assert defaults(FeaturePredictor.__init__)["composition"] == hparams.GRAPH_PREDICTOR[
        "composition"]


def test_the_pretrain_command_differs_from_the_layer_only_where_hparams_says():
    from glomo_tf.cli.pretrain import D

    for name, value in hparams.PRETRAIN_COMMAND.items():
        if name != "initial_threshold":  # not a flag
            assert getattr(D, name) == value, name
    differs = {k for k in hparams.PRETRAIN_COMMAND
               if hparams.PRETRAIN_COMMAND[k] != {**hparams.GRAPH_PREDICTOR,
                                                   **hparams.PRETRAINER}[k]}
    assert differs == {"live_row_weight"}


def test_the_command_line_offers_the_hparams_choices():
    import argparse

    from glomo_tf.cli import pretrain, transfer

    subparsers = argparse.ArgumentParser().add_subparsers()
    pretrain.register(subparsers)
    transfer.register(subparsers)
    choices = {action.dest: action.choices for parser in subparsers.choices.values()
               for action in parser._actions if action.choices}
    assert tuple(choices["threshold"]) == hparams.THRESHOLDS
    assert tuple(choices["normalization"]) == hparams.NORMALIZATIONS
    assert tuple(choices["composition"]) == hparams.COMPOSITIONS
    assert tuple(choices["objective"]) == hparams.OBJECTIVES
    assert tuple(choices["strategy"]) == hparams.STRATEGIES
    assert transfer.D.variants == list(hparams.DEFAULT_VARIANTS)


def test_the_tuner_trains_what_glomo_pretrain_trains():
    from glomo_tf.tuning.hypermodel import DEFAULT_FIXED, TUNERS

    assert {k: hparams.PRETRAIN_COMMAND[k] for k in DEFAULT_FIXED} == DEFAULT_FIXED
    assert TUNERS == hparams.TUNERS


def test_bad_values_are_refused_with_the_choices():
    import pytest

    for name, choices in (("threshold", hparams.THRESHOLDS),
                          ("normalization", hparams.NORMALIZATIONS),
                          ("composition", hparams.COMPOSITIONS)):
        with pytest.raises(ValueError, match=name):
            GraphPredictor(10, 8, num_heads=2, **{name: "nope"})
        for choice in choices:
            GraphPredictor(10, 8, num_heads=2, **{name: choice})
    with pytest.raises(ValueError, match=r"--hidden-dim \(10\) must be divisible by --heads"):
        hparams.check_heads_divide(10, 3, ("--hidden-dim", "--heads"))
