"""Flags of experiment 10, kept beside its configuration (``WidthsConfig``): the recall
flags every training script shares, the widths, the learning-rate sweep and the drift
diagnostics, and the configuration they give."""

from __future__ import annotations

import argparse
from dataclasses import replace

from attnlab.core.sampling import CHUNK_ELEMENTS
from attnlab.harness import cli
from attnlab.harness.memory import (
    DRAW_COPIES,
    FLOAT32_BYTES,
    Need,
    check_needs,
    count,
    product,
    size,
    total_bytes,
)
from attnlab.recall.flags import add_mechanisms_flag, add_recall_flags, recall_config, recall_needs
from attnlab.recall.widths import WIDTHS_BASE, GridError, WidthsConfig

DEFAULT = WidthsConfig()


def add_widths_flags(parser: cli.FlagParser) -> None:
    """Every flag of experiment 10 but ``--out-dir``, with ``WidthsConfig``'s defaults."""
    add_recall_flags(parser, WIDTHS_BASE, head_width=False)
    cli.add_dk_flag(parser, DEFAULT.dks)
    add_mechanisms_flag(
        parser, "--mechanisms", DEFAULT.mechanisms, "mechanisms trained at every width"
    )
    cli.add_rates_flag(
        parser, DEFAULT.lrs, "learning rates of the transfer sweep (must include --lr)"
    )
    cli.add_int_flag(parser, "--lr-dks", DEFAULT.lr_dks, "widths of the learning-rate sweep")
    add_mechanisms_flag(
        parser, "--lr-mechanisms", DEFAULT.lr_mechanisms, "mechanisms of the learning-rate sweep"
    )
    cli.add_int_flag(
        parser,
        "--drift-dk",
        DEFAULT.drift_dk,
        "width at which every mechanism "
        "of experiment 05 is trained for the drift diagnostics (0: none)",
        minimum=0,
    )
    cli.add_int_flag(
        parser,
        "--record-every",
        DEFAULT.record_every,
        "steps between diagnostics (must divide --steps)",
    )
    cli.add_int_flag(
        parser,
        "--jacobian-trials",
        DEFAULT.jacobian_trials,
        "rows per width of the static Jacobian norm at 16 keys",
    )


#: The field of ``WidthsConfig`` each flag sets, where ``check_grid`` may refuse it.
FLAG_OF = {"lr_dks": "--lr-dks", "lrs": "--lrs", "record_every": "--record-every"}


def widths_config(args: argparse.Namespace) -> WidthsConfig:
    """The flags' configuration; a UsageError naming the flag on an inconsistent value
    (``attnlab.recall.widths.check_grid``'s checks)."""
    try:
        config = WidthsConfig(
            base=recall_config(args, d_k=WIDTHS_BASE.d_k),
            dks=tuple(args.dk),
            mechanisms=tuple(args.mechanisms),
            lrs=tuple(args.lrs),
            lr_dks=tuple(args.lr_dks),
            lr_mechanisms=tuple(args.lr_mechanisms),
            drift_dk=args.drift_dk or None,
            record_every=args.record_every,
            jacobian_trials=args.jacobian_trials,
        )
    except GridError as err:
        raise cli.UsageError(f"{FLAG_OF[err.field]}: {err}") from None
    check_needs(widths_needs(config))
    return config


#: Bytes per row of the static Jacobian sweep beside its chunk (as 02's and 03's): its
#: key, index and width, its statistics and their copy, and the float64 copies of the mean.
JACOBIAN_TRIAL_BYTES = 16 + 2 * 3 * 2 * FLOAT32_BYTES + 32


def jacobian_needs(config: WidthsConfig) -> list[Need]:
    """The static Jacobian sweep's largest allocations (``jacobian_frame``: 03's sweep of
    ``--jacobian-trials`` rows of ``--pairs`` keys, per d_k in turn): the rows,
    ``jacobian_trials * JACOBIAN_TRIAL_BYTES``, and one chunk of keys and logits,
    ``max(CHUNK_ELEMENTS, pairs (d_k + 2)) * 4 * DRAW_COPIES``."""
    trials, pairs = config.jacobian_trials, config.base.pairs
    row = pairs * (max(config.dks) + 2)
    return [
        Need(
            product(trials, JACOBIAN_TRIAL_BYTES),
            "the statistics of one d_k's softmax rows",
            (size("--jacobian-trials", trials, DEFAULT.jacobian_trials),),
        ),
        Need(
            product(max(CHUNK_ELEMENTS, row), FLOAT32_BYTES, DRAW_COPIES),
            "one chunk of keys and logits",
            (size("--dk", config.dks, DEFAULT.dks), size("--pairs", pairs, WIDTHS_BASE.pairs)),
        ),
    ]


def widths_needs(config: WidthsConfig) -> list[Need]:
    """Experiment 10's largest allocations (``attnlab.harness.memory``): ``recall_needs``
    at the width that needs most (its lanes, every mechanism at every rate on every seed,
    train together; the records of every width's lanes are kept), and ``jacobian_needs``."""
    runs = config.runs()
    seeds = config.base.seeds
    all_lanes = sum(len(lrs) for _, _, lrs in runs) * seeds
    default = replace(WIDTHS_BASE, d_k=max(DEFAULT.dks))
    lane_sizes = (
        count("--mechanisms", config.mechanisms, DEFAULT.mechanisms),
        count("--lrs", config.lrs, DEFAULT.lrs),
    )
    widest = max(
        (
            recall_needs(
                replace(config.base, d_k=d_k),
                default,
                lanes=sum(len(lrs) for dk, _, lrs in runs if dk == d_k) * seeds,
                all_lanes=all_lanes,
                lane_sizes=lane_sizes,
            )
            for d_k in config.dks
        ),
        key=total_bytes,
    )
    return widest + jacobian_needs(config)
