"""Experiment 08: the companion article's numbers (article 000), measured.

(1) how far the top logit of n = 512 standard normal logits sits above the row mean
("about 3.5 sigma", "nearly 28" at d_k = 64); (2) dividing by sqrt(d_model) = 22.6
instead of sqrt(d_k) = 8 with 8 heads: logit spread, max weight and entropy; (3) folding
the factor into W_Q (and W_K): logits, gradient and SGD-step ratios against the
derivation. Writes one long table (claim, quantity, setting, value, sem, predicted).
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.memory import check_needs
from attnlab.studies import headline
from attnlab.studies.companion.compute import CompanionConfig, companion_needs, run_companion
from attnlab.studies.companion.study import COMPANION_CSV

DEFAULT = CompanionConfig()


def add_flags(parser):
    cli.add_int_flag(parser, "--trials", DEFAULT.trials, "softmax rows", 2)
    cli.add_int_flag(
        parser, "--fold-setups", DEFAULT.fold_setups, "random (x, W) setups of the fold check", 2
    )


def plan(args):
    config = CompanionConfig(trials=args.trials, fold_setups=args.fold_setups, seed=args.seed)
    check_needs(companion_needs(config))
    return config.trials, lambda bar: run_companion(config, bar)


build_parser, run = cli.table_script(__doc__, COMPANION_CSV, "08 companion claims", add_flags, plan)
main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
