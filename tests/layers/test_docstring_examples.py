"""The ``Example`` sections of the public layers' docstrings run as doctests.

Every layer of ``glomo_tf.layers.__all__`` has one (a layer without it, or an example that raises
or prints something else than its docstring shows, fails here). Each runs in the namespace of its
layer's module, as a reader of that module would paste it, from a fixed seed.
"""

import doctest
import sys

import keras
import pytest

import glomo_tf.models.task  # noqa: F401 (modules of public classes)
import glomo_tf.preprocessing  # noqa: F401
from glomo_tf import layers

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


# Public layers and models outside glomo_tf.layers, by their glomo_tf name.
OTHER_LAYERS = {"GlomoTokenizer": "glomo_tf.preprocessing",
                "GlomoClassifier": "glomo_tf.models.task",
                "GlomoPairClassifier": "glomo_tf.models.task"}


def layer_class(name):
    if name in OTHER_LAYERS:
        return getattr(sys.modules[OTHER_LAYERS[name]], name)
    return getattr(layers, name)


def examples(name):
    obj = layer_class(name)
    module = sys.modules[obj.__module__]
    finder = doctest.DocTestFinder(recurse=False)
    return [test for test in finder.find(obj, name, module=module, globs=vars(module).copy())
            if test.examples]


@pytest.mark.parametrize("name", [*layers.__all__, *OTHER_LAYERS])
def test_the_layer_docstring_example_runs(name):
    tests = examples(name)
    assert tests and "Example" in layer_class(name).__doc__, f"{name} has no docstring example"
    keras.utils.set_random_seed(0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{name}'s docstring example failed (see the output above)"
