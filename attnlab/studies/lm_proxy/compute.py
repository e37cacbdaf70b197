"""Experiment 14's computation: the learning-rate sweep of a byte-level causal LM per
mechanism and width (``attnlab.lm.train``), its tables (``attnlab.lm.sweep``), and
who owns the attention temperature in the trained weights at the best rate and at
``DRIFT_FACTOR`` times it.

Each (mechanism, width) is one ``Piece`` (``attnlab.harness.workers``): its rates and seeds
are lanes of one compiled program, and its tables do not depend on how many workers run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef, resolve
from attnlab.harness.workers import Piece
from attnlab.lm.export import Saved
from attnlab.lm.sweep import curve_rows, ownership_rows, sweep_rows
from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.lm.train import LMConfig, split_text, train_lanes
from attnlab.studies.lm_proxy.checkpoints import best_model
from attnlab.studies.lm_proxy.study import (
    DRIFT_FACTOR,
    LAYOUT,
    LRS,
    ONE_WIDTH,
    ONE_WIDTH_D_MODEL,
    RECORD_EVERY,
    SWEPT,
    WIDTHS,
    checkpoint_name,
)


@dataclass(frozen=True)
class ProxyConfig:
    """The sweep: ``swept`` at every width of ``widths``, ``one_width`` at
    ``one_width_d_model``, each at every rate of ``lrs`` on ``seeds`` seeds from ``seed``;
    ``lm`` the rest of the set-up (its ``d_model`` replaced by each width); ``layout`` that
    of the saved models (a key of ``attnlab.lm.export.LAYOUTS``). The mechanisms
    are resolved where they enter (``resolve``: the flags, the defaults here), each a
    ``MechanismRef`` that the pieces carry to the model."""

    lm: LMConfig = field(default_factory=LMConfig)
    widths: tuple[int, ...] = WIDTHS
    swept: tuple[MechanismRef, ...] = tuple(map(resolve, SWEPT))
    one_width: tuple[MechanismRef, ...] = tuple(map(resolve, ONE_WIDTH))
    one_width_d_model: int = ONE_WIDTH_D_MODEL
    lrs: tuple[float, ...] = LRS
    seeds: int = 1
    seed: int = 0
    layout: str = LAYOUT

    @property
    def seed_values(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))

    def cells(self) -> list[tuple[MechanismRef, int]]:
        """Every (mechanism, d_model) swept, in table order."""
        cells = [(m, d) for m in self.swept for d in self.widths]
        return cells + [(m, self.one_width_d_model) for m in self.one_width if m not in self.swept]

    def width(self, d_model: int) -> LMConfig:
        return replace(self.lm, d_model=d_model)


def cost(config: ProxyConfig, d_model: int) -> float:
    """A piece's expected cost, in lane-steps of d_model 64 (parameters grow as d^2)."""
    lanes = len(config.lrs) * config.seeds
    return lanes * config.lm.steps * (d_model / 64) ** 2


def pieces(config: ProxyConfig, tokens: np.ndarray) -> list[Piece]:
    """One piece per cell; its units are its lane-steps (the progress bar's)."""
    units = len(config.lrs) * config.seeds * config.lm.steps
    return [
        Piece(sweep_cell, (config, reference, d, tokens), units, cost(config, d))
        for reference, d in config.cells()
    ]


def sweep_cell(
    config: ProxyConfig,
    reference: MechanismRef,
    d_model: int,
    tokens: np.ndarray,
    on_progress: Progress,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Saved | None]:
    """One cell's rows of the sweep, curves and ownership tables, and at
    ``one_width_d_model`` with learned positions its model at the best rate (``Saved``)."""
    mechanism = reference.mechanism
    lm = config.width(d_model)
    split = split_text(tokens, lm)
    result = train_lanes(lm, mechanism, list(config.lrs), list(config.seed_values), split,
                         on_progress)  # fmt: skip
    sweep = sweep_rows(result)
    ownership = ownership_rows(result, sweep, split, mechanism, DRIFT_FACTOR)
    saved = None
    if d_model == config.one_width_d_model and lm.positions == "learned":
        best, _ = best_lane_rates(sweep, DRIFT_FACTOR)
        saved = best_model(result, best, mechanism, reference.text, config.layout)
    return sweep, curve_rows(result, RECORD_EVERY), ownership, saved


def saved_names(config: ProxyConfig) -> list[str]:
    """The checkpoints the sweep saves (``sweep_cell``): each mechanism's at
    ``one_width_d_model``, with learned positions only; their paths are checked before
    any work (``cli.check_outputs``)."""
    if config.lm.positions != "learned":
        return []
    return [checkpoint_name(reference.mechanism.name, d) for reference, d in config.cells()
            if d == config.one_width_d_model]  # fmt: skip


def tables(
    results: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Saved | None]],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[Saved]]:
    """The pieces' rows joined: the sweep, curves and ownership tables; the saved models."""
    *frames, saved = zip(*results, strict=True)
    joined = (pd.concat(part, ignore_index=True) for part in frames)
    return (*joined, [s for s in saved if s is not None])
