"""Experiment 15's computation: the causal LM of 14 (``attnlab.lm.train``) under AdamW and
Muon (``attnlab.lm.optimizers``), with and without QK-Clip (``attnlab.lm.qk_clip``), in two
parts.

*The sweep*: each (optimizer, mechanism, clip) at every rate and seed for ``lm.steps`` on
14's text. *The long run*: per optimizer, ``scaled`` at its best rate and at the lowest
swept rate where its logits blow up (``blowup_rate``), and ``scaled`` with QK-Clip at that
rate, for ``long_steps`` on a text the run reads about once, the temperature ledger of every
head at ``LEDGER_POINTS`` points along it (``attnlab.lm.trajectory``) and each lane's model
at the points of ``CHECKPOINT_FRACTIONS`` as GPT-2 checkpoints (``attnlab.lm.export``),
which experiment 13 reads.

Each (optimizer, mechanism, clip) of a part is one ``Piece`` (``attnlab.harness.workers``):
its rates and seeds are lanes of one compiled program, so its tables do not depend on how
many workers run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace

import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.mechanism import Mechanism
from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef, resolve
from attnlab.core.text import TextSource, byte_tokens
from attnlab.harness.workers import Piece
from attnlab.lm.export import Saved, saved_model
from attnlab.lm.ledger import bilinear_spectral_norms
from attnlab.lm.sweep import curve_rows, sweep_rows
from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.lm.train import LMConfig, SweepResult, split_text, train_lanes
from attnlab.lm.trajectory import Trajectory
from attnlab.studies.optimizer.answers import logit_by_rate, runs_of
from attnlab.studies.optimizer.study import (
    BLOWN,
    CHECKPOINT_FRACTIONS,
    CLIPPED,
    CURVES,
    D_MODEL,
    LEDGER,
    LEDGER_POINTS,
    LEDGER_WINDOWS,
    LONG_SEEDS,
    LONG_STEPS,
    LRS,
    MECHANISMS,
    ONE_UPDATE,
    OPTIMIZERS,
    RECORD_EVERY,
    RUNS,
    SCRIPT,
    TAU,
    checkpoint_name,
)

#: A cell: (optimizer, mechanism, QK-Clip's tau or None).
Cell = tuple[str, MechanismRef, float | None]
#: The long run's mechanism: the built-in ``scaled``.
SCALED = resolve("scaled")


@dataclass(frozen=True)
class OptimizerConfig:
    """The study: ``mechanisms`` under every optimizer of ``optimizers``, ``clipped`` with
    QK-Clip at ``tau`` besides, at every rate of ``lrs`` on ``seeds`` seeds from ``seed``
    for ``lm.steps``; then the long run of ``long_steps`` (0: none) on ``long_seeds`` seeds
    from ``seed``. ``lm`` is 14's set-up at ``D_MODEL``. The mechanisms are resolved where
    they enter (``resolve``: the flags, the defaults here), each a ``MechanismRef`` that the
    pieces carry to the model."""

    lm: LMConfig = field(default_factory=lambda: LMConfig(d_model=D_MODEL))
    optimizers: tuple[str, ...] = OPTIMIZERS
    mechanisms: tuple[MechanismRef, ...] = tuple(map(resolve, MECHANISMS))
    clipped: tuple[MechanismRef, ...] = tuple(map(resolve, CLIPPED))
    tau: float = TAU
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

    @property
    def long_lanes(self) -> int:
        """The long run's lanes at most (``long_runs``): per optimizer the best rate, the
        blow-up rate and the clipped run at it, each on ``long_seeds`` seeds."""
        return 3 * len(self.optimizers) * self.long_seeds

    def cells(self) -> list[Cell]:
        """Every (optimizer, mechanism, tau) of the sweep, in table order."""
        return [
            (optimizer, mechanism, tau)
            for optimizer in self.optimizers
            for mechanism, tau in [(m, None) for m in self.mechanisms]
            + [(m, self.tau) for m in self.clipped]
        ]

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


def _cell_config(lm: LMConfig, optimizer: str, tau: float | None) -> LMConfig:
    return replace(lm, optimizer=optimizer, qk_clip_tau=tau)


def after_first_clip(
    signed: np.ndarray, fraction: np.ndarray, bound: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per lane of the per-step metrics ``[lanes, steps, layers]``: the first step the clip
    fired in any layer (-1: never), the largest signed logit (max over layers) at every
    later step (NaN where none) and how many of those steps it exceeded ``bound``."""
    fired = (fraction > 0).any(axis=-1)  # [lanes, steps]
    first = np.where(fired.any(axis=1), fired.argmax(axis=1), -1)
    top = np.max(signed, axis=-1)
    later = [top[i, f + 1 :] if f >= 0 else top[i, :0] for i, f in enumerate(first)]
    after = [np.max(t) if len(t) else math.nan for t in later]
    return first, np.asarray(after, float), np.asarray([int(np.sum(t > bound)) for t in later])


