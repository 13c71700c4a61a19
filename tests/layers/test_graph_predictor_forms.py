"""GraphPredictor computes its CNNs and Eq. 1 in two forms each; the two forms agree.

* The CNNs: training mode runs every stack's windows through one batched matrix product and
  normalises with the batch's statistics; inference mode folds the batch norm (moving statistics)
  into one ``conv1d`` per stack. With ``momentum=0`` a training call leaves the moving statistics
  equal to that batch's, so an inference call on the same batch must give the same outputs.
* Eq. 1: a decoupled predictor computes every layer at once with the query threshold folded into
  the keys (``_graphs``); a coupled one computes one layer at a time with the threshold subtracted
  from the scores (``_coupled_layer_graphs``). On the same features they must agree.

The forms round differently (which is why both are kept: merging them would change outputs), so
they agree to float32 rounding, not bit for bit.
"""

import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GraphPredictor, ops
from glomo_tf.layers import graph_predictor
from glomo_tf.layers.conv_encoder import BATCH_NORM_EPSILON, batch_norm_affine

IDS = np.array([[5, 3, 9, 1, 7, 2, 4, 8],
                [8, 2, 6, 11, 14, 0, 0, 0],  # trailing padding
                [4, 0, 12, 7, 3, 0, 0, 0]],  # a hole, then padding
               np.int32)
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def predictor(rng, **kwargs):
    config = dict(vocabulary_size=20, hidden_dim=8, num_layers=2, num_heads=2, head_dim=4,
                  conv_layers=2, kernel_size=3)
    config.update(kwargs)
    layer = graph_predictor(**config)
    layer(IDS)
    for weight in layer.trainable_weights:  # away from the initial values, biases included
        weight.assign(weight.numpy() + rng.normal(0, 0.3, weight.shape).astype("float32"))
    return layer


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(kernel_size=1, conv_layers=3),
    dict(kernel_size=4, hidden_dim=16, num_heads=4, head_dim=8),
    dict(coupled=True, composition="gru"),
    dict(coupled=True, composition="projected", threshold="scalar", normalization="entmax15"),
])
@pytest.mark.parametrize("ids", [IDS, IDS[:1]], ids=["padded", "unpadded"])
def test_inference_cnn_form_matches_the_training_form(kwargs, ids, rng):
    # A batch without padding takes both forms' unmasked branches (tf.cond), a padded one the
    # masked ones.
    layer = predictor(rng, momentum=0.0, **kwargs)
    training = layer(ids, training=True)  # moving statistics := this batch's statistics
    inference = layer(ids, training=False)
    for key in ("graphs", "features") if layer.coupled else ("graphs",):
        np.testing.assert_allclose(inference[key], training[key], **TOLERANCE, err_msg=key)
    # and the statistics were really used: other moving statistics give other graphs
    layer.encoder.moving_means[0].assign(layer.encoder.moving_means[0] + 1.0)
    assert np.abs(layer(ids)["graphs"] - inference["graphs"]).max() > 1e-3


@pytest.mark.parametrize("threshold,normalization,live_row_weight", [
    ("query", "squared_relu", 0.5),
    ("scalar", "squared_relu", 0.5),
    ("query", "softmax", 0.0),
    ("scalar", "entmax15", 0.0),
    ("query", "entmax", 0.0),
])
def test_coupled_eq1_form_matches_the_batched_form(threshold, normalization, live_row_weight,
                                                   rng):
    layer = predictor(rng, coupled=True, threshold=threshold, normalization=normalization,
                      live_row_weight=live_row_weight, initial_threshold=0.0)
    features = tf.constant(rng.normal(size=(3, 2, IDS.shape[1], 8)).astype("float32"))
    admissible = ops.admissible_sources(ops.padding_mask_from_ids(IDS))
    batched = layer.scorer(features, features, admissible, training=True)
    for index in range(layer.num_layers):
        single = layer.scorer.layer_graphs(features, index, admissible, training=True)
        np.testing.assert_allclose(single, batched[:, :, index:index + 1], **TOLERANCE)
    if live_row_weight:
        # The live-row hinge: one loss over every layer, then one per layer (the same rows in
        # each layer, so their mean is the first).
        losses = [float(loss) for loss in layer.losses]
        assert len(losses) == 1 + layer.num_layers and losses[0] > 0
        np.testing.assert_allclose(np.mean(losses[1:]), losses[0], **TOLERANCE)


