"""Experiment 14's computation: the learning-rate sweep of a byte-level causal LM per
mechanism and width (``attnlab.lm.train``), its tables (``attnlab.lm.sweep``), and
who owns the attention temperature in the trained weights at the best rate and at
``DRIFT_FACTOR`` times it.

Each (mechanism, width) is one ``Piece`` (``attnlab.harness.workers``): its rates and seeds
are lanes of one compiled program, and its tables do not depend on how many workers run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

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
    SINK_SEEDS,
    SINK_TABLE,
    SINKS,
    SWEPT,
    WIDTHS,
    checkpoint_name,
)


class Cell(NamedTuple):
    """One piece of the sweep: a mechanism at one width on ``seeds``; ``sinks`` for the sink
    set's (its rows go to the sink table, and no model is saved)."""

    reference: MechanismRef
    d_model: int
    seeds: tuple[int, ...]
    sinks: bool = False


@dataclass(frozen=True)
class ProxyConfig:
    """The sweep: ``swept`` at every width of ``widths``, ``one_width`` at
    ``one_width_d_model``, each at every rate of ``lrs`` on ``seeds`` seeds from ``seed``;
    ``lm`` the rest of the set-up (its ``d_model`` replaced by each width); ``layout`` that
    of the saved models (a key of ``attnlab.lm.export.LAYOUTS``); ``sinks`` the attention
    sink's set at ``one_width_d_model`` on ``sink_seeds`` seeds from ``seed``. The mechanisms
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
    sinks: tuple[MechanismRef, ...] = tuple(map(resolve, SINKS))
    sink_seeds: int = SINK_SEEDS

    @property
    def seed_values(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))

    def cells(self) -> list[Cell]:
        """Every cell, in table order: each mechanism swept at each width, the one-width
        ones, then the sink set's."""
        seeds, one = self.seed_values, self.one_width_d_model
        cells = [Cell(m, d, seeds) for m in self.swept for d in self.widths]
        cells += [Cell(m, one, seeds) for m in self.one_width if m not in self.swept]
        sink_seeds = tuple(range(self.seed, self.seed + self.sink_seeds))
        return cells + [Cell(m, one, sink_seeds, True) for m in self.sinks if sink_seeds]

    def width(self, d_model: int) -> LMConfig:
        return replace(self.lm, d_model=d_model)


def cost(config: ProxyConfig, cell: Cell) -> float:
    """A piece's expected cost, in lane-steps of d_model 64 (parameters grow as d^2)."""
    lanes = len(config.lrs) * len(cell.seeds)
    return lanes * config.lm.steps * (cell.d_model / 64) ** 2


def pieces(config: ProxyConfig, tokens: np.ndarray) -> list[Piece]:
    """One piece per cell; its units are its lane-steps (the progress bar's)."""
    return [
        Piece(sweep_cell, (config, cell, tokens),
              len(config.lrs) * len(cell.seeds) * config.lm.steps, cost(config, cell))
        for cell in config.cells()
    ]  # fmt: skip


#: The sink table's columns from a lane's sweep row, beside its ownership rows.
SINK_LOSS_COLUMNS = ("final_val_loss", "final_val_loss_se")


def sink_rows(sweep: pd.DataFrame, ownership: pd.DataFrame) -> pd.DataFrame:
    """The sink table of one cell: its ownership rows (the heads at the best rate and at
    ``DRIFT_FACTOR`` times it) with their lane's held-out loss, in the declared columns
    (``study.SINK_TABLE``)."""
    losses = sweep[["lr", "seed", *SINK_LOSS_COLUMNS]]
    table = ownership.merge(losses, on=["lr", "seed"], how="left", validate="many_to_one")
    return table[list(SINK_TABLE.columns)]


def sweep_cell(
    config: ProxyConfig, cell: Cell, tokens: np.ndarray, on_progress: Progress
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame, Saved | None]:
    """One cell's rows of the sweep, curves, ownership and sink tables (a sink set's cell
    only the last), and at ``one_width_d_model`` with learned positions its model at the
    best rate (``Saved``; not the sink set's)."""
    mechanism = cell.reference.mechanism
    lm = config.width(cell.d_model)
    split = split_text(tokens, lm)
    result = train_lanes(lm, mechanism, list(config.lrs), list(cell.seeds), split, on_progress)
    sweep = sweep_rows(result)
    ownership = ownership_rows(result, sweep, split, mechanism, DRIFT_FACTOR)
    if cell.sinks:
        empty = pd.DataFrame()
        return empty, empty, empty, sink_rows(sweep, ownership), None
    saved = None
    if cell.d_model == config.one_width_d_model and lm.positions == "learned":
        best, _ = best_lane_rates(sweep, DRIFT_FACTOR)
        saved = best_model(result, best, mechanism, cell.reference.text, config.layout)
    return sweep, curve_rows(result, RECORD_EVERY), ownership, pd.DataFrame(), saved


def saved_names(config: ProxyConfig) -> list[str]:
    """The checkpoints the sweep saves (``sweep_cell``): each mechanism's at
    ``one_width_d_model``, with learned positions only; their paths are checked before
    any work (``cli.check_outputs``)."""
    if config.lm.positions != "learned":
        return []
    return [checkpoint_name(cell.reference.mechanism.name, cell.d_model)
            for cell in config.cells()
            if cell.d_model == config.one_width_d_model and not cell.sinks]  # fmt: skip


def tables(results: list[tuple]) -> tuple[pd.DataFrame, ...]:
    """The pieces' rows joined: the sweep, curves, ownership and sink tables; then the
    saved models (a list)."""
    *frames, saved = zip(*results, strict=True)
    joined = (pd.concat(part, ignore_index=True) for part in frames)
    return (*joined, [s for s in saved if s is not None])
