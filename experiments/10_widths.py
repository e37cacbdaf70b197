"""Experiment 10: the recall demo across head widths, and the drift of the temperature.

Trains the recall model of experiment 04 at every --dk for every --mechanisms (same seeds,
initialisations and data per width), the learning-rate sweep at --lr-dks, and every
mechanism of experiment 05 at --drift-dk for the drift diagnostics; recomputes experiment
03's Jacobian norm at the task's 16 keys. Writes 10_widths_summary.csv,
10_widths_curves.csv, 10_lr_transfer.csv and 10_jacobian_n16.csv, each with a JSON
sidecar. Its defaults narrow 04's reading (see --help); method and diagnostics:
attnlab/studies/widths/README.md.
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.studies import headline
from attnlab.studies.widths.compute import (
    divergence_note,
    jacobian_frame,
)
from attnlab.studies.widths.study import CURVES_CSV, JACOBIAN_CSV, LR_CSV, SUMMARY_CSV
from attnlab.training.flags import add_mechanisms_flag, add_recall_flags, recall_config
from attnlab.training.sweep import (
    WIDTHS_BASE,
    WidthsConfig,
    curves_frame,
    lr_frame,
    run_widths,
    summary_frame,
)

DEFAULT = WidthsConfig()


#: One result CSV per part of the run: --help says how long they took.
TIMED_BY = (SUMMARY_CSV, JACOBIAN_CSV)


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
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
    cli.add_out_dir_flag(parser)
    return parser


def widths_config(args) -> WidthsConfig:
    """The flags' configuration; UsageError naming the flag on an inconsistent value."""
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


def run(args):
    out_dir = cli.prepare_out_dir(args)
    config = widths_config(args)
    flags = vars(args)
    started = time.perf_counter()
    with cli.progress(config.total_steps(), "10 widths", args.quiet, unit="step") as bar:
        results = run_widths(config, bar.update)
    train_wall = time.perf_counter() - started
    started = time.perf_counter()
    jacobian = jacobian_frame(config)
    jacobian_wall = time.perf_counter() - started
    summary = summary_frame(results, config.base.smoothing)
    with cli.staged_outputs(out_dir, args.written) as stage:
        write_result(summary, stage / SUMMARY_CSV, flags, train_wall)
        write_result(
            curves_frame(results, config.base.smoothing), stage / CURVES_CSV, flags, train_wall
        )
        write_result(lr_frame(summary, config), stage / LR_CSV, flags, train_wall)
        write_result(jacobian, stage / JACOBIAN_CSV, flags, jacobian_wall)
    args.outputs_note = divergence_note(summary)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
