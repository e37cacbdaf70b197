"""The report's sections for experiment 10: the training claims across widths, and the
drift of the temperature. Verdicts come from the CSVs only (``CHECKS``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnlab.harness.headlines import medians as median_line
from attnlab.harness.tables import Tables, markdown_table, num
from attnlab.harness.verdicts import Check, claim_rows, claims_block
from attnlab.studies.widths.study import CLAIMS, CURVES_CSV, JACOBIAN_CSV, LR_CSV, SUMMARY_CSV

#: Routing is *frozen* when its accuracy stays within this multiple of chance (1 / pairs).
FROZEN_MULTIPLE = 2.0
#: A ratio within this relative distance of 1 counts as "no difference" (sign 0).
SAME = 0.1
#: Scaled attention *routes* at a width when its median routing accuracy reaches this.
ROUTED = 0.5
#: Standard errors of an accuracy difference that make it a loss.
SE_MULTIPLE = 4.0

_SUMMARY = [
    "d_k",
    "mechanism",
    "lr",
    "seed",
    "grad_wq_step0",
    "step_loss_below_1",
    "eval_accuracy",
    "routing_accuracy_end",
    "diverged_step",
]


def base_lr(tables: Tables) -> float:
    """The learning rate of the width runs: ``--lr`` from the sidecar, else the most
    common rate of the summary."""
    summary = tables.get(SUMMARY_CSV, ["lr"])
    return tables.flags(SUMMARY_CSV).get("lr", summary.lr.mode().iloc[0])


def base_runs(tables: Tables) -> tuple[pd.DataFrame, int, int]:
    """The width runs (at the base learning rate), the pairs and the value-token count."""
    summary = tables.get(SUMMARY_CSV, _SUMMARY)
    flags = tables.flags(SUMMARY_CSV)
    return (
        summary[np.isclose(summary.lr, base_lr(tables))],
        int(flags.get("pairs", 16)),
        int(flags.get("value_tokens", 32)),
    )


def drift_width(tables: Tables) -> int | None:
    """``--drift-dk`` of the run (None if it trained no drift runs)."""
    return tables.flags(SUMMARY_CSV).get("drift_dk") or None


def curves_at(tables: Tables, d_k: int | None, columns: list[str]) -> pd.DataFrame:
    """The recorded curves of the runs at width ``d_k`` and the base learning rate."""
    curves = tables.get(CURVES_CSV, ["d_k", "mechanism", "lr", "seed", "step", *columns])
    return curves[(curves.d_k == d_k) & np.isclose(curves.lr, base_lr(tables))]


def medians(base: pd.DataFrame, column: str) -> pd.DataFrame:
    """Median over seeds of ``column``: rows d_k, columns mechanism."""
    return base.pivot_table(index="d_k", columns="mechanism", values=column, aggfunc="median")


def routed_widths(tables: Tables) -> list[int]:
    """Widths at which the task is learnable in the run: scaled attention routes (median
    routing accuracy at least ``ROUTED``). The claims about large d_k are judged there."""
    base, _, _ = base_runs(tables)
    routing = medians(base, "routing_accuracy_end")
    return routing.index[routing["scaled"] >= ROUTED].tolist()


def _frozen_routing(tables: Tables) -> tuple[str, str, bool]:
    """At the widths where scaled attention routes: unscaled routing stays within
    ``FROZEN_MULTIPLE`` x chance (frozen) while its held-out accuracy exceeds 2x chance
    (a learnable payload); holds if that happens at some width."""
    base, pairs, values = base_runs(tables)
    widths = routed_widths(tables)
    routing, accuracy = medians(base, "routing_accuracy_end"), medians(base, "eval_accuracy")
    if not widths:
        return "scaled attention routes at no width", "", False
    frozen = [d for d in widths if routing.loc[d, "unscaled"] <= FROZEN_MULTIPLE / pairs]
    payload = [d for d in frozen if accuracy.loc[d, "unscaled"] > 2 / values]
    text = "; ".join(
        f"d_k {d}: routing {routing.loc[d, 'unscaled']:.3f}, accuracy "
        f"{accuracy.loc[d, 'unscaled']:.3f}"
        for d in widths
    )
    found = f"frozen at d_k {', '.join(map(str, frozen))}" if frozen else "never frozen"
    detail = (
        f"unscaled, where scaled routes (d_k ≥ {widths[0]}); frozen: routing ≤ "
        f"{FROZEN_MULTIPLE:g}/{pairs}; {found}, up to d_k {widths[-1]}"
    )
    return text, detail, bool(payload)


def _silent_quality_loss(tables: Tables) -> tuple[str, str, bool]:
    """At the widest width: unscaled held-out accuracy below scaled's by more than
    ``SE_MULTIPLE`` binomial standard errors (of the difference), and no diverged unscaled
    run at any width."""
    base, _, _ = base_runs(tables)
    widths = routed_widths(tables)
    if not widths:
        return "scaled attention routes at no width", "", False
    n = int(tables.flags(SUMMARY_CSV).get("eval_size", 512))
    accuracy = medians(base, "eval_accuracy")
    crashes = int(base[base.mechanism == "unscaled"].diverged_step.notna().sum())
    widest = widths[-1]
    a, b = accuracy.loc[widest, "unscaled"], accuracy.loc[widest, "scaled"]
    se = math.sqrt((a * (1 - a) + b * (1 - b)) / n)
    text = ", ".join(
        f"d_k {d}: {accuracy.loc[d, 'unscaled']:.3f} vs {accuracy.loc[d, 'scaled']:.3f}"
        for d in widths
    )
    ok = crashes == 0 and b - a > SE_MULTIPLE * se
    detail = (
        f"unscaled vs scaled; gap at d_k {widest} > {SE_MULTIPLE:g} SE ({se:.3f}); "
        f"{crashes} diverged unscaled runs"
    )
    return text, detail, ok


def _sign(ratio: float) -> int:
    return 0 if abs(ratio - 1) <= SAME else (1 if ratio > 1 else -1)


def milestone_ratios(tables: Tables) -> pd.DataFrame:
    """Per d_k: median step-to-loss-1.0 of unscaled over scaled (``slowdown``; a variant
    that never gets there counts as the run length, so the ratio is then a bound), and the
    static Jacobian ratio scaled / unscaled at the task's 16 keys (``jacobian``)."""
    base, _, _ = base_runs(tables)
    steps = int(tables.flags(SUMMARY_CSV).get("steps", 0)) or None
    filled = base.assign(step=base.step_loss_below_1.astype(float).fillna(steps or np.nan))
    reached = base.assign(hit=base.step_loss_below_1.notna())
    median = medians(filled, "step")
    share = reached.pivot_table(index="d_k", columns="mechanism", values="hit", aggfunc="mean")
    jac = tables.get(JACOBIAN_CSV, ["d_k", "ratio_unscaled_scaled", "ratio_se"]).set_index("d_k")
    out = pd.DataFrame(
        {
            "slowdown": median["unscaled"] / median["scaled"],
            "reached_scaled": share["scaled"],
            "reached_unscaled": share["unscaled"],
        }
    )
    out["jacobian"] = 1 / jac.ratio_unscaled_scaled.reindex(out.index)
    return out


