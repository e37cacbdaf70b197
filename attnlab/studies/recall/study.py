"""The declaration of study recall (experiment 04): its outputs, their columns and rules
(the training tables' columns, ``attnlab.training.columns``)."""

from __future__ import annotations

from attnlab.harness.declaration import Output, Study
from attnlab.training.columns import CURVES, SUMMARY

SCRIPT = "04_associative_recall.py"

STUDY = Study(
    "recall",
    2,
    {
        "04_recall_curves.csv": Output(SCRIPT, CURVES, curve_step="step"),
        "04_recall_summary.csv": Output(SCRIPT, SUMMARY),
    },
    figures=("fig3_training",),
    reads=("article_fit",),
    claims="TRAINING_CLAIMS",
)
