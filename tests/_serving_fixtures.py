"""Small SavedModels with several signatures, for the serving tests.

:func:`write_toy_model` writes a ``tf.Module`` whose signatures cover what a model server must
carry: strings in and out (``serving_default``), several float/int inputs with static output
shapes (``scale``, which the batcher may merge), and outputs with a dynamic second dimension,
a scalar and bools (``ids``, which it must not merge). ``scale`` fails at run time for a negative
``k``, like a model that rejects some inputs only once it runs them. ``negate`` has one input and
one output (the REST API then drops the names). ``factor`` changes every number ``scale``
returns, so two versions written with different factors can be told apart.
"""

import os
import shutil
import tempfile


def toy_module(factor=1.0):
    import tensorflow as tf

    class Toy(tf.Module):
        def __init__(self):
            super().__init__()
            self.factor = tf.Variable(factor, dtype=tf.float32, trainable=False)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
        def texts(self, texts):
            return {"upper": tf.strings.upper(texts),
                    "length": tf.strings.length(texts),
                    "head_bytes": tf.strings.substr(texts, 0, 2)}

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                      tf.TensorSpec([None], tf.int32, name="k")])
        def scale(self, x, k):
            tf.debugging.assert_non_negative(k, message="k must be >= 0")
            y = x * tf.cast(k, tf.float32)[:, None] * self.factor
            rows = tf.shape(k)[0]
            return {"y": y, "total": tf.reduce_sum(y, axis=1),
                    "batch": tf.fill([rows], rows)}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="ids")])
        def ids(self, ids):
            return {"doubled": ids * 2,
                    "positive": ids > 0,
                    "nonzero": tf.math.count_nonzero(ids, axis=1, dtype=tf.int32),
                    "mean": tf.reduce_mean(tf.cast(ids, tf.float64))}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="v")])
        def negate(self, v):
            return {"negated": -v}

    return Toy()


def write_toy_model(path, factor=1.0):
    """Write the toy SavedModel to ``path`` atomically (built beside it, then renamed)."""
    import tensorflow as tf
    module = toy_module(factor)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=parent)
    try:
        tf.saved_model.save(module, staging, signatures={
            "serving_default": module.texts, "scale": module.scale, "ids": module.ids,
            "negate": module.negate})
        os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def write_half_plus_two(path):
    """A TensorFlow 1 style SavedModel like TF Serving's own ``saved_model_half_plus_two`` test
    model: ``y = 0.5 * x + 2`` behind a predict signature (``serving_default``: ``x`` -> ``y``), a
    regression signature (``regress_x_to_y``) and a classification signature
    (``classify_x_to_y``: class ``"big"`` when ``y > 3`` else ``"small"``, score ``y``), the last
    two over serialized ``tf.Example``s with a float feature ``x``."""
    import tensorflow as tf
    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as session:
        a = v1.Variable(0.5, name="a")
        b = v1.Variable(2.0, name="b")
        x = v1.placeholder(tf.float32, [None], name="x")
        y = tf.add(a * x, b, name="y")
        examples = v1.placeholder(tf.string, [None], name="tf_example")
        parsed = v1.io.parse_example(examples, {"x": v1.io.FixedLenFeature([1], tf.float32)})
        y_examples = a * parsed["x"] + b
        classes = tf.where(y_examples > 3.0, tf.fill(tf.shape(y_examples), "big"),
                           tf.fill(tf.shape(y_examples), "small"))
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.builder.SavedModelBuilder(path)
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
            "serving_default": v1.saved_model.predict_signature_def({"x": x}, {"y": y}),
            "regress_x_to_y": v1.saved_model.regression_signature_def(examples, y_examples),
            "classify_x_to_y": v1.saved_model.classification_signature_def(
                examples, classes, y_examples)})
        builder.save()
    return path


def raw_http(port, payload, until_close=False, timeout=None):
    """Sends ``payload`` as it is to 127.0.0.1:``port`` and returns the bytes of the answer: up to
    the end of the first whole answer (by its Content-Length), or with ``until_close`` every
    byte until the server closes; with ``timeout``, what came when the server has sent nothing
    for that long (it waits for the rest of a request). A client that half-closes is one that
    went away (aiohttp, like TF Serving's libevent, closes on the end of the stream), so the
    sending side stays open."""
    import re
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout or 30) as connection:
        connection.sendall(payload)
        data = b""
        while True:
            try:
                chunk = connection.recv(65536)
            except ConnectionResetError:
                return data
            except TimeoutError:
                if timeout is None:
                    raise
                return data
            if not chunk:
                return data
            data += chunk
            head, blank, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            if not until_close and blank and length and len(body) >= int(length.group(1)) \
                    and not head.startswith(b"HTTP/1.1 100 "):
                return data
