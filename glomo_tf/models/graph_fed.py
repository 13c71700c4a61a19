"""``GraphFedModel``: a model on token ids trained from graphs computed once (its GLoMo layers
fed cached graphs through their ``[features, graphs]`` input)."""

import keras

def _transfer_layers(model):
    """Every ``GlomoTransfer`` layer of ``model`` (nested models included) that reads learned
    graphs."""
    from glomo_tf.layers.glomo_transfer import GlomoTransfer

    found = []
    for layer in model.layers:
        if isinstance(layer, GlomoTransfer):
            if layer.graph_mode == "learned":
                found.append(layer)
        elif hasattr(layer, "layers"):
            found.extend(_transfer_layers(layer))
    return found


class GraphFedModel(keras.Model):
    """``(ids, graphs...) -> model(ids)``, the model's ``GlomoTransfer`` layers reading
    the given graphs instead of running their frozen predictor.

    The fed model is the model's own functional graph with every such layer called on
    ``[features, graphs]`` instead of ``[features, token_ids]`` (the layers themselves, not
    copies), one per form of the graphs it is given: it shares every layer and weight with
    ``model``, so training it trains ``model``.

    Args:
        model: a functional Keras model on token ids holding one or more ``GlomoTransfer``
            layers with learned graphs and ``fine_tune=False``, all on the same predictor (the
            fed graphs are its graphs of the ids).

    Call arguments:
        inputs: ``(ids [B, T], graphs [B, 2, L, K, T, T])``, ``(ids, {"packed_candidates":
            [B, T, C, T]})`` (or ``{"candidates": [B, 2, T, C, T]}``) or, top-k, ``(ids,
            indices [B, 2, L, K, T, k], weights [B, 2, L, K, T, k])``: the graphs of those ids
            (:func:`glomo_tf.data.graph_cache.cached_training_batches`,
            :func:`~glomo_tf.data.graph_cache.with_graphs`), any form of
            :class:`~glomo_tf.layers.GraphInput`.
        training: bool.
    """

    def __init__(self, model, **kwargs):
        kwargs.setdefault("name", f"{model.name}_graph_fed")
        super().__init__(**kwargs)
        layers = _transfer_layers(model)
        if not layers:
            raise ValueError(f"{model.name} has no GlomoTransfer layer with learned graphs to "
                             "feed; train it on token ids.")
        for layer in layers:
            if layer.fine_tune:
                raise ValueError(
                    f"{layer.name} fine-tunes its graph predictor (fine_tune=True): its graphs "
                    "change every step, so train the model on token ids (the online path).")
        if len({id(layer.graph_predictor) for layer in layers}) > 1:
            raise ValueError(f"The GlomoTransfer layers of {model.name} hold different graph "
                             "predictors; one set of fed graphs cannot serve them all.")
        nested = [layer.name for layer in layers if layer not in model.layers]
        if nested or not hasattr(model, "inputs") or len(model.inputs) != 1:
            raise ValueError(f"{model.name} must be a functional model on token ids with its "
                             "GlomoTransfer layers at its own level (not inside a nested "
                             f"model{': ' + ', '.join(nested) if nested else ''}) to be fed "
                             "graphs; train it on token ids.")
        self.model = model
        self._transfer = layers

    def build(self, input_shape):
        """Makes the fed model for the form of the graphs in ``input_shape``."""
        self.form = _graph_input(input_shape).form
        self.fed_model = _fed_twin(self.model, self._transfer, self.form)

    def call(self, inputs, training=None):
        ids, graphs = inputs[0], _graph_input(inputs)
        if graphs.form != self.form:
            raise ValueError(f"{self.name} was built for graphs of the {self.form} form, and is "
                             f"given {graphs.form}; make another GraphFedModel for those.")
        return self.fed_model([ids, *graphs.parts], training=training)

    def compute_output_shape(self, input_shape):
        return self.model.compute_output_shape(input_shape[0])


def _graph_input(inputs):
    """The :class:`~glomo_tf.layers.GraphInput` of ``(ids, graphs...)`` (tensors or shapes)."""
    from glomo_tf.layers.graph_input import GraphInput

    graphs = tuple(inputs[1:])
    return GraphInput.parse(graphs[0] if len(graphs) == 1 else graphs)


def _fed_twin(model, transfer, form):
    """``model`` as a functional model on ``[ids, *graph parts]``: each layer of ``transfer``
    called on ``[features, graphs]`` (graphs of ``form``, with the sizes of the layers'
    predictor and mixture; in the layers' compute dtype, top-k indices int32), the others as they
    are; the same layer objects. The graphs' inputs take the compute dtype because this model
    casts its float inputs to it on the way in (a Keras layer's autocast): float32 inputs would
    cast them back, and the transfer layers again (a third of the cached-candidates step's
    added time under ``mixed_bfloat16``)."""
    import keras

    from glomo_tf._keras_private import run_functional_graph
    from glomo_tf.layers.graph_input import GraphInput

    predictor, mixture = transfer[0].graph_predictor, transfer[0].mixture
    layers, heads = predictor.num_layers, predictor.num_heads
    shapes = {"dense": [(2, layers, heads, None, None)],
              "top_k": [(2, layers, heads, None, None)] * 2,
              "candidates": [(2, None, mixture.distinct_candidates(layers, heads), None)],
              "packed_candidates": [(None, mixture.distinct_candidates(layers, heads), None)]}
    weights_dtype = transfer[0].compute_dtype
    dtypes = ["int32", weights_dtype] if form == "top_k" else [weights_dtype]
    parts = [keras.Input(shape, dtype=dtype, name=f"graphs_{i}")
             for i, (shape, dtype) in enumerate(zip(shapes[form], dtypes))]
    fed = GraphInput(form, tuple(parts)).value()

    def call(layer, *args, **kwargs):
        if layer in transfer:
            return layer([args[0][0], *(fed if form == "top_k" else [fed])], **kwargs)
        return layer(*args, **kwargs)

    ids = keras.Input(model.inputs[0].shape[1:], dtype=model.inputs[0].dtype, name="ids")
    outputs = run_functional_graph(model, ids, call)
    return keras.Model([ids, *parts], outputs, name=f"{model.name}_fed_{form}")