def run_rows(result: SweepResult, part: str, tau: float | None) -> pd.DataFrame:
    """One row per lane of ``result``: 14's sweep row (``attnlab.lm.sweep.sweep_rows``) with
    the part, optimizer and clip; the largest logit over layers and steps; with QK-Clip the
    largest signed logit, the first step it fired, the largest signed logit at every step
    after (before that step's clip), how many of those steps it exceeded ``ONE_UPDATE``
    tau (answer (b)'s bound) and the fraction of heads clipped over the run; and the
    largest ``sigma_max(W_q,h W_k,h^T)`` over layers and heads of the final weights."""
    lm, metrics = result.config, result.metrics
    frame = sweep_rows(result)
    lanes = len(result.lrs)
    frame.insert(0, "part", part)
    frame.insert(1, "optimizer", lm.optimizer)
    frame.insert(3, "qk_clip_tau", math.nan if tau is None else tau)
    frame.insert(6, "steps", lm.steps)
    layers = [f"max_attn_logit_layer{i}" for i in range(lm.n_layers)]
    frame["max_attn_logit"] = frame[layers].max(axis=1, skipna=False)
    if tau is not None:
        signed, fraction = metrics["max_signed_logit"], metrics["clip_fraction"]
        first, after, over = after_first_clip(signed, fraction, ONE_UPDATE * tau)
        frame["max_signed_logit"] = np.nanmax(metrics["max_signed_logit"], axis=(1, 2))
        frame["first_clip_step"] = first
        frame["max_signed_after_first_clip"] = after
        frame["steps_over_bound_after_first_clip"] = over
        frame["clip_fraction"] = metrics["clip_fraction"].mean(axis=(1, 2))
    else:
        for column in ("max_signed_logit", "max_signed_after_first_clip", "clip_fraction",
                       "clip_fraction_first_quarter", "clip_fraction_last_quarter"):  # fmt: skip
            frame[column] = math.nan
        frame["first_clip_step"] = -1
        frame["steps_over_bound_after_first_clip"] = 0
    norms = np.zeros((lanes, lm.n_layers))
    for layer in range(lm.n_layers):
        attn = result.params[f"h_{layer}"]["attn"]
        for lane in range(lanes):
            norms[lane, layer] = float(jnp.max(bilinear_spectral_norms(
                attn["W_Q"][lane], attn["W_K"][lane], lm.n_heads)))  # fmt: skip
    frame["final_qk_spectral_norm"] = norms.max(axis=1)
    return frame[RUNS.column_names]


def _curves(result: SweepResult, part: str, tau: float | None) -> pd.DataFrame:
    frame = curve_rows(result, RECORD_EVERY).rename(columns={"max_logit": "max_attn_logit"})
    frame.insert(0, "part", part)
    frame.insert(1, "optimizer", result.config.optimizer)
    frame.insert(3, "qk_clip_tau", math.nan if tau is None else tau)
    for column in ("max_signed_logit", "clip_fraction"):
        if column not in frame:
            frame[column] = math.nan
    return frame[CURVES.column_names]


