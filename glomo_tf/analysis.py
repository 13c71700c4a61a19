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



# ------------------------------------------------------------------ graphs against syntax
def token_graphs(graphs, spans):
    """Unit graphs ``[..., U, U]`` -> graphs over tokens ``[..., n, n]``, token ``a`` written as
    the units ``spans[a] = (start, end)``: the row of a token is the mean of its units' rows,
    the weight on a token the sum of the weights on its units (Clark et al. 2019's word-level
    attention). A token with no unit (``start == end``) gets an all-zero row and column."""
    graphs = np.asarray(graphs, np.float32)
    units = graphs.shape[-1]
    average = np.zeros((len(spans), units), np.float32)
    member = np.zeros((units, len(spans)), np.float32)
    for a, (start, end) in enumerate(spans):
        if end > start:
            average[a, start:end] = 1.0 / (end - start)
            member[start:end, a] = 1.0
    return average @ graphs @ member


def _head_hits(rows, receiver, head, forward):
    """``rows [..., n]`` of one receiving token -> bool ``[...]``: the head has a positive weight
    strictly above every other admissible source (before the receiver, forward; after it,
    backward). Ties at the top and all-zero rows are misses."""
    positions = np.arange(rows.shape[-1])
    admissible = positions < receiver if forward else positions > receiver
    others = admissible & (positions != head)
    on_head = rows[..., head]
    strongest_other = np.where(others, rows, -np.inf).max(axis=-1)
    return (on_head > 0) & (on_head > strongest_other)


def dependency_agreement(graphs, sentences, min_relation_words=100):
    """How often the strongest edge of graphs over tokens points at the gold syntactic head.

    Every word with a head (the root aside) whose head is written in another surface token
    counts once: its receiving row is its token's, read in the direction that can see the head
    (forward graphs when the head comes before, backward after); it agrees with a graph when
    its head's token is the strongest admissible source there (strictly: ties at the top and
    all-zero rows are misses). Baselines: the fixed-offset rules ("point at the token ``k``
    before", forward, and "``k`` after", backward, each direction's best ``k`` chosen on these
    words) and chance (a uniformly random admissible source).

    Args:
        graphs: one float array ``[2, L, K, n, n]`` per sentence (direction 0 forward), over its
            first ``n`` surface tokens (:func:`token_graphs`); words whose token or head lies
            past ``n`` are left out (and counted in ``left_out``).
        sentences: the :class:`glomo_tf.data.conllu.DependencySentence` objects.
        min_relation_words: relations with at least this many words get a row in
            ``by_relation``.

    Returns:
        A JSON-able dict: ``words`` (counted), ``left_out``, ``forward_share`` (of the words,
        those whose head comes before them); ``per_head`` ``[L][K]``; ``best_head`` (``{"layer",
        "head", "share"}``, numbered from 1); ``heads_averaged`` (per layer: the graphs averaged
        over heads, then scored); ``best_heads_averaged``; ``offset_rules`` (``{"forward": {k:
        share of the forward words whose head is k before}, "backward": ...}``);
        ``best_offset_rule`` (``{"forward": k, "backward": k, "share"}``: both directions' best
        rules together, over all the words); ``adjacent`` (the rule "the previous word, or the
        next": offsets 1 and 1); ``chance``; ``by_relation`` (``{relation: {"words", "best_head",
        "best_offset_rule"}}``, the best head's and the best rule's shares on that relation's
        words).

    Raises:
        ValueError: one graph per sentence is needed, of ``[2, L, K, n, n]``; no word to count.
    """
    from glomo_tf.data.listops import head_shares

    if len(graphs) != len(sentences):
        raise ValueError(f"dependency_agreement needs one graph per sentence: {len(graphs)} "
                         f"graphs, {len(sentences)} sentences.")
    shape = None
    hits, averaged_hits, items, left_out = [], [], [], 0
    for graph, sentence in zip(graphs, sentences):
        graph = np.asarray(graph, np.float32)
        if graph.ndim != 5 or graph.shape[0] != 2 or graph.shape[-1] != graph.shape[-2]:
            raise ValueError(f"dependency_agreement expects graphs [2, L, K, n, n] per "
                             f"sentence, got shape {graph.shape}.")
        shape = shape or graph.shape[1:3]
        n = graph.shape[-1]
        averaged = graph.mean(axis=2)  # [2, L, n, n]
        for word, head_word in enumerate(sentence.heads):
            if head_word < 0:
                continue
            receiver, head = sentence.token_of[word], sentence.token_of[head_word]
            if receiver == head:
                continue
            if receiver >= n or head >= n:
                left_out += 1
                continue
            forward = head < receiver
            z = 0 if forward else 1
            hits.append(_head_hits(graph[z, :, :, receiver], receiver, head, forward))
            averaged_hits.append(_head_hits(averaged[z, :, receiver], receiver, head, forward))
            admissible = receiver if forward else n - 1 - receiver
            items.append((forward, abs(receiver - head), 1.0 / admissible,
                          sentence.relations[word]))
    if not items:
        raise ValueError("dependency_agreement found no word whose head is written in another "
                         "token.")
    hits, averaged_hits = np.array(hits), np.array(averaged_hits)  # [N, L, K], [N, L]
    forward = np.array([item[0] for item in items])
    offsets = np.array([item[1] for item in items])
    relations = np.array([item[3] for item in items])
    per_head = hits.mean(axis=0)
    heads_averaged = averaged_hits.mean(axis=0)
    layer, head = np.unravel_index(int(np.argmax(per_head)), per_head.shape)
    rules, best = {}, {}
    for name, side in (("forward", forward), ("backward", ~forward)):
        counts = np.bincount(offsets[side], minlength=2)
        rules[name] = {k: float(counts[k] / max(side.sum(), 1)) for k in range(1, len(counts))}
        best[name] = max(rules[name], key=lambda k: (rules[name][k], -k)) if rules[name] else 1
    rule_hits = np.where(forward, offsets == best["forward"], offsets == best["backward"])
    best_head_hits = hits[:, layer, head]
    by_relation = {}
    for relation in sorted(set(relations.tolist())):
        chosen = relations == relation
        if chosen.sum() >= min_relation_words:
            by_relation[relation] = {"words": int(chosen.sum()),
                                     "best_head": float(best_head_hits[chosen].mean()),
                                     "best_offset_rule": float(rule_hits[chosen].mean())}
    return {
        "words": int(len(items)), "left_out": int(left_out),
        "forward_share": float(forward.mean()),
        **head_shares(per_head, heads_averaged),
        "offset_rules": rules,
        "best_offset_rule": {"forward": int(best["forward"]), "backward": int(best["backward"]),
                             "share": float(rule_hits.mean())},
        "adjacent": float((offsets == 1).mean()),
        "chance": float(np.mean([item[2] for item in items])),
        "by_relation": by_relation,
    }