def _slowdown_follows_jacobian(tables: Tables) -> tuple[str, str, bool]:
    """At every width where scaled reaches loss 1.0 on at least half its seeds, the sign of
    (unscaled slower) matches the sign of (unscaled Jacobian smaller), each within ``SAME``
    of 1 counting as equal; a censored slow-down (unscaled never reaching loss 1.0) counts
    only when its lower bound is above ``1 + SAME``."""
    frame = milestone_ratios(tables)
    judged = frame[(frame.reached_scaled >= 0.5) & frame.slowdown.notna() & frame.jacobian.notna()]
    if judged.empty:
        return "scaled never reaches loss 1.0", "", False
    # Where unscaled never gets there the slow-down is a lower bound: it says "slower" only
    # when the bound itself exceeds 1 + SAME, and nothing otherwise (the width is skipped).
    censored = judged.reached_unscaled < 0.5
    judged = judged[~censored | (judged.slowdown > 1 + SAME)]
    if judged.empty:
        return "no width where both signs are known", "", False
    agree = [_sign(r.slowdown) == _sign(r.jacobian) for r in judged.itertuples()]
    text = "; ".join(
        f"d_k {d}: {num(r.slowdown)} vs {num(r.jacobian)}" for d, r in judged.iterrows()
    )
    return text, f"slow-down vs J_scaled/J_unscaled, equal within ±{SAME:g}", all(agree)