def sweep_cell(
    config: OptimizerConfig, cell: Cell, tokens: np.ndarray, on_progress: Progress
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One cell of the sweep: its rows of the runs and the curves tables."""
    optimizer, reference, tau = cell
    lm = _cell_config(config.lm, optimizer, tau)
    result = train_lanes(lm, reference.mechanism, list(config.lrs),
                         list(config.seed_values), split_text(tokens, lm), on_progress)  # fmt: skip
    return run_rows(result, "sweep", tau), _curves(result, "sweep", tau)


def long_checkpoints(
    result: SweepResult,
    kept: dict[int, list[dict]],
    mechanism: Mechanism,
    text: TextSource,
    seed: int,
) -> list[Saved]:
    """Each lane of the long run's ``result`` on ``seed`` at each step of ``kept``
    (``Trajectory.kept``) as a GPT-2 checkpoint (``checkpoint_name``) whose
    ``attnlab.made_by`` records how it was made: the script, optimizer, mechanism,
    QK-Clip's tau (null: none), rate, seed, step, the text's source and SHA-256 and the
    run's ``LMConfig``."""
    lm = result.config
    model = lm.model(mechanism)
    saved = []
    for step, lanes in kept.items():
        for lr, lane_seed, params in zip(result.lrs, result.seeds, lanes, strict=True):
            if lane_seed != seed:
                continue
            made_by = {"script": f"experiments/{SCRIPT}", "optimizer": lm.optimizer,
                       "mechanism": mechanism.name, "qk_clip_tau": lm.qk_clip_tau,
                       "lr": float(lr), "seed": seed, "step": step,
                       "text_source": text.source, "text_sha256": text.sha256,
                       "lm_config": dataclasses.asdict(lm)}  # fmt: skip
            name = checkpoint_name(lm.optimizer, lm.qk_clip_tau is not None, float(lr), step)
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
    (``long_checkpoints``). Several seeds give ``make verify`` a spread: one seed of a run
    far above the best rate moves under any change of rounding (study.py's ``LONG_SEEDS``)."""
    optimizer, reference, tau = cell
    lm = _cell_config(config.long_config(), optimizer, tau)
    mechanism = reference.mechanism
    split = split_text(byte_tokens(text.text), lm)
    model = lm.model(mechanism)
    seeds = list(config.long_seed_values)
    trajectory = Trajectory(model, len(lrs) * len(seeds), split.held_out[:LEDGER_WINDOWS, :-1],
                            mechanism.constant_values(lm.d_head), tau,
                            config.checkpoint_steps())  # fmt: skip
    result = train_lanes(lm, mechanism, list(lrs), seeds, split, on_progress,
                         trajectory)  # fmt: skip
    ledger = trajectory.rows()
    lane = ledger.pop("lane").to_numpy()
    keys = pd.DataFrame({"part": "long", "optimizer": optimizer, "mechanism": mechanism.name,
                         "qk_clip_tau": math.nan if tau is None else tau,
                         "lr": result.lrs[lane], "seed": result.seeds[lane]})  # fmt: skip
    ledger = pd.concat([keys, ledger], axis=1)[LEDGER.column_names]
    saved = long_checkpoints(result, trajectory.kept, mechanism, text, config.seed)
    return run_rows(result, "long", tau), _curves(result, "long", tau), ledger, saved


def sweep_pieces(config: OptimizerConfig, tokens: np.ndarray) -> list[Piece]:
    """One piece per cell of the sweep; its units are its lane-steps (the progress bar's)."""
    units = len(config.lrs) * config.seeds * config.lm.steps
    return [Piece(sweep_cell, (config, cell, tokens), units, units) for cell in config.cells()]


def blowup_rate(runs: pd.DataFrame, optimizer: str) -> float:
    """The lowest swept rate at which ``scaled``'s largest logit without the clip (median
    over seeds) passes ``BLOWN`` under ``optimizer``; the top rate if none does."""
    by_rate = logit_by_rate(runs_of(runs, "sweep", optimizer))
    blown = by_rate[by_rate > BLOWN]
    return float(blown.index.min() if len(blown) else by_rate.index.max())


def long_runs(config: OptimizerConfig, sweep: pd.DataFrame) -> list[tuple[Cell, tuple]]:
    """The long run's cells and rates, from the sweep's rows: per optimizer, ``scaled`` at
    its best rate (lowest mean held-out loss) and at ``blowup_rate``, and ``scaled`` with
    QK-Clip at ``blowup_rate``; none where ``scaled`` was not swept."""
    plan = []
    for optimizer in config.optimizers:
        cell = runs_of(sweep, "sweep", optimizer)
        if cell.empty:
            continue
        best, _ = best_lane_rates(cell, 1.0)
        blown = blowup_rate(sweep, optimizer)
        plan.append(((optimizer, SCALED, None), tuple(sorted({best, blown}))))
        if SCALED in config.clipped:
            plan.append(((optimizer, SCALED, config.tau), (blown,)))
    return plan


def possible_checkpoints(config: OptimizerConfig) -> list[str]:
    """Every checkpoint the long run may save (``long_checkpoints``), known before the
    sweep picks its rates (``long_runs``): under each optimizer, ``scaled`` without and
    (where ``scaled`` is clipped) with QK-Clip, at each rate of ``lrs`` and each of
    ``checkpoint_steps``; none with ``long_steps`` 0. A superset of those saved, whose
    paths are checked before any work (``cli.check_outputs``)."""
    if not config.long_steps:
        return []
    clipped = (False, True) if SCALED in config.clipped else (False,)
    return [checkpoint_name(optimizer, clip, float(lr), step)
            for optimizer in config.optimizers for clip in clipped for lr in config.lrs
            for step in config.checkpoint_steps()]  # fmt: skip


def long_pieces(config: OptimizerConfig, sweep: pd.DataFrame, text: TextSource) -> list[Piece]:
    """One piece per cell of the long run (``long_runs``) on ``text``; none with
    ``long_steps`` 0."""
    if not config.long_steps:
        return []
    pieces = []
    for cell, lrs in long_runs(config, sweep):
        units = len(lrs) * config.long_seeds * config.long_steps
        pieces.append(Piece(long_cell, (config, cell, lrs, text), units, units))
    return pieces


def joined(parts: list[tuple[pd.DataFrame, ...]]) -> tuple[pd.DataFrame, ...]:
    """The pieces' tables joined, table by table."""
    return tuple(pd.concat(frames, ignore_index=True) for frames in zip(*parts, strict=True))


def long_tables(
    parts: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[Saved]]],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[Saved]]:
    """The long run's pieces joined: its runs, curves and ledger tables, and every piece's
    checkpoints."""
    return (*joined([part[:3] for part in parts]), [s for part in parts for s in part[3]])
