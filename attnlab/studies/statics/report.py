"""The report's section for experiments 01-03: every static number of article 004."""

from __future__ import annotations

import pandas as pd

from attnlab.claims import ABOUT
from attnlab.core.curves import crossing_dk
from attnlab.harness.headlines import at_row, medians
from attnlab.harness.tables import Tables
from attnlab.harness.verdicts import Check, claim_rows, claims_block
from attnlab.studies.statics.study import CLAIMS, JACOBIAN_CSV, LOGIT_CSV, SATURATION_CSV


def _three_quarters(tables: Tables) -> tuple[str, str, bool]:
    """Unscaled max weight at d_k >= 64: "roughly three quarters or more" (ABOUT below)."""
    frame = tables.get(SATURATION_CSV, ["variant", "d_k", "max_weight_mean", "max_weight_sem"])
    rows = frame[(frame.variant == "unscaled") & (frame.d_k >= 64)]
    low = rows.loc[rows.max_weight_mean.idxmin()]
    ours = f"min {low.max_weight_mean:.3f} ± {low.max_weight_sem:.3f} at d_k = {int(low.d_k)}"
    return ours, f"≥ 0.75 × (1 − {ABOUT:g})", bool(low.max_weight_mean >= 0.75 * (1 - ABOUT))


def _unscaled_minus_scaled(tables: Tables) -> pd.DataFrame:
    frame = tables.get(JACOBIAN_CSV, ["variant", "d_k", "jacobian_fro_mean"])
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
    "three_quarters_at_production": _three_quarters,
    "jacobian_peak": _jacobian_peak,
    "jacobian_crossing": _jacobian_crossing,
}


def section(tables: Tables) -> str:
    rows = claim_rows(CLAIMS, tables, CHECKS)
    return "\n\n".join(
        [
            "## Static measurements (experiments 01-03)",
            "Rules (`docs/verdicts.md`): a Monte-Carlo number is reproduced when "
            "|ours − article| ≤ 4·√2·SEM + half a unit of the article's last printed digit "
            "(the article's estimate is as noisy as ours); Δ/SEM is (ours − article) / our "
            'SEM. A bound ("within 0.5%") is judged against the bound itself, on a '
            "high-precision column: reproduced when |x| + 4 SE ≤ bound at every row, missed "
            "when |x| − 4 SE > bound at some row, else undecided. Identities are the "
            "article's arithmetic, shown and never counted.",
            claims_block(rows),
        ]
    )


def headline_sampler(frame) -> str:
    """The sampler a headline reads: ``direct`` where the run has it, else the run's own
    (``--sampler exact`` alone gave an empty headline)."""
    return "direct" if (frame.sampler == "direct").any() else frame.sampler.iloc[0]


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    LOGIT_CSV: lambda f: at_row(
        f, {"d_k": 64}, {"std_measured": "std(q.k)", "std_predicted": "predicted"}, 5
    ),
    SATURATION_CSV: lambda f: medians(
        f[(f.d_k == f.d_k.max()) & (f.sampler == headline_sampler(f))],
        "variant",
        "max_weight_mean",
        f"mean max weight at d_k {f.d_k.max()}",
    ),
    JACOBIAN_CSV: lambda f: medians(
        f[(f.d_k == f.d_k.max()) & (f.sampler == headline_sampler(f))],
        "variant",
        "jacobian_fro_mean",
        f"mean Jacobian norm at d_k {f.d_k.max()}",
    ),
}
