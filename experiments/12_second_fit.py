"""Experiment 09, second pass: the second family of readings, fitted the first fit's way.

Screens every reading of the second family (finer batch-size and d_model grids) by its
step-0 ||grad W_Q|| (no training), fits the survivors under every smoothing of the loss on
the article's scaled run alone (a cascade: pass 2a one short run per reading on one seed,
pass 2b the best on more seeds to the longest run length), and predicts the unscaled run
with every member within the fit's noise (--stage runs one stage; a later stage alone reads
the earlier CSVs from --out-dir).
Writes 12_second_fit_screen.csv, 12_second_fit_scores.csv,
12_second_fit_prediction_curves.csv.xz and 12_second_fit_prediction_summary.csv, each with a
JSON sidecar. Method, stages and cuts: attnlab/studies/article_fit/README.md.
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import read_csv_checked, write_result
from attnlab.studies import headline
from attnlab.studies.article_fit.compute import (
    fit,
    predict,
    predicted_readings,
    prediction_steps,
    screen,
)
from attnlab.studies.article_fit.second import (
    CURVES_2_CSV,
    SCORE_2_COLUMNS,
    SCORES_2_CSV,
    SCREEN_2_CSV,
    SUMMARY_2_CSV,
    get_pair,
    pass_a_readings,
)
from attnlab.studies.recall.flags import substring_of
from attnlab.studies.recall.readings import FAMILY_2_READINGS, RUN_LENGTHS, SMOOTHINGS, pair_name

STAGES = ("screen", "fit", "predict", "all")

#: One result CSV per part of the run: --help says how long they took.
TIMED_BY = (SCREEN_2_CSV, SCORES_2_CSV, SUMMARY_2_CSV)


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    parser.add_argument("--stage", choices=STAGES, default="all", help="which stage to run")
    cli.add_int_flag(parser, "--seeds", 8, "seeds of the step-0 screen")
    cli.add_seed_flag(parser, help="the first seed of every stage")
    parser.add_argument(
        "--family-filter",
        type=substring_of(FAMILY_2_READINGS),
        default="",
        metavar="SUBSTRING",
        help="screen only the readings whose name contains SUBSTRING (a quick look)",
    )
    cli.add_int_flag(parser, "--pass-a-seeds", 1, "seeds per reading in pass 2a")
    cli.add_int_flag(parser, "--milestone-steps", 700, "training steps of pass 2a")
    cli.add_int_flag(
        parser, "--finalists", 4, "readings pass 2b trains from step 0 to the longest run length"
    )
    cli.add_int_flag(parser, "--fit-seeds", 5, "seeds per reading in pass 2b")
    cli.add_int_flag(
        parser, "--run-lengths", RUN_LENGTHS, "run lengths the final-loss term chooses from"
    )
    cli.add_int_flag(parser, "--predict-seeds", 10, "seeds per variant in stage 3")
    cli.add_out_dir_flag(parser)
    return parser


def _read(args, name, columns, stage):
    path = args.out_dir / name
    if not path.is_file():
        raise cli.UsageError(
            f"--stage {args.stage}: needs {path}; make it with `python "
            f"experiments/12_second_fit.py --stage {stage} --out-dir {args.out_dir}`"
        )
    return read_csv_checked(path, columns, "python experiments/12_second_fit.py")


def run(args):
    out_dir = cli.prepare_out_dir(args)
    readings = [r for r in FAMILY_2_READINGS if args.family_filter in r.name]
    for flag, count in (("--seeds", args.seeds), ("--pass-a-seeds", args.pass_a_seeds),
                        ("--fit-seeds", args.fit_seeds),
                        ("--predict-seeds", args.predict_seeds)):  # fmt: skip
        cli.check_seeds(args.seed, count, flag)
    run_lengths = tuple(sorted(set(args.run_lengths)))
    stages = STAGES[:3] if args.stage == "all" else (args.stage,)
    screen_frame = scores = None
    if stages[0] == "fit":
        screen_frame = _read(args, SCREEN_2_CSV, ["name", "grad_norm_wq_scaled", "kept"], "screen")
    if stages[0] == "predict":
        scores = _read(args, SCORES_2_CSV, SCORE_2_COLUMNS, "fit")
    flags = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()}
    written = []
    with cli.staged_outputs(out_dir) as stage:
        if "screen" in stages:
            started = time.perf_counter()
            screen_frame = screen(readings, args.seeds, args.seed)
            write_result(screen_frame, stage / SCREEN_2_CSV, flags, time.perf_counter() - started)
            written.append(SCREEN_2_CSV)
        if "fit" in stages:
            started = time.perf_counter()
            names = pass_a_readings(screen_frame)
            with cli.progress(len(names) + args.finalists, "12 fit", args.quiet,
                              unit="reading") as bar:  # fmt: skip
                scores = fit(
                    names,
                    SMOOTHINGS,
                    seeds=args.fit_seeds,
                    seed=args.seed,
                    milestone_steps=args.milestone_steps,
                    finalists=args.finalists,
                    run_lengths=run_lengths,
                    pass_a_seeds=args.pass_a_seeds,
                    naming=pair_name,
                    on_reading=bar.update,
                )[SCORE_2_COLUMNS]
            write_result(scores, stage / SCORES_2_CSV, flags, time.perf_counter() - started)
            written.append(SCORES_2_CSV)
        if "predict" in stages:
            started = time.perf_counter()
            members = predicted_readings(scores)
            steps = prediction_steps(members, get_pair)
            with cli.progress(steps, "12 predict", args.quiet, unit="step") as bar:
                curves, summary = predict(members, args.predict_seeds, args.seed, get_pair,
                                          bar.update)  # fmt: skip
            wall = time.perf_counter() - started
            (name, length), lengths = members[0], dict(members)
            flags = {**flags, "reading": name, "run_length": length, "readings": lengths}
            write_result(curves, stage / CURVES_2_CSV, flags, wall)
            write_result(summary, stage / SUMMARY_2_CSV, flags, wall)
            written += [CURVES_2_CSV, SUMMARY_2_CSV]
    if not args.quiet:
        print(f"12: wrote {', '.join(written)} into {out_dir}", file=sys.stderr)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
