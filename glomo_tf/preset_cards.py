"""A preset's model card (its ``README.md``), written from its ``metadata.json`` alone.

:func:`render_card` is the text; :func:`glomo_tf.presets.model_card` reads a preset's metadata
and calls it, and every saved preset is written with its card (the Hugging Face Hub shows it as
the model's page).
"""


def render_card(info, name, builtin, hub_extra="hub"):
    """The Markdown model card of a preset whose ``metadata.json`` is ``info``, called ``name``
    (``builtin``: a preset that ships with the package, loaded by its name alone; ``hub_extra``:
    the extra that reads ``hf://`` and ``kaggle://`` handles). A key whose value is None (a run
    without validation has no perplexity) is left out as if it were not recorded."""
    info = {key: value for key, value in info.items() if value is not None}
    tokenizer = info.get("tokenizer")
    task = info.get("task")
    kind = info.get("class_name")
    lines = [f"# `{name}`", "",
             (info.get("description") or _default_description(kind, task)) + ".", "",
             "## What it is", "", "| | |", "|---|---|",
             f"| model | {kind or 'no graph predictor'}"
             + (f", {info['parameters']:,} parameters" if info.get("parameters") else "") + " |"]
    if "vocabulary_size" in info:
        reads = (f"{tokenizer.get('splitter', 'whitespace')} splitting"
                 + (", lower-cased" if tokenizer.get("lowercase") else "")
                 + (", WordPiece units" if tokenizer.get("subword") else "")
                 if tokenizer else "token ids, no tokenizer")
        lines.append(f"| vocabulary | {info['vocabulary_size']:,} ids ({reads}) |")
    if task:
        lines.append(f"| task | {task['class_name']}, {task['num_classes']} classes, graphs at "
                     f"{task['transfer_at'] or 'none (the plain model)'} |")
    if "weights_dtype" in info:
        stored = f"| weights on disk | {info['weights_dtype']}"
        if "float16_graph_difference" in info:
            stored += (f"; the graphs of the reference inputs move by at most "
                       f"{info['float16_graph_difference']:.2g} from float32 (tolerance "
                       f"{info['graph_tolerance']})")
        lines.append(stored + " |")
    lines.append(f"| written | {info.get('date', '?')}, glomo_tf {info.get('glomo_tf_version')}, "
                 f"Keras {info.get('keras_version')}, TensorFlow "
                 f"{info.get('tensorflow_version')} |")
    trained = [(label, render(info[key])) for key, label, render in _TRAINING if key in info]
    if "validation_perplexity" in info:  # after what was read, before how
        seen_on = f" ({info['validation_text']})" if info.get("validation_text") else ""
        at = len([label for label, _ in trained if label in _READ])
        trained.insert(at, ("validation perplexity",
                            f"{info['validation_perplexity']:.1f}{seen_on}"))
    if trained:
        lines += ["", "## How it was trained", "", "| | |", "|---|---|"]
        lines += [f"| {label} | {value} |" for label, value in trained]
    handle = name if builtin else f"path/to/{name}"
    code = ["import glomo_tf", ""]
    if task:
        code.append(f"classifier = glomo_tf.{task['class_name']}.from_preset(\"{handle}\")")
    if kind:
        code.append(f"predictor = glomo_tf.GraphPredictor.from_preset(\"{handle}\")")
    if tokenizer:
        code.append(f"tokenizer = glomo_tf.GlomoTokenizer.from_preset(\"{handle}\")")
        if not task:
            code.append(f"classifier = glomo_tf.GlomoClassifier.from_preset(\"{handle}\", "
                        "num_classes=2)")
    lines += ["", "## How to load it", "", "```python", *code, "```", "",
              f"`{name}` is a built-in preset: its name is enough." if builtin else
              f"Pass this directory's path, or its `hf://` or `kaggle://` handle once uploaded "
              f"there (with the `{hub_extra}` extra: `pip install 'glomo_tf[{hub_extra}]'`)."]
    if info.get("reference_graphs"):
        lines += ["", "Check a loaded copy against the graphs recorded when it was written: "
                  f"`glomo_tf.presets.check_preset(\"{handle}\")` (the largest difference)."]
    sources = [(label, info[key]) for key, label in _SOURCES if info.get(key)]
    if sources:
        lines += ["", "## Licence and sources", "", "| | |", "|---|---|"]
        lines += [f"| {label} | {_listed(value)} |" for label, value in sources]
    return "\n".join(lines) + "\n"


def _listed(value):
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _default_description(kind, task):
    what = (f"a {task['class_name']} of {task['num_classes']} classes" if task else
            f"a {kind}, the predictor of GLoMo's latent graphs (Yang et al., 2018)")
    return f"A glomo_tf preset: {what}"


# Metadata key, the card's label, how it is written: how a preset was trained, when recorded.
_TRAINING = [
    ("corpus", "corpus", lambda value: _listed(value)),
    ("tokens_seen", "tokens seen", "{:,}".format),
    ("training_steps", "training steps", "{:,}".format),
    ("text_read", "text read", str),
    ("training_precision", "precision", str),
    ("made_by", "made by", str),
]
_READ = ("corpus", "tokens seen", "training steps", "text read")
# Metadata key, the card's label: the licences and sources, when recorded.
_SOURCES = [("licence", "licence"), ("data_licence", "data licence"), ("sources", "sources")]


