"""``glomo demo``: :func:`glomo_tf.experiments.demo.run_demo` on the built-in planted corpus,
and its report."""

import os

from glomo_tf.cli.common import (HelpFormatter, UsageError, add_precision_argument,
                                 add_verbose_argument, resolve_verbose)
from glomo_tf.experiments.demo import DEFAULTS, QUICK, format_report, run_demo

DESCRIPTION = ("Pretrain on the built-in planted corpus and check that the graphs find the plants. "
               "Writes metrics.json and graphs.png.")


def register(subparsers):
    parser = subparsers.add_parser(
        "demo", help="pretrain on a built-in planted corpus and report graph recovery",
        description=DESCRIPTION,
        formatter_class=HelpFormatter)
    parser.add_argument("--output-dir", default="glomo-demo",
                        help="folder for metrics.json and graphs.png (default: ./glomo-demo)")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"training epochs (default {DEFAULTS['epochs']})")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help=f"training steps per epoch (default {DEFAULTS['steps_per_epoch']})")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the model initialisation and the training order (default 0)")
    add_precision_argument(parser)
    add_verbose_argument(parser)
    parser.add_argument("--quick", action="store_true",
                        help="a few training steps only: checks that everything runs")
    parser.set_defaults(func=run)
    return parser


def run(args):
    settings = dict(QUICK if args.quick else DEFAULTS)
    for name in ("epochs", "steps_per_epoch"):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")
            settings[name] = value
    output_dir = args.output_dir
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UsageError(f"--output-dir {output_dir!r} exists and is not a folder.")
    os.makedirs(output_dir, exist_ok=True)
    result = run_demo(output_dir, seed=args.seed, verbose=resolve_verbose(args.verbose),
                      precision=args.precision, **settings)
    print(format_report(result))
    print(f"\nWrote {result['outputs']['metrics']}\n      {result['outputs']['figure']}")
    return 0
