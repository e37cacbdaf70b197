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
from attnlab.recall.widths import curves_frame, lr_frame, run_widths, summary_frame
from attnlab.studies import headline
from attnlab.studies.widths.compute import divergence_note, jacobian_frame
from attnlab.studies.widths.flags import add_widths_flags, widths_config
from attnlab.studies.widths.study import CURVES_CSV, JACOBIAN_CSV, LR_CSV, SUMMARY_CSV

TIMED_BY = (SUMMARY_CSV, JACOBIAN_CSV)  # --help says how long each part took


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    add_widths_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    out_dir = cli.prepare_out_dir(context)
    config = widths_config(args)
    started = time.perf_counter()
    with cli.progress(config.total_steps(), "10 widths", args.quiet, unit="step") as bar:
        results = run_widths(config, bar.update)
    train_wall, started = time.perf_counter() - started, time.perf_counter()
    jacobian = jacobian_frame(config)
    jacobian_wall = time.perf_counter() - started
    summary = summary_frame(results, config.base.smoothing)
    curves = curves_frame(results, config.base.smoothing)
    with cli.staged_outputs(out_dir, context.written) as stage:
        for frame, name, wall in ((summary, SUMMARY_CSV, train_wall),
                                  (curves, CURVES_CSV, train_wall),
                                  (lr_frame(summary, config), LR_CSV, train_wall),
                                  (jacobian, JACOBIAN_CSV, jacobian_wall)):  # fmt: skip
            write_result(frame, stage / name, context.sidecar_flags, wall)
    context.add_note(divergence_note(summary))


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
