"""Experiment 09's computation: screen, fit (scaled numbers only) and prediction.

See the package docstring for the score. Nothing here reads an unscaled number before
stage 3: stage 2 trains only ``scaled`` attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from attnlab.core.curves import first_step_below, trailing_mean
from attnlab.core.parallel import unpad
from attnlab.core.temperature import MECHANISMS
from attnlab.harness.errors import RunError
from attnlab.studies.recall.readings import (
    RUN_LENGTHS,
    Reading,
    get_reading,
    kept,
    reading_config,
    step0_fingerprints,
)
from attnlab.studies.recall.train import RecallConfig, TrainResult, train

#: The article's scaled numbers, the only targets of the fit: (term, value).
ARTICLE_SCALED: dict[str, float] = {
    "grad_norm_wq": 0.1085,
    "step_loss_below_1": 224.0,
    "step_loss_below_0p1": 436.0,
    "final_loss": 0.00562,
}
#: The smoothed-loss thresholds of the two milestone terms.
THRESHOLDS: dict[str, float] = {"step_loss_below_1": 1.0, "step_loss_below_0p1": 0.1}
TERMS: tuple[str, ...] = tuple(ARTICLE_SCALED)
#: Screen and fit CSV names.
SCREEN_CSV = "09_fit_screen.csv"
SCORES_CSV = "09_fit_scores.csv"
CURVES_CSV = "09_fit_prediction_curves.csv"
SUMMARY_CSV = "09_fit_prediction_summary.csv"

SCORE_COLUMNS = [
    "reading",
    "pass",
    "horizon",
    "seeds",
    "grad_norm_wq",
    "step_loss_below_1",
    "step_loss_below_0p1",
    "censored_1",
    "censored_0p1",
    "final_loss",
    "best_run_length",
    *(f"log_{t}" for t in TERMS),
    "score",
    "rank",
]


def screen(readings: Iterable[Reading], seeds: int, seed: int) -> pd.DataFrame:
    """Stage 1: ``step0_fingerprints`` with the ``kept`` column."""
    frame = step0_fingerprints(list(readings), seeds=seeds, seed=seed)
    frame["kept"] = kept(frame)
    return frame


def score(logs: Mapping[str, float]) -> float:
    """Root-mean-square of the log ratios given (NaN terms are left out)."""
    values = [v for v in logs.values() if not math.isnan(v)]
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else math.nan


def log_ratio(ours: float, term: str) -> float:
    return math.log(ours / ARTICLE_SCALED[term]) if ours > 0 else math.nan


def scaled_numbers(
    result: TrainResult, smoothing: int, run_lengths: Sequence[int]
) -> dict[str, float]:
    """The scaled numbers of one trained reading, medians over seeds: step-0 ``||grad
    W_Q||``, both milestones (censored at the horizon, with the censored seed counts), and
    the smoothed loss at step ``L - 1`` for every run length ``L`` within the horizon."""
    smoothed = trailing_mean(result.metrics["loss"], smoothing)
    horizon = smoothed.shape[1]
    out: dict[str, float] = {
        "grad_norm_wq": float(np.median(result.metrics["grad_norm_wq"][:, 0])),
        "horizon": horizon,
    }
    for term, threshold in THRESHOLDS.items():
        steps = [first_step_below(curve, threshold) for curve in smoothed]
        out[term] = float(np.median([horizon if s is None else s for s in steps]))
        out["censored_" + term.removeprefix("step_loss_below_")] = sum(s is None for s in steps)
    for length in run_lengths:
        if length <= horizon:
            out[f"final_loss_{length}"] = float(np.median(smoothed[:, length - 1]))
    return out


def score_row(reading: str, stage: str, numbers: Mapping[str, float], seeds: int,
              run_lengths: Sequence[int]) -> dict:  # fmt: skip
    """One row of the scores table: the terms, the best run length (if any run length is
    within the horizon) and the score over the terms present."""
    row = {"reading": reading, "pass": stage, "seeds": seeds, **{
        k: numbers[k] for k in ("horizon", "grad_norm_wq", "step_loss_below_1",
                                "step_loss_below_0p1", "censored_1", "censored_0p1")}}  # fmt: skip
    finals = {L: numbers[f"final_loss_{L}"] for L in run_lengths if f"final_loss_{L}" in numbers}
    if finals:
        best = min(finals, key=lambda L: (abs(log_ratio(finals[L], "final_loss")), L))
        row["final_loss"], row["best_run_length"] = finals[best], best
    else:
        row["final_loss"], row["best_run_length"] = math.nan, None
    logs = {t: log_ratio(row[t], t) if not math.isnan(row[t]) else math.nan for t in TERMS}
    row.update({f"log_{t}": v for t, v in logs.items()})
    row["score"] = score(logs)
    return row


def rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Rank each pass's rows by score (1 = best; ties by reading name), best first."""
    frame = frame.sort_values(["pass", "score", "reading"], kind="stable").reset_index(drop=True)
    frame["rank"] = frame.groupby("pass").cumcount() + 1
    return frame


