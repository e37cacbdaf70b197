"""Experiment 05: who owns the attention temperature? Remedies, folding, sensitivity.

(1) Trains the 04 model with every temperature mechanism of attnlab.core.temperature (same
seeds, initialisations and data) -> 05_remedies_curves.csv, 05_remedies_summary.csv.
(2) Trains scaled attention to --fold-step, folds 1/sqrt(d_k) into W_Q and continues at the
same learning rate beside the unfolded model -> 05_fold_curves.csv, 05_fold_check.csv.
(3) The 04 milestone ratio unscaled / scaled over batch size x embedding init std
-> 05_sensitivity.csv. Every CSV has a JSON sidecar; all go to --out-dir.
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.recall.tables import write_recall_outputs
from attnlab.studies import headline
from attnlab.studies.remedies import compute, study
from attnlab.studies.remedies.flags import add_remedies_flags, remedies_run

# --help says how long each part took
TIMED_BY = (study.SUMMARY_CSV, study.FOLD_CHECK_CSV, study.SENSITIVITY_CSV)


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    add_remedies_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    out_dir = cli.prepare_out_dir(context)
    job = remedies_run(args)
    config, walls = job.config, []
    # Every part is computed before anything is written: all outputs or none.
    with cli.progress(job.total_steps, "05 remedies", args.quiet, unit="step") as bar:
        for part in (lambda: compute.run_remedies(config, bar.update),
                     lambda: compute.run_fold(config, job.fold_step, bar.update),
                     lambda: compute.run_sensitivity(job.sensitivity, job.batch_sizes,
                                                     job.embed_stds, bar.update)):  # fmt: skip
            started = time.perf_counter()
            walls.append((part(), time.perf_counter() - started))
    (results, remedies_wall), ((curves, check), fold_wall), (frame, grid_wall) = walls
    flags = context.sidecar_flags
    with cli.staged_outputs(out_dir, context.written) as stage:
        names = (study.CURVES_CSV, study.SUMMARY_CSV)
        write_recall_outputs(results, config, stage, names, flags, remedies_wall)
        write_result(curves, stage / study.FOLD_CURVES_CSV, flags, fold_wall)
        write_result(check, stage / study.FOLD_CHECK_CSV, flags, fold_wall)
        write_result(frame, stage / study.SENSITIVITY_CSV, flags, grid_wall)
    context.add_note(compute.divergence_note(compute.diverged(results), config.d_k))


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
