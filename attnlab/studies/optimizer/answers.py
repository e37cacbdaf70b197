"""Experiment 15's known answers, read from its runs table alone (pandas, no JAX), each a
rule that can come out either way (``Answer``: whether it holds, and what it read).

An *arm* is an optimizer with its recipe (``study.ARMS``): by default ``adamw``, ``muon``
(Moonlight's one rate for both sides) and ``muon_pinned`` (Muon's AdamW side at
``SIDE_LR``); any registered optimizer may be one (``--optimizers``), and every rule reads
the arms the table holds, each compared against ``BASELINE`` (AdamW). Rates are
compared on ``scaled`` without the clip, by the largest attention logit over the run
(``max_attn_logit``, all layers), the seeds' median and range; a rate's best is the lowest
mean held-out loss (``attnlab.lm.sweep_tables.best_lane_rates``). *S* is the clip's
quantity: a head's largest signed logit (Kimi K2's), or its largest |logit| under
``qk_clip_on = abs``; like is compared with like, S with S and |z| with |z|.

(a) Kimi K2: under Muon the largest logit grows more than under AdamW. Judged per arm,
    at matched nominal rates and at matched multiples of each arm's best rate: at each
    rate, the arm's seeds all above AdamW's is *more*, all below *less*, overlapping a *tie*;
    it holds where *more* is the majority. Reported, whichever way it comes out.
(b) QK-Clip bounds S in K2's regime: in every clipped run at most ``HOT`` times its arm's
    best rate whose clip fired (the tau sweep and the long run, signed S), after the first
    firing the largest S is within ``ONE_UPDATE`` tau on every seed and within
    ``MEDIAN_UPDATE`` tau in the median over seeds. Far above the best rate the sweep's
    clipped runs are reported beside it with their over-bound steps by cause.
(c) QK-Clip costs nothing where it is not needed and helps where it is: at every swept rate
    where the unclipped run is stable (largest logit at most ``BLOWN``, finite), the clipped
    run's mean held-out loss is within the larger of ``LOSS_MARGIN`` and the unclipped
    seeds' spread of the unclipped one's; at every rate where the unclipped logits blew up,
    it is lower.
(d) Reported, not required: on the plateau of K2's warmup-stable-decay schedule, the clip
    fires less in the plateau's last quarter than in its first (as in K2, whose rate was
    constant there), in the median over seeds.
(e) qk_norm bounds the logits without a clip under every optimizer of the arms but AdamW
    (Muon's, as committed): its largest logit stays below ``BOUNDED`` at every rate, and no
    run diverges.
(f) The clip keyed on |logit| (``qk_clip_on = abs``, not K2's) bounds both signs: in each of
    its runs that fired, the largest |logit| after the first firing within ``ONE_UPDATE``
    tau on every seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.studies.optimizer.study import (
    BASELINE,
    BLOWN,
    BOUNDED,
    HOT,
    LOSS_MARGIN,
    MEDIAN_UPDATE,
    ONE_UPDATE,
    PINNED,
    arm_optimizer,
    optimizer_name,
)


@dataclass(frozen=True)
class Answer:
    """One known answer: its label, whether it holds, and what it read, in words."""

    label: str
    holds: bool
    detail: str


def arm_of(runs: pd.DataFrame) -> pd.Series:
    """Each row's arm: its optimizer, ``_pinned`` added where its side rate was."""
    return runs.optimizer.where(runs.side != "pinned", runs.optimizer + PINNED)


def arms_of(runs: pd.DataFrame) -> list[str]:
    """The arms ``runs`` holds: ``BASELINE`` first, the others as they first appear."""
    present = list(dict.fromkeys(arm_of(runs)))
    return sorted(present, key=lambda arm: arm != BASELINE)


def compared_arms(runs: pd.DataFrame) -> list[str]:
    """The arms of ``runs`` compared against ``BASELINE``: every one but it."""
    return [arm for arm in arms_of(runs) if arm != BASELINE]


def arm_words(arm: str) -> str:
    """An arm in words: Muon's two (``muon``: one rate for both sides, Moonlight's; pinned:
    its AdamW side pinned), any other by its optimizer's name (``OPTIMIZER_NAMES``)."""
    name = optimizer_name(arm)
    if arm.endswith(PINNED):
        return f"{name} with its AdamW side pinned"
    return f"{name} with one rate for both sides (Moonlight's)" if arm == "muon" else name


