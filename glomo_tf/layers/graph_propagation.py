"""``GraphPropagation``: features composed along transferred graphs over several steps."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.layers._common import float32_sigmoid
from glomo_tf.layers.glomo_transfer import GlomoTransfer
from glomo_tf.layers.graph_input import GraphInput

# How a step updates a unit: a GRU cell on its state and its messages (a gated graph network), or
# a two-layer perceptron of its input features and its messages (a graph isomorphism network).
UPDATES = ("gru", "mlp")
# How a unit gathers what its sources hold: the graph's weighted mean (rows sum to one), or the
# sum over its sources (each row's weights times its number of sources).
AGGREGATIONS = ("mean", "sum")
# Which of the graphs' directions a unit hears: both (the forward graph's sources before it and
# the backward graph's after it), or one of them alone.
DIRECTIONS = ("both", "forward", "backward")


@keras.saving.register_keras_serializable(package="glomo_tf")
class GraphPropagation(GlomoTransfer):
    """Composes a feature sequence ``H`` along graphs for ``steps`` steps: a deeper use of the
    transferred graphs than :class:`GlomoTransfer`'s single gated fusion.

    Each step mixes the graphs' candidates into ``M`` (a :class:`GraphMixture` per direction,
    its weights conditioned on the current states when ``conditioned``) and updates every unit
    with a GRU cell on what its sources hold (a gated graph network, Li et al. 2016):

        h^0 = H (projected to ``units`` when they differ)
        m^n = [M_1^fw h^n ; M_1^bw h^n ; ...]                   (both directions, every mixture)
        z, r = sigmoid(W_zr [m^n ; h^n]),  c = tanh(W_c [m^n ; r * h^n])
        h^{n+1} = (1 - z) * h^n + z * c

    with one cell shared by the steps, so after ``n`` steps a unit holds what reached it along
    paths of up to ``n`` edges: with a tree's edges (an operator's arguments, a word's head) the
    states compose bottom-up as deep as there are steps. The output is ``[H ; h^steps]``.

    Args:
        graph_predictor: as :class:`GlomoTransfer`'s (None for graphs given as input, or
            ``graph_mode="uniform"``).
        steps: int >= 1, propagation steps.
        units: int, width of the states ``h``; default ``H``'s width.
        aggregation: ``"mean"`` (default: the graphs as they are, each row a weighted mean of
            its sources) or ``"sum"``: every row of the graphs scaled by its number of sources
            (weights above 0), so that a unit adds up its sources (over a tree's edges, a
            child-sum composition that can count its arguments). Applies to graphs the layer
            reads dense or in the top-k form.
        update: ``"gru"`` (default: the GRU cell above) or ``"mlp"``: ``h^{n+1} =
            relu(W_2 relu(W_1 [h^0 ; m^n]))``, each step a two-layer perceptron of the unit's own
            input and its messages (a graph isomorphism network, Xu et al. 2019; with
            ``aggregation="sum"`` it tells apart any two multisets of sources).
        hidden_units: the ``"gru"`` update: None (default: the candidate is one layer,
            ``tanh(W_c [m ; r * h])``) or an int: the candidate through a ReLU layer of that
            width first, ``tanh(W_c relu(W_u [m ; r * h]))``; the ``"mlp"`` update: the width of
            its hidden layer (default ``2 * units``).
        directions: ``"both"`` (default: ``m^n`` holds both directions' messages, as above),
            ``"forward"`` or ``"backward"``: only that direction's. With a tree whose operators
            come before their arguments (ListOps' prefix order, the gold trees of
            :func:`~glomo_tf.data.gold_graphs.tree_graphs`), ``"backward"`` is the bottom-up
            composition alone: an operator hears its arguments and a leaf nothing, so after
            ``n`` steps every subtree of height up to ``n`` holds its final value; with
            ``"both"`` each unit also hears its parent, whose state changes with its own.
        layer_norm: bool (default False): normalise the update's hidden pre-activations over
            their width (``keras.layers.LayerNormalization``): the ``"mlp"`` update's hidden
            layer, ``relu(LN(W_1 [h^0 ; m^n]))``, and the ``"gru"`` update's candidate,
            ``tanh(LN(W_c ...))``, so that a sum over many sources does not set the scale of
            every later step.
        dropout: float, dropout on each step's messages ``m^n``.
        **kwargs: :class:`GlomoTransfer`'s other arguments, which say where the graphs come
            from and how they are mixed: ``num_mixtures``, ``conditioned``,
            ``include_products``, ``graph_mode``, ``fine_tune``, ``top_k``,
            ``graph_temperature``, ``propagation``, ``fused_normalization``; and a layer's
            ``name``, ``dtype``.

    Call arguments:
        inputs: as :class:`GlomoTransfer`'s: ``[features, token_ids]``, ``[features, graphs]``
            (any form of :class:`~glomo_tf.layers.GraphInput`), ``[features, indices, weights]``
            or ``token_ids``.
        training: bool.
        mask: optional padding mask of ``H``; by default taken from ``token_ids != 0``.

    Returns:
        ``[batch, T, d + units]``, masked like the tokens.

    Example:

    >>> import keras, numpy as np
    >>> from glomo_tf.layers import GraphPredictor
    >>> predictor = GraphPredictor(vocabulary_size=50, hidden_dim=8, num_layers=2, num_heads=2)
    >>> ids = keras.Input((None,), dtype="int32")
    >>> h = keras.layers.Embedding(50, 6, mask_zero=True)(ids)
    >>> h = GraphPropagation(predictor, steps=3)([h, ids])
    >>> model = keras.Model(ids, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h)))
    >>> model(np.array([[3, 4, 5, 0]], "int32")).shape
    TensorShape([1, 2])

    References:
        Li et al., Gated Graph Sequence Neural Networks, ICLR 2016; Yang et al., NeurIPS 2018,
        Section 2.2 (the mixtures).
    """

    def __init__(self, graph_predictor=None, steps=3, units=None, aggregation="mean",
                 update="gru", hidden_units=None, directions="both", layer_norm=False,
                 dropout=0.0, **kwargs):
        super().__init__(graph_predictor, units=units, dropout=dropout, **kwargs)
        (self.steps,) = hparams.check_positive(steps=steps)
        if units is not None:
            hparams.check_positive(units=units)
        hparams.check_choice("aggregation", aggregation, AGGREGATIONS)
        self.aggregation = aggregation
        hparams.check_choice("update", update, UPDATES)
        self.update = update
        hparams.check_choice("directions", directions, DIRECTIONS)
        self.directions = directions
        self.layer_norm = bool(layer_norm)
        self.hidden_units = (None if hidden_units is None
                             else hparams.check_positive(hidden_units=hidden_units)[0])

    def build(self, input_shape):
        features_shape, graphs_shape = self._build_graphs(input_shape)
        d = features_shape[-1]
        self._features_dim = d
        self._units = units = self.units or self._default_units(d)
        self.input_projection = None
        if units != d:
            self.input_projection = keras.layers.Dense(units, dtype=self.dtype_policy,
                                                       name="input_projection")
            self.input_projection.build((None, None, d))
        self.mixture.build((features_shape[0], features_shape[1], units), graphs_shape)
        cell_input = units * (1 + self._directions_heard() * self.num_mixtures)
        self.gates_dense = self.hidden_dense = self.norm = None
        if self.update == "mlp":
            self.hidden_dense = keras.layers.Dense(self.hidden_units or 2 * units,
                                                   activation=None if self.layer_norm else "relu",
                                                   dtype=self.dtype_policy, name="hidden")
            self.hidden_dense.build((None, None, cell_input))
            self._build_norm(self.hidden_dense.units)
            self.output_dense = keras.layers.Dense(units, activation="relu",
                                                   dtype=self.dtype_policy, name="output")
            self.output_dense.build((None, None, self.hidden_dense.units))
            self.built = True
            return
        self.gates_dense = keras.layers.Dense(2 * units, dtype=self.dtype_policy, name="gates")
        self.candidate_dense = keras.layers.Dense(units, dtype=self.dtype_policy,
                                                  name="candidate")
        self.gates_dense.build((None, None, cell_input))
        if self.hidden_units:
            self.hidden_dense = keras.layers.Dense(self.hidden_units, activation="relu",
                                                   dtype=self.dtype_policy, name="hidden")
            self.hidden_dense.build((None, None, cell_input))
            cell_input = self.hidden_units
        self.candidate_dense.build((None, None, cell_input))
        self._build_norm(units)
        self.built = True

    def _build_norm(self, width):
        if self.layer_norm:
            self.norm = keras.layers.LayerNormalization(dtype=self.dtype_policy, name="norm")
            self.norm.build((None, None, width))

    def call(self, inputs, training=None, mask=None):
        features, graphs, padding_mask = self._features_and_graphs(inputs, training, mask)
        if self.aggregation == "sum":
            graphs = summed(graphs)
        features = tf.cast(features, self.compute_dtype)
        h = features if self.input_projection is None else self.input_projection(features)
        initial = h
        keep = (None if padding_mask is None
                else tf.cast(padding_mask, self.compute_dtype)[:, :, None])
        shape = tf.shape(h)
        width = self._directions_heard() * self.num_mixtures * self._units
        for _ in range(self.steps):
            messages = self.mixture(h, graphs=graphs, padding_mask=padding_mask)
            if self.directions != "both":  # [B, T, 2, m, units] -> the direction heard
                messages = messages[:, :, DIRECTIONS.index(self.directions) - 1]
            messages = tf.reshape(messages, [shape[0], shape[1], width])  # [B, T, 2 m units]
            messages = self.fusion_dropout(messages, training=training)
            if self.update == "mlp":
                hidden = self.hidden_dense(tf.concat([initial, messages], -1))
                if self.norm is not None:
                    hidden = tf.nn.relu(self.norm(hidden))
                h = self.output_dense(hidden)
                if keep is not None:
                    h = h * keep
                continue
            update, reset = tf.split(
                float32_sigmoid(self.gates_dense(tf.concat([messages, h], -1))), 2, axis=-1)
            candidate = tf.concat([messages, reset * h], -1)
            if self.hidden_dense is not None:
                candidate = self.hidden_dense(candidate)
            candidate = self.candidate_dense(candidate)
            candidate = tf.tanh(candidate if self.norm is None else self.norm(candidate))
            h = (1 - update) * h + update * candidate
            if keep is not None:
                h = h * keep
        output = tf.concat([features, h], axis=-1)
        if keep is not None:
            output = output * keep
        return output

    def _directions_heard(self):
        return 2 if self.directions == "both" else 1

    def _default_units(self, features_dim):
        """The states' width when ``units`` is None: the features' own."""
        return features_dim

    def get_config(self):
        config = super().get_config()
        config.update(steps=self.steps, aggregation=self.aggregation, update=self.update,
                      hidden_units=self.hidden_units, directions=self.directions,
                      layer_norm=self.layer_norm)
        return config


def summed(graphs):
    """:class:`GraphInput` graphs with every row's weights times its number of sources (weights
    above 0): ``M H`` then sums a row's sources where it averaged them. Dense and top-k forms;
    uniform graphs (None) are left as they are."""
    if graphs is None:
        return None
    if graphs.form not in ("dense", "top_k"):
        raise ValueError(f"aggregation='sum' scales the graphs' rows, given dense or in the "
                         f"top-k form; these come as {graphs.form}: feed those forms, or use "
                         "aggregation='mean'.")
    weights = graphs.parts[-1]
    sources = tf.reduce_sum(tf.cast(weights > 0, weights.dtype), axis=-1, keepdims=True)
    return GraphInput(graphs.form, (*graphs.parts[:-1], weights * sources))
