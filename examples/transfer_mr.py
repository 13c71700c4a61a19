"""Movie-review polarity (MR) with and without pretrained GLoMo graphs, in plain ``model.fit``.

What ``glomo transfer --run RUN --dataset mr`` does, for one seed and without the CLI:

    python examples/transfer_mr.py RUN_DIR [MR_DIR]

RUN_DIR is a ``glomo pretrain`` output (``graph_predictor.keras`` and ``tokenizer/``); MR_DIR holds
``rt-polarity.pos`` and ``rt-polarity.neg`` (default: the project's ``../shared/data/mr``).
"""

import os
import sys

import keras
import numpy as np

import glomo_tf
from glomo_tf.data import Tokenizer, load_mr, seeded_split
from glomo_tf.models.classifier import build_classifier

run_dir = sys.argv[1]
texts, labels, class_names = load_mr(sys.argv[2] if len(sys.argv) > 2 else None)
tokenizer = Tokenizer.load(os.path.join(run_dir, "tokenizer"))  # the pretraining ids
predictor = glomo_tf.load_graph_predictor(os.path.join(run_dir, "graph_predictor.keras"))
ids = tokenizer.encode(texts, max_length=64).numpy()

seed = 0
train, test = seeded_split(len(texts), test_fraction=0.1, seed=seed)      # 90 / 10
keep, val = seeded_split(len(train), test_fraction=0.1, seed=seed)        # validation from train
train, val = train[keep], train[val]

for variant in ["baseline", "glomo_embeddings", "glomo_rnn", "uniform"]:
    keras.utils.set_random_seed(seed)
    model = build_classifier(tokenizer.vocabulary_size, len(class_names), variant,
                             graph_predictor=predictor)  # frozen predictor
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(ids[train], labels[train], validation_data=(ids[val], labels[val]),
              epochs=10, batch_size=50,
              callbacks=[keras.callbacks.EarlyStopping("val_accuracy", mode="max", patience=2,
                                                       restore_best_weights=True)])
    predicted = model.predict(ids[test], batch_size=100, verbose=0).argmax(-1)
    print(f"{variant:>17}: test accuracy {100 * np.mean(predicted == labels[test]):.2f}")
