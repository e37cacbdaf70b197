"""Features of measured curves: where one curve crosses another, milestones, plateaus,
where a run went non-finite, and one run's loss curves summarised per seed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np


def crossing_dk(d_k: np.ndarray, diff: np.ndarray) -> tuple[int, int, float] | None:
    """The first bracket ``(d_lo, d_hi)`` where ``diff`` turns from > 0 to <= 0 after its
    maximum, and the crossing interpolated linearly in ``log2 d_k``; None if it never does."""
    start = int(np.argmax(diff))
    for i in range(start, len(diff) - 1):
        if diff[i] > 0 >= diff[i + 1]:
            t = diff[i] / (diff[i] - diff[i + 1])
            log_cross = np.log2(d_k[i]) + t * (np.log2(d_k[i + 1]) - np.log2(d_k[i]))
            return int(d_k[i]), int(d_k[i + 1]), float(2.0**log_cross)
    return None


def trailing_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average along the last axis: ``mean(x[..., max(0, t-w+1) : t+1])``.

    Trailing (not centred) so a milestone read off the smoothed curve is a step at which
    the run had actually got there.
    """
    x = np.asarray(x, np.float64)
    csum = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)], axis=-1)
    t = np.arange(x.shape[-1])
    lo = np.maximum(0, t - window + 1)
    return (csum[..., t + 1] - csum[..., lo]) / (t + 1 - lo)


def debiased_ema(x: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing along the last axis: the exponential moving average
    ``m_t = w m_{t-1} + (1 - w) x_t`` from ``m_{-1} = 0``, debiased as ``m_t / (1 - w^(t+1))``
    (so the first value is ``x_0``). It lags a trend by about ``w / (1 - w)`` steps."""
    if not 0 <= weight < 1:
        raise ValueError(f"debiased_ema: weight must be in [0, 1), got {weight!r}")
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    m = np.zeros(x.shape[:-1])
    for t in range(x.shape[-1]):  # a recurrence; a few thousand steps, after training
        m = weight * m + (1 - weight) * x[..., t]
        out[..., t] = m / (1 - weight ** (t + 1))
    return out


def first_step_below(
    curve: np.ndarray, threshold: float, steps: np.ndarray | None = None
) -> int | None:
    """The first step at which ``curve <= threshold``, or None if it never gets there."""
    below = np.flatnonzero(np.asarray(curve) <= threshold)
    if below.size == 0:
        return None
    steps = np.arange(len(curve)) if steps is None else np.asarray(steps)
    return int(steps[below[0]])


def find_plateau(
    curve: np.ndarray,
    start: int,
    band_ratio: float = 1.5,
    min_steps: int = 100,
    floor: float = 0.05,
) -> tuple[int, int, float] | None:
    """The longest stall of a decreasing loss curve after index ``start``.

    A plateau is a run of at least ``min_steps`` consecutive steps over which the curve
    stays inside a band ``max / min < band_ratio`` while above ``floor`` (the slow tail of a
    converged run is not a stall). Returns ``(first, last, median level)`` or None.
    """
    curve = np.asarray(curve, np.float64)
    best: tuple[int, int] | None = None
    for a in range(max(0, start), len(curve)):
        if curve[a] <= floor:
            break
        tail = curve[a:]
        inside = (np.maximum.accumulate(tail) / np.minimum.accumulate(tail) < band_ratio) & (
            tail > floor
        )
        length = int(np.argmin(inside)) if not inside.all() else len(tail)
        if length >= min_steps and (best is None or length > best[1] - best[0] + 1):
            best = (a, a + length - 1)
    if best is None:
        return None
    return best[0], best[1], float(np.median(curve[best[0] : best[1] + 1]))


def first_nonfinite_steps(losses: np.ndarray) -> np.ndarray:
    """Per run (row of ``losses`` ``[runs, steps]``), the first step whose loss is NaN or
    infinite, -1 where none is: every divergence record of the suite (the Trainer's, the
    sweeps' tables, the language model's lanes) reads it here."""
    bad = ~np.isfinite(np.asarray(losses))
    if bad.shape[1] == 0:
        return np.full(bad.shape[0], -1)
    return np.where(bad.any(axis=1), bad.argmax(axis=1), -1)


@dataclass(frozen=True)
class LossSummary:
    """One run's loss curves ``[seeds, steps]`` summarised per seed: what the per-run
    summaries read (04's and 05's summaries, 10's sweep, the card's learning rates, the
    fits' numbers).

    Attributes:
      smoothed: the loss under the table's smoothing, ``[seeds, steps]``.
      steps: the step of each column (``start_step`` onwards).
      diverged_step: per seed, the first step whose loss is NaN or infinite; -1 where none
        is (``first_nonfinite_steps``).
      milestones: per threshold's name, per seed, the first step at which the smoothed loss
        is ``<=`` the threshold; None where it never is.
      final_loss: per seed, the smoothed loss at the last step.
    """

    smoothed: np.ndarray
    steps: np.ndarray
    diverged_step: np.ndarray
    milestones: dict[str, list[int | None]]
    final_loss: np.ndarray


def summarize_losses(
    loss: np.ndarray,
    smoothing: Callable[[np.ndarray], np.ndarray],
    thresholds: Iterable[tuple[str, float]],
    start_step: int = 0,
) -> LossSummary:
    """``LossSummary`` of ``loss`` ``[seeds, steps]`` recorded from ``start_step``, smoothed
    by ``smoothing`` (along the last axis) and read at each ``(name, threshold)``."""
    smoothed = np.asarray(smoothing(np.asarray(loss)))
    steps = np.arange(smoothed.shape[1]) + start_step
    first = first_nonfinite_steps(loss)
    milestones = {name: [first_step_below(curve, threshold, steps) for curve in smoothed]
                  for name, threshold in thresholds}  # fmt: skip
    return LossSummary(smoothed, steps, np.where(first >= 0, first + start_step, -1),
                       milestones, smoothed[:, -1])  # fmt: skip
