"""Width and learning-rate sweeps of the recall demo, as lanes of the engine, with
diagnostics of the attention temperature along training (experiment 10 and the card).

Runs. For every ``d_k`` of ``WidthsConfig.dks`` and every mechanism of ``mechanisms``, the
recall model of experiment 04 is trained on ``seeds`` seeds; each seed has one
initialisation key and one data stream, shared by every mechanism at a width (identical
initialisation and data, as in 04). At each ``d_k`` of ``lr_dks`` the ``lr_mechanisms`` are
also trained at every learning rate of ``lrs``; at ``drift_dk`` every mechanism of
``attnlab.core.temperature`` is trained (05's set). One compiled program per (``d_k``,
mechanism) trains every (learning rate, seed) *lane* at once: the learning rate is a traced
argument of ``optax.adam``, and the lanes are vmapped.

A lane whose loss turns non-finite is recorded as diverged at that step (``diverged_step``);
its later numbers are left empty, and the sweep goes on.

Diagnostics, on the seed's held-out sequences (``probe`` of them), at step 0 and every
``record_every`` steps (``diagnostics``): for queries ``q`` and keys ``k`` as they leave the
projections (before any normalisation),

- ``q_norm``, ``k_norm``: mean ``|q|`` and ``|k|``;
- ``logit_std_raw``, ``logit_max_raw``: std over every (sequence, slot) of ``q . k`` and the
  mean over sequences of the row maximum (for QK-norm, of the cosines ``q^ . k^``);
- ``logit_std``, ``logit_max``: the same for the logits the softmax sees (after the
  mechanism's scale, and cap);
- ``cos_asked``: mean cosine between ``q`` and the key of the slot asked for;
- ``rho_implied``: experiment 07's law inverted: for coordinates of unit variance and
  correlation ``rho``, ``E[q . k] = d_k rho``; with ``sigma_q, sigma_k`` the rms coordinates
  of ``q`` and ``k`` over the probe, ``rho = mean(q . k_asked) / (d_k sigma_q sigma_k)``
  (``implied_rho``);
- ``routing_accuracy``: the fraction of sequences whose largest attention weight is on the
  slot that holds the asked-for key (chance ``1 / pairs``), and ``asked_weight``, the mean
  weight on that slot (``routing``);
- ``attn_max_weight``, ``attn_entropy`` (nats): mean max weight and entropy of the rows;
- ``accuracy``: held-out accuracy of the predicted value (``evaluate``'s, at the end of the
  run the summary's ``eval_accuracy``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.attention import attention_logits
from attnlab.core.curves import summarize_losses, trailing_mean
from attnlab.core.mechanism import Mechanism
from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef, resolve
from attnlab.core.softmax_stats import entropy, max_weight
from attnlab.core.temperature import MECHANISMS
from attnlab.recall.columns import LR_TRANSFER, WIDTHS_CURVES, WIDTHS_SUMMARY
from attnlab.recall.config import RecallConfig
from attnlab.recall.model import MechanismConstants, RecallModel
from attnlab.recall.tables import MILESTONES
from attnlab.recall.task import Batch
from attnlab.recall.trainer import Diagnostics, Run, TrainResult, train_runs

DIAGNOSTICS = (
    "q_norm",
    "k_norm",
    "logit_std_raw",
    "logit_max_raw",
    "logit_std",
    "logit_max",
    "cos_asked",
    "rho_implied",
    "routing_accuracy",
    "asked_weight",
    "attn_max_weight",
    "attn_entropy",
    "accuracy",
)
#: The tables' columns, declared with their rules in ``attnlab.recall.columns``.
CURVE_COLUMNS = list(WIDTHS_CURVES)
SUMMARY_COLUMNS = list(WIDTHS_SUMMARY)
LR_COLUMNS = list(LR_TRANSFER)

#: The recall set-up of 10: 04's reading (concat slots, natural init, no biases) with
#: narrower embeddings, a smaller batch and a shorter run, so that 7 widths up to 4096, 4
#: mechanisms, the learning-rate grid and the drift runs fit ``make reproduce``'s budget.
WIDTHS_BASE = RecallConfig(
    d_model=32, batch_size=32, steps=500, seeds=3, eval_size=512, chunk_steps=50
)


class GridError(ValueError):
    """A sweep's grid that ``check_grid`` refuses; ``field`` names the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_grid(config: Any) -> None:
    """The checks a sweep's configuration (``base``, ``dks``, ``lr_dks``, ``lrs``,
    ``record_every``) makes: the rates are swept at some of the widths, the widths' own rate
    ``base.lr`` is one of the rates, and the diagnostics' interval divides the run. A
    ``GridError`` (a ``ValueError``) names the configuration's class and field."""
    name = type(config).__name__
    if not set(config.lr_dks) <= set(config.dks):
        raise GridError("lr_dks", f"{name}.lr_dks must be a subset of dks")
    if config.base.lr not in config.lrs:
        raise GridError("lrs", f"{name}.lrs must include base.lr (the rate of every width)")
    if config.record_every < 1 or config.base.steps % config.record_every:
        raise GridError("record_every", f"{name}.record_every must divide base.steps")


