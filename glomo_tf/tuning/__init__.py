"""KerasTuner support: search GLoMo pretraining settings with an objective comparable across ``D``.

Needs the ``tune`` extra (``pip install -e ".[tune]"``, keras-tuner). See
:mod:`glomo_tf.tuning.hypermodel`, and :mod:`glomo_tf.experiments.search` for the search that
``glomo tune`` runs. The names below are loaded on first use, so ``glomo`` and its other commands work without
keras-tuner installed.
"""

import importlib

__all__ = ["OBJECTIVE", "OBJECTIVE_NAME", "TUNERS", "GlomoHyperModel", "first_unit_loss",
           "make_tuner", "results_table", "trial_rows"]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module("glomo_tf.tuning.hypermodel"), name)
    raise AttributeError(f"module 'glomo_tf.tuning' has no attribute {name!r}")
