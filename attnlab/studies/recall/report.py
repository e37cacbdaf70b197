"""The report's section for experiment 04: the article's training numbers over our seeds,
under each reading of the set-up the article leaves open.

Up to three readings are judged side by side: 04's (``natural`` unless 04 ran with
``--reading``) from ``04_recall_summary.csv``, and the readings experiment 09's two fits
chose on the article's scaled numbers, from their prediction runs (``FITS``, the declared
predictions: each summary's ``reading`` column also holds every finalist within the
score's noise of the best one).
The section's tally counts 04's column; each reading gets its own count line, and the
report's summary a line for each column's reading (``tallies``). A fit whose CSVs are
missing is left out, and the section says how to make them.
"""

from __future__ import annotations

from collections.abc import Callable

from attnlab.claims import MEDIAN_FACTOR, TRAINING_CLAIMS
from attnlab.harness.headlines import medians
from attnlab.harness.study_report import Tally
from attnlab.harness.tables import Tables, markdown_table
from attnlab.harness.verdicts import Row, tally
from attnlab.recall.predictions import count_line, fit_predictions, reading_rows, seen_by_fit
from attnlab.studies import predictions
from attnlab.studies.recall.study import SUMMARY_CSV

#: The fits of experiment 09 with a column in the training table: (prediction summary,
#: how the table names it).
FITS = predictions("summary")


def natural_name(tables: Tables) -> str:
    """04's reading: ``natural`` unless 04 ran with ``--reading``."""
    return tables.flags(SUMMARY_CSV).get("reading") or "natural"


def fitted_label(tables: Tables, csv: str, fit: str) -> str:
    """ "09's first fit `<reading>`", with the name where the fit's sidecar gives one."""
    flags = tables.flags(csv)
    name = flags.get("reading") or next(iter(flags.get("readings") or {}), None)
    return f"09's {fit} `{name}`" if name else f"09's {fit}"


def tallies(tables: Tables) -> list[Tally]:
    """The report summary's lines of this study: the training claims judged under 04's
    reading and under the best reading of each fit of 09, each its own line."""

    def best(csv: str) -> Callable[[], list[Row]]:
        return lambda: reading_rows(tables, fit_predictions(tables, csv)[0].csv)[0]

    return [
        (f"recall: 04's reading `{natural_name(tables)}`",
         lambda: reading_rows(tables, SUMMARY_CSV)[0]),
        *((f"recall: {fitted_label(tables, csv, fit)}", best(csv)) for csv, fit in FITS),
    ]  # fmt: skip


def section(tables: Tables) -> str:
    natural_reading = natural_name(tables)
    natural, natural_near = reading_rows(tables, SUMMARY_CSV)
    n_natural = tables.get(SUMMARY_CSV, ["seed"]).seed.nunique()
    natural_steps = tables.flags(SUMMARY_CSV).get("steps", "?")
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
    SUMMARY_CSV: lambda f: medians(
        f, "variant", "step_loss_below_1", "median step to smoothed loss 1"
    ),
}
