"""The report's section for experiments 01-03: every static number of article 004."""

from __future__ import annotations

import math

import pandas as pd

from attnlab.claims import SEM_MULTIPLE, STATIC_CLAIMS
from attnlab.core.curves import crossing_dk
from attnlab.harness.tables import Tables, markdown_table
from attnlab.harness.verdicts import Check, claim_rows


def _variance_band(tables: Tables) -> tuple[str, str, bool]:
    frame = tables.get("01_logit_variance.csv", ["d_k", "rel_error", "rel_error_se"])
    band = frame[(frame.d_k >= 4) & (frame.d_k <= 1024)]
    worst = band.loc[band.rel_error.abs().idxmax()]
    within = (band.rel_error.abs() <= 0.005).all()
    consistent = (
        band.rel_error.abs() <= 0.005 + SEM_MULTIPLE * math.sqrt(2) * band.rel_error_se
    ).all()
    ours = (
        f"max {100 * abs(worst.rel_error):.2f}% at d_k = {int(worst.d_k)} "
        f"({abs(worst.rel_error) / worst.rel_error_se:.1f} SE from 0)"
    )
    detail = "all within 0.5%" if within else "within 0.5% + 4√2 SE at every d_k"
    return ours, detail, bool(consistent)


def _unscaled_minus_scaled(tables: Tables) -> pd.DataFrame:
    frame = tables.get("03_jacobian_norm.csv", ["variant", "d_k", "jacobian_fro_mean"])
    wide = frame.pivot(index="d_k", columns="variant", values="jacobian_fro_mean").sort_index()
    return wide


def _jacobian_peak(tables: Tables) -> tuple[str, str, bool]:
    wide = _unscaled_minus_scaled(tables)
    peak = int(wide["unscaled"].idxmax())
    return f"{peak} (norm {wide['unscaled'].max():.3f})", "", peak == 16


def _jacobian_crossing(tables: Tables) -> tuple[str, str, bool]:
    wide = _unscaled_minus_scaled(tables)
    found = crossing_dk(wide.index.to_numpy(), (wide["unscaled"] - wide["scaled"]).to_numpy())
    if found is None:
        return "no crossing in the sweep", "", False
    lo, hi, at = found
    return f"between {lo} and {hi} (interpolated {at:.0f})", "", lo >= 256 and hi <= 1024


#: Check name -> function of the tables returning (ours, detail, verdict).
CHECKS: dict[str, Check] = {
    "variance_band": _variance_band,
    "jacobian_peak": _jacobian_peak,
    "jacobian_crossing": _jacobian_crossing,
}


def section(tables: Tables) -> str:
    rows = claim_rows(STATIC_CLAIMS, tables, CHECKS)
    header = ["Section", "Quantity", "Article", "Ours ± SEM", "Δ/SEM", "Tolerance", "Verdict"]
    table = markdown_table(
        header,
        [
            (r.section, r.quantity, r.article, r.ours, r.deviation, r.tolerance, r.verdict)
            for r in rows
        ],
    )
    missed = sum(r.verdict != "reproduced" for r in rows)
    return "\n\n".join(
        [
            "## Static measurements (experiments 01-03)",
            "Rule: a number is reproduced when |ours − article| ≤ 4·√2·SEM + half a unit of the "
            "article's last printed digit (the article's estimate is as noisy as ours). Δ/SEM is "
            "(ours − article) / our SEM.",
            table,
            f"{len(rows) - missed} of {len(rows)} reproduced.",
        ]
    )
