"""Flags of the fits (experiments 09 and 12), kept beside the settings they give
(``pipeline.FitSettings``): the stages, the screen, the fit's own candidate rule, both
passes and the prediction; ``script`` makes 09's and 12's parser and run."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from attnlab.harness import cli
from attnlab.recall.flags import substring_of
from attnlab.recall.readings import RUN_LENGTHS
from attnlab.studies.article_fit import pipeline
from attnlab.studies.article_fit.fits import Fit


def build_parser(doc: str | None, spec: Fit) -> cli.FlagParser:
    """The fit's flags: the stages, the screen, its own candidate rule, both passes and
    the prediction."""
    csvs = spec.csvs
    parser = cli.new_parser(doc, (csvs.screen, csvs.scores, csvs.summary))
    parser.add_argument(
        "--stage", choices=pipeline.STAGES, default="all", help="which stage to run"
    )
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


def fit_settings(args: argparse.Namespace) -> pipeline.FitSettings:
    """The settings the flags give; a flag the fit lacks has the value that leaves it out
    (``--candidates`` 0: every kept reading; ``--pass-a-seeds`` None: ``--fit-seeds``). A
    UsageError naming the flag whose seeds run past the largest seed."""
    settings = pipeline.FitSettings(
        stage=args.stage,
        seed=args.seed,
        seeds=args.seeds,
        family_filter=args.family_filter,
        candidates=getattr(args, "candidates", 0),
        pass_a_seeds=getattr(args, "pass_a_seeds", None),
        fit_seeds=args.fit_seeds,
        milestone_steps=args.milestone_steps,
        finalists=args.finalists,
        run_lengths=tuple(sorted(set(args.run_lengths))),
        predict_seeds=args.predict_seeds,
    )
    for flag, count in (("--seeds", settings.seeds), ("--pass-a-seeds", settings.pass_a_seeds),
                        ("--fit-seeds", settings.fit_seeds),
                        ("--predict-seeds", settings.predict_seeds)):  # fmt: skip
        if count is not None:
            cli.check_seeds(settings.seed, count, flag)
    return settings


def script(
    doc: str | None, spec: Fit
) -> tuple[Callable[[], cli.FlagParser], Callable[[argparse.Namespace, cli.RunContext], None]]:
    """``(build_parser, run)`` of the script of the fit ``spec`` (``cli.entry_point``'s)."""

    def run(args: argparse.Namespace, context: cli.RunContext) -> None:
        pipeline.run(fit_settings(args), context, spec)

    return (lambda: build_parser(doc, spec)), run
