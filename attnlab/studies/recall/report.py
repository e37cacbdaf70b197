"""The report's section for experiment 04: the article's training numbers over our seeds."""

from __future__ import annotations

from attnlab.claims import MEDIAN_FACTOR, RECALL_SUMMARY_CSV, TRAINING_CLAIMS
from attnlab.harness.tables import Tables, markdown_table
from attnlab.harness.verdicts import claim_rows, tally


def section(tables: Tables) -> str:
    rows = claim_rows(TRAINING_CLAIMS, tables)
    header = ["Quantity", "Source", "Article (one run)", "Ours: median [min, max]", "Verdict"]
    summary = tables.get(RECALL_SUMMARY_CSV, ["seed"])
    table = markdown_table(
        header, [(r.quantity, f"“{r.quote}”", r.article, r.ours, r.verdict) for r in rows]
    )
    return "\n\n".join(
        [
            "## Training demo (experiment 04)",
            f"The article reports one run; we report {summary.seed.nunique()} seeds with identical "
            "initialisation and data for both variants. A number is *within seed range* when the "
            "article's value lies between our smallest and largest seed (± half its last digit) "
            f"**and** our median is within a factor {MEDIAN_FACTOR:g} of it (*median off* "
            "otherwise); a quantity that only some seeds show (a plateau, a milestone) is "
            "judged *on k of n seeds* when fewer than half show it. Ratios are unscaled / "
            "scaled, paired by seed. See README for the settings the article leaves open and "
            "why our absolute step counts differ.",
            table,
            tally(rows),
        ]
    )
