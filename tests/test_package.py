"""glomo_tf's classes are registered with Keras after `import glomo_tf`, whichever of glomo_tf,
TensorFlow and Keras a program imports first; the `glomo` command's parsers import none of them."""

import subprocess
import sys

import pytest


def run_python(code):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_hparams_and_the_serving_client_stay_light_in_a_command_line_process():
    """In the `glomo` process, the package defers TensorFlow to the command that needs it."""
    out = run_python("import sys\nsys.argv = ['glomo']\n"
                     "import glomo_tf, glomo_tf.hparams, glomo_tf.serving.client\n"
                     "print(sorted({m.split('.')[0] for m in sys.modules} & "
                     "{'tensorflow', 'keras', 'tensorflow_text'}))")
    assert out.strip() == "[]"


@pytest.mark.parametrize("imports", ["import glomo_tf; import keras", "import keras; import glomo_tf"])
def test_a_saved_glomo_model_loads_whatever_the_import_order(tmp_path, imports):
    """A downstream model with a GlomoTransfer, saved to .keras, loads with keras.saving alone."""
    import keras
    import numpy as np

    from glomo_tf import GlomoTransfer, GraphPredictor

    predictor = GraphPredictor(vocabulary_size=20, hidden_dim=8, num_layers=1, num_heads=2,
                               conv_layers=1)
    ids = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(20, 8, mask_zero=True)(ids)
    model = keras.Model(ids, GlomoTransfer(predictor)([h, ids]))
    path = tmp_path / "model.keras"
    model.save(path)
    x = np.array([[3, 4, 5, 0]], "int32")
    np.save(tmp_path / "expected.npy", np.asarray(model(x)))
    out = run_python(f"{imports}\nimport numpy as np\n"
                     f"model = keras.saving.load_model({str(path)!r})\n"
                     "got = np.asarray(model(np.array([[3, 4, 5, 0]], 'int32')))\n"
                     f"print(np.allclose(got, np.load({str(tmp_path / 'expected.npy')!r}), "
                     "atol=1e-6))")
    assert out.strip().endswith("True")
