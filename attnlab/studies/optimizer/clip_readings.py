"""What experiment 15 reads of the clip along a run, per lane, from its per-step metrics
(numpy only): when it first fired and the largest S after, the head-steps over
``ONE_UPDATE`` tau by cause, the probes' one-update growth, and the clip's firing on the
plateau of K2's schedule."""

from __future__ import annotations

import math

import numpy as np

from attnlab.lm.train import LMConfig
from attnlab.studies.optimizer.study import ONE_UPDATE
from attnlab.training.schedules import wsd_decay_start


def after_first_clip(
    top: np.ndarray, fraction: np.ndarray, bound: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per lane of ``top`` ``[lanes, steps]`` (a step's largest S over layers and heads)
    and the fractions clipped ``[lanes, steps, layers]``: the first step the clip fired in
    any layer (-1: never), the largest of ``top`` at every later step (NaN where none) and
    how many of those steps it exceeded ``bound``."""
    fired = (fraction > 0).any(axis=-1)  # [lanes, steps]
    first = np.where(fired.any(axis=1), fired.argmax(axis=1), -1)
    later = [top[i, f + 1 :] if f >= 0 else top[i, :0] for i, f in enumerate(first)]
    after = [np.max(t) if len(t) else math.nan for t in later]
    return first, np.asarray(after, float), np.asarray([int(np.sum(t > bound)) for t in later])


#: The causes ``over_bound_causes`` tells apart, as the runs table's columns.
CAUSES = ("over_bound_clipped_before", "over_bound_negative_before", "over_bound_from_below")


def over_bound_causes(
    s: np.ndarray, absolute: np.ndarray, first: np.ndarray, tau: float
) -> dict[str, np.ndarray]:
    """Per lane, the head-steps after the clip first fired (``first``) at which a head's S
    (the clip's quantity, ``s`` ``[lanes, steps, layers, H]``) exceeded ``ONE_UPDATE`` tau,
    by the head's state the step before: ``clipped_before`` (its S was above tau: clipped
    to tau on that batch, then one update and a new batch grew it), ``negative_before``
    (its S was at most tau while its |logit| ``absolute`` exceeded ``ONE_UPDATE`` tau:
    large negative logits, which a clip on the signed S never touches, until an update
    flips one) and ``from_below`` (both at most that: one update grew it from the
    unclipped range)."""
    counts = {c: np.zeros(len(s), int) for c in CAUSES}
    bound = ONE_UPDATE * tau
    for lane, f in enumerate(first):
        if f < 0:
            continue
        now, before, before_abs = s[lane, f + 1 :], s[lane, f:-1], absolute[lane, f:-1]
        over = now > bound
        clipped = before > tau
        negative = ~clipped & (before_abs > bound)
        counts["over_bound_clipped_before"][lane] = int(np.sum(over & clipped))
        counts["over_bound_negative_before"][lane] = int(np.sum(over & negative))
        counts["over_bound_from_below"][lane] = int(np.sum(over & ~clipped & ~negative))
    return counts


def probe_summary(metrics: dict[str, np.ndarray], tau: float) -> dict[str, np.ndarray]:
    """Per lane, from the clip's probes (``attnlab.lm.train.PROBE_METRICS``): how many head
    readings, one update's growth ``S_after_update / S_before`` over the probed heads
    with ``S_before > tau / 2`` (median, 90th percentile, largest; NaN where none) and the
    largest ``S_after_clip / tau`` over every probed head."""
    before, update, clipped = (metrics[k] for k in ("probe_before", "probe_after_update",
                                                    "probe_after_clip"))  # fmt: skip
    out = {k: [] for k in ("probes", "update_growth_median", "update_growth_p90",
                           "update_growth_max", "after_clip_max")}  # fmt: skip
    for lane in range(len(before)):
        b, u, c = (x[lane][np.isfinite(before[lane])] for x in (before, update, clipped))
        grown = u[b > tau / 2] / b[b > tau / 2]
        out["probes"].append(len(b))
        for name, q in (("median", 50), ("p90", 90), ("max", 100)):
            out[f"update_growth_{name}"].append(np.percentile(grown, q) if len(grown) else math.nan)
        out["after_clip_max"].append(np.max(c) / tau if len(c) else math.nan)
    return {k: np.asarray(v, float if k != "probes" else int) for k, v in out.items()}


def plateau_fractions(fraction: np.ndarray, lm: LMConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per lane, the fraction of heads clipped in the first and the last quarter of the
    WSD schedule's plateau (after the warmup, before the decay); NaN on cosine."""
    lanes = len(fraction)
    if lm.schedule != "wsd":
        return np.full(lanes, math.nan), np.full(lanes, math.nan)
    start, end = lm.warmup, wsd_decay_start(lm.steps, lm.warmup)
    quarter = max((end - start) // 4, 1)
    first = fraction[:, start : start + quarter].mean(axis=(1, 2))
    last = fraction[:, end - quarter : end].mean(axis=(1, 2))
    return first, last
