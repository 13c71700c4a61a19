"""What learned graphs look like: extraction over sentences and statistics (``glomo extract``).

* :func:`extract`: the tokens and head-averaged graphs ``[2, L, n, n]`` of each sentence, read with
  the predictor's own tokenizer;
* :class:`GraphStatistics`: per direction and layer, over many sentences, the share of live rows,
  the weight on adjacent units, the mean distance to the sources, the sources per row, the rows'
  entropy and the weight on ``<unk>``; the same for uniform graphs over the same units;
* :func:`format_edges`, :func:`format_statistics`, :func:`graphs_figure`: text and pictures.
"""

import os

import numpy as np

from glomo_tf.hparams import DIRECTIONS

# Float32 arrays the size of one batch's graphs that the predictor's call holds at once (an
# estimate: the scores, the graphs and the normalisation's temporaries).
GRAPH_ARRAYS_ALIVE = 4


def extract(predictor, tokenizer, sentences, max_length=128, batch_size=128, statistics=None,
            uniform_statistics=None):
    """Tokens and head-averaged graphs of ``sentences``, ``batch_size`` sentences per call.

    Returns a list of dicts ``{"text", "tokens", "graphs"}`` where ``graphs`` is a float array
    ``[2, L, n, n]`` over the sentence's ``n`` units (direction 0 forward, 1 backward). A
    :class:`GraphStatistics` given as ``statistics`` is updated with every batch's per-head graphs,
    one given as ``uniform_statistics`` with the uniform graphs over the same units (the
    reference: every admissible source weighted alike).
    """
    from glomo_tf import ops
    from glomo_tf.data.vocabulary import check_vocabulary_matches

    check_vocabulary_matches(tokenizer.vocabulary, predictor)
    unk_id = tokenizer.vocabulary.unk_id
    out = []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start:start + batch_size]
        ids = np.asarray(tokenizer.encode(batch, max_length=max_length))
        per_head = np.asarray(predictor(ids, training=False)["graphs"], np.float32)
        if statistics is not None:
            statistics.update(per_head, ids, unk_id)
        if uniform_statistics is not None:
            uniform = np.asarray(ops.uniform_graphs(ids != 0))  # [B, 2, T, T]
            uniform_statistics.update(uniform[:, :, None, None], ids, unk_id)
        graphs = per_head.mean(axis=3)  # [B, 2, L, T, T]
        tokens = tokenizer.ids_to_tokens(ids).numpy()
        lengths = (ids != 0).sum(axis=1)
        for i, n in enumerate(lengths):
            out.append({"text": batch[i],
                        "tokens": [t.decode("utf-8", "replace") for t in tokens[i, :n]],
                        "graphs": graphs[i, :, :, :n, :n]})
    return out


class GraphStatistics:
    """What graphs ``[B, 2, L, K, T, T]`` look like, accumulated over batches.

    Per direction and layer, every head pooled, over the rows of real units that have an
    admissible source (a real unit before them, forward; after them, backward):

    * ``live``: the share of those rows with any weight;
    * over the live rows, as shares of their total weight: ``adjacent`` (on ``|t - s| = 1``) and
      ``unk`` (on ``<unk>`` sources); ``mean_distance``, the weight-averaged ``|t - s|``;
    * ``sources``: the mean number of sources with weight per live row, and ``entropy``: the mean
      entropy (nats) of the live rows normalised to sum to one.

    ``units`` and ``unk_share`` count the real units and the share of them that are ``<unk>``.
    """

    KEYS = ("live", "adjacent", "mean_distance", "sources", "entropy", "unk")

    def __init__(self):
        self._sums = None
        self.units = 0
        self.unknown = 0

    def update(self, graphs, token_ids, unk_id=1):
        from glomo_tf import ops

        graphs = np.asarray(graphs, np.float32)
        token_ids = np.asarray(token_ids)
        real = token_ids != 0  # [B, T]
        _, directions, layers, _, steps, _ = graphs.shape
        if self._sums is None:
            self._sums = np.zeros((directions, layers, 8))
        self.units += int(real.sum())
        self.unknown += int((real & (token_ids == unk_id)).sum())
        position = np.arange(steps)
        distance = np.abs(position[:, None] - position[None, :]).astype(np.float32)
        admissible = np.asarray(ops.admissible_sources(real))[:, :, 0, 0] > 0  # [B, 2, T, T]
        receives = real[:, None] & admissible.any(axis=-1)  # [B, 2, T]: real, with a source
        unknown_source = (token_ids == unk_id)[:, None, None, :]  # [B, 1, 1, T] (sources)
        for z in range(directions):
            has_source = receives[:, z]  # [B, T]
            for layer in range(layers):
                g = graphs[:, z, layer]  # [B, K, T, T]
                total = g.sum(-1)  # [B, K, T]
                rows = np.broadcast_to(has_source[:, None], total.shape)
                live = rows & (total > 0)
                p = g / np.where(total > 0, total, 1.0)[..., None]
                entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)
                self._sums[z, layer] += [  # float64 sums
                    rows.sum(), live.sum(), total[live].astype(np.float64).sum(),
                    (g * (distance == 1)).sum(-1)[live].sum(),
                    (g * distance).sum(-1)[live].sum(),
                    (g > 0).sum(-1)[live].sum(), entropy[live].sum(),
                    (g * unknown_source).sum(-1)[live].sum()]

    def result(self):
        """``{"forward": [per layer {key: value}], "backward": [...], "units", "unk_share"}``."""
        out = {"units": self.units, "unk_share": self.unknown / max(self.units, 1)}
        if self._sums is None:
            return out
        for z, name in enumerate(DIRECTIONS[:self._sums.shape[0]]):
            out[name] = []
            for rows, live, weight, adjacent, distance, sources, entropy, unk in self._sums[z]:
                weight_ = max(weight, 1e-12)
                out[name].append({
                    "live": live / max(rows, 1), "adjacent": adjacent / weight_,
                    "mean_distance": distance / weight_, "sources": sources / max(live, 1),
                    "entropy": entropy / max(live, 1), "unk": unk / weight_})
        return out


