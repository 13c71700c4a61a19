"""TF-Serving-compatible client and local development server for exported GLoMo SavedModels.

* :class:`ServingClient` / :func:`extract` (``glomo_tf.serving.client``): REST or gRPC calls that
  return NumPy arrays, with timeouts, retries on UNAVAILABLE and :class:`ServingError`.
* :class:`ModelServer` (``glomo_tf.serving.server``, configured by one :class:`ServerOptions`) and
  ``glomo serve``: TF Serving's REST and gRPC APIs over any SavedModel, with version hot-swap and
  request batching.
"""

from glomo_tf._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "glomo_tf.serving.client": ("ServingClient", "extract"),
    "glomo_tf.serving.errors": ("ServingError",),
    "glomo_tf.serving.server": ("ModelServer", "ServerOptions"),
    "glomo_tf.serving.models": ("ModelConfig",),
})
