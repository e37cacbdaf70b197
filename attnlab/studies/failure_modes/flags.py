"""Flags of experiment 07, kept beside its configurations: the rows of part (a), the widths
and samples of part (c), and the ``OverflowConfig`` and ``CorrelationConfig`` they give."""

from __future__ import annotations

import argparse

from attnlab.harness import cli
from attnlab.harness.memory import check_needs
from attnlab.studies.failure_modes.compute import (
    CorrelationConfig,
    OverflowConfig,
    failure_modes_needs,
)

OVERFLOW = OverflowConfig()
CORRELATION = CorrelationConfig()


def add_failure_modes_flags(parser: cli.FlagParser) -> None:
    """Every flag of experiment 07 but ``--out-dir``, with its defaults."""
    cli.add_int_flag(parser, "--rows", OVERFLOW.rows, "(a) rows per max logit")
    cli.add_dk_flag(parser, CORRELATION.dks, "(c) head widths d_k")
    cli.add_int_flag(parser, "--samples", CORRELATION.samples, "(c) query-key pairs per d_k", 2)
    cli.add_seed_flag(parser)


def failure_modes_configs(args: argparse.Namespace) -> tuple[OverflowConfig, CorrelationConfig]:
    """The configurations of parts (a) and (c) the flags give (the widths sorted, each
    once); a UsageError naming the flag whose value needs more memory than there is
    (``failure_modes_needs``)."""
    overflow = OverflowConfig(rows=args.rows, seed=args.seed)
    dks = tuple(sorted(set(args.dk)))
    correlation = CorrelationConfig(dks=dks, samples=args.samples, seed=args.seed)
    check_needs(failure_modes_needs(overflow, correlation))
    return overflow, correlation
