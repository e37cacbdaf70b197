"""Verdict rules: one report row per article claim (see ``attnlab.claims`` for the kinds).

- ``CellClaim`` (a Monte-Carlo mean): reproduced when
  ``|ours - article| <= 4 sqrt(2) SEM + half a unit of the article's last printed digit``.
- ``DerivedClaim`` (a statement about a whole curve): reproduced when the study's check
  function, looked up by the claim's ``check`` name, says so.
- ``SeedClaim`` / ``RatioClaim`` (the article's single training run): within seed range
  when the article's number lies in ``[min, max]`` of ours over seeds (± half its last
  digit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from attnlab.claims import SEM_MULTIPLE, CellClaim, DerivedClaim, RatioClaim, SeedClaim
from attnlab.harness.tables import Tables, fmt, select

#: A derived check: tables -> (our value as text, detail, verdict).
Check = Callable[[Tables], tuple[str, str, bool]]


@dataclass(frozen=True)
class Row:
    """One line of the report's table."""

    section: str
    quantity: str
    article: str
    ours: str
    deviation: str
    tolerance: str
    verdict: str


def tolerance(claim: CellClaim, sem: float) -> float:
    """``4 sqrt(2) SEM`` plus half a unit of the article's last printed digit."""
    return SEM_MULTIPLE * math.sqrt(2.0) * sem + claim.half_unit


def cell_row(claim: CellClaim, tables: Tables) -> Row:
    """Compare a Monte-Carlo cell with the article's number by the tolerance rule."""
    mean_col, sem_col = claim.mean_column, claim.sem_column
    frame = select(tables.get(claim.csv, [mean_col, sem_col]), claim.where)
    if len(frame) != 1:
        return Row(
            claim.section,
            claim.quantity,
            claim.article_text,
            "not measured",
            "",
            "",
            f"missing: run `{tables.made_by(claim.csv)}` with its defaults",
        )
    ours, sem = float(frame[mean_col].iloc[0]), float(frame[sem_col].iloc[0])
    tol = tolerance(claim, sem)
    diff = ours - claim.article
    return Row(
        claim.section,
        claim.quantity,
        claim.article_text,
        f"{fmt(ours)} ± {fmt(sem, 2)}",
        f"{diff / sem:+.1f}" if sem > 0 else "",
        f"± {fmt(tol, 2)}",
        "reproduced" if abs(diff) <= tol else "**miss**",
    )


def derived_row(claim: DerivedClaim, tables: Tables, checks: Mapping[str, Check]) -> Row:
    """Judge a statement about a curve by ``checks[claim.check]``."""
    ours, detail, ok = checks[claim.check](tables)
    return Row(
        claim.section,
        claim.quantity,
        claim.article,
        ours,
        "",
        detail,
        "reproduced" if ok else "**miss**",
    )


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
    """The article's single run against our median [min, max] of ``values`` over seeds."""
    spread = seed_spread(values, digits)
    if spread is None:
        verdict, text = "**miss**", "never (no seed)"
    else:
        text, low, high = spread
        inside = in_range(claim.article, low, high, claim.decimals)
        verdict = "within seed range" if inside else "**outside seed range**"
    return Row(claim.section, claim.quantity, claim.article_text, text, "", "", verdict)


def seed_row(claim: SeedClaim, tables: Tables) -> Row:
    """One column of one variant, over seeds."""
    frame = tables.get(claim.csv, ["variant", "seed", claim.column])
    return _range_row(claim, frame[frame.variant == claim.variant][claim.column], 4)


def ratio_row(claim: RatioClaim, tables: Tables) -> Row:
    """Per-seed ratios ``numerator / denominator`` of one column."""
    frame = tables.get(claim.csv, ["variant", "seed", claim.column])
    wide = frame.pivot(index="seed", columns="variant", values=claim.column).astype(float)
    return _range_row(claim, wide[claim.numerator] / wide[claim.denominator], 3)


def claim_rows(
    claims: Sequence[object], tables: Tables, checks: Mapping[str, Check] | None = None
) -> list[Row]:
    """One row per claim, by the rule of its kind; ``checks`` serve the derived claims."""
    rows = []
    for claim in claims:
        if isinstance(claim, DerivedClaim):
            rows.append(derived_row(claim, tables, checks or {}))
        elif isinstance(claim, CellClaim):
            rows.append(cell_row(claim, tables))
        elif isinstance(claim, SeedClaim):
            rows.append(seed_row(claim, tables))
        else:
            rows.append(ratio_row(claim, tables))
    return rows
