"""Verdict rules: one report row per article claim, by the rule of the claim's type.

Each rule is as strict as the claim it judges (``attnlab.claims`` defines the types and the
constants; ``docs/verdicts.md`` states the same rules):

- ``CellClaim`` (a Monte-Carlo mean): *reproduced* when
  ``|ours - article| <= 4 sqrt(2) SEM + half a unit of the article's last printed digit``
  (the article's estimate is as noisy as ours, hence sqrt(2)); else *miss*.
- ``BoundClaim`` ("|x| <= b on every row"): judged on the high-precision column, by
  ``max_i (|x_i| + 4 SE_i) <= b`` -> *reproduced*, ``max_i (|x_i| - 4 SE_i) > b`` -> *miss*,
  otherwise *undecided* (our error too large to decide). The article's sample size is
  shown beside it.
- ``SeedClaim`` / ``RatioClaim`` (the article's single run against our seeds): with ``k`` of
  ``n`` seeds showing the quantity (a milestone reached, a plateau found),
  *on k of n seeds* when ``k < n / 2``; else *within seed range* when the article's number
  lies in ``[min, max]`` of ours (± half its last digit) **and** our median is within a
  factor ``MEDIAN_FACTOR`` of it; else *outside seed range* or *median off*.
- ``CheckClaim``: the study's check function decides; *reproduced* / *miss* for a measured
  claim, *holds* / *fails* for a qualitative one.
- ``IdentityClaim``: our value of the article's arithmetic, marked *identity*; never counted.

``tally`` counts each section's rows as reproduced, missed (miss, fails-to-reproduce,
undecided, on a minority of seeds), identities and qualitative (holds / fails).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlab.claims import (
    MEDIAN_FACTOR,
    SEM_MULTIPLE,
    BoundClaim,
    CellClaim,
    CheckClaim,
    Claim,
    IdentityClaim,
    Kind,
    RatioClaim,
    SeedClaim,
)
from attnlab.harness.tables import Tables, fmt, markdown_table, select

#: A check: tables -> (our value as text, detail, whether the claim holds).
Check = Callable[[Tables], tuple[str, str, bool]]

REPRODUCED = "reproduced"
MISS = "**miss**"
UNDECIDED = "undecided"
WITHIN = "within seed range"
OUTSIDE = "**outside seed range**"
MEDIAN_OFF = "**median off**"
HOLDS = "holds"
FAILS = "**fails**"
IDENTITY = "identity"


@dataclass(frozen=True)
class Row:
    """One line of a report table."""

    section: str
    quantity: str
    article: str
    ours: str
    deviation: str
    tolerance: str
    verdict: str
    kind: Kind = "measured"
    quote: str = ""


def tolerance(claim: CellClaim, sem: float) -> float:
    """``4 sqrt(2) SEM`` plus half a unit of the article's last printed digit."""
    return SEM_MULTIPLE * math.sqrt(2.0) * sem + claim.half_unit


def cell_verdict(claim: CellClaim, ours: float, sem: float) -> str:
    return REPRODUCED if abs(ours - claim.article) <= tolerance(claim, sem) else MISS


def cell_row(claim: CellClaim, tables: Tables) -> Row:
    """Compare a Monte-Carlo cell with the article's number by the tolerance rule."""
    mean_col, sem_col = claim.mean_column, claim.sem_column
    frame = select(tables.get(claim.csv, [mean_col, sem_col]), claim.where)
    if len(frame) != 1:
        missing = f"missing: run `{tables.made_by(claim.csv)}` with its defaults"
        return _row(claim, "not measured", "", "", missing)
    ours, sem = float(frame[mean_col].iloc[0]), float(frame[sem_col].iloc[0])
    diff = ours - claim.article
    return _row(
        claim,
        f"{fmt(ours)} ± {fmt(sem, 2)}",
        f"{diff / sem:+.1f}" if sem > 0 else "",
        f"± {fmt(tolerance(claim, sem), 2)}",
        cell_verdict(claim, ours, sem),
    )


