"""The training engine of the recall model: every training in the suite runs through
``Trainer``.

A training is a list of ``Run``s (a configuration, a mechanism, a learning rate), each
trained on every seed of its configuration. Every (run, seed) is a *lane*, trained on the
lanes engine both wings share (``attnlab.training.lanes``): the lanes' states are stacked
along a leading axis, laid out in blocks that fit the CPU's cache (``LaneBlocks``,
``block_size``), each vmapped and sharded over all devices; steps run inside
``jax.lax.scan`` in chunks of ``chunk_steps`` (``scan_steps``, ``run_chunks``), each fed the
chunk's batches drawn beforehand by a program of its own (``draw_chunk``, once per seed,
however many lanes share it). Python runs only between chunks: the progress callback, the
divergence check, an early stop, optional diagnostics.

One program, many runs: the learning rate and the mechanism's fixed scalars (its
``constants``, e.g. the logit scale and cap) are traced arguments of the compiled chunk, and the
model enters it as its ``program_model`` (without what only sets the initial parameters),
so runs that differ only in those (scaled, unscaled, 1/d and folded attention; both caps;
the initialisations of 09's readings; 10's learning rates) are lanes of one program, and
``train_runs`` groups runs that way.

Identical means identical: for a given seed every mechanism starts from the parameters
drawn from the same initialisation key (the mechanisms differ only where documented in
``attnlab.core.temperature``) and sees the same batches in the same order, because batch ``t``
is drawn from ``fold_in(data_key(seed), t)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.core.curves import first_nonfinite_steps
from attnlab.core.mechanism import Mechanism
from attnlab.core.parallel import replicate
from attnlab.harness.errors import RunError
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.model import MechanismConstants, RecallModel, program_model
from attnlab.recall.step import (
    METRICS,
    TrainState,
    draw_chunk,
    evaluate,
    held_out_batches,
    initial_state,
    recall_optimizer,
    scan_steps,
)
from attnlab.recall.task import Batch
from attnlab.training.lanes import LaneBlocks, block_size, host_concatenate, run_chunks


class DivergenceError(RunError):
    """A loss turned NaN or infinite; the message names the mechanism, seed and step."""


@dataclass
class TrainResult:
    """One run (a mechanism at one learning rate) trained on every seed: per-step
    ``metrics`` ``[seeds, steps]`` from ``start_step``, held-out accuracy ``[seeds]`` (NaN
    where not evaluated), the final ``state`` stacked over seeds, the first step whose loss
    went non-finite per seed (``diverged_step``, -1: none), and the ``diagnostics`` records
    ``[seeds, records]`` taken at ``record_steps`` (empty without diagnostics)."""

    mechanism: str
    seeds: list[int]
    start_step: int
    metrics: dict[str, np.ndarray]
    eval_accuracy: np.ndarray
    state: TrainState  # stacked over seeds
    d_k: int = 0
    lr: float = 0.0
    diverged_step: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    records: dict[str, np.ndarray] = field(default_factory=dict)
    record_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, int))


@dataclass(frozen=True)
class Run:
    """One member of a training: ``mechanism`` on every seed of ``config`` at learning rate
    ``lr`` (``config.lr`` if None), from ``state`` (stacked over the seeds; the step-0
    state if None). ``label`` names it where the mechanism does not (09's readings)."""

    config: RecallConfig
    mechanism: Mechanism
    lr: float | None = None
    state: TrainState | None = field(default=None, compare=False)
    label: str = ""

    @property
    def rate(self) -> float:
        return self.config.lr if self.lr is None else self.lr

    @property
    def program(self) -> tuple:
        """What decides the compiled program: runs with equal ``program`` share one."""
        c = self.config
        return (program_model(make_model(c, self.mechanism)), c.batch_size, c.chunk_steps)


Diagnostics = Callable[[RecallModel, dict, MechanismConstants, Batch], dict[str, jax.Array]]


def _lane_batch(batches: Batch, seed: jax.Array) -> Batch:
    """A lane's own batches out of every seed's (``[seeds, ...]`` fields; ``seed`` an index)."""
    return jax.tree.map(lambda x: x[seed], batches)


@cache
def _chunk_program(model: RecallModel, metrics: tuple[str, ...]):
    """The compiled chunk: ``scan_steps`` of every lane, vmapped; the lane's seed (an index
    into the chunk's batches of every seed), learning rate and mechanism constants are
    per-lane traced arguments."""

    def train_chunk(state, seed, lr, constants, batches):
        optimizer = recall_optimizer(lr)
        return scan_steps(model, optimizer, state, _lane_batch(batches, seed), metrics, constants)

    return jax.jit(jax.vmap(train_chunk, in_axes=(0, 0, 0, 0, None)))


@cache
def _evaluate_program(model: RecallModel):
    """Held-out accuracy of every lane on its seed's held-out batch."""

    def held_out_accuracy(params, seed, constants, held_out):
        return evaluate(model, params, _lane_batch(held_out, seed), constants)

    return jax.jit(jax.vmap(held_out_accuracy, in_axes=(0, 0, 0, None)))


@cache
def _diagnostics_program(model: RecallModel, diagnose: Diagnostics):
    """``diagnose`` of every lane on its seed's probe, one lane after another (``lax.map``:
    a probe's intermediates at large widths are large)."""

    def lane(item, probe):
        params, seed, constants = item
        return diagnose(model, params, constants, _lane_batch(probe, seed))

    def diagnose_lanes(items, probe):
        return jax.lax.map(lambda item: lane(item, probe), items)

    return jax.jit(diagnose_lanes)


def lane_bytes(config: RecallConfig, state: TrainState) -> int:
    """Float32 bytes one lane touches per step: its parameters and Adam's two moments
    (``state``, stacked over lanes: one lane's share), and about six ``[B, pairs, d_k]``
    activations (keys, values and their gradients)."""
    params = sum(x[0].size for x in jax.tree.leaves(state.params))
    return 4 * (3 * params + 6 * config.batch_size * config.pairs * config.d_k)


def _stacked_constants(runs: Sequence[Run]) -> MechanismConstants:
    """Each run's mechanism constants at its width, each stacked ``[len(runs)]`` (the runs
    share a program, so their mechanisms have the same constants' names)."""
    values = [run.mechanism.constant_values(run.config.d_k) for run in runs]
    return {name: np.asarray([v[name] for v in values], np.float32) for name in values[0]}


class Trainer:
    """Trains ``runs`` together, one compiled program for all their lanes.

    Every run must have the same ``Run.program`` (``train_runs`` groups runs that way).
    Lanes are run-major: lane ``i`` is seed ``i % seeds`` of run ``i // seeds`` when every
    run has ``seeds`` seeds. ``metrics`` names the per-step ``METRICS`` recorded;
    ``diagnostics``, if given, is evaluated on each lane's held-out sequences (its first
    ``probe`` of them) at ``start_step`` and after every chunk (``records``). With
    ``on_diverge="raise"`` a non-finite loss raises ``DivergenceError``; with ``"record"``
    the lane goes on (its later numbers are NaN) and ``diverged_step`` says where.
    ``lanes_per_call`` lanes are vmapped in one call of the compiled chunk (``block_size``);
    blocks of lanes run one after another through the same program.
    """

    def __init__(
        self,
        runs: Sequence[Run],
        *,
        start_step: int = 0,
        metrics: tuple[str, ...] = METRICS,
        diagnostics: Diagnostics | None = None,
        probe: int | None = None,
        on_diverge: str = "raise",
        lanes_per_call: int | None = None,
    ):
        runs = list(runs)
        if not runs:
            raise ValueError("Trainer needs at least one run")
        if len({run.program for run in runs}) != 1:
            raise ValueError("Trainer: every run must share one program (see train_runs)")
        if on_diverge not in ("raise", "record"):
            raise ValueError(f"Trainer.on_diverge must be 'raise' or 'record', got {on_diverge!r}")
        if start_step < 0:
            raise ValueError(f"Trainer: start_step must be >= 0, got {start_step}")
        self.runs, self.metric_names, self.on_diverge = runs, tuple(metrics), on_diverge
        self.start_step = self.step = start_step
        self.config = runs[0].config  # its batch size, task and chunk length hold for every run
        self.model = runs[0].program[0]

        self.lanes = [(r, seed) for r, run in enumerate(runs) for seed in run.config.seed_values]
        self.seeds = sorted({seed for _, seed in self.lanes})
        self._data_keys = replicate(jnp.stack([seed_keys(s).data for s in self.seeds]))
        states = [run.state if run.state is not None else initial_state(run.config, run.mechanism)
                  for run in runs]  # fmt: skip
        state = host_concatenate(states)
        args = {
            "seed": np.asarray([self.seeds.index(seed) for _, seed in self.lanes], np.int32),
            "rate": np.asarray([runs[r].rate for r, _ in self.lanes], np.float32),
            "constants": _stacked_constants([runs[r] for r, _ in self.lanes]),
        }
        per_lane = lane_bytes(self.config, state)
        self.block = block_size(len(self.lanes), lanes_per_call, per_lane)
        self._blocks = LaneBlocks(state, args, len(self.lanes), self.block)

        self.chunks: list[dict[str, np.ndarray]] = []
        self.diverged_step = np.full(len(self.lanes), -1)
        self.diagnostics, self.records, self.record_steps = diagnostics, [], []
        if diagnostics is not None:
            self._probe = jax.tree.map(lambda x: x[:, :probe], self._held_out())
            self._record()

    @property
    def n_lanes(self) -> int:
        return len(self.lanes)

    def _held_out(self) -> Batch:
        """Every seed's held-out set (``held_out_batches``), ``[seeds, eval_size, ...]``."""
        config = replace(self.runs[0].config, seed=self.seeds[0], seeds=1)
        sets = [held_out_batches(replace(config, seed=s)) for s in self.seeds]
        return replicate(host_concatenate(sets))

    def _record(self) -> None:
        program = _diagnostics_program(self.model, self.diagnostics)
        record = self._blocks.map(
            lambda b: program((b.state.params, b.args["seed"], b.args["constants"]), self._probe)
        )
        self.records.append(record)
        self.record_steps.append(self.step)

    def run(
        self,
        until: int,
        on_chunk: Callable[[int], None] | None = None,
        stop: Callable[[Trainer], bool] | None = None,
    ) -> None:
        """Train every lane to step ``until`` in chunks of ``chunk_steps``. After each chunk:
        ``on_chunk(steps x runs)``, the divergence check, the diagnostics, then ``stop(self)``
        (True ends the training early)."""
        program = _chunk_program(self.model, self.metric_names)

        def call(state, args, steps, batches):
            return program(state, args["seed"], args["rate"], args["constants"], batches)

        def draw(steps: np.ndarray) -> Batch:
            return draw_chunk(self._data_keys, steps, self.config.batch_size, self.config.task)

        def after(first: int, end: int, metrics: dict[str, np.ndarray]) -> bool:
            self._check_finite(metrics["loss"])
            self.chunks.append(metrics)
            self.step = end
            if self.diagnostics is not None:
                self._record()
            if on_chunk is not None:
                on_chunk((end - first) * len(self.runs))
            return stop is not None and stop(self)

        run_chunks(self._blocks, self.step, until, self.config.chunk_steps, call, draw, after)

    def chunk_programs(self) -> tuple[Callable[[], Batch], Callable[[Batch], tuple]]:
        """The two calls ``run`` makes per chunk, on the first block of lanes from the current
        state, without advancing it: ``draw()`` gives the next chunk's batches (of every
        seed) and ``train(batches)`` the block's state and metrics after it (the bench times
        them)."""
        steps = jnp.arange(self.step, self.step + self.config.chunk_steps)
        program = _chunk_program(self.model, self.metric_names)
        block = self._blocks.blocks[0]

        def draw() -> Batch:
            return draw_chunk(self._data_keys, steps, self.config.batch_size, self.config.task)

        def train(batches: Batch) -> tuple:
            args = block.args
            return program(block.state, args["seed"], args["rate"], args["constants"], batches)

        return draw, train

    def _check_finite(self, losses: np.ndarray) -> None:
        first = first_nonfinite_steps(losses)
        first = np.where(first >= 0, first + self.step, -1)
        new = (self.diverged_step < 0) & (first >= 0)
        self.diverged_step[new] = first[new]
        if new.any() and self.on_diverge == "raise":
            lane, offset = earliest_nonfinite(losses)
            r, seed = self.lanes[lane]
            raise DivergenceError(
                f"loss is {losses[lane, offset]} for mechanism {self.runs[r].mechanism.name}, "
                f"seed {seed}, at step {self.step + offset}"
            )

    @property
    def metrics(self) -> dict[str, np.ndarray]:
        """Every lane's metrics from ``start_step``, ``[lanes, steps]``."""
        if not self.chunks:
            return {k: np.zeros((self.n_lanes, 0), np.float32) for k in self.metric_names}
        return {k: np.concatenate([c[k] for c in self.chunks], axis=1) for k in self.metric_names}

    def lane_slice(self, r: int) -> slice:
        """The lanes of run ``r``."""
        first = next(i for i, (run, _) in enumerate(self.lanes) if run == r)
        return slice(first, first + len(self.runs[r].config.seed_values))

    def metrics_by_run(self) -> list[dict[str, np.ndarray]]:
        """Each run's metrics (its lanes: its seeds), ``[seeds, steps]`` each, in the order
        of ``runs``; the chunks are joined once for all runs."""
        metrics = self.metrics
        return [{k: v[self.lane_slice(r)] for k, v in metrics.items()}
                for r in range(len(self.runs))]  # fmt: skip

    @property
    def recorded(self) -> dict[str, np.ndarray]:
        """Every lane's ``diagnostics`` at every record (``record_steps``), ``[lanes,
        records]`` each."""
        return {k: np.stack([r[k] for r in self.records], axis=1) for k in self.records[0]}

    def eval_accuracy(self) -> np.ndarray:
        """Held-out accuracy of every lane (``eval_size`` sequences of its seed's eval key)."""
        program = _evaluate_program(self.model)
        held_out = self._held_out()
        return self._blocks.map(lambda b: program(b.state.params, b.args["seed"],
                                                  b.args["constants"], held_out))  # fmt: skip

    @property
    def state(self) -> TrainState:
        """Every lane's state, ``[lanes, ...]``."""
        return self._blocks.state

    @property
    def blocks(self) -> LaneBlocks:
        """The lanes as the compiled chunk takes them, in blocks (``LaneBlocks``)."""
        return self._blocks

    def results(self, evaluate: bool = True) -> list[TrainResult]:
        """One ``TrainResult`` per run, in the order of ``runs``; held-out accuracy by
        ``eval_accuracy`` if ``evaluate`` (NaN otherwise: a sweep reads its diagnostics')."""
        by_run = self.metrics_by_run()
        accuracy = self.eval_accuracy() if evaluate else np.full(self.n_lanes, np.nan)
        records = self.recorded if self.records else {}
        state = self.state  # every lane's, joined once: each run takes its seeds' lanes
        out = []
        for r, run in enumerate(self.runs):
            lanes = self.lane_slice(r)
            out.append(TrainResult(
                run.label or run.mechanism.name, run.config.seed_values, self.start_step,
                by_run[r], accuracy[lanes], jax.tree.map(lambda x, s=lanes: x[s], state),
                run.config.d_k, run.rate,
                self.diverged_step[lanes], {k: v[lanes] for k, v in records.items()},
                np.asarray(self.record_steps),
            ))  # fmt: skip
        return out


def earliest_nonfinite(losses: np.ndarray) -> tuple[int, int] | None:
    """``(lane, step)`` of the earliest non-finite entry of ``losses`` ``[lanes, steps]``
    (the lowest lane among those of that step), or None if every entry is finite."""
    first = first_nonfinite_steps(losses)
    if not (first >= 0).any():
        return None
    lane = int(np.argmin(np.where(first >= 0, first, np.iinfo(first.dtype).max)))
    return lane, int(first[lane])


def group_runs(runs: Sequence[Run]) -> list[list[int]]:
    """Indices of ``runs`` grouped by ``Run.program`` (groups in order of first member)."""
    groups: dict[tuple, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(run.program, []).append(i)
    return list(groups.values())


def train_runs(
    runs: Sequence[Run],
    steps: int | None = None,
    start_step: int = 0,
    on_chunk: Callable[[int], None] | None = None,
    on_diverge: str = "raise",
    metrics: tuple[str, ...] = METRICS,
    diagnostics: Diagnostics | None = None,
    evaluate: bool = True,
) -> list[TrainResult]:
    """Train every run for ``steps`` steps (its ``config.steps - start_step`` if None), runs
    that share a program as lanes of one ``Trainer`` (``on_diverge``, ``metrics`` and
    ``diagnostics`` as ``Trainer``'s; ``evaluate`` as ``Trainer.results``'); results in the
    order of ``runs``. The loop from runs to results of 04, 05, 10 and the card; the fits
    (a stop condition, results at several lengths of one training) and the bench drive a
    ``Trainer`` themselves."""
    runs = list(runs)
    out: list[TrainResult | None] = [None] * len(runs)
    for group in group_runs(runs):
        members = [runs[i] for i in group]
        length = members[0].config.steps - start_step if steps is None else steps
        if length < 1:
            raise ValueError(f"train: steps must be >= 1, got {length} (start_step {start_step})")
        if any(m.config.steps != members[0].config.steps for m in members) and steps is None:
            raise ValueError("train_runs: runs of one program must train equally long")
        trainer = Trainer(members, start_step=start_step, on_diverge=on_diverge,
                          metrics=metrics, diagnostics=diagnostics)  # fmt: skip
        trainer.run(start_step + length, on_chunk)
        for i, result in zip(group, trainer.results(evaluate), strict=True):
            out[i] = result
    return out


def train(
    config: RecallConfig,
    mechanism: Mechanism,
    state: TrainState | None = None,
    start_step: int = 0,
    steps: int | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> TrainResult:
    """Train ``mechanism`` on every seed for ``steps`` steps from ``start_step``.

    ``state`` (stacked over seeds) defaults to the step-0 state; passing one continues a run
    (the fold experiment of 05 does). Raises DivergenceError on a non-finite loss.
    """
    return train_runs([Run(config, mechanism, state=state)], steps, start_step, on_chunk)[0]


def train_and_evaluate(
    config: RecallConfig, on_chunk: Callable[[int], None] | None = None
) -> dict[str, TrainResult]:
    """Train every mechanism of ``config`` on every seed; results keyed by the references of
    ``config.mechanisms`` (``MechanismRef.text``)."""
    runs = [Run(config, m.mechanism) for m in config.mechanisms]
    texts = [m.text for m in config.mechanisms]
    return dict(zip(texts, train_runs(runs, on_chunk=on_chunk), strict=True))
