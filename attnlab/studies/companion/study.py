"""Study companion, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import BEYOND, EXACT, KEY, SE, Output, Study, mean

CLAIMS = Output(
    "08_companion_claims.py",
    {
        "claim": KEY,
        "quantity": KEY,
        "setting": KEY,
        "value": mean("sem"),
        "sem": SE,
        "predicted": EXACT,
    },
    out_flag="--out",
)

STUDY = Study(
    "companion",
    8,
    {
        "08_companion_claims.csv": CLAIMS,
    },
    claims="COMPANION_CLAIMS",
    part=BEYOND,
)