@dataclass(frozen=True)
class WidthsConfig:
    """What experiment 10 trains (module docstring); ``base`` sets everything else.

    ``mechanisms``, ``lr_mechanisms`` and ``drift_mechanisms``: references, ``Mechanism``
    objects or ``MechanismRef``s, each resolved once, here, into a ``MechanismRef``
    (``attnlab.core.references.resolve``); equal where their references are."""

    base: RecallConfig = WIDTHS_BASE
    dks: tuple[int, ...] = (1, 4, 16, 64, 256, 1024, 4096)
    mechanisms: tuple[MechanismRef, ...] = tuple(
        map(resolve, ("scaled", "unscaled", "qk_norm", "inv_d"))
    )
    #: The issue's grid {1e-4 .. 3e-3} and one step beyond, 1e-2: a first run at 600 steps
    #: put the best rate at 3e-3, the grid's edge, for most cells.
    lrs: tuple[float, ...] = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
    lr_dks: tuple[int, ...] = (64, 256, 1024)
    lr_mechanisms: tuple[MechanismRef, ...] = tuple(map(resolve, ("scaled", "inv_d")))
    drift_dk: int | None = 256
    drift_mechanisms: tuple[MechanismRef, ...] = field(default=tuple(map(resolve, MECHANISMS)))
    record_every: int = 50
    jacobian_trials: int = 2000

    def __post_init__(self) -> None:
        for name in ("mechanisms", "lr_mechanisms", "drift_mechanisms"):
            resolved = []
            for reference in getattr(self, name):
                try:
                    resolved.append(resolve(reference))
                except ValueError as err:
                    raise ValueError(f"WidthsConfig.{name}: {err}") from None
            object.__setattr__(self, name, tuple(resolved))
        check_grid(self)

    def runs(self) -> list[tuple[int, MechanismRef, tuple[float, ...]]]:
        """``(d_k, mechanism, learning rates)`` per compiled program, in sweep order."""
        out = []
        for d_k in self.dks:
            names = list(self.mechanisms)
            if d_k == self.drift_dk:
                names += [m for m in self.drift_mechanisms if m not in names]
            for name in names:
                sweep = d_k in self.lr_dks and name in self.lr_mechanisms
                out.append((d_k, name, self.lrs if sweep else (self.base.lr,)))
        return out

    def total_steps(self) -> int:
        """Lane-steps of the whole sweep (for the progress bar)."""
        return sum(len(lrs) for _, _, lrs in self.runs()) * self.base.steps


# ----------------------------------------------------------------------------- diagnostics


def asked_slot(batch: Batch) -> jax.Array:
    """Index of the slot holding the asked-for key (keys are distinct within a sequence)."""
    return jnp.argmax(batch.keys == batch.query[..., None], axis=-1)


