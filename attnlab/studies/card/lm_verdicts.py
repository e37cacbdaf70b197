"""The language-model card's verdicts (``attnlab.studies.card.lm``): each a stated rule over
its tables that can fail, *yes*, *no* or *undetermined* as the recall card's
(``attnlab.studies.card.verdicts``). Pandas only.

The closing question asked of a model researchers train: who owns the temperature in
each layer of the trained LM, whether it holds when the rate that trained it is
``drift_factor`` times larger, whether the logits stay bounded at high rates (Wortsman et
al. 2023), and whether the model reads sequences longer than it was trained on (Press et al.
2022). ``loss`` is the held-out cross-entropy in nats per byte; *best* is the rate of the
lowest held-out loss at a width. Ownership, drift and length are read at the widest width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from attnlab.lm.sweep_tables import best_lane_rates, lr_sensitivity
from attnlab.studies.card.verdicts import Rule, Verdict, owner_words, verdicts_frame

#: The drift of the closing question: the same model at the best rate and at this multiple.
DRIFT_FACTOR = 10.0
#: Standard errors of the difference a loss may exceed scaled's by and still be "as low".
LOSS_SES = 2.0
#: "Logits stay bounded": the largest attention logit over training, any layer, at the top
#: rate, below this (experiment 14's BOUNDED; Wortsman et al. mark divergence at 1e4) ...
LOGIT_BOUND = 1e2
#: ... or, trained with QK-Clip at ``tau`` (``lm_sweep``'s ``qk_clip_tau``), below
#: ``ONE_UPDATE * tau``: the clip's own cap, which a logit may pass by one update's growth
#: (the clip scales W_Q, W_K after the step that grew them: ``attnlab.lm.qk_clip``).
ONE_UPDATE = 2.0
#: "Holds after the drift": each layer's median logit scale changes by at most this factor,
#: either way (experiment 14's HOLDS_WITHIN).
HOLDS_WITHIN = 2.0
#: "Generalises to longer sequences": the loss at each longer length at most this many nats
#: per byte above the loss at the training length.
LENGTH_TOLERANCE = 0.05


class LMCard(NamedTuple):
    """The tables of one language-model card (``attnlab.studies.card.lm``); each is written
    as ``<field>.csv`` in the card's ``lm/`` folder."""

    lm_sweep: pd.DataFrame
    lm_ownership: pd.DataFrame
    lm_lengths: pd.DataFrame