def runs_of(
    runs: pd.DataFrame,
    part: str,
    arm: str,
    mechanism: str = "scaled",
    clipped: bool = False,
    schedule: str = "cosine",
) -> pd.DataFrame:
    """The rows of one part, arm, mechanism and schedule, with the clip or without it."""
    clip = runs.qk_clip_tau.notna() if clipped else runs.qk_clip_tau.isna()
    return runs[(runs.part == part) & (arm_of(runs) == arm) & (runs.mechanism == mechanism)
                & (runs.schedule == schedule) & clip]  # fmt: skip


def logit_by_rate(cell: pd.DataFrame) -> pd.Series:
    """The largest logit per rate, median over seeds (non-finite: inf)."""
    return cell.groupby("lr").max_attn_logit.median().fillna(np.inf)


def _spread(cell: pd.DataFrame) -> pd.DataFrame:
    """Per rate, the largest logit's median, least and largest over seeds (NaN: inf)."""
    values = cell.assign(v=cell.max_attn_logit.fillna(np.inf)).groupby("lr").v
    return pd.DataFrame({"median": values.median(), "low": values.min(), "high": values.max()})


def best_rate(runs: pd.DataFrame, arm: str) -> float | None:
    """The arm's best swept rate for ``scaled`` (None: not swept)."""
    cell = runs_of(runs, "sweep", arm)
    return None if cell.empty else float(best_lane_rates(cell, 1.0)[0])


#: (where, the arm's median, low, high, AdamW's median, low, high, ``more``/``less``/``tie``)
Pair = tuple[str, float, float, float, float, float, float, str]


def _compare(where: str, m: pd.Series, a: pd.Series) -> Pair:
    word = "more" if m.low > a.high else "less" if m.high < a.low else "tie"
    return (where, m["median"], m.low, m.high, a["median"], a.low, a.high, word)


def nominal_pairs(runs: pd.DataFrame, arm: str) -> list[Pair]:
    """``Pair`` at every rate both ``arm`` and ``BASELINE`` swept."""
    ours, base = (_spread(runs_of(runs, "sweep", a)) for a in (arm, BASELINE))
    return [_compare(f"lr {r:g}", ours.loc[r], base.loc[r]) for r in ours.index
            if r in base.index]  # fmt: skip


def multiple_pairs(runs: pd.DataFrame, arm: str) -> list[Pair]:
    """``Pair`` at every multiple ``r / best`` of each arm's best rate both grids hold."""
    found = {}
    for a in (arm, BASELINE):
        best = best_rate(runs, a)
        if best is None:
            return []
        found[a] = {r / best: row for r, row in _spread(runs_of(runs, "sweep", a)).iterrows()}
    pairs = []
    for multiple, row in found[arm].items():
        match = [m for m in found[BASELINE] if math.isclose(m, multiple, rel_tol=1e-6)]
        if match:
            pairs.append(_compare(f"{multiple:g}x best", row, found[BASELINE][match[0]]))
    return pairs


def _pairs_text(pairs: list[Pair], arm: str) -> str:
    name = optimizer_name(arm)
    return "; ".join(f"{w}: {name} {m:.3g} [{ml:.3g}, {mh:.3g}] vs AdamW {a:.3g} [{al:.3g}, "
                     f"{ah:.3g}]: {word}" for w, m, ml, mh, a, al, ah, word in pairs)  # fmt: skip


def count_more(pairs: list[Pair]) -> int:
    """How many of ``pairs`` are *more*: the arm's seeds all above AdamW's."""
    return sum(p[-1] == "more" for p in pairs)


def more_of(pairs: list[Pair]) -> str:
    """``"k of n"``: ``count_more`` of ``pairs`` and how many there are."""
    return f"{count_more(pairs)} of {len(pairs)}"


def _grows_more(pairs: list[Pair]) -> bool:
    return bool(pairs) and count_more(pairs) > len(pairs) / 2


def grows_more(runs: pd.DataFrame, arm: str, matched: str) -> Answer:
    """(a) for ``arm`` at ``matched`` ``nominal`` rates or ``multiples`` of the best."""
    pairs = (nominal_pairs if matched == "nominal" else multiple_pairs)(runs, arm)
    words = (
        "matched nominal rates" if matched == "nominal" else "matched multiples of each best rate"
    )
    return Answer(f"(a) reported: the largest logit grows more under {arm_words(arm)} than under "
                  f"AdamW (Kimi K2), at {words}, seeds' ranges apart", _grows_more(pairs),
                  _pairs_text(pairs, arm) or "nothing to compare")  # fmt: skip


