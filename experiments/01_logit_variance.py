"""Experiment 01: the standard deviation of q . k grows as sqrt(d_k).

Draws --samples pairs of standard normal query and key vectors per d_k and measures the
std of their dot product against the prediction sqrt(d_k) (article 004, "The Variance
Argument"), and the std of the scaled product q . k / sqrt(d_k). A high-precision column
from --hp-samples exact-law products (q . k = |q| g, |q|^2 ~ chi^2(d_k)) decides the
article's "within 0.5% at every d_k", which 100,000 samples cannot.
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
    parser.add_argument(
        "--hp-samples",
        type=cli.int_at_least(2),
        default=DEFAULT.hp_samples,
        help="exact-law products per d_k for the high-precision columns",
    )
    cli.add_common_flags(parser, cli.RESULTS_DIR / "01_logit_variance.csv")
    return parser


def run(args):
    out = cli.check_writable(args.out, "--out")
    config = LogitVarianceConfig(
        dks=tuple(args.dk), samples=args.samples, seed=args.seed, hp_samples=args.hp_samples
    )
    total = len(config.dks) * (config.samples + config.hp_samples)
    cli.run_table(
        args, out, "01 logit variance", total, lambda bar: run_logit_variance(config, bar)
    )


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())
