"""The stages of a fit of the training demo's unstated set-up, for either fit
(``attnlab.studies.article_fit.fits``): its parser and its run, and ``script``, which
makes both for 09's and 12's scripts.

Stage 1 screens every reading of the fit's family by its step-0 ``||grad W_Q||`` (no
training); stage 2 fits the candidates on the article's scaled run alone (``compute.fit``:
pass 2a, pass 2b); stage 3 predicts the unscaled run with every member within the fit's
noise. ``--stage`` runs one stage; a later stage alone reads the earlier CSVs from
``--out-dir``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from attnlab.harness import cli
from attnlab.harness.io import read_csv_checked, write_result
from attnlab.recall.flags import substring_of
from attnlab.recall.readings import RUN_LENGTHS
from attnlab.studies.article_fit.compute import fit, predict, predicted_readings, prediction_steps
from attnlab.studies.article_fit.compute import screen as screen_readings
from attnlab.studies.article_fit.fits import Fit

STAGES = ("screen", "fit", "predict", "all")


def build_parser(doc: str | None, spec: Fit) -> argparse.ArgumentParser:
    """The fit's flags: the stages, the screen, its own candidate rule, both passes and
    the prediction."""
    csvs = spec.csvs
    parser = cli.new_parser(doc, (csvs.screen, csvs.scores, csvs.summary))
    parser.add_argument("--stage", choices=STAGES, default="all", help="which stage to run")
    cli.add_int_flag(parser, "--seeds", 8, "seeds of the step-0 screen")
    cli.add_seed_flag(parser, help="the first seed of every stage")
    parser.add_argument(
        "--family-filter",
        type=substring_of(spec.family),
        default="",
        metavar="SUBSTRING",
        help="screen only the readings whose name contains SUBSTRING (a quick look)",
    )
    cli.add_int_flag(parser, "--fit-seeds", spec.fit_seeds, "seeds per reading in pass 2b")
    spec.add_flags(parser)
    cli.add_int_flag(parser, "--milestone-steps", 700, "training steps of pass 2a")
    cli.add_int_flag(
        parser,
        "--finalists",
        spec.finalists,
        "readings pass 2b trains from step 0 to the longest run length",
    )
    cli.add_int_flag(
        parser, "--run-lengths", RUN_LENGTHS, "run lengths the final-loss term chooses from"
    )
    cli.add_int_flag(parser, "--predict-seeds", 10, "seeds per variant in stage 3")
    cli.add_out_dir_flag(parser)
    return parser


def candidates_of(spec: Fit, screen_frame: pd.DataFrame, args: argparse.Namespace) -> list[str]:
    """The readings the fit's pass 2a trains (its candidate rule)."""
    return spec.candidates(screen_frame, args)


def _earlier(args: argparse.Namespace, out_dir: Path, spec: Fit, name: str, columns, stage: str):
    """An earlier stage's CSV from ``--out-dir``, for a run of one later stage."""
    path = out_dir / name
    command = f"python experiments/{spec.script}"
    if not path.is_file():
        raise cli.UsageError(
            f"--stage {args.stage}: needs {path}; make it with `{command} --stage {stage} "
            f"--out-dir {out_dir}`"
        )
    return read_csv_checked(path, columns, command)


def run(args: argparse.Namespace, context: cli.RunContext, spec: Fit) -> None:
    """Run the stages ``--stage`` names and write their CSVs (each with its sidecar)."""
    out_dir = cli.prepare_out_dir(context)
    csvs = spec.csvs
    readings = [r for r in spec.family if args.family_filter in r.name]
    pass_a_seeds = spec.pass_a_seeds(args)
    for flag, count in (("--seeds", args.seeds), ("--pass-a-seeds", pass_a_seeds),
                        ("--fit-seeds", args.fit_seeds),
                        ("--predict-seeds", args.predict_seeds)):  # fmt: skip
        if count is not None:
            cli.check_seeds(args.seed, count, flag)
    run_lengths = tuple(sorted(set(args.run_lengths)))
    stages = STAGES[:3] if args.stage == "all" else (args.stage,)
    screen_frame = scores = None
    if stages[0] == "fit":
        columns = ["name", "grad_norm_wq_scaled", "kept"]
        screen_frame = _earlier(args, out_dir, spec, csvs.screen, columns, "screen")
    if stages[0] == "predict":
        scores = _earlier(args, out_dir, spec, csvs.scores, list(spec.score_columns), "fit")
    flags = {k: (list(v) if isinstance(v, tuple) else v) for k, v in context.sidecar_flags.items()}
    written: list[str] = []
    label = spec.number
    with cli.staged_outputs(out_dir, context.written) as stage:

        def write(frame: pd.DataFrame, name: str, wall: float, extra=None) -> None:
            write_result(frame, stage / name, {**flags, **(extra or {})}, wall)
            written.append(name)

        if "screen" in stages:
            started = time.perf_counter()
            screen_frame = screen_readings(readings, args.seeds, args.seed)
            write(screen_frame, csvs.screen, time.perf_counter() - started)
        if "fit" in stages:
            started = time.perf_counter()
            names = candidates_of(spec, screen_frame, args)
            with cli.progress(len(names) + args.finalists, f"{label} fit", args.quiet,
                              unit="reading") as bar:  # fmt: skip
                scores = fit(
                    names,
                    spec.smoothings,
                    seeds=args.fit_seeds,
                    seed=args.seed,
                    milestone_steps=args.milestone_steps,
                    finalists=args.finalists,
                    run_lengths=run_lengths,
                    pass_a_seeds=pass_a_seeds,
                    naming=spec.naming,
                    on_reading=bar.update,
                )[list(spec.score_columns)]
            write(scores, csvs.scores, time.perf_counter() - started)
        if "predict" in stages:
            started = time.perf_counter()
            members = predicted_readings(scores)
            steps = prediction_steps(members, spec.resolve)
            with cli.progress(steps, f"{label} predict", args.quiet, unit="step") as bar:
                curves, summary = predict(members, args.predict_seeds, args.seed, spec.resolve,
                                          bar.update)  # fmt: skip
            wall = time.perf_counter() - started
            # The sidecars name the best member and every member's run length.
            (name, length), lengths = members[0], dict(members)
            extra = {"reading": name, "run_length": length, "readings": lengths}
            write(curves, csvs.curves, wall, extra)
            write(summary, csvs.summary, wall, extra)
    if not args.quiet:
        print(f"{label}: wrote {', '.join(written)} into {out_dir}", file=sys.stderr)


def script(
    doc: str | None, spec: Fit
) -> tuple[Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], None]]:
    """``(build_parser, run)`` of the script of the fit ``spec`` (``cli.entry_point``'s)."""
    return (lambda: build_parser(doc, spec)), (lambda args, context: run(args, context, spec))
