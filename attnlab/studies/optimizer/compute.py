"""Experiment 15's computation: the causal LM of 14 (``attnlab.lm.train``) under each arm, an
optimizer of ``attnlab.training.optimizers`` (by default AdamW and Muon, Muon's AdamW side at
the lane's rate or pinned), with and without QK-Clip (``attnlab.lm.qk_clip``), in three
parts.

*The sweep*: each (arm, mechanism, clip) at every rate and seed for ``lm.steps`` on 14's
text. *The tau sweep* (``taus``): per arm, ``scaled`` with QK-Clip at each of ``TAUS`` (and
keyed on |logit| at ``LONG_TAU``) at the arm's best rate and ``HOT`` times it, on the
sweep's text and length. *The long run*: per arm, ``scaled`` at its best rate and ``HOT``
times it, without the clip and with it at ``LONG_TAU`` (cosine), and with it on K2's
warmup-stable-decay schedule, for ``long_steps`` on a text the run reads about once; the
temperature ledger of every head at ``LEDGER_POINTS`` points along it
(``attnlab.lm.trajectory``), the clip's probe every ``PROBE_EVERY`` steps, and each lane's
model at the points of ``CHECKPOINT_FRACTIONS`` as GPT-2 checkpoints
(``attnlab.lm.export``), which experiment 13 reads.

Each (arm, mechanism, clip, schedule) of a part is one ``Piece``
(``attnlab.harness.workers``): its rates and seeds are lanes of one compiled program, so
its tables do not depend on how many workers run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace

import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef, resolve
from attnlab.core.text import TextSource, byte_tokens
from attnlab.harness.workers import Piece, run_pieces
from attnlab.lm.export import Saved, saved_model
from attnlab.lm.ledger import bilinear_spectral_norms
from attnlab.lm.sweep import curve_rows, sweep_rows
from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.lm.train import LMConfig, SweepResult, split_text, train_lanes
from attnlab.lm.trajectory import Trajectory
from attnlab.studies.optimizer.answers import runs_of
from attnlab.studies.optimizer.clip_readings import (
    CAUSES,
    after_first_clip,
    over_bound_causes,
    plateau_fractions,
    probe_summary,
)
from attnlab.studies.optimizer.study import (
    ARMS,
    CHECKPOINT_FRACTIONS,
    CLIPPED,
    CURVES,
    D_MODEL,
    DECAY,
    HOT,
    LEDGER,
    LEDGER_POINTS,
    LEDGER_WINDOWS,
    LONG_SEEDS,
    LONG_STEPS,
    LONG_TAU,
    LRS,
    MECHANISMS,
    ONE_UPDATE,
    PINNED,
    PROBE_EVERY,
    RECORD_EVERY,
    RUNS,
    SCHEDULES,
    SCRIPT,
    SIDE_LR,
    TAU,
    TAUS,
    WEIGHT_DECAY,
    arm_optimizer,
    checkpoint_name,
)

#: The long run's mechanism: the built-in ``scaled``.
SCALED = resolve("scaled")


@dataclass(frozen=True)
class Cell:
    """One piece's set-up: the ``arm`` (``ARMS``), the mechanism, QK-Clip's tau (None:
    none) and what it reads (``qk_clip_on``), and the schedule."""

    arm: str
    mechanism: MechanismRef
    tau: float | None = None
    clip_on: str = "signed"
    schedule: str = "cosine"


@dataclass(frozen=True)
class OptimizerConfig:
    """The study: ``mechanisms`` under every arm of ``arms``, ``clipped`` with QK-Clip at
    ``tau`` besides, at every rate of ``lrs`` on ``seeds`` seeds from ``seed`` for
    ``lm.steps``; the tau sweep at each of ``taus`` (none: no tau sweep); then the long run
    of ``long_steps`` (0: none) on ``long_seeds`` seeds from ``seed``, with the clip at
    ``long_tau`` on each of ``long_schedules``; the sweep's and the long run's clip on
    ``clip_on`` (``signed``: Kimi K2's). ``lm`` is 14's set-up at ``D_MODEL`` with coupled
    decay ``WEIGHT_DECAY``; ``side_lr`` is ``muon_pinned``'s AdamW-side rate. The
    mechanisms are resolved where they enter (``resolve``: the flags, the defaults here),
    each a ``MechanismRef`` that the pieces carry to the model."""

    lm: LMConfig = field(
        default_factory=lambda: LMConfig(d_model=D_MODEL, decay=DECAY, weight_decay=WEIGHT_DECAY)
    )
    arms: tuple[str, ...] = ARMS
    mechanisms: tuple[MechanismRef, ...] = tuple(map(resolve, MECHANISMS))
    clipped: tuple[MechanismRef, ...] = tuple(map(resolve, CLIPPED))
    tau: float = TAU
    clip_on: str = "signed"
    taus: tuple[float, ...] = TAUS
    long_tau: float = LONG_TAU
    long_schedules: tuple[str, ...] = SCHEDULES
    side_lr: float = SIDE_LR
    lrs: tuple[float, ...] = LRS
    seeds: int = 2
    seed: int = 0
    long_steps: int = LONG_STEPS
    long_seeds: int = LONG_SEEDS

    @property
    def seed_values(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))

    @property
    def long_seed_values(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.long_seeds))

    def cells(self) -> list[Cell]:
        """Every cell of the sweep, in table order."""
        return [
            Cell(arm, mechanism, tau, self.clip_on)
            for arm in self.arms
            for mechanism, tau in [(m, None) for m in self.mechanisms]
            + [(m, self.tau) for m in self.clipped]
        ]

    def tau_cells(self) -> list[Cell]:
        """The tau sweep's cells: per arm, ``scaled`` clipped at each of ``taus`` and, keyed
        on |logit|, at ``long_tau``; none without ``scaled`` swept or with no ``taus``."""
        if SCALED not in self.mechanisms or not self.taus:
            return []
        return [Cell(arm, SCALED, tau, on) for arm in self.arms
                for tau, on in [*((t, "signed") for t in self.taus),
                                (self.long_tau, "abs")]]  # fmt: skip

    def long_cells(self) -> list[Cell]:
        """The long run's cells: per arm, ``scaled`` without the clip and with it at
        ``long_tau`` on the cosine schedule, and with it on each other of
        ``long_schedules`` (K2's WSD)."""
        if SCALED not in self.mechanisms or not self.long_steps:
            return []
        cells = [(None, "cosine"), *((self.long_tau, s) for s in self.long_schedules)]
        return [Cell(arm, SCALED, tau, self.clip_on, schedule) for arm in self.arms
                for tau, schedule in cells]  # fmt: skip

    @property
    def long_lanes(self) -> int:
        """The long run's lanes: two rates per cell, each on ``long_seeds`` seeds."""
        return 2 * len(self.long_cells()) * self.long_seeds

    @property
    def tau_lanes(self) -> int:
        """The tau sweep's lanes: two rates per cell, each on ``seeds`` seeds."""
        return 2 * len(self.tau_cells()) * self.seeds

    def long_config(self) -> LMConfig:
        """The long run's set-up: ``long_steps``, 14's warmup, a chunk per ledger point."""
        every = max(1, self.long_steps // LEDGER_POINTS)
        return replace(self.lm, steps=self.long_steps, chunk_steps=every)

    def checkpoint_steps(self) -> tuple[int, ...]:
        """The long run's checkpoints: each of ``CHECKPOINT_FRACTIONS`` of ``long_steps``
        snapped to the nearest ledger point (step 0 and each chunk's end; the earlier of
        two as near), ascending, without repeats."""
        every = self.long_config().chunk_steps
        points = [*range(0, self.long_steps, every), self.long_steps]
        nearest = (min(points, key=lambda p: abs(p - f * self.long_steps))
                   for f in CHECKPOINT_FRACTIONS)  # fmt: skip
        return tuple(sorted(set(nearest)))

    def cell_config(self, lm: LMConfig, cell: Cell, probe: bool = False) -> LMConfig:
        """``lm`` for ``cell``: its optimizer, AdamW-side rate, clip and schedule; with
        ``probe`` (and the clip) the clip's probe every ``PROBE_EVERY`` steps."""
        side = self.side_lr if cell.arm.endswith(PINNED) else None
        every = PROBE_EVERY if probe and cell.tau is not None else 0
        return replace(lm, optimizer=arm_optimizer(cell.arm), side_lr=side,
                       qk_clip_tau=cell.tau, qk_clip_on=cell.clip_on, schedule=cell.schedule,
                       probe_every=every)  # fmt: skip


def run_rows(result: SweepResult, part: str, cell: Cell) -> pd.DataFrame:
    """One row per lane of ``result``: 14's sweep row (``attnlab.lm.sweep.sweep_rows``) with
    the part, arm, AdamW-side rate, schedule and clip; the largest logit over layers and
    steps; with QK-Clip the largest signed logit, the first step it fired, the largest S
    (the clip's quantity) and the largest |logit| at every step after (before that step's
    clip), how many of those steps S exceeded ``ONE_UPDATE`` tau and by what cause
    (``over_bound_causes``), the fraction of heads clipped over the run, in its quarters and
    on WSD's plateau, and the probes' summary (``probe_summary``); and the largest
    ``sigma_max(W_q,h W_k,h^T)`` over layers and heads and the largest RMS of a layer's
    ``ln_1`` gain of the final weights."""
    lm, metrics = result.config, result.metrics
    frame = _keys(sweep_rows(result), part, result, cell)
    lanes = len(result.lrs)
    tau = cell.tau
    frame.insert(10, "steps", lm.steps)
    layers = [f"max_attn_logit_layer{i}" for i in range(lm.n_layers)]
    frame["max_attn_logit"] = frame[layers].max(axis=1, skipna=False)
    for column in ("max_signed_logit", "max_signed_after_first_clip", "max_abs_after_first_clip",
                   "clip_fraction", "clip_fraction_first_quarter", "clip_fraction_last_quarter",
                   "update_growth_median", "update_growth_p90", "update_growth_max",
                   "after_clip_max"):  # fmt: skip
        if column not in frame:
            frame[column] = math.nan
    for column in ("steps_over_bound_after_first_clip", "probes", *CAUSES):
        frame[column] = 0
    frame["first_clip_step"] = -1
    frame["clip_fraction_plateau_first"] = frame["clip_fraction_plateau_last"] = math.nan
    if tau is not None:
        heads = {"signed": metrics["head_signed_logit"], "abs": metrics["head_abs_logit"]}
        fraction = metrics["clip_fraction"]
        after, over = {}, {}  # per quantity; the first firing is the fractions', one for both
        for name, values in heads.items():
            first, after[name], over[name] = after_first_clip(
                np.max(values, axis=(2, 3)), fraction, ONE_UPDATE * tau)  # fmt: skip
        frame["max_signed_logit"] = np.nanmax(heads["signed"], axis=(1, 2, 3))
        frame["first_clip_step"] = first
        frame["max_signed_after_first_clip"] = after["signed"]
        frame["max_abs_after_first_clip"] = after["abs"]
        frame["steps_over_bound_after_first_clip"] = over[lm.qk_clip_on]
        s = heads[lm.qk_clip_on]
        for column, counts in over_bound_causes(s, heads["abs"], first, tau).items():
            frame[column] = counts
        frame["clip_fraction"] = fraction.mean(axis=(1, 2))
        frame["clip_fraction_plateau_first"], frame["clip_fraction_plateau_last"] = (
            plateau_fractions(fraction, lm))  # fmt: skip
        if lm.probe_every:
            for column, values in probe_summary(metrics, tau).items():
                frame[column] = values
    norms = np.zeros((lanes, lm.n_layers))
    gains = np.zeros((lanes, lm.n_layers))
    for layer in range(lm.n_layers):
        block = result.params[f"h_{layer}"]
        attn = block["attn"]
        gains[:, layer] = np.sqrt(np.mean(np.square(block["ln_1"]["scale"]), axis=-1))
        for lane in range(lanes):
            norms[lane, layer] = float(jnp.max(bilinear_spectral_norms(
                attn["W_Q"][lane], attn["W_K"][lane], lm.n_heads)))  # fmt: skip
    frame["final_qk_spectral_norm"] = norms.max(axis=1)
    frame["final_ln1_gain_rms"] = gains.max(axis=1)
    return frame[RUNS.column_names]


def _keys(frame: pd.DataFrame, part: str, result: SweepResult, cell: Cell) -> pd.DataFrame:
    """``frame`` with the part, arm, AdamW-side rate, schedule and clip in front."""
    lm = result.config
    frame.insert(0, "part", part)
    frame.insert(1, "optimizer", lm.optimizer)
    frame.insert(2, "side", "pinned" if lm.side_lr is not None else "shared")
    frame.insert(3, "side_lr", frame.lr if lm.side_lr is None else lm.side_lr)
    frame.insert(4, "schedule", lm.schedule)
    frame.insert(6, "qk_clip_on", lm.qk_clip_on if cell.tau is not None else "none")
    frame.insert(7, "qk_clip_tau", math.nan if cell.tau is None else cell.tau)
    return frame


def _curves(result: SweepResult, part: str, cell: Cell) -> pd.DataFrame:
    frame = curve_rows(result, RECORD_EVERY).rename(columns={"max_logit": "max_attn_logit"})
    frame = _keys(frame, part, result, cell)
    for column in ("max_signed_logit", "clip_fraction"):
        if column not in frame:
            frame[column] = math.nan
    return frame[CURVES.column_names]


def train_cell(
    config: OptimizerConfig,
    part: str,
    cell: Cell,
    lrs: tuple[float, ...],
    tokens: np.ndarray,
    on_progress: Progress,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One cell of the sweep or the tau sweep at ``lrs`` on ``seeds`` seeds: its rows of
    the runs and the curves tables."""
    lm = config.cell_config(config.lm, cell)
    result = train_lanes(lm, cell.mechanism.mechanism, list(lrs), list(config.seed_values),
                         split_text(tokens, lm), on_progress)  # fmt: skip
    return run_rows(result, part, cell), _curves(result, part, cell)


def long_checkpoints(
    result: SweepResult,
    kept: dict[int, list[dict]],
    cell: Cell,
    text: TextSource,
    seed: int,
) -> list[Saved]:
    """Each lane of the long run's ``result`` on ``seed`` at each step of ``kept``
    (``Trajectory.kept``) as a GPT-2 checkpoint (``checkpoint_name``) whose
    ``attnlab.made_by`` records how it was made: the script, arm, optimizer, mechanism,
    QK-Clip's tau (null: none), schedule, rate, seed, step, the text's source and SHA-256
    and the run's ``LMConfig``."""
    lm = result.config
    mechanism = cell.mechanism.mechanism
    model = lm.model(mechanism)
    saved = []
    for step, lanes in kept.items():
        for lr, lane_seed, params in zip(result.lrs, result.seeds, lanes, strict=True):
            if lane_seed != seed:
                continue
            made_by = {"script": f"experiments/{SCRIPT}", "arm": cell.arm,
                       "optimizer": lm.optimizer, "mechanism": mechanism.name,
                       "qk_clip_tau": lm.qk_clip_tau, "schedule": lm.schedule,
                       "lr": float(lr), "seed": seed, "step": step,
                       "text_source": text.source, "text_sha256": text.sha256,
                       "lm_config": dataclasses.asdict(lm)}  # fmt: skip
            name = checkpoint_name(cell.arm, lm.qk_clip_tau is not None, lm.schedule,
                                   float(lr), step)  # fmt: skip
            saved.append(saved_model(name, params, model, {"made_by": made_by}))
    return saved


def long_cell(
    config: OptimizerConfig,
    cell: Cell,
    lrs: tuple[float, ...],
    text: TextSource,
    on_progress: Progress,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[Saved]]:
    """One cell of the long run at ``lrs`` on ``long_seeds`` seeds on ``text``: its rows of
    the runs, curves and ledger tables, and its first seed's checkpoints
    (``long_checkpoints``)."""
    lm = config.cell_config(config.long_config(), cell, probe=True)
    mechanism = cell.mechanism.mechanism
    split = split_text(byte_tokens(text.text), lm)
    model = lm.model(mechanism)
    seeds = list(config.long_seed_values)
    trajectory = Trajectory(model, len(lrs) * len(seeds), split.held_out[:LEDGER_WINDOWS, :-1],
                            mechanism.constant_values(lm.d_head), cell.tau,
                            config.checkpoint_steps())  # fmt: skip
    result = train_lanes(lm, mechanism, list(lrs), seeds, split, on_progress,
                         trajectory)  # fmt: skip
    ledger = trajectory.rows()
    lane = ledger.pop("lane").to_numpy()
    ledger.insert(0, "lr", result.lrs[lane])
    ledger.insert(1, "seed", result.seeds[lane])
    ledger.insert(2, "mechanism", mechanism.name)
    ledger = _keys(ledger, "long", result, cell)[LEDGER.column_names]
    saved = long_checkpoints(result, trajectory.kept, cell, text, config.seed)
    return run_rows(result, "long", cell), _curves(result, "long", cell), ledger, saved


def sweep_pieces(config: OptimizerConfig, tokens: np.ndarray) -> list[Piece]:
    """One piece per cell of the sweep; its units are its lane-steps (the progress bar's)."""
    units = len(config.lrs) * config.seeds * config.lm.steps
    return [Piece(train_cell, (config, "sweep", cell, config.lrs, tokens), units, units)
            for cell in config.cells()]  # fmt: skip


def best_rates(config: OptimizerConfig, sweep: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per arm with ``scaled`` swept: its best rate (lowest mean held-out loss over seeds,
    ``best_lane_rates``) and ``HOT`` times it."""
    rates = {}
    for arm in config.arms:
        cell = runs_of(sweep, "sweep", arm)
        if not cell.empty:
            best, _ = best_lane_rates(cell, 1.0)
            rates[arm] = (float(best), float(best) * HOT)
    return rates


def tau_pieces(config: OptimizerConfig, sweep: pd.DataFrame, tokens: np.ndarray) -> list[Piece]:
    """One piece per cell of the tau sweep, at its arm's ``best_rates``."""
    rates = best_rates(config, sweep)
    units = 2 * config.seeds * config.lm.steps
    return [Piece(train_cell, (config, "taus", cell, rates[cell.arm], tokens), units, units)
            for cell in config.tau_cells() if cell.arm in rates]  # fmt: skip


def long_pieces(config: OptimizerConfig, sweep: pd.DataFrame, text: TextSource) -> list[Piece]:
    """One piece per cell of the long run at its arm's ``best_rates``, on ``text``."""
    rates = best_rates(config, sweep)
    units = 2 * config.long_seeds * config.long_steps
    return [Piece(long_cell, (config, cell, rates[cell.arm], text), units, units)
            for cell in config.long_cells() if cell.arm in rates]  # fmt: skip


def possible_checkpoints(config: OptimizerConfig) -> list[str]:
    """Every checkpoint the long run may save (``long_checkpoints``), known before the
    sweep picks its rates (``best_rates``): each long cell at each rate of ``lrs`` and
    ``HOT`` times it, at each of ``checkpoint_steps``. A superset of those saved, whose
    paths are checked before any work (``cli.check_outputs``)."""
    rates = sorted({*config.lrs, *(HOT * r for r in config.lrs)})
    return [checkpoint_name(c.arm, c.tau is not None, c.schedule, float(lr), step)
            for c in config.long_cells() for lr in rates
            for step in config.checkpoint_steps()]  # fmt: skip


def joined(parts: list[tuple[pd.DataFrame, ...]]) -> tuple[pd.DataFrame, ...]:
    """The pieces' tables joined, table by table."""
    return tuple(pd.concat(frames, ignore_index=True) for frames in zip(*parts, strict=True))


def long_tables(
    parts: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[Saved]]],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[Saved]]:
    """The long run's pieces joined: its runs, curves and ledger tables, and every piece's
    checkpoints."""
    return (*joined([part[:3] for part in parts]), [s for part in parts for s in part[3]])


def run_study(
    config: OptimizerConfig,
    tokens: np.ndarray,
    long_text: TextSource,
    jobs: int,
    on_progress: Progress = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None, list[Saved]]:
    """The three parts in turn (module docstring), ``jobs`` workers each: the sweep on
    ``tokens``; the tau sweep at each arm's best rate and ``HOT`` times it (the sweep's);
    the long run at those rates on ``long_text``. Returns the runs, the curves, the long
    run's ledger (None without a long run) and its checkpoints."""
    sweep = joined(run_pieces(sweep_pieces(config, tokens), jobs, on_progress))
    tau_work = tau_pieces(config, sweep[0], tokens)
    runs, curves = joined([sweep, *run_pieces(tau_work, jobs, on_progress)])
    parts = run_pieces(long_pieces(config, runs, long_text), jobs, on_progress)
    if not parts:
        return runs, curves, None, []
    long_runs, long_curves, ledger, saved = long_tables(parts)
    runs, curves = joined([(runs, curves), (long_runs, long_curves)])
    return runs, curves, ledger, saved


def total_units(config: OptimizerConfig, tokens: np.ndarray) -> int:
    """Progress units of ``run_study`` at most (an arm may not be swept): lane-steps."""
    later = config.tau_lanes * config.lm.steps + config.long_lanes * config.long_steps
    return sum(p.units for p in sweep_pieces(config, tokens)) + later
