"""glomo_tf.hparams is the one source of every default and choice list: the constructors, the
command line and the tuner agree with it."""

import inspect

from glomo_tf import FeaturePredictor, GlomoPretrainer, GraphPredictor, hparams
from glomo_tf.layers import graph_predictor


def defaults(callable_):
    return {name: p.default for name, p in inspect.signature(callable_).parameters.items()
            if p.default is not inspect.Parameter.empty}


def test_layer_and_model_signatures_hold_the_hparams_defaults():
    """The flat settings are the layer's arguments, ``graph_predictor``'s (coupling and
    composition) and the sub-objects' (the live-row hinge, the threshold initializer)."""
    from glomo_tf.layers import LiveRowHinge, graph_predictor

    predictor = defaults(GraphPredictor.__init__)
    flat = {k: v for k, v in hparams.GRAPH_PREDICTOR.items() if k != "hidden_dim"}
    layer_args = {k: v for k, v in flat.items() if k in predictor}
    assert {k: predictor[k] for k in layer_args} == layer_args
    assert "hidden_dim" not in predictor  # the one size a user must choose
    factory = defaults(graph_predictor)
    assert factory["coupled"] == flat["coupled"] and factory["composition"] == flat["composition"]
    assert predictor["threshold_initializer"] == flat["initial_threshold"]
    assert predictor["live_row_regularizer"] is None and flat["live_row_weight"] == 0.0
    assert defaults(LiveRowHinge.__init__)["margin"] == flat["live_row_margin"]
    assert set(flat) - set(layer_args) == {"coupled", "composition", "initial_threshold",
                                          "live_row_weight", "live_row_margin"}
    assert defaults(GlomoPretrainer.__init__)["composition"] == flat["composition"]
    assert defaults(GlomoPretrainer.from_sizes)["hidden_dim"] == hparams.GRAPH_PREDICTOR[
        "hidden_dim"]
    pretrainer = defaults(GlomoPretrainer.__init__)
    assert {k: pretrainer[k] for k in hparams.PRETRAINER} == hparams.PRETRAINER
    assert defaults(FeaturePredictor.__init__)["composition"] == hparams.GRAPH_PREDICTOR[
        "composition"]


def _parsers():
    """``{command: parser}`` of glomo pretrain and glomo transfer."""
    import argparse

    from glomo_tf.cli import pretrain, transfer

    subparsers = argparse.ArgumentParser().add_subparsers()
    pretrain.register(subparsers)
    transfer.register(subparsers)
    return subparsers.choices


def test_the_pretrain_command_differs_from_the_layer_only_where_hparams_says():
    parser = _parsers()["pretrain"]  # the flags' defaults, derived from PretrainingConfig
    for name, value in hparams.PRETRAIN_COMMAND.items():
        if name != "initial_threshold":  # not a flag
            assert parser.get_default(name) == value, name
    differs = {k for k in hparams.PRETRAIN_COMMAND
               if hparams.PRETRAIN_COMMAND[k] != {**hparams.GRAPH_PREDICTOR,
                                                   **hparams.PRETRAINER}[k]}
    assert differs == {"live_row_weight"}


def test_the_command_line_offers_the_hparams_choices():
    parsers = _parsers()
    choices = {action.dest: action.choices for parser in parsers.values()
               for action in parser._actions if action.choices}
    assert tuple(choices["threshold"]) == hparams.THRESHOLDS
    assert tuple(choices["normalization"]) == hparams.NORMALIZATIONS
    assert tuple(choices["composition"]) == hparams.COMPOSITIONS
    assert tuple(choices["objective"]) == hparams.OBJECTIVES
    assert tuple(choices["strategy"]) == hparams.STRATEGIES
    assert parsers["transfer"].get_default("variants") == list(hparams.DEFAULT_VARIANTS)


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
            graph_predictor(10, 8, num_heads=2, **{name: "nope"})
        for choice in choices:
            graph_predictor(10, 8, num_heads=2, **{name: choice})
    with pytest.raises(ValueError, match=r"--hidden-dim \(10\) must be divisible by --heads"):
        hparams.check_heads_divide(10, 3, ("--hidden-dim", "--heads"))


def test_the_argument_checks_name_the_argument_and_return_the_values():
    """``check_positive`` / ``check_rates`` / ``check_choice``: the values back in the order given
    (as ints / floats), the first bad one named in the error; their docstring examples run."""
    import doctest

    import numpy as np
    import pytest

    assert hparams.check_positive(units=np.int64(3), num_slots=12) == (3, 12)
    assert all(type(v) is int for v in hparams.check_positive(a=np.int64(3), b=1))
    for bad in (0, -2, 1.5, True, "4", None):
        with pytest.raises(ValueError, match=r"^num_slots must be a positive integer, got "):
            hparams.check_positive(units=4, num_slots=bad)
    assert hparams.check_rates(a=0, b=0.5) == (0.0, 0.5)
    for bad in (-0.1, 1.0, 2):
        with pytest.raises(ValueError, match=r"^b must be in \[0, 1\), got "):
            hparams.check_rates(a=0.1, b=bad)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(hparams):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 4 and result.failed == 0
