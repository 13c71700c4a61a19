"""``python -m glomo_tf.cli ...``: the ``glomo`` command."""

import sys

from glomo_tf.cli import main

sys.exit(main())
