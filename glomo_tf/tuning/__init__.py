"""KerasTuner support: search GLoMo pretraining settings with an objective comparable across ``D``.

Needs the ``tune`` extra (``pip install -e ".[tune]"``, keras-tuner). See
:mod:`glomo_tf.tuning.hypermodel` and the ``glomo tune`` command (:mod:`glomo_tf.tuning.cli`).
"""

from glomo_tf.tuning.hypermodel import (OBJECTIVE, OBJECTIVE_NAME, TUNERS, GlomoHyperModel,
                                        first_unit_loss, make_tuner, results_table, trial_rows)

__all__ = ["OBJECTIVE", "OBJECTIVE_NAME", "TUNERS", "GlomoHyperModel", "first_unit_loss",
           "make_tuner", "results_table", "trial_rows"]
