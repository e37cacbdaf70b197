"""Training results -> tables: per-step curves and a per-seed summary with milestones."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from attnlab.core.curves import find_plateau, first_step_below, trailing_mean
from attnlab.training.columns import CURVES, SUMMARY
from attnlab.training.config import RecallConfig
from attnlab.training.step import METRICS
from attnlab.training.trainer import TrainResult

#: Smoothed-loss milestones of the article: (column, threshold).
MILESTONES = (("step_loss_below_1", 1.0), ("step_loss_below_0p1", 0.1))

#: The CSVs' columns, declared with their rules in study.py.
CURVE_COLUMNS = list(CURVES)
SUMMARY_COLUMNS = list(SUMMARY)


#: A smoothing of loss curves along their last axis (``readings.Smoothing`` is one).
Smoother = Callable[[np.ndarray], np.ndarray]


def _smoother(config: RecallConfig, smoothing: Smoother | None) -> Smoother:
    """``smoothing``, or the trailing mean over ``config.smoothing`` steps if None."""
    return smoothing or (lambda loss: trailing_mean(loss, config.smoothing))


def curves_frame(
    results: Iterable[TrainResult], config: RecallConfig, smoothing: Smoother | None = None
) -> pd.DataFrame:
    """One row per (variant, seed, step): loss, smoothed loss (under ``smoothing``; the
    trailing mean over ``config.smoothing`` steps if None) and the diagnostics."""
    frames = []
    for result in results:
        n_seeds, n_steps = result.metrics["loss"].shape
        smoothed = _smoother(config, smoothing)(result.metrics["loss"])
        data = {
            "variant": result.mechanism,
            "seed": np.repeat(result.seeds, n_steps),
            "step": np.tile(np.arange(n_steps) + result.start_step, n_seeds),
            "loss": result.metrics["loss"].ravel(),
            "smoothed_loss": smoothed.ravel(),
        }
        data.update({k: result.metrics[k].ravel() for k in METRICS[1:]})
        frames.append(pd.DataFrame(data))
    return pd.concat(frames, ignore_index=True)[CURVE_COLUMNS]


def summary_frame(
    results: Iterable[TrainResult], config: RecallConfig, smoothing: Smoother | None = None
) -> pd.DataFrame:
    """One row per (variant, seed): step-0 gradients, milestones and final loss of the loss
    under ``smoothing`` (as ``curves_frame``), accuracy and the mid-training plateau if
    there is one. Milestones never reached are left empty."""
    rows = []
    for result in results:
        smoothed = _smoother(config, smoothing)(result.metrics["loss"])
        steps = np.arange(smoothed.shape[1]) + result.start_step
        for i, seed in enumerate(result.seeds):
            row = {
                "variant": result.mechanism,
                "seed": seed,
                "grad_wq_step0": float(result.metrics["grad_norm_wq"][i, 0]),
                "grad_wk_step0": float(result.metrics["grad_norm_wk"][i, 0]),
            }
            for column, threshold in MILESTONES:
                row[column] = first_step_below(smoothed[i], threshold, steps)
            row["final_loss"] = float(smoothed[i, -1])
            row["final_attn_entropy"] = float(result.metrics["attn_entropy"][i, -1])
            row["eval_accuracy"] = float(result.eval_accuracy[i])
            crossed = first_step_below(smoothed[i], MILESTONES[0][1])
            plateau = None if crossed is None else find_plateau(smoothed[i], crossed)
            row["plateau_start"], row["plateau_end"], row["plateau_level"] = (
                (int(steps[plateau[0]]), int(steps[plateau[1]]), plateau[2])
                if plateau
                else (None, None, None)
            )
            rows.append(row)
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for column in ("step_loss_below_1", "step_loss_below_0p1", "plateau_start", "plateau_end"):
        frame[column] = frame[column].astype("Int64")
    return frame
