"""Study card, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.core.temperature import BUILTINS
from attnlab.harness.declaration import Output, Study

#: Every card of a run side by side (``make cards``: every built-in).
COMPARISON_CSV = "cards/comparison.csv"

STUDY = Study(
    "card",
    9,
    {
        COMPARISON_CSV: Output("11_mechanism_card.py"),
    },
    figures=("fig10_cards",),
    arguments="--mechanism " + " ".join(BUILTINS),
)
