"""Experiment 01: the standard deviation of q . k grows as sqrt(d_k).

Draws --samples pairs of standard normal query and key vectors per d_k and measures the
std of their dot product against the prediction sqrt(d_k) (article 004, "The Variance
Argument"), and the std of the scaled product q . k / sqrt(d_k).
"""

import sys

from attnlab.harness import cli
from attnlab.studies.statics.compute import LogitVarianceConfig, run_logit_variance

DEFAULT = LogitVarianceConfig()


def build_parser():
    parser = cli.new_parser(__doc__)
    cli.add_dk_flag(parser, DEFAULT.dks)
    parser.add_argument(
        "--samples",
        type=cli.int_at_least(2),
        default=DEFAULT.samples,
        help="query-key pairs per d_k (>= 2 for a standard error)",
    )
    cli.add_common_flags(parser, cli.RESULTS_DIR / "01_logit_variance.csv")
    return parser


def run(args):
    out = cli.check_writable(args.out, "--out")
    config = LogitVarianceConfig(dks=tuple(args.dk), samples=args.samples, seed=args.seed)
    total = len(config.dks) * config.samples
    cli.run_table(
        args, out, "01 logit variance", total, lambda bar: run_logit_variance(config, bar)
    )


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())
