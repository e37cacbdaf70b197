"""The article's training numbers judged under a reading of its set-up: the readings a fit
of experiment 09 predicted (from a prediction CSV and its sidecar), the claims' verdict
rows on one reading's rows, and the count lines. The recall study's report puts 04's
reading beside each fit's best; the fit's own report and Figures 3 and 7 read the same
predictions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from attnlab.claims import TRAINING_CLAIMS, Claim, RatioClaim, SeedClaim, bind
from attnlab.harness.tables import Tables
from attnlab.harness.verdicts import WITHIN, Row, claim_rows, seed_values

#: "Near": our median within this relative distance of the article's number.
NEAR = 0.25
#: The scaled quantities experiment 09's fit was scored on (columns of the summary CSV).
FIT_COLUMNS = ("grad_wq_step0", "step_loss_below_1", "step_loss_below_0p1", "final_loss")


class Prediction(NamedTuple):
    """One reading of 09's prediction run: its name, its rows of the summary CSV (a
    ``Tables`` subset name) and its run length."""

    reading: str
    csv: str
    steps: int | str


def fit_predictions(tables: Tables, csv: str) -> list[Prediction]:
    """The readings 09 predicted from its ``csv`` (summary or curves), the fitted one first;
    the run lengths come from the sidecar."""
    flags = tables.flags(csv)
    best = flags.get("reading", "fitted")
    lengths = flags.get("readings") or {best: flags.get("run_length")}
    # The sidecar's keys are sorted by name; the CSV holds the readings best first.
    order = list(dict.fromkeys(tables.get(csv, ["reading"]).reading)) if tables.has(csv) else []
    names = sorted(lengths, key=lambda n: (n != best, order.index(n) if n in order else len(order)))
    return [Prediction(name, tables.subset(csv, "reading", name), lengths[name] or "?")
            for name in names]  # fmt: skip


def seen_by_fit(claim: Claim) -> bool:
    """Whether 09's fit read this number (a scaled quantity it scores); ratios never."""
    return (
        not isinstance(claim, RatioClaim)
        and getattr(claim, "variant", None) == "scaled"
        and getattr(claim, "column", None) in FIT_COLUMNS
    )


def near(claim: Claim, tables: Tables) -> bool | None:
    """Whether our median lies within ``NEAR`` of the article (None: not a seed claim)."""
    if not isinstance(claim, SeedClaim | RatioClaim):
        return None
    median = float(seed_values(claim, tables).astype(float).median())
    return bool(np.isfinite(median) and abs(median / claim.article - 1) <= NEAR)


def reading_rows(tables: Tables, csv: str) -> tuple[list[Row], list[bool | None]]:
    """The training claims judged on ``csv``: verdict rows and the ±``NEAR`` flags."""
    claims = bind(TRAINING_CLAIMS, csv)
    return claim_rows(claims, tables), [near(c, tables) for c in claims]


def count_line(title: str, rows: list[Row], nears: list[bool | None]) -> str:
    judged = [r for r in rows if r.kind == "measured"]
    within = sum(r.verdict == WITHIN for r in judged)
    close = sum(bool(n) for r, n in zip(rows, nears, strict=True) if r.kind == "measured")
    return (
        f"- {title}: {within} of {len(judged)} rows within seed range; {close} of "
        f"{len(judged)} with our median within ±{NEAR:.0%} of the article."
    )
