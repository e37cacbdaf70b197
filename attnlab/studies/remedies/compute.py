"""Experiment 05: the remedies side by side, folding into a trained model, sensitivity.

1. Remedies: every mechanism of ``attnlab.core.temperature`` trained on the 04 task with the same
   seeds, initialisations and data.
2. Folding: article 000 warns that folding ``1/sqrt(d_k)`` into W_Q of a *trained* model and
   continuing at the same learning rate is not equivalent. We train ``scaled`` to
   ``fold_step``, then continue twice from that checkpoint on the same data: unchanged, and
   folded (``W_Q <- W_Q / sqrt(d_k)``, no divisor; Adam's state carried over as a checkpoint
   reload would). The two models compute the same function at the fold; Adam's updates are
   invariant to the gradient's scale but not to the parameter's, so the folded W_Q moves
   ``sqrt(d_k)`` times faster relative to its size.
3. Sensitivity: the milestone ratio unscaled / scaled of 04 over the settings the article
   leaves open, batch size x embedding initialisation scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.curves import trailing_mean
from attnlab.core.progress import Progress
from attnlab.core.temperature import MECHANISMS
from attnlab.recall.config import RecallConfig, make_model
from attnlab.recall.step import TrainState, held_out_batches
from attnlab.recall.tables import summary_frame
from attnlab.recall.trainer import Run, TrainResult, train, train_runs

#: 05's defaults: the 04 configuration with every mechanism, but 3 seeds and 1500 steps
#: (every 04 milestone falls before step 1300), and one seed per sensitivity cell, so that
#: ``make reproduce`` stays within its budget: 05 trains 8 + 2 x 9 configurations where 04
#: trains 2.
REMEDIES_DEFAULT = RecallConfig(seeds=3, steps=1500, mechanisms=tuple(MECHANISMS))
FOLD_STEP = 500
SENSITIVITY_BATCH_SIZES = (16, 64, 256)
SENSITIVITY_EMBED_STDS = (0.5, 1.0, 2.0)
SENSITIVITY_SEEDS = 1


def run_remedies(config: RecallConfig, on_progress: Progress = None) -> list[TrainResult]:
    """Train every mechanism of ``config`` on its seeds (same init keys and data). A seed
    whose loss turns non-finite is recorded, not raised: its loss is NaN or infinite from
    that step on (``diverged``) and its held-out accuracy NaN."""
    runs = [Run(config, m.mechanism) for m in config.mechanisms]
    results = train_runs(runs, on_chunk=on_progress, on_diverge="record")
    for result in results:
        finite = np.isfinite(result.metrics["loss"]).all(axis=1)
        result.eval_accuracy = np.where(finite, result.eval_accuracy, np.nan)
    return results


class Divergence(NamedTuple):
    """A seed of a mechanism whose loss turned non-finite at ``step`` (to ``loss``)."""

    mechanism: str
    seed: int
    step: int
    loss: float


def diverged(results: Sequence[TrainResult]) -> list[Divergence]:
    """Every (mechanism, seed) of ``results`` whose loss turned non-finite, with the step."""
    found = []
    for result in results:
        loss = result.metrics["loss"]
        for i, seed in enumerate(result.seeds):
            bad = np.flatnonzero(~np.isfinite(loss[i]))
            if bad.size:
                step = int(bad[0])
                found.append(
                    Divergence(
                        result.mechanism, seed, step + result.start_step, float(loss[i, step])
                    )
                )
    return found


def divergence_note(found: Sequence[Divergence], d_k: int) -> str | None:
    """One line naming every divergence of ``found`` (at head width ``d_k``), or None."""
    if not found:
        return None
    each = "; ".join(f"{d.mechanism} seed {d.seed} at step {d.step} (loss {d.loss})" for d in found)
    return f"(diverged at d_k {d_k}, recorded as non-finite loss from that step on: {each})"


def fold_params(params: dict, d_k: int) -> dict:
    """Fold the scaled model's divisor into its query projection: ``W_Q / sqrt(d_k)``."""
    return {**params, "W_Q": params["W_Q"] / jnp.sqrt(jnp.float32(d_k))}


def _eval_logits(config: RecallConfig, mechanism: str, params: dict) -> np.ndarray:
    """Value logits of every seed's model on its held-out set, ``[seeds, eval, values]``."""
    model = make_model(config, MECHANISMS[mechanism])
    apply = jax.vmap(lambda p, b: model.apply({"params": p}, b)[0])
    return np.asarray(apply(params, held_out_batches(config)))


