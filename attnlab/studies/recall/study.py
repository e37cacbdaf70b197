"""The declaration of study recall (experiment 04): its outputs, their columns and rules
(the training tables' columns, ``attnlab.recall.columns``)."""

from __future__ import annotations

from attnlab.claims import TRAINING_CLAIMS, bind
from attnlab.harness.declaration import Study
from attnlab.recall.columns import training_outputs

SCRIPT = "04_associative_recall.py"
CURVES_CSV = "04_recall_curves.csv"
SUMMARY_CSV = "04_recall_summary.csv"

STUDY = Study(
    "recall",
    2,
    training_outputs(SCRIPT, CURVES_CSV, SUMMARY_CSV),
    figures=("fig3_training",),
    reads=("article_fit",),
    claims=bind(TRAINING_CLAIMS, SUMMARY_CSV),
)
