"""Flags of experiment 10, kept beside its configuration (``WidthsConfig``): the recall
flags every training script shares, the widths, the learning-rate sweep and the drift
diagnostics, and the configuration they give."""

from __future__ import annotations

import argparse

from attnlab.harness import cli
from attnlab.recall.flags import add_mechanisms_flag, add_recall_flags, recall_config
from attnlab.sweeps.widths import WIDTHS_BASE, GridError, WidthsConfig

DEFAULT = WidthsConfig()


def add_widths_flags(parser: argparse.ArgumentParser) -> None:
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
    (``attnlab.sweeps.widths.check_grid``'s checks)."""
    try:
        return WidthsConfig(
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
