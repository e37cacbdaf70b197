"""The stages of a fit of the training demo's unstated set-up, for either fit
(``attnlab.studies.article_fit.fits``), run from the settings the flags give
(``FitSettings``; the flags and 09's and 12's scripts: ``article_fit.flags``).

Stage 1 screens every reading of the fit's family by its step-0 ``||grad W_Q||`` (no
training); stage 2 fits the candidates on the article's scaled run alone (``compute.fit``:
pass 2a, pass 2b); stage 3 predicts the unscaled run with every member within the fit's
noise. ``--stage`` runs one stage; a later stage alone reads the earlier CSVs from
``--out-dir``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnlab.harness import cli
from attnlab.harness.io import read_csv_checked, write_result
from attnlab.studies.article_fit.compute import fit, predict, predicted_readings, prediction_steps
from attnlab.studies.article_fit.compute import screen as screen_readings
from attnlab.studies.article_fit.fits import Fit

STAGES = ("screen", "fit", "predict", "all")


@dataclass(frozen=True)
class FitSettings:
    """What a run of a fit's stages is asked for (``article_fit.flags.fit_settings``).

    Attributes:
      stage: the stage to run, one of ``STAGES`` (``"all"``: the three in turn).
      seed: the first seed of every stage.
      seeds: seeds of the step-0 screen.
      family_filter: screen only the readings whose name contains it (``""``: all).
      candidates: readings pass 2a trains under the first fit's rule (0: every kept one).
      pass_a_seeds: seeds per reading in pass 2a (None: ``fit_seeds``).
      fit_seeds: seeds per reading in pass 2b.
      milestone_steps: training steps of pass 2a.
      finalists: readings pass 2b trains to the longest run length.
      run_lengths: the run lengths the final-loss term chooses from, sorted.
      predict_seeds: seeds per variant in stage 3.
    """

    stage: str
    seed: int
    seeds: int
    family_filter: str
    candidates: int
    pass_a_seeds: int | None
    fit_seeds: int
    milestone_steps: int
    finalists: int
    run_lengths: tuple[int, ...]
    predict_seeds: int


def candidates_of(spec: Fit, screen_frame: pd.DataFrame, settings: FitSettings) -> list[str]:
    """The readings the fit's pass 2a trains (its candidate rule)."""
    return spec.candidates(screen_frame, settings.candidates)


def _earlier(stage: str, out_dir: Path, spec: Fit, name: str, columns, made_by: str):
    """An earlier stage's CSV from ``--out-dir`` (made by stage ``made_by``), for a run of
    the later ``stage`` alone."""
    path = out_dir / name
    command = f"python experiments/{spec.script}"
    if not path.is_file():
        raise cli.UsageError(
            f"--stage {stage}: needs {path}; make it with `{command} --stage {made_by} "
            f"--out-dir {out_dir}`"
        )
    return read_csv_checked(path, columns, command)


def run(settings: FitSettings, context: cli.RunContext, spec: Fit) -> None:
    """Run the stages ``settings.stage`` names and write their CSVs (each with its
    sidecar) into the run's output folder."""
    out_dir = cli.prepare_out_dir(context)
    csvs = spec.csvs
    readings = [r for r in spec.family if settings.family_filter in r.name]
    stages = STAGES[:3] if settings.stage == "all" else (settings.stage,)
    screen_frame = scores = None
    if stages[0] == "fit":
        columns = ["name", "grad_norm_wq_scaled", "kept"]
        screen_frame = _earlier(settings.stage, out_dir, spec, csvs.screen, columns, "screen")
    if stages[0] == "predict":
        scores = _earlier(
            settings.stage, out_dir, spec, csvs.scores, list(spec.score_columns), "fit"
        )
    flags = {k: (list(v) if isinstance(v, tuple) else v) for k, v in context.sidecar_flags.items()}
    written: list[str] = []
    label = spec.number
    with cli.staged_outputs(out_dir, context.written) as stage:

        def write(frame: pd.DataFrame, name: str, wall: float, extra=None) -> None:
            write_result(frame, stage / name, {**flags, **(extra or {})}, wall)
            written.append(name)

        if "screen" in stages:
            started = time.perf_counter()
            screen_frame = screen_readings(readings, settings.seeds, settings.seed)
            write(screen_frame, csvs.screen, time.perf_counter() - started)
        if "fit" in stages:
            started = time.perf_counter()
            names = candidates_of(spec, screen_frame, settings)
            with cli.progress(len(names) + settings.finalists, f"{label} fit", context.quiet,
                              unit="reading") as bar:  # fmt: skip
                scores = fit(
                    names,
                    spec.smoothings,
                    seeds=settings.fit_seeds,
                    seed=settings.seed,
                    milestone_steps=settings.milestone_steps,
                    finalists=settings.finalists,
                    run_lengths=settings.run_lengths,
                    pass_a_seeds=settings.pass_a_seeds,
                    naming=spec.naming,
                    on_reading=bar.update,
                )[list(spec.score_columns)]
            write(scores, csvs.scores, time.perf_counter() - started)
        if "predict" in stages:
            started = time.perf_counter()
            members = predicted_readings(scores)
            steps = prediction_steps(members, spec.resolve)
            with cli.progress(steps, f"{label} predict", context.quiet, unit="step") as bar:
                curves, summary = predict(members, settings.predict_seeds, settings.seed,
                                          spec.resolve, bar.update)  # fmt: skip
            wall = time.perf_counter() - started
            # The sidecars name the best member and every member's run length.
            (name, length), lengths = members[0], dict(members)
            extra = {"reading": name, "run_length": length, "readings": lengths}
            write(curves, csvs.curves, wall, extra)
            write(summary, csvs.summary, wall, extra)
    if not context.quiet:
        print(f"{label}: wrote {', '.join(written)} into {out_dir}", file=sys.stderr)