def bound_verdict(bound: float, values: np.ndarray, ses: np.ndarray) -> str:
    """Reproduced if ``|x| + 4 SE <= bound`` on every row, miss if ``|x| - 4 SE > bound``
    on some row, else undecided."""
    values, ses = np.abs(np.asarray(values, float)), np.asarray(ses, float)
    if np.all(values + SEM_MULTIPLE * ses <= bound):
        return REPRODUCED
    if np.any(values - SEM_MULTIPLE * ses > bound):
        return MISS
    return UNDECIDED


def bound_row(claim: BoundClaim, tables: Tables) -> Row:
    """A bound on every row, decided by the high-precision column."""
    columns = [claim.by, claim.column, claim.se_column, claim.headline, claim.headline_se]
    frame = tables.get(claim.csv, columns)
    band = frame[(frame[claim.by] >= claim.low) & (frame[claim.by] <= claim.high)]
    worst = band.loc[band[claim.column].abs().idxmax()]
    head = band.loc[band[claim.headline].abs().idxmax()]
    ours = (
        f"max {100 * abs(worst[claim.column]):.3f}% ± {100 * worst[claim.se_column]:.3f}% "
        f"at {claim.by} = {worst[claim.by]:g}; at the article's sample size max "
        f"{100 * abs(head[claim.headline]):.2f}% ± {100 * head[claim.headline_se]:.2f}% "
        f"at {claim.by} = {head[claim.by]:g}"
    )
    verdict = bound_verdict(claim.bound, band[claim.column], band[claim.se_column])
    return _row(claim, ours, "", "|x| ± 4 SE vs the bound", verdict)


def seed_verdict(article: float, decimals: int, values: pd.Series) -> str:
    """The seed-range rule (see the module docstring) over one value per seed."""
    present = values.dropna().astype(float)
    if len(present) < len(values) / 2:
        return f"on {len(present)} of {len(values)} seeds"
    if not in_range(article, float(present.min()), float(present.max()), decimals):
        return OUTSIDE
    median = float(present.median())
    if article != 0 and not 1 / MEDIAN_FACTOR <= median / article <= MEDIAN_FACTOR:
        return MEDIAN_OFF
    return WITHIN


def seed_spread(values: pd.Series, digits: int = 4) -> tuple[str, float, float] | None:
    """``median [min, max]`` of the non-empty values (with a count if some are empty)."""
    present = values.dropna().astype(float)
    if present.empty:
        return None
    low, mid, high = (fmt(x, digits) for x in (present.min(), present.median(), present.max()))
    text = f"{mid} [{low}, {high}]"
    if len(present) < len(values):
        text += f" ({len(present)}/{len(values)} seeds)"
    return text, float(present.min()), float(present.max())


def spread_text(values: pd.Series, digits: int = 3) -> str:
    """``median [min, max]`` over seeds, or "never" when no seed has a value."""
    spread = seed_spread(values, digits)
    return "never" if spread is None else spread[0]


def in_range(article: float, low: float, high: float, decimals: int) -> bool:
    """Whether ``article`` lies in ``[low, high]``, widened by half its last digit."""
    half = 0.5 * 10.0 ** (-decimals)
    return low - half <= article <= high + half


def _range_row(claim: SeedClaim | RatioClaim, values: pd.Series, digits: int) -> Row:
    spread = seed_spread(values, digits)
    text = "never (no seed)" if spread is None else spread[0]
    verdict = seed_verdict(claim.article, claim.decimals, values)
    return _row(claim, text, "", f"range, median ×{MEDIAN_FACTOR:g}", verdict)


def seed_values(claim: SeedClaim | RatioClaim, tables: Tables) -> pd.Series:
    """Our value per seed of a seed claim (one column of one variant) or a ratio claim
    (``numerator / denominator / divide_by`` of one column, paired by seed)."""
    frame = tables.get(claim.csv, ["variant", "seed", claim.column])
    if isinstance(claim, SeedClaim):
        return frame[frame.variant == claim.variant][claim.column]
    wide = frame.pivot(index="seed", columns="variant", values=claim.column).astype(float)
    return wide[claim.numerator] / wide[claim.denominator] / claim.divide_by


def seed_row(claim: SeedClaim, tables: Tables) -> Row:
    """One column of one variant, over seeds."""
    return _range_row(claim, seed_values(claim, tables), 4)


