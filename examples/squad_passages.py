"""The training articles' passages of a SQuAD v1.1 file, one per line: unlabelled text for a
graph predictor of the reading task that never sees a development or test passage.

``glomo transfer --dataset squad`` splits the file by article (:data:`glomo_tf.experiments.reading.SPLIT_SEED`,
the same split for every seed); this writes the passages of its training articles
(:func:`glomo_tf.experiments.reading.training_passages`), for ``glomo pretrain``::

    python examples/squad_passages.py --output runs/squad/passages.txt
    glomo pretrain --train runs/squad/passages.txt --splitter unicode_script --lowercase \\
        --window 64 --shift 64 --hidden-dim 128 --num-layers 2 --num-heads 4 --conv-layers 2 \\
        --optimizer adam --learning-rate 0.002 --clipnorm 1.0 --output-dir runs/squad/predictor
    glomo transfer --run runs/squad/predictor --dataset squad --max-length 256 \\
        --graph-cache --output-dir runs/squad/transfer
"""

import argparse
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", help="a SQuAD v1.1 JSON file (default: the shared "
                                       "squad/dev-v1.1.json)")
    parser.add_argument("--test-file", help="the test file given to glomo transfer, if any "
                                            "(the training file's articles then split 90 / 10)")
    parser.add_argument("--output", required=True, help="where the passages are written")
    args = parser.parse_args(argv)
    from glomo_tf.data.labeled import shared_data_dir
    from glomo_tf.experiments.reading import training_passages

    path = args.file or os.path.join(shared_data_dir(), "squad", "dev-v1.1.json")
    try:
        passages = training_passages(path, args.test_file)
    except ValueError as error:
        print(f"squad_passages: error: {error}", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.writelines(" ".join(p.split()) + "\n" for p in passages)
    print(f"{len(passages)} training passages ({sum(len(p.split()) for p in passages):,} words) "
          f"-> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
