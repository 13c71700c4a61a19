"""``glomo pretrain`` in a subprocess, for tests/experiments/test_pretrain_cli.py and tests/experiments/test_distributed.py.

``python tests/_pretrain_runner.py [pretrain options]`` runs
``glomo_tf.cli.main(["pretrain", ...])`` with a parser holding only the pretrain command (so the test does not depend on the other commands'
modules). With ``GLOMO_TEST_PAUSE_AT_STEP=N`` and ``GLOMO_TEST_PAUSED=FILE`` in the environment, the
run stops after optimizer step ``N`` (checkpoint callback done), creates ``FILE`` and sleeps, so a
test can SIGKILL it at a known point in the middle of training.
"""

import functools
import os
import sys
import time
from _paths import REPO

sys.path.insert(0, REPO)

from glomo_tf import cli, training  # noqa: E402

cli.build_parser = functools.partial(cli.build_parser, [("pretrain", "glomo_tf.cli.pretrain")])

PAUSE_AT = int(os.environ.get("GLOMO_TEST_PAUSE_AT_STEP", "0"))
if PAUSE_AT:
    _original = training.CrashSafeCheckpoint.on_train_batch_end

    def _pause(self, batch, logs=None):
        _original(self, batch, logs)
        if self._step() == PAUSE_AT:
            with open(os.environ["GLOMO_TEST_PAUSED"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)

    training.CrashSafeCheckpoint.on_train_batch_end = _pause

if __name__ == "__main__":
    sys.exit(cli.main(["pretrain"] + sys.argv[1:]))
