"""Study bench, declared: its one output, timings that ``make verify`` never compares and the
report only names."""

from __future__ import annotations

from attnlab.harness.declaration import Output, Study

STUDY = Study("bench", 10, {"bench.csv": Output("bench.py")}, in_report=False, timing=True)
