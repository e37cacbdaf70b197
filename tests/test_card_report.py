"""The report's card section (``attnlab.studies.card.report``): the attention sink per
built-in, read from its cards' tables; a dash where a card lacks them."""

from __future__ import annotations

import pandas as pd

from attnlab.harness.tables import Tables
from attnlab.studies.card.report import sink_lines


def test_sink_lines_read_the_lm_ownership_and_the_recall_drift(tmp_path):
    """Two of four LM heads above 0.3 at the best rate (the drifted rows and the baseline's
    left out), the
    mean first-position and null weights; the recall card's readings at alpha 1; the other
    mechanism's cards lack the columns (made before them), so dashes."""
    lm = tmp_path / "cards" / "sink" / "lm"
    lm.mkdir(parents=True)
    pd.DataFrame({
        "mechanism": ["sink"] * 5 + ["scaled"],
        "weights": ["best"] * 4 + ["drifted", "best"],
        "d_model": [32, 32, 64, 64, 64, 64],
        "first_weight": [0.5, 0.1, 0.4, 0.2, 0.9, 0.9],
        "null_weight": [0.2, 0.2, 0.4, 0.4, 0.0, 0.0],
        "sink_head": [True, False, True, False, True, True],
    }).to_csv(lm / "lm_ownership.csv", index=False)  # fmt: skip
    drift = {"alpha": [1.0, 4.0], "first_weight_mean": [0.0625, 0.5],
             "null_weight_mean": [0.25, 0.1]}  # fmt: skip
    pd.DataFrame(drift).to_csv(lm.parent / "drift.csv", index=False)
    old = tmp_path / "cards" / "scaled" / "lm"
    old.mkdir(parents=True)
    pd.DataFrame({"weights": ["best"], "d_model": [32]}).to_csv(old / "lm_ownership.csv",
                                                                index=False)  # fmt: skip
    lines = sink_lines(Tables(tmp_path, lambda name: "make cards"), ["sink", "scaled"])
    assert "| sink | 2 of 4 | 0.300 | 0.300 | 0.062 | 0.250 |" in lines
    assert "| scaled | — | — | — | — | — |" in lines
