"""Experiment 01: the standard deviation of q . k grows as sqrt(d_k).

Draws --samples pairs of standard normal query and key vectors per d_k and measures the
std of their dot product against the prediction sqrt(d_k) (article 004, "The Variance
Argument"), and the std of the scaled product q . k / sqrt(d_k). A high-precision column
from --hp-samples exact-law products (q . k = |q| g, |q|^2 ~ chi^2(d_k)) decides the
article's "within 0.5% at every d_k", which 100,000 samples cannot.
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.memory import check_needs
from attnlab.studies import headline
from attnlab.studies.statics.compute import (
    LogitVarianceConfig,
    logit_variance_needs,
    run_logit_variance,
)
from attnlab.studies.statics.study import LOGIT_CSV

DEFAULT = LogitVarianceConfig()


def add_flags(parser):
    cli.add_dk_flag(parser, DEFAULT.dks)
    cli.add_int_flag(parser, "--samples", DEFAULT.samples, "query-key pairs per d_k", 2)
    cli.add_int_flag(
        parser, "--hp-samples", DEFAULT.hp_samples, "exact-law products per d_k (*_hp)", 2
    )


def plan(args):
    config = LogitVarianceConfig(
        dks=tuple(args.dk), samples=args.samples, seed=args.seed, hp_samples=args.hp_samples
    )
    check_needs(logit_variance_needs(config))
    total = len(config.dks) * (config.samples + config.hp_samples)
    return total, lambda bar: run_logit_variance(config, bar)


build_parser, run = cli.table_script(__doc__, LOGIT_CSV, "01 logit variance", add_flags, plan)
main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
