"""Flags of the bench (``experiments/bench.py``), kept beside its configuration: the rounds,
the statics' widths, --quick's sizes, the optional rows, and the ``BenchConfig`` they give."""

from __future__ import annotations

import argparse
from dataclasses import replace

from attnlab.harness import cli
from attnlab.studies.bench.config import QUICK, BenchConfig


def add_bench_flags(parser: cli.FlagParser) -> None:
    """Every flag of the bench, with its defaults; ``--gemma`` alone is a committed run too
    (``make bench`` after ``make gemma``), so it writes to results/."""
    add = parser.add_argument
    # fmt: off
    add("--repeats", type=cli.positive_int, default=5, help="timed rounds per measurement")
    add("--statics-dk", type=cli.positive_int, nargs="+", default=None,
        help="d_k timed by the statics rows (default 64 256 1024; 1 2 4 ... 1024 is the "
        "whole default sweep of 02/03)")
    add("--quick", action="store_true", help="tiny sizes, for the tests (seconds, not minutes)")
    add("--gemma", action="store_true",
        help="also time experiment 13 on Gemma 3 270M (rows gemma3_read_seconds, "
        "gemma3_13_seconds; `make gemma` first, about 6 minutes more)")
    add("--reproduce", action="store_true",
        help="also time `make reproduce` from an empty compilation cache (row "
        "make_reproduce_seconds; regenerates every result in results/ and figures/)")
    # fmt: on
    cli.add_common_flags(parser, cli.RESULTS_DIR / "bench.csv")
    parser.declare_flags(committed=(["--gemma"],))


def bench_config(args: argparse.Namespace) -> BenchConfig:
    """The sizes the flags give: ``QUICK``'s with ``--quick``, else the defaults, with the
    rounds, the seed and (where given) the statics' widths of the flags."""
    config = replace(QUICK if args.quick else BenchConfig(), repeats=args.repeats, seed=args.seed)
    if args.statics_dk is not None:
        config = replace(config, statics_dks=tuple(args.statics_dk))
    return config