def _identical_at_dk1(tables: Tables) -> tuple[str, str, bool]:
    """Every column of the d_k = 1 summary and curves rows equal for scaled and unscaled."""
    summary = tables.get(SUMMARY_CSV, _SUMMARY)
    curves = tables.get(CURVES_CSV, ["d_k", "mechanism", "lr", "seed", "step"])
    compared = []
    for frame in (summary, curves):
        at1 = frame[frame.d_k == 1]
        a = at1[at1.mechanism == "scaled"].drop(columns="mechanism").reset_index(drop=True)
        b = at1[at1.mechanism == "unscaled"].drop(columns="mechanism").reset_index(drop=True)
        if a.empty or b.empty:
            return "d_k = 1 not measured", "", False
        compared.append(a.equals(b))
    n = len(curves[(curves.d_k == 1) & (curves.mechanism == "scaled")])
    return (
        ("identical" if all(compared) else "different"),
        f"{n} curve rows and the summary",
        all(compared),
    )


def best_lrs(tables: Tables) -> pd.DataFrame:
    """Best learning rate per (mechanism, d_k) of the transfer sweep."""
    frame = tables.get(LR_CSV, ["mechanism", "d_k", "lr", "best"])
    best = frame[frame.best.astype(bool)]
    return best.pivot(index="d_k", columns="mechanism", values="lr")


def _mup_lr_transfer(tables: Tables) -> tuple[str, str, bool]:
    """inv_d's best rate spans fewer octaves across the swept widths than scaled's."""
    best = best_lrs(tables)
    if not {"scaled", "inv_d"} <= set(best.columns):
        return "not measured", "", False
    grid = tables.get(LR_CSV, ["lr"]).lr
    span = {m: math.log10(best[m].max() / best[m].min()) for m in ("scaled", "inv_d")}
    text = ", ".join(f"{m}: " + " / ".join(f"{v:g}" for v in best[m]) for m in span)
    detail = f"decades spanned: scaled {span['scaled']:.2f}, inv_d {span['inv_d']:.2f}"
    edge = best.isin([grid.min(), grid.max()]).to_numpy().sum()
    if edge:
        detail += f"; {edge} optima at the grid's edge (the true optimum may lie beyond)"
    return text, detail, span["inv_d"] < span["scaled"]


#: Check name -> function of the tables returning (ours, detail, verdict).
CHECKS: dict[str, Check] = {
    "frozen_routing": _frozen_routing,
    "silent_quality_loss": _silent_quality_loss,
    "slowdown_follows_jacobian": _slowdown_follows_jacobian,
    "identical_at_dk1": _identical_at_dk1,
    "mup_lr_transfer": _mup_lr_transfer,
}


def _slowdown_cell(slowdown: float, reached_scaled: float, reached_unscaled: float) -> str:
    """The slow-down as Figure 8(a) draws it: the ratio where both variants reach loss 1.0
    on at least half their seeds, a lower bound (≥) where only scaled does, and undefined
    (—) where scaled does not: its step is then censored at the run length, and Figure
    8(a) draws no point."""
    if reached_scaled < 0.5:
        return (
            "— (neither reaches 1.0)" if reached_unscaled < 0.5 else "— (scaled never reaches 1.0)"
        )
    return ("≥ " if reached_unscaled < 0.5 else "") + num(slowdown)


