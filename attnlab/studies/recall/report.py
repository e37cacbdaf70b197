"""The report's section for experiment 04: the article's training numbers over our seeds."""

from __future__ import annotations

from attnlab.claims import TRAINING_CLAIMS
from attnlab.harness.tables import Tables, markdown_table
from attnlab.harness.verdicts import claim_rows


def section(tables: Tables) -> str:
    rows = claim_rows(TRAINING_CLAIMS, tables)
    header = ["Quantity", "Article (one run)", "Ours: median [min, max] over seeds", "Verdict"]
    summary = tables.get("04_recall_summary.csv", ["seed"])
    table = markdown_table(header, [(r.quantity, r.article, r.ours, r.verdict) for r in rows])
    return "\n\n".join(
        [
            "## Training demo (experiment 04)",
            f"The article reports one run; we report {summary.seed.nunique()} seeds with identical "
            "initialisation and data for both variants. A number is *within seed range* when the "
            "article's value lies between our smallest and largest seed (± half its last digit). "
            "Ratios are unscaled / scaled, paired by seed. See README for the settings the article "
            "leaves open and why our absolute step counts differ.",
            table,
        ]
    )