def test_batch_norm_affine_is_batch_normalisation(rng):
    x, mean, variance = rng.normal(size=(5, 3)), rng.normal(size=3), rng.uniform(0.5, 2, 3)
    gamma, beta = rng.normal(size=3), rng.normal(size=3)
    scale, shift = batch_norm_affine(*(tf.constant(v) for v in (mean, variance, gamma, beta)))
    expected = (x - mean) / np.sqrt(variance + BATCH_NORM_EPSILON) * gamma + beta
    np.testing.assert_allclose(x * scale.numpy() + shift.numpy(), expected, rtol=1e-12)
    assert BATCH_NORM_EPSILON == 1e-5  # the value the saved predictors were trained with


@pytest.mark.parametrize("kwargs,training", [
    (dict(), False),
    (dict(), True),
    (dict(threshold="scalar", num_layers=3), True),
    (dict(normalization="softmax"), False),
    (dict(normalization="entmax15", num_layers=1), True),
    (dict(normalization="entmax", entmax_alpha=1.25), True),
    (dict(live_row_weight=0.5), True),  # the hinge needs every row: the full graphs, cut
])
def test_graphs_with_top_rows_are_calls_graphs_cut_to_the_rows(kwargs, training, rng):
    """graphs_with_top_rows computes the last layer at the given rows only (repeated, unsorted,
    padded rows included): the same graphs as call()'s, cut, and the same gradients."""
    layer = predictor(rng, **kwargs)
    rows = tf.constant([[6, 0, 3, 3, 7], [1, 5, 2, 0, 4]], tf.int32)  # [2, S]
    upstream = tf.constant(rng.normal(size=(len(IDS), 2, layer.num_heads, 5, IDS.shape[1])),
                           tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        full = layer(IDS, training=training)
        full_top = tf.stack([tf.gather(full["graphs"][:, z, -1], rows[z], axis=2)
                             for z in range(2)], axis=1)  # [B, 2, K, S, T]
        got = layer.graphs_with_top_rows(IDS, rows, training=training)
        full_loss = tf.reduce_sum(full_top * upstream)
        got_loss = tf.reduce_sum(got["top_rows"] * upstream)
    assert got["graphs"].shape == (len(IDS), 2, layer.num_layers - 1, layer.num_heads,
                                   IDS.shape[1], IDS.shape[1])
    np.testing.assert_allclose(got["graphs"], full["graphs"][:, :, :-1], **TOLERANCE)
    np.testing.assert_allclose(got["top_rows"], full_top, **TOLERANCE)
    np.testing.assert_array_equal(got["padding_mask"], full["padding_mask"])
    assert np.abs(full_top.numpy()).max() > 0.1  # not a vacuous match of empty rows
    for kernel in (layer.scorer.query_kernel, layer.scorer.key_kernel, layer.embeddings):
        np.testing.assert_allclose(tf.convert_to_tensor(tape.gradient(got_loss, kernel)),
                                   tf.convert_to_tensor(tape.gradient(full_loss, kernel)),
                                   **TOLERANCE)


def test_graphs_with_top_rows_builds_an_unbuilt_predictor():
    layer = GraphPredictor(vocabulary_size=20, hidden_dim=8, num_layers=2, num_heads=2,
                           head_dim=4, conv_layers=1)
    out = layer.graphs_with_top_rows(IDS, tf.constant([[1, 2], [3, 4]]))
    assert out["top_rows"].shape == (len(IDS), 2, 2, 2, IDS.shape[1])
    sums = tf.reduce_sum(out["top_rows"], -1).numpy()  # each row sums to 1, or 0 if empty
    assert np.all((np.abs(sums - 1) < 1e-5) | (sums == 0)) and (sums > 0.5).any()


def test_graphs_with_top_rows_refuses_a_coupled_predictor(rng):
    layer = predictor(rng, coupled=True)
    with pytest.raises(ValueError, match="graphs_with_top_rows needs a GraphPredictor"):
        layer.graphs_with_top_rows(IDS, tf.zeros([2, 3], tf.int32))
