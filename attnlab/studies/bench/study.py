"""Study bench, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import Output, Study

STUDY = Study(
    "bench",
    10,
    {
        "bench.csv": Output("bench.py"),
    },
    in_report=False,
    timing=True,
)