def _rows(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    return frame[frame.mechanism == name] if "mechanism" in frame else frame.iloc[:0]


def _widest(card: LMCard, name: str) -> int | None:
    rows = _rows(card.lm_sweep, name)
    return int(rows.d_model.max()) if not rows.empty else None


def at_grid_edge(rows: pd.DataFrame) -> str | None:
    """Why the best rate of ``rows`` (one mechanism at one width) locates no optimum, or
    None: the rate of the lowest mean held-out loss (``best_lane_rates``) is the smallest or
    the largest of the grid, so a rate beyond it, not swept, may be better, and the
    "best rate's model" is not the best model. A verdict read from it is undetermined."""
    best, _ = best_lane_rates(rows, DRIFT_FACTOR)
    rates = rows.lr.unique()
    if best in (rates.min(), rates.max()):
        return f"best rate {best:g} at the grid's edge ({rates.min():g} to {rates.max():g})"
    return None


def _edge_at(card: LMCard, name: str, widths: str = "widest") -> str | None:
    """``at_grid_edge`` at the widest width (``widths="widest"``) or at the first width
    where it says so (``"every"``)."""
    rows = _rows(card.lm_sweep, name)
    if rows.empty:
        return None
    keep = [_widest(card, name)] if widths == "widest" else sorted(rows.d_model.unique())
    for d in keep:
        if reason := at_grid_edge(rows[rows.d_model == d]):
            return f"{reason} at d_model {d}"
    return None


def _best(rows: pd.DataFrame) -> tuple[float, float]:
    """The lowest mean held-out loss over the rates of one width, and its SE."""
    by_rate = rows.groupby("lr")[["final_val_loss", "final_val_loss_se"]].mean()
    finite = by_rate[np.isfinite(by_rate.final_val_loss)]
    if finite.empty:
        return math.inf, math.nan
    best = finite.final_val_loss.idxmin()
    return float(finite.final_val_loss[best]), float(finite.final_val_loss_se[best])


LM_LOSS = Rule(
    "LM: held-out loss as low as scaled's",
    f"the best rate's held-out loss at most scaled's + {LOSS_SES:g} SE of the difference "
    "(windows' SEs), at every width; undetermined where its best rate is at the grid's edge",
)


def _beside_scaled(card: LMCard, name: str) -> tuple[list, str | None]:
    """``(d_model, its rows, scaled's rows)`` per width of its sweep, or why not."""
    own, scaled = _rows(card.lm_sweep, name), _rows(card.lm_sweep, "scaled")
    if own.empty or scaled.empty:
        return [], "no rows for it or for scaled"
    pairs = [(int(d), rows, scaled[scaled.d_model == d]) for d, rows in own.groupby("d_model")]
    missing = [d for d, _, theirs in pairs if theirs.empty]
    return pairs, (f"scaled not trained at d_model {missing[0]}" if missing else None)


def lm_loss_as_low(card: LMCard, name: str) -> Verdict:
    pairs, problem = _beside_scaled(card, name)
    if problem or (problem := _edge_at(card, name, "every")):
        return LM_LOSS.says(problem, None)
    parts, passed = [], True
    for d, rows, theirs in pairs:
        (mine, se1), (ref, se2) = _best(rows), _best(theirs)
        if not math.isfinite(ref):
            return LM_LOSS.says(f"scaled diverged at every rate at d_model {d}", None)
        parts.append(f"d {d}: {mine:.3f} vs {ref:.3f}")
        passed &= mine <= ref + LOSS_SES * math.hypot(se1, se2)
    return LM_LOSS.says("; ".join(parts), bool(passed))


LM_HIGH_LR = Rule(
    "LM: stable at high learning rates",
    "Wortsman et al.'s LR sensitivity E_eta[min(l(eta), l0) - l*] at most scaled's + "
    f"{LOSS_SES:g} SE (the best losses' windows), at every width",
)


def lm_stable_at_high_lr(card: LMCard, name: str) -> Verdict:
    pairs, problem = _beside_scaled(card, name)
    if problem:
        return LM_HIGH_LR.says(problem, None)
    if _rows(card.lm_sweep, name).lr.nunique() < 2:
        return LM_HIGH_LR.says("fewer than two rates", None)
    both = pd.concat([_rows(card.lm_sweep, name), _rows(card.lm_sweep, "scaled")])
    table = lr_sensitivity(both).set_index(["mechanism", "d_model"]).lr_sensitivity
    parts, passed = [], True
    for d, rows, theirs in pairs:
        mine, ref = table[name, d], table["scaled", d]
        se = math.hypot(_best(rows)[1], _best(theirs)[1])
        parts.append(f"d {d}: {mine:.3f} vs {ref:.3f}")
        passed &= mine <= ref + LOSS_SES * se
    return LM_HIGH_LR.says("; ".join(parts), bool(passed))


LM_LOGITS = Rule(
    "LM: logits bounded at the top rate",
    f"the largest attention logit over training, any layer, at the top rate below "
    f"{LOGIT_BOUND:g} at every width (Wortsman et al.'s attention-logit growth); trained with "
    f"QK-Clip at tau (--qk-clip), below {ONE_UPDATE:g} tau (the clip's cap, passed by at most "
    "one update's growth)",
)


def _logit_bound(rows: pd.DataFrame) -> tuple[float, str]:
    """The bound ``rows``' largest logit is held to, and how the value names it: ``tau``
    of the QK-Clip they trained under (``qk_clip_tau``) times ``ONE_UPDATE``, else
    ``LOGIT_BOUND``."""
    taus = rows.qk_clip_tau.dropna().unique() if "qk_clip_tau" in rows else ()
    if len(taus) != 1:  # no clip (an empty column, or a card made before it)
        return LOGIT_BOUND, ""
    tau = float(taus[0])
    return ONE_UPDATE * tau, f" (QK-Clip tau {tau:g}: bound {ONE_UPDATE * tau:g})"


def lm_logits_bounded(card: LMCard, name: str) -> Verdict:
    rows = _rows(card.lm_sweep, name)
    if rows.empty:
        return LM_LOGITS.says("no rows", None)
    layers = [c for c in rows.columns if c.startswith("max_attn_logit_layer")]
    parts, passed = [], True
    for d, g in rows.groupby("d_model"):
        top = g[g.lr == g.lr.max()]
        largest = float(np.nanmax(top[layers].to_numpy(float), initial=-np.inf))
        largest = math.inf if not np.isfinite(largest) or top.diverged_step.ge(0).any() else largest
        bound, said = _logit_bound(top)
        parts.append(f"d {d}: {largest:.3g} at {g.lr.max():g}{said}")
        passed &= largest < bound
    return LM_LOGITS.says("; ".join(parts), bool(passed))


def _layers(card: LMCard, name: str, weights: str) -> pd.DataFrame:
    """Per layer at the widest width, the median over heads and seeds of the ownership
    table's columns, for the ``best`` or ``drifted`` weights."""
    rows = _rows(card.lm_ownership, name)
    d = _widest(card, name)
    rows = rows[(rows.d_model == d) & (rows.weights == weights)] if not rows.empty else rows
    columns = ["logit_scale", "elasticity_1", "elasticity_8"]
    return rows.groupby("layer")[columns].median() if not rows.empty else rows


def lm_owner_words(e_start: float, e_drifted: float) -> str:
    """The owner of one layer's temperature from its elasticity at ``alpha = 1`` and at the
    largest ``alpha`` (``owner_words``), where an elasticity between the two bounds that
    *rises* with ``alpha`` is a fixed term sharing the spread with the weights (a bias,
    ALiBi's), not a cap: ``shared``."""
    words = owner_words(e_start, e_drifted)
    return "shared" if words == "cap" and e_drifted > e_start else words


LM_OWNER = Rule(
    "LM: the weights do not own the temperature in any layer",
    "per layer at the best rate, widest width: the median elasticity e over heads of the "
    "logits' scale to q, k -> alpha q, alpha k names the owner (e >= 1.5 at alpha 1 and 8: "
    "weights; <= 0.5: mechanism; falling from 2: a cap; between and rising: shared); with "
    "QK-Clip (--qk-clip), a layer whose heads the clip still clipped in the last quarter of "
    "training is owned by the optimizer (the clip), whatever e says; undetermined where the "
    "best rate is at the grid's edge",
)
#: The owner ``lm_owner`` names where QK-Clip still fired late in training.
CLIP_OWNER = "optimizer (QK-Clip)"


def clip_layers_late(card: LMCard, name: str) -> set[int]:
    """The layers whose heads QK-Clip clipped in the last quarter of training at the best
    rate, widest width (median over seeds above 0); none without the clip."""
    rows = _rows(card.lm_sweep, name)
    columns = [c for c in rows.columns if c.startswith("clip_fraction_last_quarter_layer")]
    if rows.empty or not columns:
        return set()
    rows = rows[rows.d_model == _widest(card, name)]
    best, _ = best_lane_rates(rows, DRIFT_FACTOR)
    late = rows[np.isclose(rows.lr, best)][columns].median()
    return {int(c.rsplit("layer", 1)[1]) for c, v in late.items() if v > 0}


def lm_owner(card: LMCard, name: str) -> Verdict:
    layers = _layers(card, name, "best")
    if layers.empty:
        return LM_OWNER.says("no ownership rows", None)
    if edge := _edge_at(card, name):
        return LM_OWNER.says(edge, None)
    clipped = clip_layers_late(card, name)
    owners = {
        int(layer): CLIP_OWNER if int(layer) in clipped
        else lm_owner_words(r.elasticity_1, r.elasticity_8)
        for layer, r in layers.iterrows()
    }  # fmt: skip
    value = "; ".join(
        f"layer {layer}: {owners[layer]} (e {r.elasticity_1:.2f})" for layer, r in layers.iterrows()
    )
    return LM_OWNER.says(value, all(o != "weights" for o in owners.values()))


LM_DRIFT = Rule(
    "LM: holds its temperature after the weights drift",
    f"each layer's median logit scale (within-row std) at {DRIFT_FACTOR:g}x the best rate "
    f"within a factor {HOLDS_WITHIN:g} of the best rate's, both ways (max(g, 1/g) <= "
    f"{HOLDS_WITHIN:g}), widest width; undetermined where "
    f"{DRIFT_FACTOR:g}x the best rate is not swept or the best rate is at the grid's edge",
)


def lm_holds_after_drift(card: LMCard, name: str) -> Verdict:
    best, drifted = _layers(card, name, "best"), _layers(card, name, "drifted")
    if best.empty:
        return LM_DRIFT.says("no ownership rows", None)
    if edge := _edge_at(card, name):
        return LM_DRIFT.says(edge, None)
    if drifted.empty:
        rows = _rows(card.lm_sweep, name)
        rate, _ = best_lane_rates(rows[rows.d_model == _widest(card, name)], DRIFT_FACTOR)
        return LM_DRIFT.says(f"best rate {rate:g}: {DRIFT_FACTOR:g}x it not swept", None)
    growth = drifted.logit_scale / best.logit_scale
    value = "; ".join(f"layer {layer}: x{g:.3g}" for layer, g in growth.items())
    factor = np.maximum(growth, 1.0 / growth)  # NaN (0 / 0) fails below
    return LM_DRIFT.says(value, bool((factor <= HOLDS_WITHIN).all()))


LM_LENGTH = Rule(
    "LM: generalises to longer sequences",
    "the best rate's model, widest width, on held-out sequences 2x and 4x its training "
    f"length: loss at most {LENGTH_TOLERANCE:g} nats per byte above the training length's "
    "(Press et al. 2022); undetermined with learned positions or where the best rate is at "
    "the grid's edge",
)


def lm_length_generalises(card: LMCard, name: str) -> Verdict:
    rows = _rows(card.lm_lengths, name)
    if rows.empty:
        return LM_LENGTH.says(
            "no lengths read (learned positions end at the training length)", None
        )
    if edge := _edge_at(card, name):
        return LM_LENGTH.says(edge, None)
    rows = rows[rows.d_model == rows.d_model.max()]
    by_factor = rows.groupby("factor").loss.mean()
    if 1 not in by_factor.index or len(by_factor) < 2:
        return LM_LENGTH.says("no longer length read", None)
    base = by_factor[1]
    rise = by_factor.drop(1) - base
    value = f"{rows.positions.iloc[0]} positions: loss {base:.3f} at 1x; " + ", ".join(
        f"{by_factor[f]:.3f} at {f}x ({rise[f]:+.3f})" for f in rise.index
    )
    return LM_LENGTH.says(value, bool((rise <= LENGTH_TOLERANCE).all()))


LM_VERDICTS: tuple[Callable[[LMCard, str], Verdict], ...] = (
    lm_loss_as_low,
    lm_stable_at_high_lr,
    lm_logits_bounded,
    lm_owner,
    lm_holds_after_drift,
    lm_length_generalises,
)


def lm_verdicts_frame(card: LMCard, names: list[str]) -> pd.DataFrame:
    """One row per (mechanism, verdict): ``verdict, rule, value, passed``."""
    return verdicts_frame(card, names, LM_VERDICTS)
