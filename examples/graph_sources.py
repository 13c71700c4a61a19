"""What a pretrained predictor's graphs point at on a labelled task, against the uniform graph.

Transfer asks more of a graph than being sparse: ``M H`` hands each unit the features of the
sources its row weights, so it helps a classifier only where those sources carry what the task
needs. This script measures that on a labelled text set (MR by default), per direction and graph
layer, every head pooled, for the learned graphs and for the uniform graph over the same units
(every admissible source weighted alike, what ``--variants uniform`` transfers):

* ``label_information``: the mean over edges (weighted by the graph) of the source word's
  class information ``|log p(w | pos) - log p(w | neg)|`` (add-one smoothed counts over the
  task's texts; for more than two classes, the largest gap between two classes), i.e. how much
  a source word alone says about the label;
* ``frequent_share``: the weight on the task's ``--frequent`` most frequent words (function
  words and punctuation);
* ``sources``, ``self_token_share``: sources per row (weight > 0) and the weight on a source that is
  the same word as the receiver;
* ``top_sources``: the words that receive the most weight, with their share under both graphs.

Run::

    python examples/graph_sources.py --run runs/wt2_projected_entmax15 --dataset mr \\
        --output examples/outputs/graph_sources_mr.json

Word statistics count every text of the task: this is a description of the graphs, not a
classifier, so nothing is held out.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a glomo pretrain run directory")
    p.add_argument("--dataset", default="mr", choices=("mr", "subj", "sst2"))
    p.add_argument("--max-length", type=int, default=48)
    p.add_argument("--max-texts", type=int, default=None,
                   help="a seeded sample of N texts (default: all)")
    p.add_argument("--frequent", type=int, default=50,
                   help="this many most frequent words count as frequent (default 50)")
    p.add_argument("--top", type=int, default=12, help="top sources listed (default 12)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--output", default=None, help="write the JSON here too")
    return p.parse_args(argv)


def load_texts(dataset):
    from glomo_tf.data import labeled

    if dataset == "mr":
        return labeled.load_mr()[:2]
    if dataset == "subj":
        return labeled.load_subj()[:2]
    texts, labels, _ = labeled.load_sst("train")
    return texts, labels


def word_information(ids, labels, vocabulary_size):
    """``|log p(w | c) - log p(w | c')|``, largest over class pairs, per word id (add-one)."""
    classes = np.unique(labels)
    counts = np.ones((len(classes), vocabulary_size))
    for c_index, c in enumerate(classes):
        words = ids[labels == c]
        np.add.at(counts[c_index], words[words != 0], 1)
    log_p = np.log(counts / counts.sum(axis=1, keepdims=True))
    return log_p.max(axis=0) - log_p.min(axis=0)


class SourceStatistics:
    """Edge-weighted sums over rows with a source, per direction and layer (heads pooled)."""

    def __init__(self, directions, layers, vocabulary_size):
        self.sums = np.zeros((directions, layers, 5))  # rows, info, frequent, sources, self
        self.source_weight = np.zeros((directions, layers, vocabulary_size))

    def update(self, graphs, ids, information, frequent):
        """``graphs [B, 2, L, K, T, T]`` (or ``[B, 2, 1, 1, T, T]``) over ``ids [B, T]``."""
        total = graphs.sum(-1)  # [B, 2, L, K, T]
        live = total > 0
        same = (ids[:, :, None] == ids[:, None, :]).astype(np.float32)  # [B, T, S]
        info = information[ids].astype(np.float32)  # [B, S]
        freq = frequent[ids].astype(np.float32)
        for z in range(graphs.shape[1]):
            for layer in range(graphs.shape[2]):
                g = graphs[:, z, layer]  # [B, K, T, S]
                p = g / np.where(total[:, z, layer] > 0, total[:, z, layer], 1)[..., None]
                rows = live[:, z, layer]
                self.sums[z, layer] += [
                    rows.sum(), (p @ info[:, None, :, None])[..., 0][rows].sum(),
                    (p @ freq[:, None, :, None])[..., 0][rows].sum(),
                    (g > 0).sum(-1)[rows].sum(), (p * same[:, None]).sum(-1)[rows].sum()]
                weight = p.sum(axis=(1, 2))  # [B, S]: weight each source receives
                np.add.at(self.source_weight[z, layer], ids.ravel(), weight.ravel())

    def result(self, tokens, top):
        out = []
        for z in range(self.sums.shape[0]):
            layers = []
            for layer in range(self.sums.shape[1]):
                rows, info, freq, sources, same = self.sums[z, layer]
                weight = self.source_weight[z, layer].copy()
                weight[0] = 0
                share = weight / max(weight.sum(), 1e-12)
                order = np.argsort(-share)[:top]
                layers.append({"rows": int(rows), "label_information": info / rows,
                               "frequent_share": freq / rows, "sources": sources / rows,
                               "self_token_share": same / rows,
                               "top_sources": [[tokens[i], float(share[i])] for i in order],
                               "_share": share, "_top": order})
            out.append(layers)
        return out


def main(argv=None):
    a = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from glomo_tf import ops
    from glomo_tf.data.vocabulary import Tokenizer, check_vocabulary_matches
    from glomo_tf.saving import load_graph_predictor

    started = time.perf_counter()
    tokenizer = Tokenizer.load(os.path.join(a.run, "tokenizer"))
    predictor = load_graph_predictor(os.path.join(a.run, "graph_predictor.keras"))
    check_vocabulary_matches(tokenizer.vocabulary, predictor)
    texts, labels = load_texts(a.dataset)
    labels = np.asarray(labels)
    if a.max_texts:  # a seeded sample: the files hold one class after the other
        keep = np.sort(np.random.default_rng(0).permutation(len(texts))[:a.max_texts])
        texts, labels = [texts[i] for i in keep], labels[keep]
    if len(np.unique(labels)) < 2:
        raise SystemExit("error: the texts hold a single class; the label information needs two")
    ids = np.asarray(tokenizer.encode(list(texts), max_length=a.max_length))
    vocabulary_size = tokenizer.vocabulary_size
    information = word_information(ids, labels, vocabulary_size)
    counts = np.bincount(ids[ids != 0], minlength=vocabulary_size)
    frequent = np.zeros(vocabulary_size, bool)
    frequent[np.argsort(-counts)[:a.frequent]] = True
    tokens = [t.decode("utf-8", "replace") for t in
              tokenizer.ids_to_tokens(np.arange(vocabulary_size)[None]).numpy()[0]]

    layers = predictor.num_layers
    learned = SourceStatistics(2, layers, vocabulary_size)
    uniform = SourceStatistics(2, 1, vocabulary_size)
    for start in range(0, len(ids), a.batch_size):
        batch = ids[start:start + a.batch_size]
        batch = batch[:, :max(1, int((batch != 0).sum(1).max()))]
        graphs = np.asarray(predictor(batch, training=False)["graphs"], np.float32)
        learned.update(graphs, batch, information, frequent)
        flat = np.asarray(ops.uniform_graphs(batch != 0), np.float32)[:, :, None, None]
        uniform.update(flat, batch, information, frequent)
    learned_result = learned.result(tokens, a.top)
    uniform_result = uniform.result(tokens, a.top)
    report = {"run": a.run, "dataset": a.dataset, "texts": len(texts), "max_length": a.max_length,
              "frequent_words": a.frequent, "directions": {}}
    for z, direction in enumerate(("forward", "backward")):
        base = uniform_result[z][0]
        rows = []
        for layer, r in enumerate(learned_result[z]):
            r.pop("_share")
            for entry, word in zip(r["top_sources"], r.pop("_top")):
                entry.append(float(base["_share"][word]))  # its share under the uniform graph
            rows.append({"layer": layer + 1, **r})
        base.pop("_share")
        base.pop("_top")
        report["directions"][direction] = {"learned": rows, "uniform": base}
    report["seconds"] = round(time.perf_counter() - started, 1)

    for direction, result in report["directions"].items():
        u = result["uniform"]
        print(f"{direction}: uniform graph: label information {u['label_information']:.3f}, "
              f"frequent share {u['frequent_share']:.3f}, sources {u['sources']:.1f}")
        for r in result["learned"]:
            top = ", ".join(f"{w} {s:.2f} ({b:.2f})" for w, s, b in r["top_sources"][:6])
            print(f"  layer {r['layer']}: label information {r['label_information']:.3f}, "
                  f"frequent share {r['frequent_share']:.3f}, sources {r['sources']:.2f}, "
                  f"same word {r['self_token_share']:.3f}; top sources (uniform): {top}")
    if a.output:
        with open(a.output, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
            handle.write("\n")
    print(f"{report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