def run_fold(
    config: RecallConfig, fold_step: int, on_progress: Progress = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train scaled to ``fold_step``; continue unfolded and folded; compare.

    Returns the per-step curves of both continuations (``seed, step, loss_unfolded,
    loss_folded`` and their smoothed versions) and one row per seed with the fold's check:
    the largest logit difference at the fold, relative to the largest logit.
    """
    scaled = MECHANISMS["scaled"]
    head = train(config, scaled, steps=fold_step, on_chunk=on_progress)
    params, opt_state = head.state
    folded_params = fold_params(params, config.d_k)

    logits = _eval_logits(config, "scaled", params)
    logits_folded = _eval_logits(config, "unscaled", folded_params)
    gap = np.abs(logits - logits_folded).max(axis=(1, 2)) / np.abs(logits).max(axis=(1, 2))

    continuations = [
        Run(config, scaled, state=TrainState(params, opt_state)),
        Run(config, MECHANISMS["unscaled"], state=TrainState(folded_params, opt_state)),
    ]
    unfolded, folded = train_runs(continuations, config.steps - fold_step, fold_step, on_progress)
    steps = np.arange(fold_step, config.steps)
    frames = []
    for i, seed in enumerate(config.seed_values):
        a, b = unfolded.metrics["loss"][i], folded.metrics["loss"][i]
        frames.append(
            pd.DataFrame(
                {
                    "seed": seed,
                    "step": steps,
                    "loss_unfolded": a,
                    "loss_folded": b,
                    "smoothed_unfolded": trailing_mean(a, config.smoothing),
                    "smoothed_folded": trailing_mean(b, config.smoothing),
                    "grad_norm_wq_unfolded": unfolded.metrics["grad_norm_wq"][i],
                    "grad_norm_wq_folded": folded.metrics["grad_norm_wq"][i],
                }
            )
        )
    curves = pd.concat(frames, ignore_index=True)

    final_unfolded = _eval_logits(config, "scaled", unfolded.state.params)
    final_folded = _eval_logits(config, "unscaled", folded.state.params)
    check = pd.DataFrame(
        {
            "seed": config.seed_values,
            "fold_step": fold_step,
            "logit_rel_diff_at_fold": gap,
            "grad_wq_ratio_at_fold": folded.metrics["grad_norm_wq"][:, 0]
            / unfolded.metrics["grad_norm_wq"][:, 0],
            "logit_rel_diff_at_end": np.abs(final_unfolded - final_folded).max(axis=(1, 2))
            / np.abs(final_unfolded).max(axis=(1, 2)),
            "eval_accuracy_unfolded": unfolded.eval_accuracy,
            "eval_accuracy_folded": folded.eval_accuracy,
            "final_loss_unfolded": trailing_mean(unfolded.metrics["loss"], config.smoothing)[:, -1],
            "final_loss_folded": trailing_mean(folded.metrics["loss"], config.smoothing)[:, -1],
        }
    )
    return curves, check


def run_sensitivity(
    config: RecallConfig,
    batch_sizes: Sequence[int],
    embed_stds: Sequence[float],
    on_progress: Progress = None,
) -> pd.DataFrame:
    """Milestones of scaled and unscaled, and their ratio, over batch size x embedding std.

    One row per (batch size, embedding std, seed): both variants' milestone steps and the
    ratios unscaled / scaled (empty where a variant never reaches a milestone).
    """
    cells = [
        dataclasses.replace(
            config, batch_size=batch_size, embed_init_std=std, mechanisms=("scaled", "unscaled")
        )
        for batch_size in batch_sizes
        for std in embed_stds
    ]
    # Every cell's two variants at once: cells of one batch size share a program.
    runs = [Run(cell, m.mechanism) for cell in cells for m in cell.mechanisms]
    results = train_runs(runs, on_chunk=on_progress)
    rows = []
    for i, cell in enumerate(cells):
        summary = summary_frame(results[2 * i : 2 * i + 2], cell).set_index(["variant", "seed"])
        for seed in cell.seed_values:
            s, u = summary.loc[("scaled", seed)], summary.loc[("unscaled", seed)]
            row = {"batch_size": cell.batch_size, "embed_init_std": cell.embed_init_std,
                   "seed": seed}  # fmt: skip
            for column in ("step_loss_below_1", "step_loss_below_0p1"):
                row[f"scaled_{column}"] = s[column]
                row[f"unscaled_{column}"] = u[column]
                row[f"ratio_{column}"] = (
                    float(u[column]) / float(s[column])
                    if pd.notna(u[column]) and pd.notna(s[column])
                    else None
                )
            row["grad_wq_ratio_step0"] = float(u["grad_wq_step0"]) / float(s["grad_wq_step0"])
            row["scaled_eval_accuracy"] = s["eval_accuracy"]
            row["unscaled_eval_accuracy"] = u["eval_accuracy"]
            rows.append(row)
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if column.endswith(("below_1", "below_0p1")) and not column.startswith("ratio"):
            frame[column] = frame[column].astype("Int64")
    return frame