def _width_table(tables: Tables) -> str:
    base, _, _ = base_runs(tables)
    routing, accuracy = medians(base, "routing_accuracy_end"), medians(base, "eval_accuracy")
    grad = medians(base, "grad_wq_step0")
    ratios = milestone_ratios(tables)
    names = [
        m
        for m in tables.flags(SUMMARY_CSV).get("mechanisms", routing.columns)
        if m in routing.columns
    ]  # the width sweep's mechanisms
    header = [
        "d_k",
        "slow-down (loss-1.0 step, unscaled / scaled)",
        "J_scaled / J_unscaled",
        *(f"routing, {m}" for m in names),
        *(f"accuracy, {m}" for m in names),
        "‖∇W_Q‖ step 0, scaled / unscaled",
    ]
    rows = []
    for d_k in routing.index:
        r = ratios.loc[d_k]
        rows.append(
            [
                str(d_k),
                _slowdown_cell(r.slowdown, r.reached_scaled, r.reached_unscaled),
                num(r.jacobian),
                *(num(routing.loc[d_k, m]) for m in names),
                *(num(accuracy.loc[d_k, m]) for m in names),
                f"{num(grad.loc[d_k, 'scaled'])} / {num(grad.loc[d_k, 'unscaled'])}",
            ]
        )
    return markdown_table(header, rows)


def _drift_table(tables: Tables) -> tuple[str, int | None]:
    d_k = drift_width(tables)
    at = curves_at(tables, d_k, ["logit_std", "rho_implied", "cos_asked", "attn_max_weight"])
    if at.empty:
        return "", None
    first, last = at[at.step == 0], at[at.step == at.step.max()]
    rows = []
    for name in at.mechanism.unique():
        a = first[first.mechanism == name]
        b = last[last.mechanism == name]
        rows.append(
            [
                name,
                f"{num(a.logit_std.median())} → {num(b.logit_std.median())}",
                f"×{num(b.logit_std.median() / a.logit_std.median())}",
                f"{num(a.rho_implied.median())} → {num(b.rho_implied.median())}",
                num(b.cos_asked.median()),
                num(b.attn_max_weight.median()),
            ]
        )
    header = [
        "mechanism",
        "logit std (step 0 → end)",
        "moved",
        "implied ρ (step 0 → end)",
        "cos(q, asked key), end",
        "max weight, end",
    ]
    return markdown_table(header, rows), d_k


def section(tables: Tables) -> str:
    rows = claim_rows(CLAIMS, tables, CHECKS)
    flags = tables.flags(SUMMARY_CSV)
    drift, drift_dk = _drift_table(tables)
    parts = [
        "## Across widths, and after the weights drift (experiment 10)",
        f"The recall task at d_k {', '.join(str(d) for d in flags.get('dk', []))}: "
        f"d_model {flags.get('d_model')}, batch {flags.get('batch_size')}, "
        f"{flags.get('steps')} steps at learning rate {flags.get('lr')}, "
        f"{flags.get('seeds')} seeds with identical initialisation and data per width "
        "(medians over seeds below). *Routing accuracy*: the fraction of held-out sequences "
        "whose largest attention weight sits on the slot of the asked-for key (chance "
        f"1/{flags.get('pairs', 16)}). The slow-down is bounded (≥) where unscaled never "
        "reaches loss 1.0 in the run; the Jacobian column is experiment 03's static norm "
        "recomputed at 16 keys.",
        _width_table(tables),
        claims_block(rows),
    ]
    if drift_dk is not None:
        parts += [
            f"### The temperature after the weights drift (d_k = {drift_dk})",
            "The variance argument assumes independent q and k. Over training, the logits "
            "the softmax sees (after each mechanism's scale) and the correlation ρ that "
            "experiment 07's law (mean d_k ρ for unit-variance coordinates) implies for the "
            "asked-for key:",
            drift,
        ]
    return "\n\n".join(parts)


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    SUMMARY_CSV: lambda f: median_line(
        f[f.d_k == f.d_k.max()],
        "mechanism",
        "eval_accuracy",
        f"median held-out accuracy at d_k {f.d_k.max()}",
    ),
    LR_CSV: lambda f: ", ".join(
        f"{m}: best lr {', '.join(f'{x:g}' for x in g[g.best.astype(bool)].lr)}"
        for m, g in f.groupby("mechanism", sort=False)
    ),
}
