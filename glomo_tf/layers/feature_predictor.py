"""The GLoMo feature predictor ``f``: features propagated along the predicted graphs (Eq. 2)."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf._keras_private import in_xla_context
from glomo_tf.hparams import COMPOSITIONS
from glomo_tf.layers._common import (compute_cast, direction_rows, gru_update, transpose_rows,
                                      with_bias_row, with_ones_column)


@keras.saving.register_keras_serializable(package="glomo_tf")
class FeaturePredictor(keras.layers.Layer):
    """Computes ``F^l_t = v(sum_s G^l[t, s] F^{l-1}_s, F^{l-1}_t)`` for every layer and direction.

    The features are split into ``num_heads`` heads of ``hidden_dim / num_heads`` units; head ``k``
    of the message ``m_t = sum_s G^l_k[t, s] F^{l-1}_s`` is propagated along head ``k`` of the graph
    (no value projection, as in the reference code). The composition ``v`` is one cell per direction,
    shared by all layers:

    * ``"gru"``: a GRU cell with input ``[m * F_t ; m]`` and state ``F_t`` (reference code's best);
    * ``"residual"``: ``F_t + W [m * F_t ; m] + b``, a linear layer with a residual connection;
    * ``"projected"``: ``LayerNorm(F_t + W_o m_t)`` with ``m_t`` propagated from *projected*
      values ``W_v F_s`` (each head reads all of ``F_s``, not its slice), as in a Transformer
      layer. Not in the paper: an option measured against ``"gru"`` on the planted corpus
      (``examples/planted_diagnostics.py``).

    Each direction's features depend only on that direction's admissible sources, so a forward
    feature at ``t`` never sees units at or after ``t`` beyond itself.

    Args:
        hidden_dim: int, feature width ``d``; must be divisible by ``num_heads``.
        num_heads: int, heads ``K`` of the graphs.
        composition: ``"gru"``, ``"residual"`` or ``"projected"`` (above).

    Call arguments:
        features: ``F^0``, ``[batch, T, d]`` (shared by both directions, e.g. embeddings) or
            ``[batch, 2, T, d]`` (one per direction).
        graphs: ``[batch, 2, L, K, T, T]`` from a :class:`GraphPredictor`.
        padding_mask: optional bool ``[batch, T]``; padded positions' features are zeroed.

    Returns:
        ``[batch, 2, L, T, d]``: the features of every layer and direction.

    Example:

    >>> import numpy as np
    >>> f = FeaturePredictor(hidden_dim=8, num_heads=2)
    >>> feats = np.random.rand(1, 5, 8).astype("float32")
    >>> graphs = np.full((1, 2, 3, 2, 5, 5), 0.2, dtype="float32")
    >>> tuple(f(feats, graphs).shape)
    (1, 2, 3, 5, 8)

    References:
        Yang et al., NeurIPS 2018, Section 2.1, Eq. 2.
    """

    def __init__(self, hidden_dim, num_heads, composition="gru", **kwargs):
        super().__init__(**kwargs)
        hparams.check_choice("composition", composition, COMPOSITIONS)
        hparams.check_heads_divide(hidden_dim, num_heads)
        self.hidden_dim = int(hidden_dim)
        self.num_heads = int(num_heads)
        self.composition = composition

    def build(self, features_shape=None, graphs_shape=None):
        d = self.hidden_dim
        init = keras.initializers.VarianceScaling(1.0, "fan_avg", "uniform")
        if self.composition == "gru":
            self.input_kernel = self.add_weight(name="input_kernel", shape=(2, 2 * d, 3 * d),
                                                initializer=init)
            self.recurrent_kernel = self.add_weight(name="recurrent_kernel", shape=(2, d, 3 * d),
                                                    initializer="orthogonal")
            self.input_bias = self.add_weight(name="input_bias", shape=(1, 2, 1, 3 * d),
                                              initializer="zeros")
            self.recurrent_bias = self.add_weight(name="recurrent_bias", shape=(1, 2, 1, 3 * d),
                                                  initializer="zeros")
        elif self.composition == "residual":
            self.kernel = self.add_weight(name="kernel", shape=(2, 2 * d, d), initializer=init)
            self.bias = self.add_weight(name="bias", shape=(1, 2, 1, d), initializer="zeros")
        else:
            self.value_kernel = self.add_weight(name="value_kernel", shape=(2, d, d),
                                                initializer=init)
            self.output_kernel = self.add_weight(name="output_kernel", shape=(2, d, d),
                                                 initializer=init)
            self.bias = self.add_weight(name="bias", shape=(1, 2, 1, d), initializer="zeros")
            self.norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy,
                                                        name="norm")
            self.norm.build((None, 2, None, d))
        self.built = True

    def call(self, features, graphs, padding_mask=None):
        features, graphs = self._inputs(features, graphs)
        layers = self._compose_layers(features, tf.unstack(graphs, axis=2), padding_mask)
        return tf.stack(layers, axis=2)

    def _inputs(self, features, graphs):
        """``features`` as ``[B, 2, T, d]`` and ``graphs``, in the compute dtype, checked."""
        features = tf.cast(features, self.compute_dtype)
        graphs = tf.cast(graphs, self.compute_dtype)
        if features.shape.rank == 3:
            features = tf.stack([features, features], axis=1)
        if features.shape.rank != 4 or graphs.shape.rank != 6:
            raise ValueError(
                "FeaturePredictor expects features [batch, T, d] or [batch, 2, T, d] and graphs "
                f"[batch, 2, L, K, T, T]; got ranks {features.shape.rank} and {graphs.shape.rank}.")
        return features, graphs

    def _compose_layers(self, features, layer_graphs, padding_mask):
        """The features of one layer per graph of ``layer_graphs`` (each ``[B, 2, K, T, T]``,
        ``graphs`` unstacked along their layer axis: an unstack's gradient is one stack, where
        indexing each layer out makes one strided slice's gradient per layer), each
        ``[B, 2, T, d]`` (padding zeroed)."""
        outputs = []
        for graph in layer_graphs:
            features = self.compose(features, graph)
            if padding_mask is not None:
                features = features * tf.cast(padding_mask, features.dtype)[:, None, :, None]
            outputs.append(features)
        return outputs

    def top_features(self, features, graphs, positions, padding_mask=None, top_rows=None):
        """The last layer's features at ``positions`` only: ``[batch, 2, S, d]``.

        ``positions``: int ``[2, S]``, the rows wanted in each direction. Equals
        ``call(features, graphs, padding_mask)[:, z, -1]`` gathered at ``positions[z]``, but the
        last layer composes those rows only: pretraining decodes from a few sampled positions
        (``num_positions`` of ``T``), and the top layer's other rows would be computed for nothing
        (their messages and the cell; every lower layer is needed whole).

        ``top_rows``: optional ``[batch, 2, K, S, T]``, the last layer's graph already cut to
        ``positions`` (:meth:`GraphPredictor.graphs_with_top_rows`); ``graphs`` then holds the
        layers below it only.
        """
        if not self.built:
            self.build(features.shape, graphs.shape)
        features, graphs = self._inputs(features, graphs)
        layer_graphs = tf.unstack(graphs, axis=2)
        below = layer_graphs if top_rows is not None else layer_graphs[:-1]
        lower = self._compose_layers(features, below, padding_mask)
        features = lower[-1] if lower else features
        positions = tf.cast(positions, tf.int32)
        if top_rows is None:
            top = self.compose(features, layer_graphs[-1], rows=positions)
        else:
            top = self.compose(features, tf.cast(top_rows, self.compute_dtype), rows=positions,
                               graph_at_rows=True)
        if padding_mask is not None:
            mask = tf.gather(tf.cast(padding_mask, top.dtype), positions, axis=1)  # [B, 2, S]
            top = top * mask[..., None]
        return top

    def compose(self, features, graph, rows=None, graph_at_rows=False):
        """One layer of Eq. 2: ``features [B, 2, T, d]``, ``graph [B, 2, K, T, T]`` -> ``[B, 2, T, d]``;
        with ``rows`` (int ``[2, S]``), only those receiving rows of each direction:
        ``[B, 2, S, d]`` (``graph_at_rows``: ``graph`` is ``[B, 2, K, S, T]``, already cut)."""
        shape = tf.shape(features)
        values = features
        if self.composition == "projected":
            values = tf.einsum("bzsd,zde->bzse", features, self._w(self.value_kernel))
        heads = tf.reshape(values, [shape[0], 2, shape[2], self.num_heads,
                                    self.hidden_dim // self.num_heads])
        if rows is not None:
            if not graph_at_rows:
                graph = direction_rows(graph, rows, axis=3)  # [B, 2, K, S, T]
            features = direction_rows(features, rows, axis=2)  # the receivers' own features
        message = tf.reshape(_head_messages(graph, heads), tf.shape(features))
        if self.composition == "projected":
            update = tf.einsum("bztd,zde->bzte", message, self._w(self.output_kernel))
            return self.norm(features + update + self._w(self.bias))
        if self.composition == "residual":
            cell_input = tf.concat([message * features, message], axis=-1)  # [m * F ; m]
            return features + tf.einsum("bzti,zio->bzto", cell_input, self._w(self.kernel)) + \
                self._w(self.bias)
        # The cell runs direction-major, [2, B * T, .]: one product per direction and gate set
        # (as einsums over [B, 2, T, .], the weight gradients transposed both operands). Each
        # bias rides in its product as one more input row (with_ones_column).
        cell_input = _direction_major(with_ones_column(message * features, message))
        state = _direction_major(features)
        gates_x = tf.matmul(cell_input,
                            self._w(with_bias_row(self.input_kernel, self.input_bias[0])))
        gates_h = tf.matmul(with_ones_column(state),
                            self._w(with_bias_row(self.recurrent_kernel, self.recurrent_bias[0])))
        return _batch_major(gru_update(gates_x, gates_h, state), tf.shape(features))

    _w = compute_cast

    def compute_output_shape(self, features_shape, graphs_shape):
        return (graphs_shape[0], 2, graphs_shape[2], graphs_shape[4], self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "num_heads": self.num_heads,
                       "composition": self.composition})
        return config


def _head_messages(graph, heads):
    """``einsum("bzkts,bzskc->bztkc", graph, heads)``. Outside XLA as transposes around one
    batched product: TensorFlow's CPU einsum ran this at a third of the product rate, the
    product form in about two thirds of its time (forward and backward, float32 and bfloat16);
    XLA compiles the einsum itself a little faster."""
    if in_xla_context():
        return tf.einsum("bzkts,bzskc->bztkc", graph, heads)
    messages = tf.matmul(graph, transpose_rows(heads, [0, 1, 3, 2, 4]))  # [B, 2, K, T, c]
    return transpose_rows(messages, [0, 1, 3, 2, 4])


def _direction_major(x):
    """``[B, 2, T, c] -> [2, B * T, c]``."""
    return tf.reshape(transpose_rows(x, [1, 0, 2, 3]), [2, -1, x.shape[-1]])


def _batch_major(x, shape):
    """``[2, B * T, c] -> [B, 2, T, c]`` for ``shape`` ``[B, 2, T, c]``."""
    return transpose_rows(tf.reshape(x, [2, shape[0], shape[2], x.shape[-1]]), [1, 0, 2, 3])