def in_regime(runs: pd.DataFrame) -> pd.DataFrame:
    """The clipped runs on the signed S at most ``HOT`` times their arm's best rate (the tau
    sweep's and the long run's)."""
    clipped = runs[runs.qk_clip_tau.notna() & (runs.qk_clip_on == "signed")
                   & runs.part.isin(["taus", "long"])]  # fmt: skip
    bests = {arm: best_rate(runs, arm) for arm in arm_of(clipped).unique()}
    ceiling = arm_of(clipped).map(lambda a: (bests[a] or 0) * HOT * (1 + 1e-6))
    return clipped[clipped.lr <= ceiling]


_GROUP = ["part", "optimizer", "side", "schedule", "qk_clip_tau", "lr"]


def regime_groups(runs: pd.DataFrame) -> pd.DataFrame:
    """What (b) reads: per group of seeds (``_GROUP``) of the clipped runs in K2's regime
    (``in_regime``) whose clip fired, S after the first firing over tau: the seeds'
    ``median``, ``max`` and their number (``size``); empty where none fired."""
    fired = in_regime(runs)
    fired = fired[fired.first_clip_step >= 0]
    ratio = fired.assign(r=fired.max_signed_after_first_clip / fired.qk_clip_tau)
    return ratio.groupby(_GROUP, dropna=False).r.agg(["median", "max", "size"])


def clip_bounds(runs: pd.DataFrame) -> Answer:
    """(b)."""
    groups = regime_groups(runs)
    if groups.empty:
        return Answer(_B_LABEL, False, "the clip fired in no run of K2's regime")
    worst = groups["max"].max()
    bad = groups[(groups["max"] > ONE_UPDATE) | (groups["median"] > MEDIAN_UPDATE)]
    parts = [f"{len(groups)} clipped groups that fired: worst seed {worst:.3g} tau, worst "
             f"median {groups['median'].max():.3g} tau"]  # fmt: skip
    parts += [f"{p} {o}{'_pinned' if s == 'pinned' else ''} {sch} tau {t:g} lr {lr:g}: median "
              f"{g['median']:.3g} tau, largest {g['max']:.3g} tau"
              for (p, o, s, sch, t, lr), g in bad.iterrows()]  # fmt: skip
    return Answer(_B_LABEL, bad.empty, "; ".join(parts))


_B_LABEL = (f"(b) QK-Clip bounds S in K2's regime (at most {HOT:g}x the best rate, a tau that "
            f"binds): after the first firing within {ONE_UPDATE:g} tau on every seed, "
            f"{MEDIAN_UPDATE:g} tau in the median")  # fmt: skip


def far_above(runs: pd.DataFrame) -> list[str]:
    """The sweep's clipped runs above ``HOT`` times their arm's best rate: the largest S
    after the first firing and its over-bound head-steps by cause, per rate (seeds
    summed), like for like with the unclipped run's largest |logit|."""
    lines = []
    for arm in arms_of(runs):
        best = best_rate(runs, arm)
        rows = runs_of(runs, "sweep", arm, clipped=True)
        if best is None or rows.empty:
            continue
        free = runs_of(runs, "sweep", arm)
        for rate, group in rows[rows.lr > best * HOT * (1 + 1e-6)].groupby("lr"):
            unclipped = free[np.isclose(free.lr, rate)].max_attn_logit.median()
            if not (group.first_clip_step >= 0).any():
                lines.append(f"{arm} lr {rate:g} ({rate / best:.3g}x best): the clip never "
                             f"fired (unclipped |z| {unclipped:.3g})")  # fmt: skip
                continue
            lines.append(
                f"{arm} lr {rate:g} ({rate / best:.3g}x best): S after the first firing up to "
                f"{group.max_signed_after_first_clip.max() / group.qk_clip_tau.iloc[0]:.3g} tau; "
                f"|z| clipped {group.max_abs_after_first_clip.median():.3g} vs unclipped "
                f"{unclipped:.3g} (medians); head-steps over {ONE_UPDATE:g} tau: "
                f"{group.over_bound_clipped_before.sum()} clipped the step before, "
                f"{group.over_bound_negative_before.sum()} negative logits the step before, "
                f"{group.over_bound_from_below.sum()} from below"
            )  # fmt: skip
    return lines


