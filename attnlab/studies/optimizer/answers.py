"""Experiment 15's known answers, read from its runs table alone (pandas, no JAX), each a
rule that can come out either way (``Answer``: whether it holds, and what it read).

Rates are compared on ``scaled`` without the clip, by the median over seeds of the largest
attention logit over the run (``max_attn_logit``, all layers); a rate's best is the lowest
mean held-out loss (``attnlab.lm.sweep_tables.best_lane_rates``).

(a) Kimi K2: under Muon the largest logit grows more than under AdamW. Judged twice on the
    sweep, each reported whichever way it comes out: at matched nominal rates (Muon's above
    AdamW's at more than half of the rates both swept) and at matched multiples of each
    optimizer's best rate (the same, at every multiple ``r / best`` both grids hold).
(b) QK-Clip bounds the logits: in every clipped run, every step after the clip first fired
    has its largest logit (before that step's clip) within ``ONE_UPDATE`` tau; and in the
    long run (the sweep where there is none) the unclipped run at the same rate, where its
    logits passed ``BLOWN``, reaches at least ``ORDERS`` times the clipped run's largest
    after the first firing.
(c) QK-Clip costs nothing where it is not needed and helps where it is: at every swept rate
    where the unclipped run is stable (largest logit at most ``BLOWN``, finite), the clipped
    run's mean held-out loss is within the larger of ``LOSS_MARGIN`` and the unclipped
    seeds' spread of the unclipped one's; at every rate where the unclipped logits blew up,
    it is lower.
(d) Reported, not required: late in the long run the clip fires less than early (the
    fraction of heads clipped in the last quarter below the first quarter's), as in K2.
(e) qk_norm bounds the logits under Muon without a clip: its largest logit stays below
    ``BOUNDED`` at every rate, and no run diverges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.studies.optimizer.study import BLOWN, BOUNDED, LOSS_MARGIN, ONE_UPDATE, ORDERS


@dataclass(frozen=True)
class Answer:
    """One known answer: its label, whether it holds, and what it read, in words."""

    label: str
    holds: bool
    detail: str


def runs_of(
    runs: pd.DataFrame, part: str, optimizer: str, mechanism: str = "scaled", clipped=False
) -> pd.DataFrame:
    """The rows of one part, optimizer and mechanism, with the clip or without it."""
    clip = runs.qk_clip_tau.notna() if clipped else runs.qk_clip_tau.isna()
    return runs[(runs.part == part) & (runs.optimizer == optimizer)
                & (runs.mechanism == mechanism) & clip]  # fmt: skip


def logit_by_rate(cell: pd.DataFrame) -> pd.Series:
    """The largest logit per rate, median over seeds (non-finite: inf)."""
    return cell.groupby("lr").max_attn_logit.median().fillna(np.inf)


def _majority(pairs: list[tuple[str, float, float]]) -> bool:
    return bool(pairs) and sum(m > a for _, m, a in pairs) > len(pairs) / 2


def _pairs_text(pairs: list[tuple[str, float, float]]) -> str:
    return "; ".join(f"{where}: Muon {m:.3g} vs AdamW {a:.3g}" for where, m, a in pairs)


def nominal_pairs(runs: pd.DataFrame) -> list[tuple[str, float, float]]:
    """(rate, Muon's, AdamW's largest logit) at every rate both swept."""
    muon = logit_by_rate(runs_of(runs, "sweep", "muon"))
    adamw = logit_by_rate(runs_of(runs, "sweep", "adamw"))
    return [(f"lr {r:g}", muon[r], adamw[r]) for r in muon.index if r in adamw.index]


def multiple_pairs(runs: pd.DataFrame) -> list[tuple[str, float, float]]:
    """(multiple, Muon's, AdamW's largest logit) at every multiple ``r / best`` of each
    optimizer's best rate that both grids hold."""
    found = {}
    for optimizer in ("muon", "adamw"):
        cell = runs_of(runs, "sweep", optimizer)
        if cell.empty:
            return []
        best, _ = best_lane_rates(cell, 1.0)
        found[optimizer] = {r / best: v for r, v in logit_by_rate(cell).items()}
    pairs = []
    for multiple, value in found["muon"].items():
        match = [m for m in found["adamw"] if math.isclose(m, multiple, rel_tol=1e-6)]
        if match:
            pairs.append((f"{multiple:g}x best", value, found["adamw"][match[0]]))
    return pairs


def muon_grows_more_nominal(runs: pd.DataFrame) -> Answer:
    """(a) at matched nominal rates."""
    pairs = nominal_pairs(runs)
    return Answer("(a) reported: under Muon the largest logit grows more than under AdamW "
                  "(Kimi K2), at matched nominal rates", _majority(pairs),
                  _pairs_text(pairs) or "no rate swept under both")  # fmt: skip


def muon_grows_more_multiples(runs: pd.DataFrame) -> Answer:
    """(a) at matched multiples of each optimizer's best rate."""
    pairs = multiple_pairs(runs)
    return Answer("(a) reported: under Muon the largest logit grows more than under AdamW "
                  "(Kimi K2), at matched multiples of each one's best rate", _majority(pairs),
                  _pairs_text(pairs) or "no multiple of the best rate on both grids")  # fmt: skip


def _partner(runs: pd.DataFrame, row) -> pd.Series | None:
    """The unclipped run of clipped ``row``'s part, optimizer, mechanism, rate and seed."""
    found = runs_of(runs, row.part, row.optimizer, row.mechanism)
    found = found[np.isclose(found.lr, row.lr) & (found.seed == row.seed)]
    return found.iloc[0] if len(found) else None