def _scaled_config(reading: Reading, seeds: int, seed: int, steps: int) -> RecallConfig:
    base = RecallConfig(seeds=seeds, seed=seed, steps=steps, mechanisms=("scaled",),
                        chunk_steps=500)  # fmt: skip
    return reading_config(reading, base)


def train_scaled(reading: Reading, seeds: int, seed: int, steps: int) -> TrainResult:
    """Scaled attention only, ``seeds`` seeds from ``seed``, ``steps`` steps."""
    return train(_scaled_config(reading, seeds, seed, steps), MECHANISMS["scaled"])


def candidates(screen_frame: pd.DataFrame, limit: int) -> list[str]:
    """The kept readings, nearest the article's step-0 norm first (the score's first term,
    a scaled number); the first ``limit`` of them (all if ``limit`` is 0)."""
    frame = screen_frame[screen_frame["kept"].astype(bool)].copy()
    frame["distance"] = np.abs(np.log(frame.grad_norm_wq_scaled / ARTICLE_SCALED["grad_norm_wq"]))
    names = frame.sort_values(["distance", "name"], kind="stable")["name"].tolist()
    return names if limit == 0 else names[:limit]


def fit(
    screen_frame: pd.DataFrame,
    *,
    seeds: int,
    seed: int,
    milestone_steps: int,
    finalists: int,
    run_lengths: Sequence[int] = RUN_LENGTHS,
    limit: int = 0,
    on_reading: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Stage 2: pass 2a (every candidate, ``milestone_steps`` steps, three terms) and pass
    2b (the best ``finalists``, continued to ``max(run_lengths)`` steps, four terms), ranked
    per pass. A finalist's 2b run continues its 2a run (same seeds, same data stream, Adam
    state carried over), so the 2b curve is one run from step 0."""
    smoothing = RecallConfig().smoothing
    rows, runs = [], {}
    names = candidates(screen_frame, limit)
    if not names:
        raise RunError("stage 2: the screen kept no reading (nothing to fit)")
    for name in names:
        runs[name] = train_scaled(get_reading(name), seeds, seed, milestone_steps)
        numbers = scaled_numbers(runs[name], smoothing, ())
        rows.append(score_row(name, "2a", numbers, seeds, ()))
        if on_reading:
            on_reading(1)
    first = rank(pd.DataFrame(rows))
    horizon = max(run_lengths)
    for name in first.reading.head(finalists):
        result = runs[name]
        if horizon > milestone_steps:
            config = _scaled_config(get_reading(name), seeds, seed, horizon)
            more = train(config, MECHANISMS["scaled"], state=unpad(result.state, seeds),
                         start_step=milestone_steps)  # fmt: skip
            metrics = {k: np.concatenate([result.metrics[k], more.metrics[k]], axis=1)
                       for k in result.metrics}  # fmt: skip
            result = replace(more, start_step=0, metrics=metrics)
        numbers = scaled_numbers(result, smoothing, run_lengths)
        rows.append(score_row(name, "2b", numbers, seeds, run_lengths))
        if on_reading:
            on_reading(1)
    frame = rank(pd.DataFrame(rows))
    frame["best_run_length"] = frame["best_run_length"].astype("Int64")
    return frame[SCORE_COLUMNS]


def best_reading(scores: pd.DataFrame) -> tuple[str, int]:
    """The rank-1 reading of the last pass and its best run length."""
    last = scores[scores["pass"] == scores["pass"].max()]
    top = last[last["rank"] == 1].iloc[0]
    length = top.best_run_length
    return str(top.reading), int(max(RUN_LENGTHS) if pd.isna(length) else length)


def predict(
    name: str,
    run_length: int,
    seeds: int,
    seed: int,
    on_chunk: Callable[[int], None] | None = None,
) -> tuple[RecallConfig, list[TrainResult]]:
    """Stage 3: both variants of reading ``name``, identical init and data, ``run_length``
    steps."""
    config = reading_config(get_reading(name), RecallConfig(seeds=seeds, seed=seed,
                                                            steps=run_length))  # fmt: skip
    return config, [train(config, MECHANISMS[m], on_chunk=on_chunk) for m in config.mechanisms]
