"""Pretrain a tiny GLoMo graph predictor, then transfer its frozen graphs into a classifier.

Runs in about a minute on a laptop CPU:

    python examples/transfer_quickstart.py

Step 1 pretrains `GlomoPretrainer` on unlabeled token windows (here: random toy data; see
`glomo pretrain` for real text). Step 2 drops the frozen graph predictor into an ordinary Keras
classifier through `GlomoTransfer` and trains it with `model.fit`.
"""

import keras
import numpy as np

import glomo_tf

VOCAB, T = 200, 24
rng = np.random.default_rng(0)

# 1. Unsupervised pretraining on token-id windows (0 = padding).
windows = rng.integers(1, VOCAB, size=(256, T)).astype("int32")
predictor = glomo_tf.GraphPredictor(vocabulary_size=VOCAB, hidden_dim=32, num_layers=2,
                                     num_heads=4, conv_layers=2)
pretrainer = glomo_tf.GlomoPretrainer(predictor, num_positions=8)
pretrainer.compile(optimizer=keras.optimizers.Adam(2e-3))
pretrainer.fit(windows, batch_size=32, epochs=1, verbose=2)

# 2. Transfer: the frozen predictor's graphs mixed into the embeddings of a downstream model.
token_ids = keras.Input((None,), dtype="int32")
h = keras.layers.Embedding(VOCAB, 32, mask_zero=True)(token_ids)
h = glomo_tf.GlomoTransfer(pretrainer.graph_predictor, num_mixtures=2)([h, token_ids])
h = keras.layers.Bidirectional(keras.layers.GRU(32))(h)
classifier = keras.Model(token_ids, keras.layers.Dense(2, activation="softmax")(h))
classifier.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])

labels = (windows[:, 0] % 2).astype("int32")  # a toy label
classifier.fit(windows, labels, batch_size=32, epochs=2, verbose=2)
print("trainable weights:", sum(int(np.prod(w.shape)) for w in classifier.trainable_weights),
      "(the graph predictor's are frozen)")
