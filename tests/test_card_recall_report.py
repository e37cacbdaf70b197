"""attnlab/studies/card/recall_report.py: a milestone never reached reads "never" in the training
table, and a mechanism's name is printed as it is (``trainnan`` stays ``trainnan``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.studies.card.recall_report import _training_lines


def test_a_name_holding_nan_is_kept_and_a_missed_milestone_reads_never():
    training = pd.DataFrame(
        {
            "mechanism": ["trainnan"],
            "grad_wq_step0": [0.5],
            "step_loss_below_1": pd.array([None], dtype="Int64"),
            "step_loss_below_0p1": pd.array([None], dtype="Int64"),
            "final_loss": [2.0],
            "eval_accuracy": [np.nan],
            "diverged_step": pd.array([None], dtype="Int64"),
        }
    )
    row = _training_lines(training, ["trainnan"])[-1]
    assert row.startswith("| trainnan |") and "never (0/1)" in row and "nan" not in row[12:]
