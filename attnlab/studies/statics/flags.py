"""Flags of the static experiments (01-03), kept beside their configurations.

Scripts 02 and 03 take the same flags and differ only in the statistic they tabulate and
the CSV they write, so both are made by ``sweep_script``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pandas as pd

from attnlab.core.progress import Progress
from attnlab.core.sampling import CHUNK_ELEMENTS, SAMPLERS, VARIANT_SCALES
from attnlab.core.softmax_sweeps import SoftmaxSweepConfig
from attnlab.harness import cli
from attnlab.harness.memory import DRAW_COPIES, FLOAT32_BYTES, Need, check_needs, product, size

#: Bytes per softmax row of 02 and 03 beside its chunk: its key (8), index (4) and width
#: (4), its statistics (3 per variant, float32) and their copy, and ``mean_and_sem``'s
#: float64 copies (about 32).
TRIAL_BYTES = 16 + 2 * 3 * len(VARIANT_SCALES) * FLOAT32_BYTES + 32


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


def sweep_needs(
    config: SoftmaxSweepConfig,
    default: SoftmaxSweepConfig | None = None,
    trials_flag: str = "--trials",
    n_keys_flag: str = "--n-keys",
) -> list[Need]:
    """The sweep's largest allocations (``attnlab.harness.memory``), per d_k in turn:

    * the rows: ``trials * TRIAL_BYTES``;
    * one chunk of logits: ``max(CHUNK_ELEMENTS, e) * 4 * DRAW_COPIES`` bytes, where a row
      draws ``e = n_keys * d_k + 2 n_keys`` numbers (``n_keys`` keys of width ``d_k``; the
      exact sampler ``3 n_keys``) and a chunk holds about ``CHUNK_ELEMENTS``, at least a row.

    ``default`` (the flags' defaults, ``SoftmaxSweepConfig()`` if None) and the flag names
    say which flag to name; 10 sweeps the Jacobian with flags of its own."""
    default = SoftmaxSweepConfig() if default is None else default
    direct = config.sampler == "direct"
    widths = (size("--dk", config.dks, default.dks),) if direct else ()
    row = config.n_keys * (max(config.dks) if direct else 1) + 2 * config.n_keys
    return [
        Need(
            product(config.trials, TRIAL_BYTES),
            "the statistics of one d_k's softmax rows",
            (size(trials_flag, config.trials, default.trials),),
        ),
        Need(
            product(max(CHUNK_ELEMENTS, row), FLOAT32_BYTES, DRAW_COPIES),
            "one chunk of keys and logits",
            (size(n_keys_flag, config.n_keys, default.n_keys), *widths),
        ),
    ]


def sweep_script(
    description: str,
    csv_name: str,
    desc: str,
    run_sweep: Callable[[SoftmaxSweepConfig, Progress], pd.DataFrame],
) -> tuple[Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], None]]:
    """``(build_parser, run)`` of a softmax-sweep script writing ``results/<csv_name>``."""

    def plan(args: argparse.Namespace):
        config = sweep_config(args)
        check_needs(sweep_needs(config))
        return len(config.dks) * config.trials, lambda bar: run_sweep(config, bar)

    return cli.table_script(description, csv_name, desc, add_sweep_flags, plan)