def format_statistics(result, uniform=None):
    """Table lines of a :meth:`GraphStatistics.result`, and of the uniform graphs' if given."""
    lines = [f"\nGraph statistics over {result['units']} units ({100 * result['unk_share']:.1f}% "
             "<unk>), every head pooled, rows with an admissible source:",
             f"  {'graph':<18}" + "".join(f"{key:>14}" for key in GraphStatistics.KEYS)]
    for label, source in (("", result), ("uniform ", uniform or {})):
        for name in DIRECTIONS:
            for layer, values in enumerate(source.get(name, [])):
                row = label + name + ("" if label else f" {layer + 1}")
                lines.append(f"  {row:<18}" +
                             "".join(f"{values[key]:>14.3f}" for key in GraphStatistics.KEYS))
    return lines


def format_edges(item, top_k):
    """Lines ``unit: forward layer l -> source (weight) ...`` for one sentence."""
    from glomo_tf import ops

    tokens, graphs = item["tokens"], item["graphs"]
    lines = [f"\n{' '.join(tokens)}"]
    # The heaviest sources of every row, ties to the lower position: the compact form that
    # GlomoTransfer(top_k=...) and the graph cache use.
    indices, weights = (np.asarray(x) for x in ops.top_k_sources(np.asarray(graphs, np.float32),
                                                                  top_k))
    for t, token in enumerate(tokens):
        parts = []
        for z in range(len(DIRECTIONS)):
            for layer in range(graphs.shape[1]):
                row = graphs[z, layer, t]
                best = [s for s, w in zip(indices[z, layer, t], weights[z, layer, t]) if w > 0]
                edges = ", ".join(f"{tokens[s]}@{s} {row[s]:.2f}" for s in best) or "-"
                parts.append(f"{('fw', 'bw')[z]}{layer + 1}: {edges}")
        lines.append(f"  {t:3d} {token:<14} " + " | ".join(parts))
    return lines


def graphs_figure(items, sentences=1):
    """A figure of heatmaps: per sentence of ``items`` (from :func:`extract`, the first
    ``sentences``), one panel per direction and layer (heads averaged)."""
    from glomo_tf import viz

    panels = [dict(graph=item["graphs"][z, layer], tokens=item["tokens"],
                   title=f"{name} graph, layer {layer + 1} (heads averaged)")
              for item in items[:sentences]
              for z, name in enumerate(DIRECTIONS)
              for layer in range(item["graphs"].shape[1])]
    layers = items[0]["graphs"].shape[1]
    return viz.panels_figure(panels, columns=2 * layers if layers < 3 else layers,
                             panel_size=5.0, suptitle="G[t, s]: row t receives from column s")


def unit_counts(tokenizer, sentences, batch_size=1024):
    """Units of each sentence as the tokenizer splits it, before any truncation (int array)."""
    counts = [tokenizer.encode_ragged(sentences[i:i + batch_size]).row_lengths().numpy()
              for i in range(0, len(sentences), batch_size)]
    return np.concatenate(counts) if counts else np.zeros([0], np.int64)


def graph_memory_bytes(predictor, batch_size, length):
    """About how many bytes the predictor's call needs for ``batch_size`` sentences of
    ``length`` units: ``2 x L x K x T^2`` float32 graphs per sentence, several arrays of that
    size alive at once (:data:`GRAPH_ARRAYS_ALIVE`)."""
    per_sentence = 2 * predictor.num_layers * predictor.num_heads * length ** 2 * 4
    return GRAPH_ARRAYS_ALIVE * batch_size * per_sentence


def physical_memory_bytes():
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None

