"""Contextualized non-local neural networks (CN3): task-specific graphs learned on the fly."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.layers._common import compute_cast, masked_softmax, sequence_inputs

CONTEXTS = ("lstm", "cnn")


@keras.saving.register_keras_serializable(package="glomo_tf")
class ContextualizedNonLocal(keras.layers.Layer):
    """CN3 message passing: edge weights from node states, node attributes and edge attributes.

    Node attributes ``v_i`` are the input features concatenated with their local context (a
    bidirectional LSTM, ``2 * units`` wide, or a width-3 convolution with ``tanh``, ``units`` wide;
    both masked so padding never enters the context) and, when given, extra node features such as
    tag embeddings. The initial node states are a linear projection ``h^0_i = W_0 v_i + b_0`` to
    ``units`` (the paper's ``h^0`` is the word embedding; the projection fuses it with its
    attributes and sets the width). Each of the ``num_layers`` layers then computes, for receiver
    ``i`` and source ``k``:

    * ``s_ik = u^T tanh(W [h_k ; h_i ; v_i ; v_k ; e_ik] + b)`` (Eqs. 1-2). ``W`` is held as one
      matrix per part, so the per-node projections are computed once and only their broadcast sum
      is ``[batch, T, T, units]``;
    * ``alpha_ik = softmax_k(s_ik)`` over the real (unpadded) sources ``k``, the receiver itself
      included (Eq. 3); rows of padded receivers are all zeros;
    * ``m_i = sum_k alpha_ik h_k`` (Eq. 4);
    * ``h'_i = g * m_i + (1 - g) * h_i`` with ``g = sigmoid(W_g h_i + b_g)`` (Eqs. 5-6).

    Every layer has its own parameters; node states at padded positions are zero.

    Args:
        units: int, width of the node states (and of the edge-scoring hidden layer).
        num_layers: int, message-passing layers ``L``.
        context: ``"lstm"`` (bidirectional LSTM) or ``"cnn"`` (width-3 convolution), the local
            context added to the node attributes.
        edge_dim: optional int, width ``e`` of the edge attributes; when set, ``edge_features``
            must be passed to every call.
        dropout: float, dropout rate on the input features (training only).
        return_graphs: bool, also return the graphs ``alpha`` of every layer.
        **kwargs: standard layer arguments.

    Call arguments:
        inputs: float ``[batch, T, d]`` (e.g. word embeddings).
        mask: optional bool ``[batch, T]``, ``True`` at real positions; by default the Keras
            mask attached to ``inputs`` (e.g. by ``Embedding(mask_zero=True)``), also when
            ``edge_features`` or ``node_features`` are passed.
        edge_features: float ``[batch, T, T, edge_dim]``; ``edge_features[b, t, s]`` describes the
            edge from source ``s`` to receiver ``t``. Required iff ``edge_dim`` is set.
        node_features: optional float ``[batch, T, a]`` extra node attributes (e.g. POS-tag
            embeddings); if the layer was built with them, they are required afterwards.
        training: bool, enables dropout.

    Returns:
        Node states ``[batch, T, units]``; with ``return_graphs=True`` the tuple
        ``(states, graphs)`` where ``graphs[b, l, t, s]`` is the weight receiver ``t`` puts on
        source ``s`` in layer ``l`` (row-stochastic over real sources, zero rows for padded
        receivers), ``[batch, num_layers, T, T]``.

    Example:

    >>> import numpy as np
    >>> layer = ContextualizedNonLocal(8, num_layers=2, context="cnn", return_graphs=True)
    >>> x = np.random.rand(2, 5, 4).astype("float32")
    >>> mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    >>> states, graphs = layer(x, mask=mask)
    >>> tuple(states.shape), tuple(graphs.shape)
    ((2, 5, 8), (2, 2, 5, 5))
    >>> rows = graphs.numpy()[1].sum(-1)  # receivers' rows: 1 when real, 0 when padded
    >>> bool(np.allclose(rows[:, :3], 1.0)), float(rows[:, 3:].sum())
    (True, 0.0)

    References:
        Liu, Chang, Huang, Tang and Cheung, "Contextualized Non-local Neural Networks for Sequence
        Learning", AAAI 2019, Eqs. 1-6 and Algorithm 1.
    """

    def __init__(self, units, num_layers=1, context="lstm", edge_dim=None, dropout=0.0,
                 return_graphs=False, **kwargs):
        super().__init__(**kwargs)
        hparams.check_choice("context", context, CONTEXTS)
        hparams.check_positive(units=units, num_layers=num_layers)
        hparams.check_rates(dropout=dropout)
        self.units = int(units)
        self.num_layers = int(num_layers)
        self.context = context
        self.edge_dim = None if edge_dim is None else int(edge_dim)
        self.dropout = float(dropout)
        self.return_graphs = bool(return_graphs)
        self.supports_masking = True
        self.has_node_features = False

    def build(self, inputs_shape, edge_features_shape=None, node_features_shape=None):
        d = int(inputs_shape[-1])
        u, num_layers = self.units, self.num_layers
        # Every sub-layer shares this layer's dtype policy (also one given to this layer alone,
        # not globally): a float32 sub-layer would cast its bfloat16 inputs back to float32.
        policy = self.dtype_policy
        self.input_dropout = keras.layers.Dropout(self.dropout, dtype=policy, name="input_dropout")
        if self.context == "lstm":
            # Bidirectional copies the wrapped LSTM from its config: the LSTM needs the policy too.
            self.context_encoder = keras.layers.Bidirectional(
                keras.layers.LSTM(u, return_sequences=True, dtype=policy), dtype=policy,
                name="context_lstm")
            context_dim = 2 * u
        else:
            self.context_encoder = keras.layers.Conv1D(u, 3, padding="same", activation="tanh",
                                                       dtype=policy, name="context_cnn")
            context_dim = u
        self.context_encoder.build((None, None, d))
        self.has_node_features = node_features_shape is not None
        attribute_dim = d + context_dim
        if self.has_node_features:
            attribute_dim += int(node_features_shape[-1])
        self.attribute_dim = attribute_dim
        self.node_projection = keras.layers.Dense(u, dtype=policy, name="node_projection")
        self.node_projection.build((None, None, attribute_dim))

        init = keras.initializers.VarianceScaling(1.0, "fan_avg", "uniform")

        def weight(name, shape, initializer=init):
            return self.add_weight(name=name, shape=(num_layers,) + shape, initializer=initializer)

        # Eq. 2: W = [W_source_state, W_receiver_state, W_receiver_attr, W_source_attr, W_edge].
        self.source_state_kernel = weight("source_state_kernel", (u, u))
        self.receiver_state_kernel = weight("receiver_state_kernel", (u, u))
        self.receiver_attribute_kernel = weight("receiver_attribute_kernel", (attribute_dim, u))
        self.source_attribute_kernel = weight("source_attribute_kernel", (attribute_dim, u))
        self.edge_kernel = weight("edge_kernel", (self.edge_dim, u)) if self.edge_dim else None
        self.score_bias = weight("score_bias", (u,), "zeros")
        self.score_vector = weight("score_vector", (u,))  # u in Eq. 2
        self.gate_kernel = weight("gate_kernel", (u, u))  # Eq. 6
        self.gate_bias = weight("gate_bias", (u,), "zeros")
        self.built = True

    # ------------------------------------------------------------------ pieces
    _w = compute_cast

    def node_attributes(self, inputs, maskf, node_features=None, training=False):
        """``v = [x ; context(x) ; node_features]``, zero at padded positions, ``[B, T, a]``."""
        inputs = self.input_dropout(inputs, training=training) * maskf
        if self.context == "lstm":
            context = self.context_encoder(inputs, mask=tf.cast(maskf[..., 0], tf.bool))
        else:
            context = self.context_encoder(inputs)  # padded inputs are already zero
        parts = [inputs, tf.cast(context, self.compute_dtype) * maskf]
        if self.has_node_features:
            if node_features is None:
                raise ValueError("This ContextualizedNonLocal layer was built with node_features; "
                                 "pass them to every call.")
            parts.append(tf.cast(node_features, self.compute_dtype) * maskf)
        elif node_features is not None:
            raise ValueError("This ContextualizedNonLocal layer was built without node_features.")
        return tf.concat(parts, axis=-1)

    def edge_weights(self, layer, states, attributes, maskf, edge_features=None):
        """Eqs. 1-3 for one layer: ``alpha [B, T(receiver), T(source)]``."""
        receiver = (tf.matmul(states, self._w(self.receiver_state_kernel[layer]))
                    + tf.matmul(attributes, self._w(self.receiver_attribute_kernel[layer]))
                    + self._w(self.score_bias[layer]))  # [B, T, u]
        source = (tf.matmul(states, self._w(self.source_state_kernel[layer]))
                  + tf.matmul(attributes, self._w(self.source_attribute_kernel[layer])))
        hidden = receiver[:, :, None, :] + source[:, None, :, :]  # [B, T, T, u]
        if edge_features is not None:
            hidden += tf.einsum("btse,eu->btsu", edge_features, self._w(self.edge_kernel[layer]))
        scores = tf.einsum("btsu,u->bts", tf.tanh(hidden), self._w(self.score_vector[layer]))
        # Real sources of real receivers; padded receivers get all-zero rows.
        admissible = maskf[:, None, :, 0] * maskf  # [B, T, T]
        return masked_softmax(scores, admissible)

    def update_nodes(self, layer, states, graph, maskf):
        """Eqs. 4-6: ``h' = g * (alpha h) + (1 - g) * h``, zero at padded positions."""
        message = tf.matmul(graph, states)  # Eq. 4
        gate = tf.sigmoid(tf.matmul(states, self._w(self.gate_kernel[layer]))
                          + self._w(self.gate_bias[layer]))  # Eq. 6
        return (gate * message + (1.0 - gate) * states) * maskf  # Eq. 5

    # ------------------------------------------------------------------ call
    def call(self, inputs, mask=None, edge_features=None, node_features=None, training=False):
        inputs, mask = sequence_inputs(self, inputs, mask)
        if (edge_features is None) != (self.edge_dim is None):
            raise ValueError("edge_features must be passed if and only if edge_dim is set "
                             f"(edge_dim={self.edge_dim}).")
        if edge_features is not None:
            edge_features = tf.cast(edge_features, self.compute_dtype)
        if mask is None:
            maskf = tf.ones_like(inputs[..., :1])
        else:
            maskf = tf.cast(mask, self.compute_dtype)[..., None]
        attributes = self.node_attributes(inputs, maskf, node_features, training)
        states = self.node_projection(attributes) * maskf  # h^0
        graphs = []
        for layer in range(self.num_layers):
            graph = self.edge_weights(layer, states, attributes, maskf, edge_features)
            states = self.update_nodes(layer, states, graph, maskf)
            graphs.append(graph)
        if self.return_graphs:
            return states, tf.stack(graphs, axis=1)
        return states

    def compute_mask(self, inputs, mask=None):
        if self.return_graphs:
            return [mask, None]
        return mask

    def compute_output_shape(self, inputs_shape, edge_features_shape=None,
                             node_features_shape=None):
        states = tuple(inputs_shape[:-1]) + (self.units,)
        if self.return_graphs:
            graphs = (inputs_shape[0], self.num_layers, inputs_shape[1], inputs_shape[1])
            return states, graphs
        return states

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "num_layers": self.num_layers,
                       "context": self.context, "edge_dim": self.edge_dim,
                       "dropout": self.dropout, "return_graphs": self.return_graphs})
        return config