def ratio_row(claim: RatioClaim, tables: Tables) -> Row:
    """Per-seed ratios ``numerator / denominator / divide_by`` of one column."""
    return _range_row(claim, seed_values(claim, tables), 3)


def check_row(claim: CheckClaim, tables: Tables, checks: Mapping[str, Check]) -> Row:
    """Judge a statement by ``checks[claim.check]``."""
    ours, detail, ok = checks[claim.check](tables)
    if claim.kind == "qualitative":
        verdict = HOLDS if ok else FAILS
    else:
        verdict = REPRODUCED if ok else MISS
    return _row(claim, ours, "", detail, verdict)


def identity_row(claim: IdentityClaim) -> Row:
    """The article's arithmetic beside ours; never counted as a reproduction."""
    agrees = in_range(claim.value, claim.article, claim.article, claim.decimals)
    detail = "agrees to the printed digits" if agrees else "differs from the printed digits"
    return _row(claim, f"{claim.value:.6g}", "", detail, IDENTITY)


def _row(claim: Claim, ours: str, deviation: str, tol: str, verdict: str) -> Row:
    article = getattr(claim, "article_text", None) or str(claim.article)
    return Row(
        claim.section,
        claim.quantity,
        article,
        ours,
        deviation,
        tol,
        verdict,
        claim.kind,
        claim.quote,
    )


def claim_rows(
    claims: Sequence[Claim], tables: Tables, checks: Mapping[str, Check] | None = None
) -> list[Row]:
    """One row per claim, by the rule of its type; ``checks`` serve the check claims."""
    rows = []
    for claim in claims:
        if isinstance(claim, CheckClaim):
            rows.append(check_row(claim, tables, checks or {}))
        elif isinstance(claim, IdentityClaim):
            rows.append(identity_row(claim))
        elif isinstance(claim, CellClaim):
            rows.append(cell_row(claim, tables))
        elif isinstance(claim, BoundClaim):
            rows.append(bound_row(claim, tables))
        elif isinstance(claim, SeedClaim):
            rows.append(seed_row(claim, tables))
        else:
            rows.append(ratio_row(claim, tables))
    return rows


def counts(rows: Sequence[Row]) -> dict[str, int]:
    """How many rows were reproduced, missed, identities, and qualitative holds / fails."""
    measured = [r for r in rows if r.kind == "measured"]
    qualitative = [r for r in rows if r.kind == "qualitative"]
    reproduced = sum(r.verdict in (REPRODUCED, WITHIN) for r in measured)
    return {
        "reproduced": reproduced,
        "missed": len(measured) - reproduced,
        "identities": sum(r.kind == "identity" for r in rows),
        "holds": sum(r.verdict == HOLDS for r in qualitative),
        "fails": sum(r.verdict != HOLDS for r in qualitative),
    }


def tally(rows: Sequence[Row]) -> str:
    """One line: ``"a of m measured reproduced, b missed; q qualitative (h hold, f fail);
    i identities (shown, not counted)"``."""
    c = counts(rows)
    parts = [f"{c['reproduced']} of {c['reproduced'] + c['missed']} measured reproduced"]
    parts[0] += f", {c['missed']} missed"
    if c["holds"] + c["fails"]:
        parts.append(
            f"{c['holds'] + c['fails']} qualitative ({c['holds']} hold, {c['fails']} fail)"
        )
    if c["identities"]:
        noun = "identity" if c["identities"] == 1 else "identities"
        parts.append(f"{c['identities']} {noun} (shown, not counted)")
    return "; ".join(parts) + "."


CLAIM_HEADER = ("Section", "Quantity", "Source", "Article", "Ours", "Δ/SEM", "Rule", "Verdict")


def claims_block(rows: Sequence[Row]) -> str:
    """The claims table (one row per claim, its source quoted) and its tally line."""
    cells = [
        (
            r.section,
            r.quantity,
            f"“{r.quote}”",
            r.article,
            r.ours,
            r.deviation,
            r.tolerance,
            r.verdict,
        )
        for r in rows
    ]
    return markdown_table(CLAIM_HEADER, cells) + "\n\n" + tally(rows)
