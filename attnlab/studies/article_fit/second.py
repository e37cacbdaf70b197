"""Experiment 09's second pass: the second family, fitted the first fit's way as a cascade.

The second family (``attnlab.studies.recall.readings.FAMILY_2``, declared before any of its
results) pairs every reading of finer batch-size and d_model grids with a smoothing of the
loss the milestones are read from; a member is named ``<reading>/<smoothing>``. Smoothing
is applied after training, so each reading is trained once for all its smoothings.

The stages are the first fit's (``attnlab.studies.article_fit.compute``: ``screen``,
``fit``, ``predict``), with one cut more: pass 2a trains only the kept readings whose
screened median also lies within the quality bar (``QUALITY`` of the article's step-0
norm; a reading outside it misses the bar's first number on the screen's seeds), and
scores each of them under every smoothing. Pass 2b trains the readings of the best
members until ``finalists`` distinct readings; stage 3 predicts every member within the
noise, its milestones read under its own smoothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.studies.article_fit.compute import ARTICLE_SCALED, QUALITY
from attnlab.studies.article_fit.study import SCORES_2
from attnlab.studies.recall.readings import SMOOTHINGS, Reading, Smoothing, get_reading

SCREEN_2_CSV = "12_second_fit_screen.csv"
SCORES_2_CSV = "12_second_fit_scores.csv"
CURVES_2_CSV = "12_second_fit_prediction_curves.csv.xz"
SUMMARY_2_CSV = "12_second_fit_prediction_summary.csv"
SCORE_2_COLUMNS = SCORES_2.column_names

_SMOOTHING_OF = {s.name: s for s in SMOOTHINGS}


def get_pair(name: str) -> tuple[Reading, Smoothing]:
    """The second family's member ``<reading>/<smoothing>``."""
    reading, _, smoothing = name.rpartition("/")
    if smoothing not in _SMOOTHING_OF:
        raise ValueError(f"unknown smoothing {smoothing!r} in {name!r}")
    return get_reading(reading), _SMOOTHING_OF[smoothing]


def pass_a_readings(screen_frame: pd.DataFrame) -> list[str]:
    """Pass 2a's readings: kept, with the screened scaled median within ``QUALITY`` of the
    article's step-0 norm; nearest it first (ties by name)."""
    frame = screen_frame[screen_frame["kept"].astype(bool)].copy()
    ratio = frame.grad_norm_wq_scaled / ARTICLE_SCALED["grad_norm_wq"]
    frame = frame[np.abs(ratio - 1) <= QUALITY].assign(distance=np.abs(np.log(ratio)))
    return frame.sort_values(["distance", "name"], kind="stable")["name"].tolist()
