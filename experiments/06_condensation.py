"""Experiment 06: the condensation threshold d_k = 2 ln n of unscaled attention.

For every head width d_k and row length n of the grid, --trials rows of unscaled logits
z = |q| g (the exact law of q . k_i for standard normal q, k_i) are drawn; unscaled
attention takes softmax(z), scaled attention softmax(z / sqrt(d_k)) of the same draws.
Writes the mean max weight of each and their gap, with SEMs, per (n, d_k) (article 004,
"Keep the head small": no saturation while d_k <~ 2 ln n).
"""

import sys

from attnlab.harness import cli
from attnlab.studies.condensation.compute import CondensationConfig, run_condensation

DEFAULT = CondensationConfig()


def build_parser():
    parser = cli.new_parser(__doc__)
    cli.add_dk_flag(parser, DEFAULT.dks)
    parser.add_argument(
        "--n-keys",
        type=cli.int_at_least(2),
        nargs="+",
        default=list(DEFAULT.n_keys),
        help="keys per softmax row",
    )
    parser.add_argument(
        "--trials", type=cli.int_at_least(2), default=DEFAULT.trials, help="rows per grid cell"
    )
    cli.add_common_flags(parser, cli.RESULTS_DIR / "06_condensation.csv")
    return parser


def run(args):
    out = cli.check_writable(args.out, "--out")
    config = CondensationConfig(
        dks=tuple(sorted(set(args.dk))),
        n_keys=tuple(sorted(set(args.n_keys))),
        trials=args.trials,
        seed=args.seed,
    )
    cli.run_table(
        args, out, "06 condensation", config.trials, lambda bar: run_condensation(config, bar)
    )


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())
