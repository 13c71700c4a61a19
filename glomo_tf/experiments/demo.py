"""The planted demo (``glomo demo``): pretrain on the built-in planted corpus, check the graphs
find the plants.

One command, nothing to download: the corpus is generated from fixed seeds
(:func:`glomo_tf.data.planted.builtin_corpus`), with long-range dependencies whose true graph is
known. The demo

1. pretrains a small :class:`glomo_tf.GlomoPretrainer` with ``model.fit`` (Keras progress bar);
2. computes the graphs of held-out windows (a different seed) and, for each direction, graph layer
   and head, the share of planted receiving units whose strongest edge points at the planted source;
3. compares that share with the best *positional* rule (always point at the same relative offset,
   the offset chosen on the evaluation data itself, so an upper bound for any such rule) and with
   chance (a uniformly random admissible source);
4. writes ``metrics.json`` and ``graphs.png`` (heatmaps of the best head for a few example windows,
   planted edges outlined) to ``--output-dir``.

Run ``glomo demo`` (under four minutes on two CPU cores) or ``glomo demo --quick`` (a few seconds
of training: checks the plumbing, not the learning); from Python, :func:`run_demo` with
:data:`DEFAULTS` or :data:`QUICK`.
"""

import json
import os
import time

import numpy as np

from glomo_tf.precision import check_precision

# Corpus of the demo (see glomo_tf.data.planted); the test windows use a different seed.
CORPUS = dict(seq_len=48, deps_per_sequence=6, num_slots=6, num_pairs=8, num_fillers=40,
              min_gap=2, max_gap=12, bigram_prob=0.5)
# A small GLoMo, chosen by measurement to learn the planted edges within the time budget. The
# feature composition is "projected" (value projection, residual, LayerNorm), not the reference
# code's GRU on [m * F ; m]: with the GRU the best head finds the right key for about half of the
# receivers after 12,000 steps, with the projection for 0.99 / 0.98 of them after 2,100
# (examples/planted_diagnostics.py curve; docs/results/planted.md, "What blocked learning").
MODEL = dict(hidden_dim=64, num_layers=2, num_heads=4, conv_layers=1, kernel_size=3,
             threshold="scalar", normalization="squared_relu", composition="projected",
             context_length=3, decoder_layers=1, num_positions=None)
# Adam at a constant rate: 1e-2 made the switch to the right keys earlier than 3e-3 and 5e-3; a
# cosine decay from 3e-3 delayed it (forward 0.48 after 3,000 steps).
LEARNING_RATE = 1e-2
CLIP_NORM = 1.0
# Embeddings drawn from U(-0.5, 0.5), not the reference code's U(-0.1, 0.1): one head's share of a
# small embedding is too faint a message for the decoders to learn from in a few minutes (measured:
# with an oracle graph in a single head, the planted values are learned in 1,600 steps at +-0.1
# and in 500 at +-0.5).
EMBEDDING_SCALE = 0.5
# The token names of the pictures (glomo_tf.data.planted).
LEGEND = ("Units: B<j> marker of slot j; K<j>.<i> key of slot j naming value i; v<i> value i; "
          "w<i> filler.\nForward span K<j>.<i> ... B<j> v<i>: the marker's row should point at the "
          "key (backward: v<i> B<j> ... K<j>.<i>).")
DEFAULTS = dict(epochs=30, steps_per_epoch=100, batch_size=32, train_windows=2048, test_windows=256,
                examples=3)
QUICK = dict(epochs=1, steps_per_epoch=3, batch_size=16, train_windows=64, test_windows=16,
             examples=2)


# ---------------------------------------------------------------------- the pieces
def build_model(vocabulary_size, seed=0, precision="float32"):
    """The demo's :class:`GlomoPretrainer`, built and compiled: Adam, with XLA in float32 and a
    plain ``tf.function`` under ``mixed_bfloat16`` (see :mod:`glomo_tf.precision`)."""
    import keras

    from glomo_tf.models import GlomoPretrainer

    keras.utils.set_random_seed(seed)
    model = GlomoPretrainer.from_sizes(vocabulary_size, seed=seed, dtype=precision, **MODEL)
    model.build()
    predictor = model.graph_predictor  # threshold bias starts at -1: dense first graphs
    rng = np.random.default_rng(seed)
    predictor.embeddings.assign(rng.uniform(-EMBEDDING_SCALE, EMBEDDING_SCALE,
                                            predictor.embeddings.shape).astype("float32"))
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE, global_clipnorm=CLIP_NORM),
                  jit_compile=precision == "float32")
    return model


