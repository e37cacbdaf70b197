"""Experiment 05: who owns the attention temperature? Remedies, folding, sensitivity.

(1) Trains the 04 model with every temperature mechanism of attnlab.core.temperature (same
seeds, initialisations and data) -> 05_remedies_curves.csv, 05_remedies_summary.csv.
(2) Trains scaled attention to --fold-step, folds 1/sqrt(d_k) into W_Q and continues at the
same learning rate beside the unfolded model -> 05_fold_curves.csv, 05_fold_check.csv.
(3) The 04 milestone ratio unscaled / scaled over batch size x embedding init std
-> 05_sensitivity.csv. Every CSV has a JSON sidecar; all go to --out-dir.
"""

import dataclasses
import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.studies import headline
from attnlab.studies.remedies.compute import (
    FOLD_STEP,
    REMEDIES_DEFAULT,
    SENSITIVITY_BATCH_SIZES,
    SENSITIVITY_EMBED_STDS,
    SENSITIVITY_SEEDS,
    diverged,
    divergence_note,
    run_fold,
    run_remedies,
    run_sensitivity,
)
from attnlab.studies.remedies.study import (
    CURVES_CSV,
    FOLD_CHECK_CSV,
    FOLD_CURVES_CSV,
    SENSITIVITY_CSV,
    SUMMARY_CSV,
)
from attnlab.training.flags import (
    add_mechanisms_flag,
    add_recall_flags,
    recall_config,
    write_recall_outputs,
)

#: One result CSV per part of the run: --help says how long they took.
TIMED_BY = (SUMMARY_CSV, FOLD_CHECK_CSV, SENSITIVITY_CSV)


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    add_recall_flags(parser, REMEDIES_DEFAULT)
    add_mechanisms_flag(parser, "--mechanisms", REMEDIES_DEFAULT.mechanisms, "mechanisms to train")
    cli.add_int_flag(parser, "--fold-step", FOLD_STEP, "step at which the scaled model is folded")
    cli.add_int_flag(
        parser, "--sensitivity-batch-sizes", SENSITIVITY_BATCH_SIZES, "batch sizes of the grid"
    )
    parser.add_argument(
        "--sensitivity-embed-stds",
        type=cli.positive_float,
        nargs="+",
        default=list(SENSITIVITY_EMBED_STDS),
        help="embedding init stds",
    )
    cli.add_int_flag(parser, "--sensitivity-seeds", SENSITIVITY_SEEDS, "seeds per grid cell")
    cli.add_out_dir_flag(parser)
    return parser


def run(args):
    out_dir = cli.prepare_out_dir(args)
    if args.fold_step >= args.steps:
        raise cli.UsageError(f"--fold-step: {args.fold_step} is not below --steps {args.steps}")
    config = recall_config(args, mechanisms=tuple(args.mechanisms))
    cli.check_seeds(args.seed, args.sensitivity_seeds, "--sensitivity-seeds")
    grid = len(args.sensitivity_batch_sizes) * len(args.sensitivity_embed_stds)
    sensitivity = dataclasses.replace(config, seeds=args.sensitivity_seeds)
    # Steps trained: each mechanism, the fold (head plus two continuations), the grid.
    total = config.steps * (len(config.mechanisms) + 2 * grid) + 2 * config.steps - args.fold_step
    flags = vars(args)
    # Every part is computed before anything is written: all outputs or none.
    with cli.progress(total, "05 remedies", args.quiet, unit="step") as bar:
        started = time.perf_counter()
        results = run_remedies(config, bar.update)
        remedies_wall = time.perf_counter() - started
        started = time.perf_counter()
        curves, check = run_fold(config, args.fold_step, bar.update)
        fold_wall = time.perf_counter() - started
        started = time.perf_counter()
        frame = run_sensitivity(
            sensitivity, args.sensitivity_batch_sizes, args.sensitivity_embed_stds, bar.update
        )
        sensitivity_wall = time.perf_counter() - started
    with cli.staged_outputs(out_dir, args.written) as stage:
        write_recall_outputs(
            results, config, stage, (CURVES_CSV, SUMMARY_CSV), flags, remedies_wall
        )
        write_result(curves, stage / FOLD_CURVES_CSV, flags, fold_wall)
        write_result(check, stage / FOLD_CHECK_CSV, flags, fold_wall)
        write_result(frame, stage / SENSITIVITY_CSV, flags, sensitivity_wall)
    args.outputs_note = divergence_note(diverged(results), config.d_k)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
