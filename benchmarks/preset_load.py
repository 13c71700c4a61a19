"""Time to a usable preset in a fresh interpreter: ``import glomo_tf``, then
``glomo_tf.load_preset(name)`` (the predictor built and its weights read, the tokenizer's table
built) and the first graphs of one sentence.

Each round starts a new Python process (nothing cached in memory), so the rounds see what a user
starting a program sees; the JSON holds each phase's median and per-round times.

Example::

    python benchmarks/preset_load.py --preset glomo_books_en --rounds 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import glomo_tf
imported = time.perf_counter()
predictor, tokenizer = glomo_tf.load_preset(sys.argv[1])
loaded = time.perf_counter()
graphs = predictor(tokenizer.encode(["The cat sat on the mat."]).to_tensor())["graphs"]
float(graphs.numpy().sum())
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "load_preset_s": loaded - imported,
                  "first_graphs_s": done - loaded}))
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="glomo_books_en")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: default)")
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=_harness.REPO_ROOT)
    if a.threads:
        env.update(TF_NUM_INTRAOP_THREADS=str(a.threads), TF_NUM_INTEROP_THREADS=str(a.threads))
    rounds = []
    for _ in range(a.rounds):
        out = subprocess.run([sys.executable, "-c", CHILD, a.preset], capture_output=True,
                             text=True, env=env, check=True).stdout
        rounds.append(json.loads(out.strip().splitlines()[-1]))
    phases = list(rounds[0])
    result = {
        "benchmark": "a preset in a fresh interpreter: import, load_preset, first graphs",
        "recorded": _harness.recorded(),
        "preset": a.preset,
        "rounds": a.rounds,
        "median_s": {k: round(statistics.median(r[k] for r in rounds), 3) for k in phases},
        "rounds_s": {k: [round(r[k], 3) for r in rounds] for k in phases},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
