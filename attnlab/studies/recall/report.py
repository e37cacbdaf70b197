"""The report's section for experiment 04: the article's training numbers over our seeds,
under each reading of the set-up the article leaves open.

Up to three readings are judged side by side: 04's (``natural`` unless 04 ran with
``--reading``) from ``04_recall_summary.csv``, and the readings experiment 09's two fits
chose on the article's scaled numbers, from their prediction runs (``FITS``: each summary's
``reading`` column also holds every finalist within the score's noise of the best one).
The section's tally counts 04's column; each reading gets its own count line, and the
report's summary a line for each column's reading (``tallies``). A fit whose CSVs are
missing is left out, and the section says how to make them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from attnlab.claims import (
    MEDIAN_FACTOR,
    RECALL_SUMMARY_CSV,
    TRAINING_CLAIMS,
    Claim,
    RatioClaim,
    SeedClaim,
)
from attnlab.harness.headlines import medians
from attnlab.harness.tables import Tables, markdown_table
from attnlab.harness.verdicts import WITHIN, Row, claim_rows, seed_values, tally

FIT_SUMMARY_CSV = "09_fit_prediction_summary.csv"
FIT_CURVES_CSV = "09_fit_prediction_curves.csv.xz"
FIT_2_SUMMARY_CSV = "12_second_fit_prediction_summary.csv"
#: The fits of experiment 09 with a column in the training table: (prediction summary,
#: how the table names it).
FITS = ((FIT_SUMMARY_CSV, "first fit"), (FIT_2_SUMMARY_CSV, "second fit"))
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


def fit_predictions(tables: Tables, csv: str = FIT_SUMMARY_CSV) -> list[Prediction]:
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
    claims = [replace(c, csv=csv) if hasattr(c, "csv") else c for c in TRAINING_CLAIMS]
    return claim_rows(claims, tables), [near(c, tables) for c in claims]


def count_line(title: str, rows: list[Row], nears: list[bool | None]) -> str:
    judged = [r for r in rows if r.kind == "measured"]
    within = sum(r.verdict == WITHIN for r in judged)
    close = sum(bool(n) for r, n in zip(rows, nears, strict=True) if r.kind == "measured")
    return (
        f"- {title}: {within} of {len(judged)} rows within seed range; {close} of "
        f"{len(judged)} with our median within ±{NEAR:.0%} of the article."
    )


def natural_name(tables: Tables) -> str:
    """04's reading: ``natural`` unless 04 ran with ``--reading``."""
    return tables.flags(RECALL_SUMMARY_CSV).get("reading") or "natural"


def fitted_label(tables: Tables, csv: str = FIT_SUMMARY_CSV, fit: str = "first fit") -> str:
    """ "09's first fit `<reading>`", with the name where the fit's sidecar gives one."""
    flags = tables.flags(csv)
    name = flags.get("reading") or next(iter(flags.get("readings") or {}), None)
    return f"09's {fit} `{name}`" if name else f"09's {fit}"


def tallies(tables: Tables) -> list[tuple[str, Callable[[], list[Row]]]]:
    """The report summary's lines of this study: the training claims judged under 04's
    reading and under the best reading of each fit of 09, each its own line."""

    def best(csv: str) -> Callable[[], list[Row]]:
        return lambda: reading_rows(tables, fit_predictions(tables, csv)[0].csv)[0]

    return [
        (f"recall: 04's reading `{natural_name(tables)}`",
         lambda: reading_rows(tables, RECALL_SUMMARY_CSV)[0]),
        *((f"recall: {fitted_label(tables, csv, fit)}", best(csv)) for csv, fit in FITS),
    ]  # fmt: skip


def section(tables: Tables) -> str:
    natural_reading = natural_name(tables)
    natural, natural_near = reading_rows(tables, RECALL_SUMMARY_CSV)
    n_natural = tables.get(RECALL_SUMMARY_CSV, ["seed"]).seed.nunique()
    natural_steps = tables.flags(RECALL_SUMMARY_CSV).get("steps", "?")
    header = [
        "Quantity",
        "Source",
        "Article (one run)",
        f"{natural_reading} (04): median [min, max]",
        "Verdict",
    ]
    cells = [(a.quantity, f"“{a.quote}”", a.article, a.ours, a.verdict) for a in natural]
    counts = [count_line(f"`{natural_reading}` (04)", natural, natural_near)]
    natural_text = f"04's (`{natural_reading}`, {n_natural} seeds, {natural_steps} steps)"
    columns, missing = [], []
    for csv, fit in FITS:
        if not tables.has(csv):
            missing.append(f"the {fit}'s (`{tables.made_by(csv)}`)")
            continue
        best, *also = fit_predictions(tables, csv)
        rows, nears = reading_rows(tables, best.csv)
        n_seeds = tables.get(best.csv, ["seed"]).seed.nunique()
        header += [f"{fit}, {best.reading} (09): median [min, max]", "Verdict"]
        for i, (claim, b) in enumerate(zip(TRAINING_CLAIMS, rows, strict=True)):
            cells[i] += (b.ours + (" (fit)" if seen_by_fit(claim) else ""), b.verdict)
        counts.append(count_line(f"`{best.reading}` (09, {fit}, best)", rows, nears))
        counts += [
            count_line(
                f"`{p.reading}` (09, {fit}, within its noise; {p.steps} steps)",
                *reading_rows(tables, p.csv),
            )  # fmt: skip
            for p in also
        ]
        columns.append(f"the best reading of 09's {fit} (`{best.reading}`, {n_seeds} seeds, "
                       f"{best.steps} steps)")  # fmt: skip
    readings = (
        "Readings of that set-up, each over seeds with identical initialisation and data for "
        f"both variants: {natural_text}"
        + "".join(f"; {c}" for c in columns)
        + (
            ". Each fit chose its reading on the article's scaled numbers alone: *(fit)* marks "
            "the four numbers it was scored on, every other number of its column is a "
            "prediction."
            if columns
            else "."
        )
        + (f" Left out for want of their CSVs: {', '.join(missing)}." if missing else "")
    )
    return "\n\n".join(
        [
            "## Training demo (experiment 04)",
            "The article reports one run and leaves its set-up partly unstated "
            "(`attnlab/studies/recall/README.md`). "
            + readings
            + " A number is *within seed range* when the article's value lies between our "
            "smallest and largest seed (± half its last digit) "
            f"**and** our median is within a factor {MEDIAN_FACTOR:g} of it (*median off* "
            "otherwise); a quantity that only some seeds show (a plateau, a milestone) is "
            "judged *on k of n seeds* when fewer than half show it. Ratios are unscaled / "
            "scaled, paired by seed. Final losses are at each run's last step.",
            markdown_table(header, cells),
            "\n".join(counts),
            f"Tally (04's column): {tally(natural)}",
        ]
    )


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    "04_recall_summary.csv": lambda f: medians(
        f, "variant", "step_loss_below_1", "median step to smoothed loss 1"
    ),
}
