"""The card's training sweep: learning rates from well below the best to far above it, and
head widths, on the recall task at a narrowed reading (``SWEEP_BASE``).

At each ``d_k`` of ``SweepConfig.dks`` every mechanism is trained on ``seeds`` seeds at the
base rate; at each of ``lr_dks`` (``LR_DKS``) at every rate of ``lrs`` (``LRS``: factors of
10^(1/4), 10^-3.5 to 10^-0.5). The rates of a (width, program) are lanes of one compiled
program (the engine's ``Trainer``); a lane that goes non-finite is recorded
(``diverged_step``, ``nonfinite``), not raised. Each seed has one initialisation and one
data stream, shared by every mechanism and rate at a width.

Per lane (``width_rows``, one width at a time; ``sweep_table`` joins the widths): the loss
at step 0 (``loss_step0``, before any update), the smoothed loss at the end, the step to
smoothed loss 1, held-out accuracy, the logits' std on the held-out sequences at step 0 and
at the end, and the largest ``|z|`` of an attention logit on them over training
(``max_logit``, read every ``record_every`` steps; Wortsman et
al. 2023's attention-logit growth).

Wortsman et al.'s learning-rate sensitivity of the sweep: ``attnlab.studies.card.sensitivity``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.curves import summarize_losses, trailing_mean
from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef
from attnlab.harness.io import FLOAT_FORMAT
from attnlab.recall.config import RecallConfig
from attnlab.recall.model import MechanismConstants, RecallModel
from attnlab.recall.tables import MILESTONES
from attnlab.recall.task import Batch
from attnlab.recall.trainer import TrainResult
from attnlab.recall.widths import check_grid, train_width

#: 10's narrowed reading (d_model 32, batch 32, 500 steps) at rate 1e-3, at which scaled
#: reaches loss 1 at every width of the sweep (at 04's 3e-4 it never does at d_k 16).
SWEEP_BASE = RecallConfig(
    d_model=32, batch_size=32, steps=500, seeds=3, eval_size=512, chunk_steps=50, lr=1e-3
)
#: 10^-3.5 to 10^-0.5 by factors of 10^(1/4): scaled's best on this task is 1e-3 to 1e-2,
#: so the sweep starts 3x to 30x below it and reaches 30x and more above it. Quarter
#: decades, because the transfer verdict must resolve muP's predicted shifts (below).
LRS: tuple[float, ...] = tuple(10.0 ** (e / 4) for e in range(-14, -1))
#: The widths swept over every rate: 16x apart, because under Adam the logits' update per
#: step grows as ``d_k^(1 - s)`` for logits scaled by ``d_k^-s`` (Yang et al. 2022, Tensor
#: Programs V), so from 16 to 256 unscaled's best rate should move 16x (4.8 grid steps),
#: scaled's 4x (2.4 steps) and 1/d's not at all. History, each declared before its run:
#: sqrt 10 steps at d_k 64 and 256, then at 16, 64 and 256, gave yes for all twelve (no
#: best rate moved by more than one sqrt 10 step: a grid too coarse to see scaled's
#: predicted 4x, so the verdict could not come out no for it); this grid resolves 1.8x.
LR_DKS: tuple[int, ...] = (16, 256)
#: The per-step metric the sweep records.
LANE_METRICS = ("loss",)


@dataclass(frozen=True)
class SweepConfig:
    """What the sweep trains (module docstring); ``base`` sets everything else."""

    base: RecallConfig = SWEEP_BASE
    dks: tuple[int, ...] = (16, 64, 256, 1024)
    lr_dks: tuple[int, ...] = LR_DKS
    lrs: tuple[float, ...] = LRS
    record_every: int = 50

    def __post_init__(self) -> None:
        check_grid(self)

    def rates(self, d_k: int) -> tuple[float, ...]:
        return self.lrs if d_k in self.lr_dks else (self.base.lr,)

    def at(self, d_k: int) -> RecallConfig:
        """The training configuration at width ``d_k`` (diagnostics every chunk)."""
        return dataclasses.replace(self.base, d_k=d_k, chunk_steps=self.record_every)

    def steps_at(self, d_k: int, mechanisms: int) -> int:
        """Run-steps at width ``d_k`` for ``mechanisms`` mechanisms (the progress bar's
        units: the engine reports steps times runs, a run being every seed of one rate)."""
        return mechanisms * len(self.rates(d_k)) * self.base.steps


def diagnostics(
    model: RecallModel, params: dict, constants: MechanismConstants, probe: Batch
) -> dict[str, jax.Array]:
    """On the held-out sequences: the std of the attention logits over every (sequence,
    slot), their largest ``|z|``, and the accuracy of the predicted value."""
    (logits, _), state = model.apply(
        {"params": params}, probe, constants, mutable=["intermediates"]
    )
    z = state["intermediates"]["logits"][0]
    return {
        "logit_std": jnp.std(z),
        "max_logit": jnp.max(jnp.abs(z)),
        "accuracy": jnp.mean(jnp.argmax(logits, -1) == probe.target),
    }


def width_rows(
    config: SweepConfig, references: Sequence[MechanismRef], d_k: int, on_progress: Progress = None
) -> list[dict]:
    """The lanes of one width of the sweep (``config.rates(d_k)``), a row each."""
    width = config.at(d_k)
    entries = [(r.mechanism, config.rates(d_k)) for r in references]
    results = train_width(width, entries, config.record_every, on_progress, diagnostics,
                          LANE_METRICS)  # fmt: skip
    return [row for result in results for row in _lane_rows(result, width)]


def sweep_table(rows: Sequence[dict], references: Sequence[MechanismRef]) -> pd.DataFrame:
    """One row per (mechanism, d_k, lr, seed) lane, in that order, from the rows of every
    width (``width_rows``)."""
    frame = pd.DataFrame(list(rows))
    # the rates as the CSV writes them: a baseline read back from its card compares equal
    frame["lr"] = [float(FLOAT_FORMAT % lr) for lr in frame.lr]
    order = {r.name: i for i, r in enumerate(references)}
    frame["_rank"] = frame.mechanism.map(order)
    frame = frame.sort_values(["_rank", "d_k", "lr", "seed"], kind="stable")
    frame = frame.drop(columns="_rank").reset_index(drop=True)
    for column in ("step_loss_below_1", "diverged_step"):
        frame[column] = frame[column].astype("Int64")
    return frame


def _lane_rows(result: TrainResult, config: RecallConfig) -> list[dict]:
    """One row per seed of one (mechanism, rate) run (``summarize_losses`` at the article's
    first milestone only, loss 1, under the trailing mean over ``config.smoothing`` steps)."""
    smoothing = config.smoothing
    run = summarize_losses(result.metrics["loss"], lambda x: trailing_mean(x, smoothing),
                           MILESTONES[:1], result.start_step)  # fmt: skip
    rows = []
    for i, seed in enumerate(result.seeds):
        loss, records = result.metrics["loss"][i], {k: v[i] for k, v in result.records.items()}
        diverged = int(run.diverged_step[i])
        finite = diverged < 0
        seen = records["max_logit"]
        max_logit = float(np.nanmax(seen)) if np.isfinite(seen).any() else np.nan
        rows.append(
            {
                "mechanism": result.mechanism,
                "d_k": config.d_k,
                "lr": result.lr,
                "seed": seed,
                "loss_step0": float(loss[0]),
                "final_loss": float(run.final_loss[i]) if finite else np.nan,
                "step_loss_below_1": run.milestones["step_loss_below_1"][i] if finite else None,
                "eval_accuracy": float(records["accuracy"][-1]) if finite else np.nan,
                "logit_std_step0": float(records["logit_std"][0]),
                "logit_std_end": float(records["logit_std"][-1]) if finite else np.nan,
                "max_logit": max_logit,
                "diverged_step": diverged if not finite else None,
                "nonfinite": "" if finite else "loss",
            }
        )
    return rows
