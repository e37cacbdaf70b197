"""attnlab/harness/headlines.py and every study's HEADLINES: each names one of its study's
CSVs and gives a line with a number on the committed results; the helpers' formats."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from attnlab.harness.headlines import at_row, counted, medians, span
from attnlab.harness.study_report import study_report
from attnlab.studies import STUDIES, headline

RESULTS = Path(__file__).resolve().parents[1] / "results"
REPORTED = [s for s in STUDIES if s.in_report]


@pytest.mark.parametrize("study", REPORTED, ids=lambda s: s.name)
def test_every_headline_names_its_csv_and_reads_a_number(study):
    headlines = study_report(study).headlines  # not empty: tests/test_study_report.py
    for csv, _ in headlines.items():
        assert csv in study.outputs, csv
        text = headline(Path(csv).name, pd.read_csv(RESULTS / csv))
        assert text and re.search(r"\d", text), (csv, text)


def test_medians_and_at_row():
    frame = pd.DataFrame({"v": ["a", "a", "b", "b"], "x": [1.0, 3.0, float("nan"), None]})
    assert medians(frame, "v", "x", "median x") == "median x: a 2, b never"
    table = pd.DataFrame({"d_k": [4, 64], "s": [0.5, 7.9774], "p": [2.0, 8.0]})
    assert at_row(table, {"d_k": 64}, {"s": "std", "p": "predicted"}, 5) == (
        "at d_k 64: std 7.9774, predicted 8"
    )
    assert at_row(table, {"d_k": 1}, {"s": "std"}) == ""


def test_a_csv_without_a_headline_has_none():
    assert headline("04_recall_curves.csv", pd.DataFrame()) is None
    assert headline("not_a_result.csv", pd.DataFrame()) is None


def test_02s_headline_reads_the_exact_sampler_where_the_run_has_no_other():
    """02 --sampler exact ended its line in an empty summary ("... at d_k 256: ")."""
    exact = pd.DataFrame({"d_k": [4, 16, 16], "sampler": "exact",
                          "variant": ["scaled", "scaled", "unscaled"],
                          "max_weight_mean": [0.1, 0.04, 0.5]})  # fmt: skip
    text = headline("02_saturation_sweep.csv", exact)
    assert text == "mean max weight at d_k 16: scaled 0.04, unscaled 0.5"
    both = pd.concat([exact, exact.assign(sampler="direct", max_weight_mean=0.3)])
    assert headline("02_saturation_sweep.csv", both).endswith("scaled 0.3, unscaled 0.3")


def test_a_span_of_equal_values_is_one_value_and_counts_agree_in_number():
    """Issue 68's wording glitches: "37%-37% of heads" and "1 seeds"."""
    assert span([0.37, 0.37], ".0%") == "37%"
    assert span(pd.Series([0.4, 0.02, 0.37]), ".0%") == "2%-40%"
    assert span([500, 250], "d") == "250-500"  # integers keep their format
    assert span([2.0, 3.0], lambda x: f"{x:g} tau") == "2 tau-3 tau"
    assert [counted(n, "seed") for n in (0, 1, 2)] == ["0 seeds", "1 seed", "2 seeds"]