def training_dataset(token_ids, batch_size, seed=0):
    """Shuffled, repeated batches of token-id windows."""
    import tensorflow as tf

    return (tf.data.Dataset.from_tensor_slices(token_ids)
            .shuffle(len(token_ids), seed=seed, reshuffle_each_iteration=True)
            .repeat()
            .batch(batch_size, drop_remainder=True)
            .prefetch(2))


def predict_graphs(model, token_ids, batch_size=128):
    """``[N, 2, L, K, T, T]`` graphs of ``token_ids`` (inference mode), as numpy."""
    chunks = [model(token_ids[i:i + batch_size], training=False)["graphs"].numpy()
              for i in range(0, len(token_ids), batch_size)]
    return np.concatenate(chunks)


def recovery_report(graphs, corpus):
    """Recovery metrics of ``graphs`` ``[N, 2, L, K, T, T]`` on a :class:`PlantedCorpus`.

    Returns a dict per direction with the share per (layer, head), the best head, the share of the
    head-averaged graph per layer, the mean weight the best head puts on the planted source, the
    positional bound and chance. Layers and heads are numbered from 1.
    """
    from glomo_tf import evaluation
    from glomo_tf.data import planted

    edges = corpus.edges
    per_head = evaluation.edge_recovery(graphs, edges)  # [2, L, K]
    head_average = evaluation.edge_recovery(graphs.mean(axis=3), edges)  # [2, L]
    rows = evaluation.planted_rows(graphs, edges)  # [E, L, K, T]
    on_source = np.take_along_axis(rows, edges[:, 3][:, None, None, None], axis=-1)[..., 0]
    weight = evaluation.shares_by_direction(on_source, edges)  # [2, L, K]
    positional = evaluation.positional_baseline(edges)
    chance = evaluation.chance_level(edges, corpus.token_ids != 0)
    any_key = evaluation.same_type_chance(edges, corpus.token_ids, corpus.vocabulary)
    report = {}
    for z, name in enumerate(planted.DIRECTIONS):
        layer, head = np.unravel_index(int(np.argmax(per_head[z])), per_head[z].shape)
        best_layer = int(np.argmax(head_average[z]))
        report[name] = {
            "planted_edges": int(np.sum(edges[:, 1] == z)),
            "share_per_layer_head": np.round(per_head[z], 4).tolist(),
            "best_head": {"layer": int(layer) + 1, "head": int(head) + 1,
                          "share": float(per_head[z, layer, head]),
                          "mean_weight_on_source": float(weight[z, layer, head])},
            "head_average_per_layer": np.round(head_average[z], 4).tolist(),
            "best_layer_head_average": {"layer": best_layer + 1,
                                        "share": float(head_average[z, best_layer])},
            "positional_baseline": positional[name],
            "chance": chance[name],
            "random_key": any_key[name],
        }
    return report


def planted_value_cross_entropy(model, corpus, batch_size=128):
    """Mean cross-entropy (nats) of the planted values, per direction: ``{"forward": .., ...}``.

    For each planted edge, the decoder of its direction started at the marker ``B{j}`` predicts as
    its first unit the value ``v{i}`` (after the marker forward, before it backward); this is the
    cross-entropy of that one prediction (inference mode), averaged over the corpus' edges. It is
    low only when the value reached the marker's top feature: through the graphs, since nothing
    else at the marker carries it.
    """
    import keras
    import tensorflow as tf

    from glomo_tf import evaluation
    from glomo_tf.data import planted

    edges = corpus.edges
    per_unit = []  # [N, 2, T] cross-entropy of the first decoded unit from every position
    embedding_matrix = model.graph_predictor.embeddings
    for i in range(0, len(corpus.token_ids), batch_size):
        ids = tf.constant(corpus.token_ids[i:i + batch_size])
        top = model(ids, training=False)["features"][:, :, -1]  # [B, 2, T, d]
        positions = tf.range(tf.shape(ids)[1])
        directions = []
        for z, decoder in enumerate(model.decoders):
            out = decoder(top[:, z], positions, ids, embedding_matrix, training=False)
            ce = keras.losses.sparse_categorical_crossentropy(
                out["targets"][:, :, 0], tf.cast(out["logits"][:, :, 0], tf.float32),
                from_logits=True)
            directions.append(ce.numpy())
        per_unit.append(np.stack(directions, axis=1))
    per_unit = np.concatenate(per_unit)
    on_edges = per_unit[edges[:, 0], edges[:, 1], edges[:, 2]]
    shares = evaluation.shares_by_direction(on_edges, edges)
    return {name: round(float(shares[z]), 4) for z, name in enumerate(planted.DIRECTIONS)}