def head_agreement(predictor, tokenizer, sentences, max_length=128, batch_size=64):
    """:func:`dependency_agreement` of a predictor's graphs over CoNLL-U sentences.

    Each sentence's surface tokens are split into units as the tokenizer splits text, the
    predictor draws its graphs over the units (inference mode, ``batch_size`` sentences of
    similar length a call, each cut to its first ``max_length`` units: the tokens that do not
    fit whole are left out), and the graphs are read over tokens (:func:`token_graphs`).

    Args:
        predictor: a :class:`glomo_tf.GraphPredictor`.
        tokenizer: its :class:`glomo_tf.data.Tokenizer`.
        sentences: :class:`glomo_tf.data.conllu.DependencySentence` objects
            (:func:`glomo_tf.data.conllu.read_conllu`).

    Returns:
        :func:`dependency_agreement`'s dict, with ``sentences`` and ``max_length`` added.
    """
    from glomo_tf.data.vocabulary import check_vocabulary_matches

    check_vocabulary_matches(tokenizer.vocabulary, predictor)
    if max_length < 1 or batch_size < 1:
        raise ValueError(f"max_length and batch_size must be >= 1, got {max_length} and "
                         f"{batch_size}.")
    flat = [token for sentence in sentences for token in sentence.tokens]
    token_ids = tokenizer.encode_ragged(flat).to_list() if flat else []
    encoded, spans, start = [], [], 0
    for sentence in sentences:
        ids, sentence_spans = [], []
        for unit_ids in token_ids[start:start + len(sentence.tokens)]:
            if len(ids) + len(unit_ids) > max_length:
                break
            sentence_spans.append((len(ids), len(ids) + len(unit_ids)))
            ids += unit_ids
        start += len(sentence.tokens)
        encoded.append(ids or [1])  # a sentence with no unit: one <unk>, no token kept
        spans.append(sentence_spans)
    graphs = [None] * len(sentences)
    order = np.argsort([len(ids) for ids in encoded], kind="stable")
    for first in range(0, len(order), batch_size):
        chosen = order[first:first + batch_size]
        width = max(len(encoded[i]) for i in chosen)
        batch = np.zeros((len(chosen), width), np.int32)
        for row, i in enumerate(chosen):
            batch[row, :len(encoded[i])] = encoded[i]
        drawn = np.asarray(predictor(batch, training=False)["graphs"], np.float32)
        for row, i in enumerate(chosen):
            units = len(encoded[i])
            graphs[i] = token_graphs(drawn[row, ..., :units, :units], spans[i])
    result = dependency_agreement(graphs, sentences)
    return {"sentences": len(sentences), "max_length": int(max_length), **result}


def format_head_agreement(result):
    """Table lines of a :func:`head_agreement` result."""
    best, averaged, rule = (result["best_head"], result["best_heads_averaged"],
                            result["best_offset_rule"])
    lines = [f"Head agreement over {result['words']:,} words of {result['sentences']:,} "
             f"sentences (head before the word: {100 * result['forward_share']:.0f}%; "
             f"{result['left_out']} left out past --max-length): the share whose strongest "
             "edge, in the direction that can see the head, points at it",
             f"  best head            {best['share']:.3f} (layer {best['layer']}, head "
             f"{best['head']})",
             f"  heads averaged       {averaged['share']:.3f} (layer {averaged['layer']}; per "
             "layer " + " ".join(f"{x:.3f}" for x in result["heads_averaged"]) + ")",
             f"  best offset rule     {rule['share']:.3f} (forward t - {rule['forward']}, "
             f"backward t + {rule['backward']})",
             f"  previous/next word   {result['adjacent']:.3f}",
             f"  chance               {result['chance']:.3f}",
             "  per head (a row per layer):"]
    for layer, shares in enumerate(result["per_head"]):
        lines.append(f"    layer {layer + 1}  " + " ".join(f"{x:.3f}" for x in shares))
    return lines
