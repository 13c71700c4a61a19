"""SavedModel export for TensorFlow Serving: raw text in, latent graphs out.

See :func:`export_saved_model` (Python) and ``glomo export`` (command line), the signatures in
:data:`SIGNATURES`, and ``serving/README.md`` for deploying with the ``tensorflow/serving`` image.
Names are imported on first use, so ``glomo --help`` does not load tensorflow-text.
"""

from glomo_tf._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "glomo_tf.export.saved_model": (
        "DEFAULT_MAX_LENGTH", "DEFAULT_TOP_K", "METADATA_FILE", "SIGNATURES",
        "GlomoServingModule", "existing_versions", "export_saved_model", "next_version",
        "resolve_graph_predictor", "resolve_tokenizer"),
    "glomo_tf.export.serving_ops": (
        "TF_TEXT_SERVING_OPS", "load_serving_ops", "op_inventory", "serving_op_libraries",
        "unsupported_ops"),
})