def clip_bounds(runs: pd.DataFrame) -> Answer:
    """(b)."""
    clipped = runs[runs.qk_clip_tau.notna() & (runs.first_clip_step >= 0)]
    if clipped.empty:
        return Answer(_B_LABEL, False, "the clip never fired")
    ratio = clipped.max_signed_after_first_clip / clipped.qk_clip_tau
    bounded = bool((ratio.fillna(0) <= ONE_UPDATE).all())
    over = clipped[ratio > ONE_UPDATE]
    parts = [f"after the first firing the largest logit is at most {ratio.max():.3g} tau "
             f"over {len(clipped)} clipped runs that fired"]  # fmt: skip
    parts += [f"{r.part} {r.optimizer} lr {r.lr:g} seed {r.seed}: "
              f"{r.max_signed_after_first_clip:.3g} ({r.steps_over_bound_after_first_clip} of "
              f"{r.steps - r.first_clip_step - 1} steps above {ONE_UPDATE:g} tau)"
              for r in over.itertuples()]  # fmt: skip
    judged = clipped[clipped.part == "long"] if (clipped.part == "long").any() else clipped
    orders = []
    for row in judged.itertuples():
        partner = _partner(runs, row)
        if partner is not None and not partner.max_attn_logit <= BLOWN:
            times = partner.max_attn_logit / row.max_signed_after_first_clip
            orders.append(times)
            parts.append(f"{row.part} {row.optimizer} lr {row.lr:g}: unclipped "
                         f"{partner.max_attn_logit:.3g}, clipped "
                         f"{row.max_signed_after_first_clip:.3g} ({times:.3g}x)")  # fmt: skip
    below = bool(orders) and all(not t < ORDERS for t in orders)
    if not orders:
        parts.append(f"no unclipped run at a clipped rate passed {BLOWN:g}")
    return Answer(_B_LABEL, bounded and below, "; ".join(parts))


_B_LABEL = (f"(b) QK-Clip bounds the logits: within {ONE_UPDATE:g} tau after it first fires, "
            f"at least {ORDERS:g}x below the unclipped run where that blows up")  # fmt: skip


def clip_loss(runs: pd.DataFrame) -> Answer:
    """(c)."""
    parts, holds = [], True
    clipped = runs[(runs.part == "sweep") & runs.qk_clip_tau.notna()]
    for (optimizer, mechanism), cell in clipped.groupby(["optimizer", "mechanism"], sort=False):
        free = runs_of(runs, "sweep", optimizer, mechanism)
        logits = logit_by_rate(free)
        for rate, group in cell.groupby("lr"):
            base = free[np.isclose(free.lr, rate)]
            if base.empty:
                continue
            u, c = base.final_val_loss.mean(), group.final_val_loss.mean()
            fired = group.clip_fraction.mean() > 0
            if logits[rate] <= BLOWN and np.isfinite(u):
                allowed = max(LOSS_MARGIN, float(np.ptp(base.final_val_loss)))
                ok = bool(abs(c - u) <= allowed)
                if fired or not ok:
                    parts.append(f"{optimizer} lr {rate:g} (stable, clip fired in "
                                 f"{group.clip_fraction.mean():.1%} of head-steps): "
                                 f"{c:.3f} vs {u:.3f}, allowed {allowed:.3f}")  # fmt: skip
            else:
                ok = bool(c < u) if np.isfinite(u) else bool(np.isfinite(c))
                parts.append(f"{optimizer} lr {rate:g} (blown up): {c:.3f} vs {u:.3f}")
            holds &= ok
    return Answer(
        "(c) QK-Clip's held-out loss is within the noise of the unclipped run's where that "
        "is stable, and lower where its logits blow up",
        holds and bool(len(clipped)),
        "; ".join(parts) or "the clip fired at no stable rate",
    )


def clip_fires_less_late(runs: pd.DataFrame) -> Answer:
    """(d), reported whichever way it comes out."""
    rows = runs[(runs.part == "long") & runs.qk_clip_tau.notna()]
    detail = "; ".join(
        f"{r.optimizer} lr {r.lr:g} seed {r.seed}: first quarter "
        f"{r.clip_fraction_first_quarter:.1%}, "
        f"last {r.clip_fraction_last_quarter:.1%}"
        for r in rows.itertuples()
    )
    less = bool(len(rows)) and bool(
        (rows.clip_fraction_last_quarter < rows.clip_fraction_first_quarter).all()
    )
    return Answer("(d) reported: late in the long run the clip fires less than early (Kimi K2)",
                  less, detail or "no long run with the clip")  # fmt: skip


def qk_norm_bounds_muon(runs: pd.DataFrame) -> Answer:
    """(e)."""
    rows = runs[(runs.optimizer == "muon") & (runs.mechanism == "qk_norm")
                & runs.qk_clip_tau.isna()]  # fmt: skip
    if rows.empty:
        return Answer(_E_LABEL, False, "qk_norm was not trained under Muon")
    top = rows.max_attn_logit.max()
    diverged = int((rows.diverged_step >= 0).sum())
    return Answer(_E_LABEL, bool(top < BOUNDED and not diverged),
                  f"largest {top:.3g} over {len(rows)} runs, {diverged} diverged")  # fmt: skip


_E_LABEL = f"(e) qk_norm bounds the logits under Muon without a clip (below {BOUNDED:g})"

ANSWERS = (
    muon_grows_more_nominal,
    muon_grows_more_multiples,
    clip_bounds,
    clip_loss,
    clip_fires_less_late,
    qk_norm_bounds_muon,
)
#: The answers the issue requires to hold or be listed as disagreements ((a), (d): reported).
REQUIRED = (clip_bounds, clip_loss, qk_norm_bounds_muon)