def clip_loss(runs: pd.DataFrame) -> Answer:
    """(c)."""
    parts, holds = [], True
    clipped = runs[(runs.part == "sweep") & runs.qk_clip_tau.notna()]
    for (arm, mechanism), cell in clipped.groupby([arm_of(clipped), "mechanism"], sort=False):
        free = runs_of(runs, "sweep", arm, mechanism)
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
                    parts.append(f"{arm} lr {rate:g} (stable, clip fired in "
                                 f"{group.clip_fraction.mean():.1%} of head-steps): "
                                 f"{c:.3f} vs {u:.3f}, allowed {allowed:.3f}")  # fmt: skip
            else:
                ok = bool(c < u) if np.isfinite(u) else bool(np.isfinite(c))
                parts.append(f"{arm} lr {rate:g} (blown up): {c:.3f} vs {u:.3f}")
            holds &= ok
    return Answer(
        "(c) QK-Clip's held-out loss is within the noise of the unclipped run's where that "
        "is stable, and lower where its logits blow up",
        holds and bool(len(clipped)),
        "; ".join(parts) or "the clip fired at no stable rate",
    )


def clip_fires_less_late(runs: pd.DataFrame) -> Answer:
    """(d), reported whichever way it comes out."""
    rows = runs[(runs.part == "long") & runs.qk_clip_tau.notna() & (runs.schedule == "wsd")]
    groups = rows.groupby([arm_of(rows), "lr"])[
        ["clip_fraction_plateau_first", "clip_fraction_plateau_last"]].median()  # fmt: skip
    detail = "; ".join(f"{arm} lr {lr:g}: plateau's first quarter "
                       f"{g.clip_fraction_plateau_first:.2%}, last "
                       f"{g.clip_fraction_plateau_last:.2%} (medians over seeds)"
                       for (arm, lr), g in groups.iterrows())  # fmt: skip
    less = bool(len(groups)) and bool(
        (groups.clip_fraction_plateau_last < groups.clip_fraction_plateau_first).all()
    )
    return Answer("(d) reported: on the constant-rate plateau the clip fires less late than "
                  "early (Kimi K2)", less, detail or "no long run on K2's schedule")  # fmt: skip


def qk_norm_bounds(runs: pd.DataFrame) -> Answer:
    """(e), under every optimizer of the arms but ``BASELINE``'s."""
    names = list(dict.fromkeys(arm_optimizer(a) for a in compared_arms(runs)))
    words = " and ".join(map(optimizer_name, names)) or "any optimizer but AdamW"
    label = f"(e) qk_norm bounds the logits under {words} without a clip (below {BOUNDED:g})"
    rows = runs[runs.optimizer.isin(names) & (runs.mechanism == "qk_norm")
                & runs.qk_clip_tau.isna()]  # fmt: skip
    if rows.empty:
        return Answer(label, False, f"qk_norm was not trained under {words}")
    top = rows.max_attn_logit.max()
    diverged = int((rows.diverged_step >= 0).sum())
    return Answer(label, bool(top < BOUNDED and not diverged),
                  f"largest {top:.3g} over {len(rows)} runs, {diverged} diverged")  # fmt: skip


def abs_clip_bounds(runs: pd.DataFrame) -> Answer:
    """(f)."""
    rows = runs[runs.qk_clip_tau.notna() & (runs.qk_clip_on == "abs") & (runs.first_clip_step >= 0)]
    if rows.empty:
        return Answer(_F_LABEL, False, "no run of the clip on |logit| fired")
    ratio = rows.max_abs_after_first_clip / rows.qk_clip_tau
    signed = runs[runs.qk_clip_tau.notna() & (runs.qk_clip_on == "signed")
                  & (runs.part == "taus") & (runs.first_clip_step >= 0)]  # fmt: skip
    beside = (signed.max_abs_after_first_clip / signed.qk_clip_tau).max()
    detail = (
        f"largest |z| after the first firing {ratio.max():.3g} tau over {len(rows)} runs "
        f"(the signed clip's runs of the tau sweep, like for like: up to {beside:.3g} tau)"
    )
    return Answer(_F_LABEL, bool((ratio <= ONE_UPDATE).all()), detail)


_F_LABEL = (f"(f) QK-Clip keyed on |logit| (not K2's) bounds both signs: |z| within "
            f"{ONE_UPDATE:g} tau after the first firing on every seed")  # fmt: skip


def answers(runs: pd.DataFrame) -> list[Answer]:
    """Every known answer of the module docstring on ``runs``: (a) per arm compared, at
    matched nominal rates and at matched multiples, then (b) to (f)."""
    grown = [grows_more(runs, arm, matched) for arm in compared_arms(runs)
             for matched in ("nominal", "multiples")]  # fmt: skip
    return [*grown, clip_bounds(runs), clip_loss(runs), clip_fires_less_late(runs),
            qk_norm_bounds(runs), abs_clip_bounds(runs)]  # fmt: skip
