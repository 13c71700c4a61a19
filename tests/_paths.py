"""Where the tests find the repository's files, wherever a test module sits under ``tests/``."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