def routing(weights: jax.Array, slot: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(routing accuracy, mean weight on the asked slot)`` of rows ``weights [N, pairs]``:
    the fraction of rows whose argmax is ``slot`` and the mean of ``weights[slot]``."""
    on_slot = jnp.take_along_axis(weights, slot[:, None], axis=-1)[:, 0]
    return jnp.mean(jnp.argmax(weights, axis=-1) == slot), jnp.mean(on_slot)


def implied_rho(qk: jax.Array, d_k: int, sigma_q: jax.Array, sigma_k: jax.Array) -> jax.Array:
    """Experiment 07's law ``E[q . k] = d_k rho`` (unit-variance coordinates) inverted:
    ``rho = mean(qk) / (d_k sigma_q sigma_k)`` for products ``qk`` of vectors whose
    coordinates have rms ``sigma_q`` and ``sigma_k``."""
    return jnp.mean(qk) / (d_k * sigma_q * sigma_k)


def diagnostics(
    model: RecallModel, params: dict, constants: MechanismConstants, probe: Batch
) -> dict[str, jax.Array]:
    """The module docstring's diagnostics of one model on the probe sequences, from the
    intermediates the model records in its forward pass (``RecallModel``)."""
    (logits, _), state = model.apply(
        {"params": params}, probe, constants, mutable=["intermediates"]
    )
    sown = {name: values[0] for name, values in state["intermediates"].items()}
    q, k = sown["q"], sown["k"]  # [N, 1, d_k], [N, pairs, d_k]
    d_k = q.shape[-1]
    raw = attention_logits(sown["q_attn"], sown["k_attn"], scale=1.0)[:, 0]  # [N, pairs]
    z, weights = sown["logits"], sown["weights"]
    slot = asked_slot(probe)
    k_asked = jnp.take_along_axis(k, slot[:, None, None], axis=1)[:, 0]  # [N, d_k]
    qk_asked = jnp.sum(q[:, 0] * k_asked, axis=-1)
    cos = qk_asked / (jnp.linalg.norm(q[:, 0], axis=-1) * jnp.linalg.norm(k_asked, axis=-1))
    sigma_q, sigma_k = jnp.sqrt(jnp.mean(q * q)), jnp.sqrt(jnp.mean(k * k))
    accuracy, on_slot = routing(weights, slot)
    return {
        "q_norm": jnp.mean(jnp.linalg.norm(q, axis=-1)),
        "k_norm": jnp.mean(jnp.linalg.norm(k, axis=-1)),
        "logit_std_raw": jnp.std(raw),
        "logit_max_raw": jnp.mean(jnp.max(raw, axis=-1)),
        "logit_std": jnp.std(z),
        "logit_max": jnp.mean(jnp.max(z, axis=-1)),
        "cos_asked": jnp.mean(cos),
        "rho_implied": implied_rho(qk_asked, d_k, sigma_q, sigma_k),
        "routing_accuracy": accuracy,
        "asked_weight": on_slot,
        "attn_max_weight": jnp.mean(max_weight(weights)),
        "attn_entropy": jnp.mean(entropy(weights)),
        "accuracy": jnp.mean(jnp.argmax(logits, -1) == probe.target),
    }


# ----------------------------------------------------------------------------- training


#: The per-step metrics the sweep records.
LANE_METRICS = ("loss", "grad_norm_wq", "grad_norm_wk")


def train_width(
    config: RecallConfig,
    entries: Sequence[tuple[Mechanism, Sequence[float]]],
    record_every: int,
    on_chunk: Progress = None,
    diagnose: Diagnostics = diagnostics,
    metrics: tuple[str, ...] = LANE_METRICS,
) -> list[TrainResult]:
    """Train every ``(mechanism, learning rates)`` of ``entries`` on every (learning rate,
    seed) lane of ``config``, one ``Trainer`` per shared program, in compiled blocks of
    ``record_every`` steps, recording the per-step ``metrics``; ``diagnose`` (default: the
    module docstring's ``diagnostics``) on the seed's held-out sequences at step 0 and after
    every block. Non-finite losses are kept (the lane is diverged), not raised. One
    ``TrainResult`` per (mechanism, rate), in the order of ``entries`` and their rates; its
    ``eval_accuracy`` is left NaN (the diagnostics' records hold the held-out accuracy)."""
    config = replace(config, chunk_steps=record_every)
    runs = [Run(config, mechanism, lr=lr) for mechanism, lrs in entries for lr in lrs]
    return train_runs(runs, on_chunk=on_chunk, on_diverge="record", metrics=metrics,
                      diagnostics=diagnose, evaluate=False)  # fmt: skip


def run_widths(config: WidthsConfig, on_progress: Progress = None) -> list[TrainResult]:
    """Every run of ``config.runs()`` (a mechanism at a rate), one width at a time."""
    runs = config.runs()
    results = []
    for d_k in dict.fromkeys(d_k for d_k, _, _ in runs):
        entries = [(m.mechanism, lrs) for dk, m, lrs in runs if dk == d_k]
        base = replace(config.base, d_k=d_k)
        results += train_width(base, entries, config.record_every, on_progress)
    return results


# ----------------------------------------------------------------------------- tables


def summary_frame(results: Sequence[TrainResult], smoothing: int) -> pd.DataFrame:
    """One row per lane (``SUMMARY_COLUMNS``); a diverged lane keeps only its step-0
    numbers and ``diverged_step`` (``summarize_losses``, the trailing mean over
    ``smoothing`` steps)."""
    rows = []
    for result in results:
        d = result.records
        run = summarize_losses(result.metrics["loss"], lambda x: trailing_mean(x, smoothing),
                               MILESTONES, result.start_step)  # fmt: skip
        for i, seed in enumerate(result.seeds):
            diverged = int(run.diverged_step[i]) if run.diverged_step[i] >= 0 else None
            row = {
                "d_k": result.d_k,
                "mechanism": result.mechanism,
                "lr": result.lr,
                "seed": seed,
                "grad_wq_step0": float(result.metrics["grad_norm_wq"][i, 0]),
                "grad_wk_step0": float(result.metrics["grad_norm_wk"][i, 0]),
                "routing_accuracy_step0": float(d["routing_accuracy"][i, 0]),
                "asked_weight_step0": float(d["asked_weight"][i, 0]),
                "logit_std_step0": float(d["logit_std"][i, 0]),
                "diverged_step": diverged,
            }
            if diverged is None:
                row.update({column: run.milestones[column][i] for column, _ in MILESTONES})
                row.update(
                    final_loss=float(run.final_loss[i]),
                    eval_accuracy=float(d["accuracy"][i, -1]),
                    routing_accuracy_end=float(d["routing_accuracy"][i, -1]),
                    asked_weight_end=float(d["asked_weight"][i, -1]),
                    logit_std_end=float(d["logit_std"][i, -1]),
                )
            rows.append(row)
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    for column in ("step_loss_below_1", "step_loss_below_0p1", "diverged_step"):
        frame[column] = frame[column].astype("Int64")
    return frame


def curves_frame(results: Sequence[TrainResult], smoothing: int) -> pd.DataFrame:
    """One row per lane and recorded step: the smoothed loss (at that step, or the last
    step for the end of the run) and the diagnostics."""
    frames = []
    for result in results:
        steps = result.record_steps
        for i, seed in enumerate(result.seeds):
            smoothed = trailing_mean(result.metrics["loss"][i], smoothing)
            data = {
                "d_k": result.d_k,
                "mechanism": result.mechanism,
                "lr": result.lr,
                "seed": seed,
                "step": steps,
                "smoothed_loss": smoothed[np.minimum(steps, len(smoothed) - 1)],
            }
            data.update({k: result.records[k][i] for k in DIAGNOSTICS})
            frames.append(pd.DataFrame(data))
    return pd.concat(frames, ignore_index=True)[CURVE_COLUMNS]


def lr_frame(summary: pd.DataFrame, config: WidthsConfig) -> pd.DataFrame:
    """Per (lr mechanism, lr d_k, lr): medians over seeds of the final loss and the loss-0.1
    step, and ``best``: the rate with the lowest median final loss at that width (a rate
    with a diverged seed is never best; ties go to the smaller rate)."""
    rows = []
    for reference in config.lr_mechanisms:
        name = reference.name
        for d_k in config.lr_dks:
            cell = summary[(summary.mechanism == name) & (summary.d_k == d_k)]
            group = []
            for lr in config.lrs:
                runs = cell[cell.lr == lr]
                diverged = int(runs.diverged_step.notna().sum())
                group.append(
                    {
                        "mechanism": name,
                        "d_k": d_k,
                        "lr": lr,
                        "seeds": len(runs),
                        "diverged": diverged,
                        "final_loss_median": float(runs.final_loss.median()),
                        "step_loss_below_0p1_median": float(
                            runs.step_loss_below_0p1.astype(float).median()
                        ),
                    }
                )
            eligible = [
                g for g in group if g["diverged"] == 0 and np.isfinite(g["final_loss_median"])
            ]
            best = min(eligible, key=lambda g: (g["final_loss_median"], g["lr"]), default=None)
            for g in group:
                g["best"] = g is best
            rows += group
    return pd.DataFrame(rows, columns=LR_COLUMNS)
