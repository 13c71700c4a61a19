"""Renders every Markdown table of the results, and every figure their prose quotes, from the
JSON it reports.

Every marked table and figure of the pages of ``examples/results_tables.py``'s ``PAGES`` (the
README, ``docs/results/*.md``, the guides, ``docs/benchmarks.md``, ``benchmarks/README.md``:
``<!-- NAME table -->`` on the line above a table, ``<!-- NAME figure -->...<!-- /NAME -->``
around a figure; one function for each in ``examples/results_tables.py``), and every ``NAME.md``
under ``examples/outputs/``, a view of one recorded JSON, never edited by hand:

* ``*_results.md``: a ``glomo transfer`` run's ``results.json`` (kept as ``*_results.json``;
  ``listops_results.md`` is the transfer part of ``listops_graphs.json``), through
  :func:`glomo_tf.evaluation.format_markdown`, one table per metric;
* ``ablations_mr.md``: ``ablations_mr.json``, through ``examples/ablations_mr.py``'s table.

Run::

    python examples/render_outputs.py          # rewrite every table and figure from its JSON
    python examples/render_outputs.py --check  # exit 1 naming each one that differs
"""

import argparse
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUTS = os.path.join(HERE, "outputs")
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

# Tables whose JSON is not NAME.json: the JSON, the part of it they render, and its dataset.
SOURCES = {"listops_results.md": ("listops_graphs.json", "transfer", "listops")}
# How a results.json's runs were split, as its results.md heads the tables: runs record it
# (``split_description``); records made before they did are read by their dataset's split.
RECORDED_SPLITS = {
    "mr": "seeded 90/10 split, 10% of training for validation",
    "subj": "seeded 90/10 split, 10% of training for validation",
    "mrpc": "seeded 90/10 split, 10% of training for validation",
    "sick": "official train/dev/test split",
    "sst2": "official train/dev/test split",
    "snli": "official test split, 10% of training for validation",
    "listops": "official test split, 10% of training for validation",  # with --test-file
}


def split_description(record):
    """The heading's split of a ``results.json`` record."""
    if "split_description" in record:
        return record["split_description"]
    return RECORDED_SPLITS[record["config"]["dataset"]]


def render_results(record):
    """A ``results.json`` record as ``results.md`` shows it."""
    from glomo_tf import evaluation

    config, summary = record["config"], record["summary"]
    dataset, split = config["dataset"], split_description(record)
    primary = record.get("primary", "accuracy")
    markdown = evaluation.format_markdown(summary, dataset, split, metric=primary)
    for metric, part in summary.get("metrics", {}).items():
        markdown += "\n" + evaluation.format_markdown(part, dataset, split, metric=metric)
    return markdown


def render_ablations(record):
    """``ablations_mr.json`` as ``examples/ablations_mr.py`` writes its table."""
    import ablations_mr as ablations

    args = record["args"]
    results = {}
    for run in record["runs"]:
        results.setdefault(run["configuration"], {})[run["seed"]] = run["accuracy"]
    _, table = ablations.table(results, args["configs"])
    title = (f"## {args['dataset']}: Table 2 ablations ({args['variant']}; pretraining "
             f"{args['epochs']} epoch(s) per configuration; seeds "
             f"{' '.join(map(str, args['seeds']))})")
    return f"{title}\n\n{table}"


def rendered():
    """``{table file name: its Markdown rendered from its JSON}`` for every ``.md`` under
    ``examples/outputs/``; raises ``ValueError`` naming a table with no JSON."""
    tables = {}
    for path in sorted(glob.glob(os.path.join(OUTPUTS, "*.md"))):
        name = os.path.basename(path)
        source, part, dataset = SOURCES.get(name, (name[:-3] + ".json", None, None))
        source_path = os.path.join(OUTPUTS, source)
        if not os.path.exists(source_path):
            raise ValueError(f"examples/outputs/{name} has no JSON ({source}): record the run "
                             "that makes it, or remove the table.")
        with open(source_path, encoding="utf-8") as handle:
            record = json.load(handle)
        if part:
            record = dict(record[part], config={"dataset": dataset})
        tables[name] = (render_ablations(record) if "configuration" in record["runs"][0]
                        else render_results(record))
    return tables


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 naming each table or figure that differs from its "
                   "JSON")
    args = p.parse_args(argv)
    import results_tables

    stale = []
    pages = {page: results_tables.render_page(page) for page in results_tables.PAGES}
    outputs = {os.path.join("examples", "outputs", name): markdown
               for name, markdown in rendered().items()}
    for name, markdown in {**outputs, **pages}.items():
        path = os.path.join(os.path.dirname(HERE), name)
        with open(path, encoding="utf-8") as handle:
            same = handle.read() == markdown
        if args.check and not same:
            differ = [f"<!-- {marker} -->" for marker, (on_page, rendered_md) in
                      results_tables.tables_of(name).items() if on_page != rendered_md
                      ] if name in pages else []
            stale.append(name + (f" ({', '.join(differ)})" if differ else ""))
        elif not same:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(markdown)
            print(f"rewrote {name}")
    if stale:
        print("differ from their JSON: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
