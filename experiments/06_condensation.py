"""Experiment 06: the condensation threshold d_k = 2 ln n of unscaled attention.

For every head width d_k and row length n of the grid, --trials rows of unscaled logits
z = |q| g (the exact law of q . k_i for standard normal q, k_i) are drawn; unscaled
attention takes softmax(z), scaled attention softmax(z / sqrt(d_k)) of the same draws.
Writes the mean max weight of each and their gap, with SEMs, per (n, d_k) (article 004,
"Keep the head small": no saturation while d_k <~ 2 ln n).
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.memory import check_needs
from attnlab.studies import headline
from attnlab.studies.condensation.compute import (
    CondensationConfig,
    condensation_needs,
    run_condensation,
)
from attnlab.studies.condensation.study import CSV

DEFAULT = CondensationConfig()


def add_flags(parser):
    cli.add_dk_flag(parser, DEFAULT.dks)
    cli.add_int_flag(parser, "--n-keys", DEFAULT.n_keys, "keys per softmax row", 2)
    cli.add_int_flag(parser, "--trials", DEFAULT.trials, "rows per grid cell", 2)


def plan(args):
    config = CondensationConfig(
        dks=tuple(sorted(set(args.dk))),
        n_keys=tuple(sorted(set(args.n_keys))),
        trials=args.trials,
        seed=args.seed,
    )
    check_needs(condensation_needs(config))
    return config.trials, lambda bar: run_condensation(config, bar)


build_parser, run = cli.table_script(__doc__, CSV, "06 condensation", add_flags, plan)
main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
