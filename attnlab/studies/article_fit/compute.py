"""Experiment 09's computation: screen, fit (scaled numbers only) and prediction.

See the package docstring for the score. Nothing here reads an unscaled number before
stage 3: stage 2 trains only ``scaled`` attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.curves import first_step_below, trailing_mean
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
from attnlab.studies.recall.train import (
    RecallConfig,
    TrainResult,
    initial_state,
    make_model,
    make_optimizer,
    seed_keys,
    train,
    train_step,
)

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
    metrics: Mapping[str, np.ndarray],
    smoothing: int,
    run_lengths: Sequence[int],
    horizon: int | None = None,
) -> dict[str, float]:
    """The scaled numbers of one trained reading (``metrics["loss"]`` and
    ``metrics["grad_norm_wq"]``, ``[seeds, steps]`` from step 0), medians over seeds:
    step-0 ``||grad W_Q||``, both milestones (a seed that never crosses counts as crossing
    at ``horizon``, the number of steps trained if None; with the censored seed counts), and
    the smoothed loss at step ``L - 1`` for every run length ``L`` trained."""
    smoothed = trailing_mean(metrics["loss"], smoothing)
    horizon = smoothed.shape[1] if horizon is None else horizon
    out: dict[str, float] = {
        "grad_norm_wq": float(np.median(metrics["grad_norm_wq"][:, 0])),
        "horizon": horizon,
    }
    for term, threshold in THRESHOLDS.items():
        steps = [first_step_below(curve, threshold) for curve in smoothed]
        out[term] = float(np.median([horizon if s is None else s for s in steps]))
        out["censored_" + term.removeprefix("step_loss_below_")] = sum(s is None for s in steps)
    for length in run_lengths:
        if length <= smoothed.shape[1]:
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


#: Steps per compiled chunk of the fit's runs (an early stop is decided between chunks).
FIT_CHUNK = 100


def _scaled_config(reading: Reading, seeds: int, seed: int, steps: int) -> RecallConfig:
    base = RecallConfig(seeds=seeds, seed=seed, steps=steps, mechanisms=("scaled",))
    return reading_config(reading, base)


class ScaledRun:
    """Scaled attention of one reading on ``seeds`` seeds from ``seed``: ``train``'s
    step (same initialisation, same batch stream, same Adam), run in chunks of
    ``FIT_CHUNK`` steps that record only the loss and ``||grad W_Q||``, so a run can stop
    early and be continued later."""

    def __init__(self, reading: Reading, seeds: int, seed: int):
        self.config = _scaled_config(reading, seeds, seed, 1)
        mechanism = MECHANISMS["scaled"]
        model, optimizer = make_model(self.config, mechanism), make_optimizer(self.config)
        config = self.config
        self.state = initial_state(config, mechanism)
        self.data_keys = jnp.stack([seed_keys(s).data for s in config.seed_values])
        self.metrics: dict[str, np.ndarray] = {
            k: np.zeros((seeds, 0), np.float32) for k in ("loss", "grad_norm_wq")
        }

        def run_one_seed(state, data_key, steps):
            def body(s, t):
                s, m = train_step(model, optimizer, config, data_key, s, t)
                return s, {k: m[k] for k in ("loss", "grad_norm_wq")}

            return jax.lax.scan(body, state, steps)

        self._chunk = jax.jit(jax.vmap(run_one_seed, in_axes=(0, 0, None)))

    @property
    def steps(self) -> int:
        return self.metrics["loss"].shape[1]

    def run(self, until: int, stop_below: float | None = None, smoothing: int = 25) -> None:
        """Train to step ``until``; with ``stop_below``, stop after the first chunk at which
        every seed's smoothed loss has crossed it (later steps cannot change a milestone)."""
        while self.steps < until:
            start = self.steps
            end = min(start + FIT_CHUNK, until)
            self.state, m = self._chunk(self.state, self.data_keys, jnp.arange(start, end))
            m = {k: np.asarray(v) for k, v in m.items()}
            if not np.isfinite(m["loss"]).all():
                raise RunError(f"scaled run diverged (non-finite loss) in steps {start}-{end}")
            self.metrics = {k: np.concatenate([self.metrics[k], m[k]], axis=1) for k in m}
            if stop_below is not None:
                smoothed = trailing_mean(self.metrics["loss"], smoothing)
                if (smoothed <= stop_below).any(axis=1).all():
                    return


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
    """Stage 2: pass 2a (every candidate up to ``milestone_steps`` steps, stopped early once
    every seed has crossed loss 0.1; three terms) and pass 2b (the best ``finalists``,
    continued to ``max(run_lengths)`` steps; four terms), ranked per pass. A finalist's 2b
    run continues its 2a run (same seeds and data stream, Adam state carried over), so its
    curve is one run from step 0."""
    smoothing = RecallConfig().smoothing
    rows, runs = [], {}
    names = candidates(screen_frame, limit)
    if not names:
        raise RunError("stage 2: the screen kept no reading (nothing to fit)")
    last_threshold = min(THRESHOLDS.values())
    for name in names:
        runs[name] = ScaledRun(get_reading(name), seeds, seed)
        runs[name].run(milestone_steps, stop_below=last_threshold, smoothing=smoothing)
        numbers = scaled_numbers(runs[name].metrics, smoothing, (), horizon=milestone_steps)
        rows.append(score_row(name, "2a", numbers, seeds, ()))
        if on_reading:
            on_reading(1)
    first = rank(pd.DataFrame(rows))
    horizon = max(run_lengths)
    for name in first.reading.head(finalists):
        runs[name].run(horizon)
        numbers = scaled_numbers(
            runs[name].metrics, smoothing, run_lengths, horizon=max(horizon, milestone_steps)
        )
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
