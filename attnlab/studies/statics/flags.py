"""Flags of the static experiments (01-03), kept beside their configurations.

Scripts 02 and 03 take the same flags and differ only in the statistic they tabulate and
the CSV they write, so both are made by ``sweep_script``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pandas as pd

from attnlab.core.progress import Progress
from attnlab.core.sampling import SAMPLERS
from attnlab.core.softmax_sweeps import SoftmaxSweepConfig
from attnlab.harness import cli


def add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of 02 and 03, with the defaults of ``SoftmaxSweepConfig``."""
    default = SoftmaxSweepConfig()
    cli.add_dk_flag(parser, default.dks)
    cli.add_int_flag(parser, "--n-keys", default.n_keys, "keys per softmax row", 2)
    cli.add_int_flag(parser, "--trials", default.trials, "softmax rows per d_k", 2)
    parser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=default.sampler,
        help="direct: draw q and K (the article); exact: draw the logits "
        "from their law given |q|, O(n) per trial",
    )


def sweep_config(args: argparse.Namespace) -> SoftmaxSweepConfig:
    """The configuration the flags of ``add_sweep_flags`` describe."""
    return SoftmaxSweepConfig(
        dks=tuple(args.dk),
        n_keys=args.n_keys,
        trials=args.trials,
        seed=args.seed,
        sampler=args.sampler,
    )


def sweep_script(
    description: str,
    csv_name: str,
    desc: str,
    run_sweep: Callable[[SoftmaxSweepConfig, Progress], pd.DataFrame],
) -> tuple[Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], None]]:
    """``(build_parser, run)`` of a softmax-sweep script writing ``results/<csv_name>``."""

    def plan(args: argparse.Namespace):
        config = sweep_config(args)
        return len(config.dks) * config.trials, lambda bar: run_sweep(config, bar)

    return cli.table_script(description, csv_name, desc, add_sweep_flags, plan)
