"""Flags of experiment 10, kept beside its configuration (``WidthsConfig``): the recall
flags every training script shares, the widths, the learning-rate sweep and the drift
diagnostics, and the configuration they give."""

from __future__ import annotations

import argparse

from attnlab.harness import cli
from attnlab.training.flags import add_mechanisms_flag, add_recall_flags, recall_config
from attnlab.training.sweep import WIDTHS_BASE, WidthsConfig

DEFAULT = WidthsConfig()


def add_widths_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of experiment 10 but ``--out-dir``, with ``WidthsConfig``'s defaults."""
    add_recall_flags(parser, WIDTHS_BASE, head_width=False)
    cli.add_dk_flag(parser, DEFAULT.dks)
    add_mechanisms_flag(
        parser, "--mechanisms", DEFAULT.mechanisms, "mechanisms trained at every width"
    )
    parser.add_argument(
        "--lrs",
        nargs="+",
        type=cli.positive_float,
        default=list(DEFAULT.lrs),
        help="learning rates of the transfer sweep (must include --lr)",
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


def widths_config(args: argparse.Namespace) -> WidthsConfig:
    """The flags' configuration; a UsageError naming the flag on an inconsistent value (the
    checks of ``attnlab.training.sweep.check_grid``, in the flags' words)."""
    base = recall_config(args, d_k=WIDTHS_BASE.d_k)
    if args.steps % args.record_every:
        raise cli.UsageError(
            f"--record-every: {args.record_every} does not divide --steps {args.steps}"
        )
    if args.lr not in args.lrs:
        raise cli.UsageError(f"--lrs: must include --lr {args.lr:g}, got {args.lrs}")
    if not set(args.lr_dks) <= set(args.dk):
        raise cli.UsageError(f"--lr-dks: {args.lr_dks} are not all among --dk {args.dk}")
    return WidthsConfig(
        base=base,
        dks=tuple(args.dk),
        mechanisms=tuple(args.mechanisms),
        lrs=tuple(args.lrs),
        lr_dks=tuple(args.lr_dks),
        lr_mechanisms=tuple(args.lr_mechanisms),
        drift_dk=args.drift_dk or None,
        record_every=args.record_every,
        jacobian_trials=args.jacobian_trials,
    )
