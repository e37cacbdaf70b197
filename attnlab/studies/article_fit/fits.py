"""The two fits of experiment 09, as values: what each fits (a family of readings, the
smoothings its milestones are read under), how it chooses the readings to train (its
candidate rule and the flag that sets it), how it names a member, and its CSVs.
``attnlab.studies.article_fit.pipeline`` runs either through the same stages.

The second family (``attnlab.recall.readings.FAMILY_2``, declared before any of its
results) pairs every reading of finer batch-size and d_model grids with a smoothing of the
loss the milestones are read from; a member is named ``<reading>/<smoothing>``. Smoothing
is applied after training, so each reading is trained once for all its smoothings. Its
candidate rule has one cut more than the first's: pass 2a trains only the kept readings
whose screened median also lies within the quality bar (``QUALITY`` of the article's
step-0 norm; a reading outside it misses the bar's first number on the screen's seeds).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlab.harness import cli
from attnlab.recall.readings import (
    FAMILY,
    FAMILY_2_READINGS,
    FIRST_SMOOTHING,
    SMOOTHINGS,
    Reading,
    Smoothing,
    get_reading,
    pair_name,
)
from attnlab.studies.article_fit.compute import Naming, by_reading, candidates, first_member
from attnlab.studies.article_fit.study import (
    ARTICLE_SCALED,
    FIRST_CSVS,
    QUALITY,
    SCORES,
    SCORES_2,
    SCRIPT,
    SCRIPT_2,
    SECOND_CSVS,
    FitCsvs,
)

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


@dataclass(frozen=True)
class Fit:
    """One fit of the training demo's unstated set-up to the article's scaled numbers.

    Attributes:
      number: the experiment's number in progress bars and messages (``"09"``).
      script: its script under ``experiments/``.
      csvs: its four CSVs.
      score_columns: its scores CSV's columns.
      family: the readings it screens.
      smoothings: the smoothings each reading's milestones are read under (one member each).
      naming: a member's name from its reading and smoothing; ``resolve`` is its inverse.
      resolve: the reading and smoothing of a member's name.
      fit_seeds: ``--fit-seeds``' default (seeds per reading in pass 2b).
      finalists: ``--finalists``' default.
      add_flags: adds the fit's own flags to its parser (its candidate rule's:
        ``--candidates`` or ``--pass-a-seeds``).
      candidates: the readings pass 2a trains, from the screen and ``--candidates`` (0:
        every kept reading; the second fit's rule has no such number).
    """

    number: str
    script: str
    csvs: FitCsvs
    score_columns: tuple[str, ...]
    family: tuple[Reading, ...]
    smoothings: tuple[Smoothing, ...]
    naming: Naming
    resolve: Callable[[str], tuple[Reading, Smoothing]]
    fit_seeds: int
    finalists: int
    add_flags: Callable[[argparse.ArgumentParser], None]
    candidates: Callable[[pd.DataFrame, int], list[str]]


def _candidates_flag(parser: argparse.ArgumentParser) -> None:
    cli.add_int_flag(
        parser,
        "--candidates",
        0,
        "stage 2a trains this many kept readings, nearest the article's step-0 norm "
        "first (0: every kept reading)",
        minimum=0,
    )


def _pass_a_seeds_flag(parser: argparse.ArgumentParser) -> None:
    cli.add_int_flag(parser, "--pass-a-seeds", 1, "seeds per reading in pass 2a")


FIRST_FIT = Fit(
    "09",
    SCRIPT,
    FIRST_CSVS,
    tuple(SCORES.columns),
    FAMILY,
    (FIRST_SMOOTHING,),
    by_reading,
    first_member,
    fit_seeds=3,
    finalists=3,
    add_flags=_candidates_flag,
    candidates=candidates,
)

SECOND_FIT = Fit(
    "12",
    SCRIPT_2,
    SECOND_CSVS,
    tuple(SCORES_2.columns),
    FAMILY_2_READINGS,
    SMOOTHINGS,
    pair_name,
    get_pair,
    fit_seeds=5,
    finalists=4,
    add_flags=_pass_a_seeds_flag,
    candidates=lambda screen, _count: pass_a_readings(screen),
)
