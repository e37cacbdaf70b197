"""Flags of the static experiments (01-03), kept beside their configurations.

Scripts 02 and 03 take the same flags and differ only in the statistic they tabulate and
the CSV they write, so both are made by ``sweep_script``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pandas as pd

from attnlab.core.sampling import SAMPLERS
from attnlab.harness import cli
from attnlab.studies.statics.compute import Progress, SoftmaxSweepConfig


def add_sweep_flags(parser: argparse.ArgumentParser, default_out: str) -> None:
    """The flags of 02 and 03, with the defaults of ``SoftmaxSweepConfig``."""
    default = SoftmaxSweepConfig()
    cli.add_dk_flag(parser, default.dks)
    parser.add_argument(
        "--n-keys", type=cli.int_at_least(2), default=default.n_keys, help="keys per softmax row"
    )
    parser.add_argument(
        "--trials",
        type=cli.int_at_least(2),
        default=default.trials,
        help="softmax rows per d_k (>= 2 for a standard error)",
    )
    parser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=default.sampler,
        help="direct: draw q and K (the article); exact: draw the logits "
        "from their law given |q|, O(n) per trial",
    )
    cli.add_common_flags(parser, cli.RESULTS_DIR / default_out)


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

    def build_parser() -> argparse.ArgumentParser:
        parser = cli.new_parser(description)
        add_sweep_flags(parser, csv_name)
        return parser

    def run(args: argparse.Namespace) -> None:
        out = cli.check_writable(args.out, "--out")
        config = sweep_config(args)
        total = len(config.dks) * config.trials
        cli.run_table(args, out, desc, total, lambda bar: run_sweep(config, bar))

    return build_parser, run