def examples_figure(graphs, corpus, report, examples):
    """Heatmaps of the best head per direction for the first ``examples`` windows."""
    from glomo_tf import viz
    from glomo_tf.data import planted

    panels = []
    for n in range(min(examples, len(corpus.token_ids))):
        tokens = corpus.tokens(n)
        for z, name in enumerate(planted.DIRECTIONS):
            best = report[name]["best_head"]
            graph = graphs[n, z, best["layer"] - 1, best["head"] - 1]
            marks = [tuple(edge) for edge in corpus.edges_of(n, z)]
            panels.append(dict(
                graph=graph, tokens=tokens, marks=marks, colorbar=True,
                title=f"window {n + 1}, {name} graph, layer {best['layer']} head {best['head']}"))
    return viz.panels_figure(
        panels, columns=2, panel_size=6.0,
        suptitle="Learned graphs G[t, s] (row t receives from column s); red boxes: planted edges",
        footnote=LEGEND)


def run_demo(output_dir, epochs, steps_per_epoch, batch_size, train_windows, test_windows,
             examples, seed=0, verbose=1, precision="float32"):
    """Pretrains, evaluates and writes the outputs; returns the metrics dict (also saved).

    ``precision``: ``"float32"`` or ``"mixed_bfloat16"`` (:mod:`glomo_tf.precision`)."""
    check_precision(precision)  # before any work
    start = time.time()
    from glomo_tf import viz
    from glomo_tf.data import planted

    train = planted.builtin_corpus("train", train_windows, **CORPUS)
    test = planted.builtin_corpus("test", test_windows, **CORPUS)
    print(f"Built-in planted corpus: {train_windows} training and {test_windows} held-out windows "
          f"of {CORPUS['seq_len']} units, {CORPUS['deps_per_sequence']} planted dependencies "
          f"'K_ji ... B_j v_i' or 'v_i B_j ... K_ji' per window (gap {CORPUS['min_gap']}-"
          f"{CORPUS['max_gap']}), "
          f"vocabulary {train.vocabulary.size}.")
    model = build_model(train.vocabulary.size, seed, precision)
    print(f"Pretraining GLoMo ({model.count_params():,} parameters) for {epochs} x "
          f"{steps_per_epoch} steps of {batch_size} windows:")
    fit_start = time.time()
    history = model.fit(training_dataset(train.token_ids, batch_size, seed), epochs=epochs,
                        steps_per_epoch=steps_per_epoch, verbose=verbose,
                        shuffle=False)  # the dataset shuffles itself
    fit_seconds = time.time() - fit_start

    graphs = predict_graphs(model, test.token_ids)
    report = recovery_report(graphs, test)
    value_ce = planted_value_cross_entropy(model, test)
    for name in report:
        report[name]["value_cross_entropy"] = value_ce[name]
    metrics_path = os.path.join(output_dir, "metrics.json")
    figure_path = os.path.join(output_dir, "graphs.png")
    viz.figure_to_png(examples_figure(graphs, test, report, examples), figure_path)
    preset_path = save_demo_preset(model, os.path.join(output_dir, "preset"), test, report,
                                   epochs * steps_per_epoch * batch_size * CORPUS["seq_len"])
    result = {
        "recovery": report,
        "corpus": dict(CORPUS, train_windows=train_windows, test_windows=test_windows,
                       train_seed=planted.BUILTIN_TRAIN_SEED, test_seed=planted.BUILTIN_TEST_SEED,
                       vocabulary_size=train.vocabulary.size),
        "model": dict(MODEL, parameters=int(model.count_params())),
        "training": {"epochs": epochs, "steps_per_epoch": steps_per_epoch,
                     "batch_size": batch_size, "seed": seed, "precision": precision,
                     "optimizer": f"Adam(learning_rate={LEARNING_RATE}, "
                                  f"global_clipnorm={CLIP_NORM})",
                     "initial_threshold": model.graph_predictor.scorer.threshold_initializer.value,
                     "embedding_scale": EMBEDDING_SCALE,
                     "loss": [float(x) for x in history.history["loss"]],
                     "perplexity": [float(x) for x in history.history["perplexity"]],
                     "seconds": round(fit_seconds, 1)},
        "outputs": {"metrics": metrics_path, "figure": figure_path, "preset": preset_path},
    }
    result["wall_seconds"] = round(time.time() - start, 1)
    with open(metrics_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    return result


def save_demo_preset(model, directory, test, report, tokens_seen):
    """The trained predictor as a preset of ids (the planted corpus has no text), with four
    held-out windows and their graphs as its reference."""
    from glomo_tf.presets import save_preset
    best = {d: round(float(report[d]["best_head"]["share"]), 4) for d in report}
    return save_preset(
        model.graph_predictor, None, directory, reference_ids=test.token_ids[:4],
        metadata={"corpus": ["glomo demo's planted corpus (generated from fixed seeds)"],
                  "data_licence": "none needed: generated by glomo_tf",
                  "tokens_seen": int(tokens_seen), "made_by": "glomo demo",
                  "planted_recovery_best_head": best})


def recovery_line(recovery):
    """``recovery: forward 0.93 backward 0.91 (best head; random-key rule 0.36 / 0.35)``."""
    fw, bw = recovery["forward"], recovery["backward"]
    return (f"recovery: forward {fw['best_head']['share']:.2f} backward "
            f"{bw['best_head']['share']:.2f} (best head; random-key rule "
            f"{fw['random_key']:.2f} / {bw['random_key']:.2f})")


def format_report(result):
    """The recovery table printed by ``glomo demo``."""
    from glomo_tf.data import planted

    recovery = result["recovery"]
    edges = recovery["forward"]["planted_edges"]
    lines = [
        "",
        recovery_line(recovery),
        "",
        f"Planted-edge recovery on {result['corpus']['test_windows']} held-out windows "
        f"({edges} planted edges per direction):",
        "share of planted receiving units whose strongest edge points at the planted source;",
        "baselines: the best fixed offset (chosen on this data), a uniformly random admissible",
        "source (chance), and a random key of the right side (knows the kind of unit, not the slot)",
        "",
        f"{'direction':<10} {'best head':>22} {'heads averaged':>22} {'positional bound':>20} "
        f"{'chance':>8} {'random key':>11}",
    ]
    for name in planted.DIRECTIONS:
        r = recovery[name]
        best, avg, pos = r["best_head"], r["best_layer_head_average"], r["positional_baseline"]
        lines.append(
            f"{name:<10} "
            f"{best['share']:>6.3f} (layer {best['layer']}, head {best['head']}) "
            f"{avg['share']:>12.3f} (layer {avg['layer']}) "
            f"{pos['share']:>8.3f} (offset {pos['offset']:+d}) "
            f"{r['chance']:>8.3f} {r['random_key']:>11.3f}")
    lines.append("")
    pairs = result["corpus"]["num_pairs"]
    value_ce = {name: recovery[name]["value_cross_entropy"] for name in planted.DIRECTIONS}
    lines.append(f"planted value's cross-entropy at the marker (nats; log {pairs} = "
                 f"{np.log(pairs):.2f} is a guess among the values): forward "
                 f"{value_ce['forward']:.3f}, backward {value_ce['backward']:.3f}")
    lines.append("")
    lines.append("per layer and head (rows: layers, columns: heads):")
    for name in planted.DIRECTIONS:
        for layer, shares in enumerate(recovery[name]["share_per_layer_head"]):
            cells = " ".join(f"{s:.3f}" for s in shares)
            lines.append(f"  {name:<9} layer {layer + 1}: {cells}")
    lines.append(f"\nTraining {result['training']['seconds']:.0f} s, "
                 f"final loss {result['training']['loss'][-1]:.3f}; "
                 f"total {result['wall_seconds']:.0f} s.")
    return "\n".join(lines)
