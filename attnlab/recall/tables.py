"""Training results -> tables: per-step curves and a per-seed summary with milestones,
and both written with their sidecars (``write_recall_outputs``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlab.core.curves import find_plateau, summarize_losses, trailing_mean
from attnlab.harness.io import write_result
from attnlab.recall.columns import CURVES, SUMMARY
from attnlab.recall.config import RecallConfig
from attnlab.recall.step import METRICS
from attnlab.recall.trainer import TrainResult

#: Smoothed-loss milestones of the article: (column, threshold).
MILESTONES = (("step_loss_below_1", 1.0), ("step_loss_below_0p1", 0.1))

#: The CSVs' columns, declared with their rules in ``attnlab.recall.columns``.
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
    results: Iterable[TrainResult],
    config: RecallConfig,
    smoothing: Smoother | None = None,
    divergence: bool = False,
) -> pd.DataFrame:
    """One row per (variant, seed): step-0 gradients, milestones and final loss of the loss
    under ``smoothing`` (as ``curves_frame``), accuracy and the mid-training plateau if
    there is one (``summarize_losses``). Milestones never reached are left empty. With
    ``divergence``, also ``diverged_step`` and ``nonfinite`` (the first step whose loss is
    not finite, and what), a diverged seed's accuracy left NaN."""
    rows = []
    for result in results:
        run = summarize_losses(result.metrics["loss"], _smoother(config, smoothing),
                               MILESTONES, result.start_step)  # fmt: skip
        for i, seed in enumerate(result.seeds):
            row = {
                "variant": result.mechanism,
                "seed": seed,
                "grad_wq_step0": float(result.metrics["grad_norm_wq"][i, 0]),
                "grad_wk_step0": float(result.metrics["grad_norm_wk"][i, 0]),
            }
            for column, _ in MILESTONES:
                row[column] = run.milestones[column][i]
            row["final_loss"] = float(run.final_loss[i])
            row["final_attn_entropy"] = float(result.metrics["attn_entropy"][i, -1])
            row["eval_accuracy"] = float(result.eval_accuracy[i])
            crossed = run.milestones[MILESTONES[0][0]][i]
            plateau = (None if crossed is None
                       else find_plateau(run.smoothed[i], crossed - result.start_step))  # fmt: skip
            row["plateau_start"], row["plateau_end"], row["plateau_level"] = (
                (int(run.steps[plateau[0]]), int(run.steps[plateau[1]]), plateau[2])
                if plateau
                else (None, None, None)
            )
            if divergence:
                diverged = int(run.diverged_step[i])
                row["diverged_step"] = diverged if diverged >= 0 else None
                row["nonfinite"] = "loss" if diverged >= 0 else ""
                row["eval_accuracy"] = np.nan if diverged >= 0 else row["eval_accuracy"]
            rows.append(row)
    columns = SUMMARY_COLUMNS + (["diverged_step", "nonfinite"] if divergence else [])
    frame = pd.DataFrame(rows, columns=columns)
    integers = ["step_loss_below_1", "step_loss_below_0p1", "plateau_start", "plateau_end"]
    for column in integers + (["diverged_step"] if divergence else []):
        frame[column] = frame[column].astype("Int64")
    return frame


def write_recall_outputs(
    results: Mapping[str, TrainResult] | Iterable[TrainResult],
    config: RecallConfig,
    out_dir: Path,
    csvs: tuple[str, str],
    flags: Mapping[str, Any],
    wall: float,
) -> None:
    """Write the curves and the summary into ``out_dir`` as the CSVs ``csvs`` (curves,
    summary) with their sidecars; ``wall`` is the run's wall time in seconds."""
    runs = list(results.values()) if isinstance(results, Mapping) else list(results)
    curves_csv, summary_csv = csvs
    write_result(curves_frame(runs, config), out_dir / curves_csv, flags, wall)
    write_result(summary_frame(runs, config), out_dir / summary_csv, flags, wall)
