"""Pretraining-step throughput of :class:`glomo_tf.GlomoPretrainer`, optionally beside the PyTorch peer.

Times full training steps (forward of both directions, context-decoder loss, backward, clipped SGD
update) on random token-id windows with every position real, and prints one JSON object on stdout
with tokens/s (``B * T / median step``) per execution mode: ``function`` (``tf.function``) and
``xla`` (``tf.function(jit_compile=True)``, what ``compile(jit_compile=True)`` gives ``fit``).

The configuration follows the peer's defaults (``../shared/bench/torch_peer/glomo_torch.py --mode
train``): batch 16, T 128, d 256, vocabulary 10k, 3 graph layers, 8 heads of 128, 4-layer key and
query CNNs, thresholds predicted from the query, GRU feature composition, decoders of 2 GRU layers
predicting 3 units from 20 sampled positions per direction, SGD (learning rate 1, momentum 0.2)
with the gradient clipped to global norm 0.25. With ``--peer PYTHON`` the peer runs the same
configuration as a subprocess, interleaved round by round with the glomo_tf timings.

``--precision float32 mixed_bfloat16`` times every mode in both precisions (``function_bf16``:
the ``mixed_bfloat16`` policy, what ``glomo pretrain --precision mixed_bfloat16`` runs) and the
peer in float32 and under ``torch.autocast`` bfloat16. ``--profile`` adds each mode's time per
TensorFlow op type (one profiled round after the timings), to see where a step's time goes.

Examples::

    python benchmarks/pretrain_throughput.py
    python benchmarks/pretrain_throughput.py --peer /tmp/torchenv/bin/python
    python benchmarks/pretrain_throughput.py --mode function xla --precision float32 \
        mixed_bfloat16 --threads 1 --peer /tmp/torchenv/bin/python
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

MODES = ("function", "xla")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_model_arguments(p)
    _harness.add_timing_arguments(p)
    p.add_argument("--mode", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--context-length", "--dec-len", dest="context_length", type=int, default=3)
    p.add_argument("--decoder-layers", "--dec-layers", dest="decoder_layers", type=int, default=2)
    p.add_argument("--positions", "--sample-len", dest="positions", type=int, default=20,
                   help="decoded positions per window and direction")
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--momentum", type=float, default=0.2)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--profile", action="store_true",
                   help="also record each mode's milliseconds per step by TensorFlow op type")
    a = _harness.check_arguments(p, p.parse_args(argv))
    if a.seq <= a.context_length:
        p.error("need seq > context-length")
    return a


def main(argv=None):
    a = parse_args(argv)
    import numpy as np
    import keras
    import tensorflow as tf

    _harness.set_threads(tf, a.threads)
    sys.path.insert(0, _harness.REPO_ROOT)
    from glomo_tf import GlomoPretrainer
    from glomo_tf.precision import precision_scope

    rng = np.random.default_rng(a.seed)
    batches = [tf.constant(rng.integers(1, a.vocab, (a.batch, a.seq)), tf.int32)
               for _ in range(a.warmup + a.iters)]

    models, steps, first_loss = {}, {}, {}
    for key, mode, precision in _harness.timed_modes(a):  # one model each, same initial weights
        keras.utils.set_random_seed(a.seed)
        with precision_scope(precision):
            model = GlomoPretrainer.from_sizes(
                a.vocab, hidden_dim=a.d, num_layers=a.layers, num_heads=a.heads,
                head_dim=a.head_dim, conv_layers=a.conv_layers, kernel_size=a.kernel,
                threshold="query", composition="gru", context_length=a.context_length,
                decoder_layers=a.decoder_layers, num_positions=a.positions, seed=a.seed)
            model.build()
            model.compile(optimizer=keras.optimizers.SGD(a.lr, momentum=a.momentum,
                                                         global_clipnorm=a.clip))
            model.optimizer.build(model.trainable_variables)
        step = tf.function(model.train_step, jit_compile=mode == "xla")

        def run(ids, step=step):
            return float(step(ids)["loss"])  # fetching the loss waits for the update

        models[key], steps[key] = model, run
        first_loss[key] = run(batches[0])  # compiles; out of the timings

    cmds = _harness.peer_commands(a, "train", [
        "--dec-len", str(a.context_length), "--dec-layers", str(a.decoder_layers),
        "--sample-len", str(a.positions), "--lr", str(a.lr), "--momentum", str(a.momentum),
        "--clip", str(a.clip)])
    per_round, peer_rounds = _harness.interleaved(
        a, lambda key: _harness.median_seconds(steps[key], batches, a.warmup), cmds)
    result = {
        "benchmark": "pretraining step: forward, loss, backward, clipped SGD update, no padding",
        "recorded": _harness.recorded(tf),
        "config": {k: getattr(a, k) for k in (
            "batch", "seq", "d", "vocab", "layers", "heads", "head_dim", "conv_layers", "kernel",
            "context_length", "decoder_layers", "positions", "lr", "momentum", "clip",
            "precision", "iters", "warmup", "rounds", "seed")},
        "parameters": int(next(iter(models.values())).count_params()),
        "first_step_loss": {m: round(v, 4) for m, v in first_loss.items()},
        "loss_note": "the first step's loss is about log(vocab) for a fresh model",
    }
    result.update(_harness.summary(a, a.batch * a.seq, per_round, peer_rounds, cmds, tf, keras))
    # The physical limit: the step's matrix products at this CPU's product rate in each precision.
    flops = _harness.matmul_flops(
        tf.function(next(iter(models.values())).train_step).get_concrete_function(
            batches[0]).graph)
    rates = {precision: _harness.matmul_rate(tf, precision) for precision in a.precision}
    result["matmul_flops_per_step"] = int(flops)
    result["matmul_gflop_per_step"] = round(flops / 1e9, 2)
    result["matmul_gflop_per_s_n1024"] = rates
    result["matmul_bound_ms_per_step"] = {
        precision: round(flops / (max(rate.values()) * 1e9) * 1000, 1)
        for precision, rate in rates.items()}
    result["matmul_bound_share_of_step"] = {
        key: round(result["matmul_bound_ms_per_step"][precision]
                   / result["ms_per_iter_median"][key], 3)
        for key, _, precision in _harness.timed_modes(a)}
    if a.profile:
        result["profile_ms_per_step"] = {
            key: _harness.op_profile(tf, steps[key], batches[0]) for key in steps}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
