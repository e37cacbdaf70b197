"""The training engine of the recall model: every training in the suite runs through
``Trainer``.

A training is a list of ``Run``s (a configuration, a mechanism, a learning rate), each
trained on every seed of its configuration. Every (run, seed) is a *lane*: the lanes' states
are stacked along a leading axis that is vmapped and sharded over all devices
(``attnlab.core.parallel``); steps run inside ``jax.lax.scan`` in chunks of ``chunk_steps``
(``scan_steps``), each fed the chunk's batches drawn beforehand by a program of its own
(``draw_chunk``, once per seed, however many lanes share it). Python runs only between
chunks: the progress callback, the divergence check, an early stop, optional diagnostics.

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
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from attnlab.core.mechanism import Mechanism
from attnlab.core.parallel import device_count, pad_to_multiple, replicate, shard_batch
from attnlab.core.references import load_mechanism
from attnlab.core.softmax_stats import entropy, max_weight
from attnlab.harness.errors import RunError
from attnlab.studies.recall.model import (
    INITS,
    SLOTS,
    MechanismConstants,
    RecallModel,
    program_model,
)
from attnlab.studies.recall.task import Batch, RecallTask, sample_batch, stream_batches

#: Per-step diagnostics recorded for every seed (the CSV columns of the curves).
METRICS = (
    "loss",
    "accuracy",
    "grad_norm_wq",
    "grad_norm_wk",
    "grad_norm_wv",
    "attn_entropy",
    "attn_max_weight",
)


class DivergenceError(RunError):
    """A loss turned NaN or infinite; the message names the mechanism, seed and step."""


@dataclass(frozen=True)
class RecallConfig:
    """The recall demo. Defaults: the article's settings, and our reading of what it leaves
    open (batch size, steps, widths, initialisation, smoothing); see this folder's README.md.

    ``slot``, ``init`` and ``bias`` choose the model's laws (``attnlab.studies.recall.model``):
    ``slot`` how a pair becomes a slot (concat ``[E_key[k]; E_val[v]]``, sum ``E_key[k] +
    E_val[v]``, separate keys from key tokens and values from value tokens, onehot tokens
    fed to linear layers without embeddings, ``d_model`` unused); ``init`` the initialisation
    convention (natural: N(0, embed_init_std^2) embeddings and LeCun-normal projections;
    pytorch: N(0, 1) embeddings, U(+-1/sqrt(fan_in)) weights and biases; glorot: U(+-sqrt(6 /
    (fan_in + fan_out))), biases 0; gpt: N(0, 0.02^2), biases 0); ``bias`` biases on Q, K, V
    and W_O. The defaults (concat, natural, no bias) are the model 04 has always trained.
    ``embed_init_std`` is a natural-init setting: any other init requires it to be 1.
    """

    d_k: int = 256
    d_model: int = 256
    pairs: int = 16
    n_key_tokens: int = 32
    n_value_tokens: int = 32
    steps: int = 2000
    batch_size: int = 64
    lr: float = 3e-4
    seeds: int = 5
    seed: int = 0
    eval_size: int = 2000
    smoothing: int = 25
    embed_init_std: float = 1.0
    chunk_steps: int = 100
    mechanisms: tuple[str, ...] = field(default=("scaled", "unscaled"))
    slot: str = "concat"
    init: str = "natural"
    bias: bool = False

    def __post_init__(self) -> None:
        positive = (
            "d_k",
            "d_model",
            "pairs",
            "n_key_tokens",
            "n_value_tokens",
            "steps",
            "batch_size",
            "seeds",
            "eval_size",
            "smoothing",
            "chunk_steps",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RecallConfig.{name} must be an integer >= 1, got {value!r}")
        if self.seed < 0:
            raise ValueError(f"RecallConfig.seed must be >= 0, got {self.seed!r}")
        for name in ("lr", "embed_init_std"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"RecallConfig.{name} must be a finite number > 0, got {value!r}")
        if not self.mechanisms:
            raise ValueError("RecallConfig.mechanisms must name at least one mechanism")
        for reference in self.mechanisms:
            try:
                load_mechanism(reference)
            except ValueError as err:
                raise ValueError(f"RecallConfig.mechanisms: {err}") from None
        if self.slot not in SLOTS:
            raise ValueError(f"RecallConfig.slot must be one of {SLOTS}, got {self.slot!r}")
        if self.init not in INITS:
            raise ValueError(f"RecallConfig.init must be one of {INITS}, got {self.init!r}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"RecallConfig.bias must be True or False, got {self.bias!r}")
        if self.init != "natural" and self.embed_init_std != 1.0:
            raise ValueError(
                f"RecallConfig.embed_init_std applies to init='natural' only; init={self.init!r}"
                f" fixes the embedding law, got embed_init_std={self.embed_init_std!r}"
            )

    @property
    def task(self) -> RecallTask:
        return RecallTask(self.pairs, self.n_key_tokens, self.n_value_tokens)

    @property
    def seed_values(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


class SeedKeys(NamedTuple):
    """The three independent streams of one seed."""

    init: jax.Array
    data: jax.Array
    eval: jax.Array


def seed_keys(seed: int) -> SeedKeys:
    """Initialisation, training-data and held-out keys of a seed (disjoint by fold_in)."""
    root = jax.random.key(seed)
    return SeedKeys(*(jax.random.fold_in(root, i) for i in range(3)))


class TrainState(NamedTuple):
    params: dict
    opt_state: optax.OptState


def make_model(config: RecallConfig, mechanism: Mechanism) -> RecallModel:
    return RecallModel(
        config.task,
        mechanism,
        config.d_k,
        config.d_model,
        config.embed_init_std,
        slot=config.slot,
        init_rule=config.init,
        bias=config.bias,
    )


def make_optimizer(lr: float | jax.Array) -> optax.GradientTransformation:
    """Adam at learning rate ``lr`` (a float or a traced scalar), nothing else."""
    return optax.adam(lr)


def init_params(config: RecallConfig, mechanism: Mechanism, seed: int) -> dict:
    """The parameters of ``mechanism`` at step 0 for ``seed`` (``initial_state``'s)."""
    one = replace(config, seed=seed, seeds=1)
    return jax.tree.map(lambda x: x[0], initial_state(one, mechanism).params)


def loss_and_aux(
    model: RecallModel, params: dict, batch: Batch, constants: MechanismConstants | None = None
):
    """Mean cross-entropy of the value logits, with the logits and attention weights."""
    logits, weights = model.apply({"params": params}, batch, constants)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch.target).mean()
    return loss, (logits, weights)


def train_step(
    model: RecallModel,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batch: Batch,
    constants: MechanismConstants | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One Adam step on ``batch``; the ``METRICS`` are taken before the update.

    Its parts run under ``jax.named_scope`` (``forward_backward``, ``metrics``, ``adam``),
    which names them in profiles and compiled HLO and changes nothing computed.
    """
    with jax.named_scope("forward_backward"):
        grad_fn = jax.value_and_grad(
            lambda p: loss_and_aux(model, p, batch, constants), has_aux=True
        )
        (loss, (logits, weights)), grads = grad_fn(state.params)
    with jax.named_scope("metrics"):
        metrics = {
            "loss": loss,
            "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch.target),
            "grad_norm_wq": jnp.linalg.norm(grads["W_Q"]),
            "grad_norm_wk": jnp.linalg.norm(grads["W_K"]),
            "grad_norm_wv": jnp.linalg.norm(grads["W_V"]),
            "attn_entropy": jnp.mean(entropy(weights)),
            "attn_max_weight": jnp.mean(max_weight(weights)),
        }
    with jax.named_scope("adam"):
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
    return TrainState(params, opt_state), metrics


@cache
def _draw_program(batch_size: int, task: RecallTask):
    return jax.jit(jax.vmap(lambda key, steps: stream_batches(key, steps, batch_size, task),
                            in_axes=(0, None)))  # fmt: skip


def draw_chunk(data_keys: jax.Array, steps: jax.Array, batch_size: int, task: RecallTask) -> Batch:
    """The batches of a chunk for every seed: ``stream_batches`` of each key of ``data_keys``
    (``[seeds]``), fields ``[seeds, len(steps), batch_size, ...]``. One compiled program per
    batch size, task, chunk length and seed count, whatever the model or mechanism."""
    return _draw_program(batch_size, task)(data_keys, steps)


def scan_steps(
    model: RecallModel,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batches: Batch,
    metrics: tuple[str, ...] = METRICS,
    constants: MechanismConstants | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """``train_step`` on each of ``batches`` (fields ``[steps, batch_size, ...]``) in turn, a
    ``lax.scan``. Returns the state after the last step and the ``metrics`` named, each
    ``[steps]``. Only ``Trainer`` compiles it, vmapped over its lanes."""

    def body(s: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
        s, m = train_step(model, optimizer, s, batch, constants)
        return s, {k: m[k] for k in metrics}

    return jax.lax.scan(body, state, batches)


def held_out_batches(config: RecallConfig) -> Batch:
    """Every seed's held-out set, stacked: ``eval_size`` sequences from its eval key."""
    keys = jnp.stack([seed_keys(s).eval for s in config.seed_values])
    return jax.vmap(lambda k: sample_batch(k, config.eval_size, config.task))(keys)


def evaluate(
    model: RecallModel, params: dict, batch: Batch, constants: MechanismConstants | None = None
) -> jax.Array:
    """Accuracy of the predicted value on a held-out batch."""
    logits, _ = model.apply({"params": params}, batch, constants)
    return jnp.mean(jnp.argmax(logits, -1) == batch.target)


@dataclass
class TrainResult:
    """A mechanism trained on every seed: per-step metrics ``[seeds, steps]`` and more."""

    mechanism: str
    seeds: list[int]
    start_step: int
    metrics: dict[str, np.ndarray]
    eval_accuracy: np.ndarray
    state: TrainState  # stacked over seeds


@cache
def _init_program(model: RecallModel, task: RecallTask):
    """``TrainState`` at step 0 from an init key, vmapped over keys and jitted: one program
    per model, where an eager ``model.init`` compiles each of its operations apart (jitted,
    ``std * normal`` may round differently from the eager product by an ulp). Adam's state
    does not depend on the learning rate."""
    dummy = sample_batch(jax.random.key(0), 1, task)

    def step0(key: jax.Array) -> TrainState:
        params = model.init(key, dummy)["params"]
        return TrainState(params, make_optimizer(1.0).init(params))

    return jax.jit(jax.vmap(step0))


def initial_state(config: RecallConfig, mechanism: Mechanism) -> TrainState:
    """Step-0 training states of every seed, stacked along a leading seed axis."""
    keys = jnp.stack([seed_keys(seed).init for seed in config.seed_values])
    return _init_program(make_model(config, mechanism), config.task)(keys)


# ----------------------------------------------------------------------------- the engine


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
        optimizer = make_optimizer(lr)
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


def _stacked_constants(runs: Sequence[Run]) -> MechanismConstants:
    """Each run's mechanism constants at its width, each stacked ``[len(runs)]`` (the runs
    share a program, so their mechanisms have the same constants' names)."""
    values = [run.mechanism.constant_values(run.config.d_k) for run in runs]
    return {name: np.asarray([v[name] for v in values], np.float32) for name in values[0]}


def _host_concatenate(trees: Sequence) -> object:
    """``trees`` (of one structure) concatenated leaf by leaf along the leading axis, as
    numpy arrays: stacking and slicing lanes on the host compiles nothing (an eager
    ``jnp.concatenate`` or slice compiles a program per shape)."""
    return jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *trees)


class _Lanes(NamedTuple):
    """One block of lanes as a compiled call takes them, each field ``[block, ...]``."""

    state: TrainState
    seed_index: jax.Array
    rates: jax.Array
    constants: MechanismConstants


#: On CPU, the working set one call of the compiled chunk may hold per device (bytes): a
#: block's parameters, Adam moments and step activations then stay in cache.
CPU_BLOCK_BYTES = 4 * 2**20


def lane_bytes(config: RecallConfig, state: TrainState) -> int:
    """Float32 bytes one lane touches per step: its parameters and Adam's two moments
    (``state``, stacked over lanes: one lane's share), and about six ``[B, pairs, d_k]``
    activations (keys, values and their gradients)."""
    params = sum(x[0].size for x in jax.tree.leaves(state.params))
    return 4 * (3 * params + 6 * config.batch_size * config.pairs * config.d_k)


def _block_size(lanes: int, lanes_per_call: int | None, per_lane: int) -> int:
    """Lanes per compiled call, a multiple of the device count. Default: on CPU as many as
    fit ``CPU_BLOCK_BYTES`` per device (at least one; small models then share each call's
    kernel launches, large ones keep their state in cache); elsewhere every lane at once.
    Every block runs through the same compiled program."""
    n_dev = device_count()
    if lanes_per_call is None:
        fit = max(1, CPU_BLOCK_BYTES // per_lane) * n_dev
        lanes_per_call = fit if jax.default_backend() == "cpu" else lanes
    return -(-min(lanes_per_call, lanes) // n_dev) * n_dev


def _split_blocks(lanes: tuple, n_lanes: int, block: int) -> list[_Lanes]:
    """``lanes`` (fields ``[n_lanes, ...]``) cut into blocks of ``block`` lanes, the last
    padded to a full block (every block then runs through one compiled program), each
    sharded over the devices."""
    blocks = []
    for start in range(0, n_lanes, block):
        part = jax.tree.map(lambda x, start=start: x[start : start + block], lanes)
        blocks.append(_Lanes(*shard_batch(pad_to_multiple(part, block)[0])))
    return blocks


class Trainer:
    """Trains ``runs`` together, one compiled program for all their lanes.

    Every run must have the same ``Run.program`` (``train_runs`` groups runs that way).
    Lanes are run-major: lane ``i`` is seed ``i % seeds`` of run ``i // seeds`` when every
    run has ``seeds`` seeds. ``metrics`` names the per-step ``METRICS`` recorded;
    ``diagnostics``, if given, is evaluated on each lane's held-out sequences (its first
    ``probe`` of them) at ``start_step`` and after every chunk (``records``). With
    ``on_diverge="raise"`` a non-finite loss raises ``DivergenceError``; with ``"record"``
    the lane goes on (its later numbers are NaN) and ``diverged_step`` says where.
    ``lanes_per_call`` lanes are vmapped in one call of the compiled chunk (``_block_size``);
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
        lanes = (
            _host_concatenate(states),
            np.asarray([self.seeds.index(seed) for _, seed in self.lanes], np.int32),
            np.asarray([runs[r].rate for r, _ in self.lanes], np.float32),
            _stacked_constants([runs[r] for r, _ in self.lanes]),
        )
        per_lane = lane_bytes(self.config, lanes[0])
        self.block = _block_size(len(self.lanes), lanes_per_call, per_lane)
        self._blocks = _split_blocks(lanes, len(self.lanes), self.block)

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
        return replicate(_host_concatenate(sets))

    def _record(self) -> None:
        program = _diagnostics_program(self.model, self.diagnostics)
        record = self._per_block(
            lambda b: program((b.state.params, b.seed_index, b.constants), self._probe)
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
        while self.step < until:
            end = min(self.step + self.config.chunk_steps, until)
            steps = np.arange(self.step, end)
            batches = draw_chunk(self._data_keys, steps, self.config.batch_size, self.config.task)
            outputs = []
            for i, b in enumerate(self._blocks):
                state, block_metrics = program(b.state, b.seed_index, b.rates, b.constants, batches)
                self._blocks[i] = b._replace(state=state)
                outputs.append(block_metrics)
            metrics = self._lanes_of(outputs)
            self._check_finite(metrics["loss"])
            self.chunks.append(metrics)
            self.step = end
            if self.diagnostics is not None:
                self._record()
            if on_chunk is not None:
                on_chunk(len(steps) * len(self.runs))
            if stop is not None and stop(self):
                return

    def chunk_programs(self) -> tuple[Callable[[], Batch], Callable[[Batch], tuple]]:
        """The two calls ``run`` makes per chunk, on the first block of lanes from the current
        state, without advancing it: ``draw()`` gives the next chunk's batches (of every
        seed) and ``train(batches)`` the block's state and metrics after it (the bench times
        them)."""
        steps = jnp.arange(self.step, self.step + self.config.chunk_steps)
        program = _chunk_program(self.model, self.metric_names)
        block = self._blocks[0]

        def draw() -> Batch:
            return draw_chunk(self._data_keys, steps, self.config.batch_size, self.config.task)

        def train(batches: Batch) -> tuple:
            return program(block.state, block.seed_index, block.rates, block.constants, batches)

        return draw, train

    def _check_finite(self, losses: np.ndarray) -> None:
        bad = ~np.isfinite(losses)
        first = np.where(bad.any(axis=1), bad.argmax(axis=1) + self.step, -1)
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

    def eval_accuracy(self) -> np.ndarray:
        """Held-out accuracy of every lane (``eval_size`` sequences of its seed's eval key)."""
        program = _evaluate_program(self.model)
        held_out = self._held_out()
        return self._per_block(lambda b: program(b.state.params, b.seed_index, b.constants,
                                                 held_out))  # fmt: skip

    def run_state(self, r: int) -> TrainState:
        """The state of run ``r``, stacked over its seeds (to continue it elsewhere)."""
        lanes = self.lane_slice(r)
        return jax.tree.map(lambda x: x[lanes], self.state)

    @property
    def state(self) -> TrainState:
        """Every lane's state, ``[lanes, ...]``."""
        return self._lanes_of([b.state for b in self._blocks])

    def _lanes_of(self, outputs: list):
        """Per-block outputs as numpy arrays ``[lanes, ...]`` (block padding removed)."""
        return jax.tree.map(lambda x: x[: self.n_lanes], _host_concatenate(outputs))

    def _per_block(self, fn: Callable[[_Lanes], object]):
        return self._lanes_of([fn(b) for b in self._blocks])

    def results(self) -> list[TrainResult]:
        """One ``TrainResult`` per run, in the order of ``runs``."""
        metrics, accuracy = self.metrics, self.eval_accuracy()
        out = []
        for r, run in enumerate(self.runs):
            lanes = self.lane_slice(r)
            out.append(TrainResult(
                run.label or run.mechanism.name, run.config.seed_values, self.start_step,
                {k: v[lanes] for k, v in metrics.items()}, accuracy[lanes], self.run_state(r),
            ))  # fmt: skip
        return out


def earliest_nonfinite(losses: np.ndarray) -> tuple[int, int] | None:
    """``(lane, step)`` of the earliest non-finite entry of ``losses`` ``[lanes, steps]``
    (the lowest lane among those of that step), or None if every entry is finite."""
    bad = np.argwhere(~np.isfinite(losses))
    if not len(bad):
        return None
    lane, step = min(bad, key=lambda ij: (ij[1], ij[0]))
    return int(lane), int(step)


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
) -> list[TrainResult]:
    """Train every run for ``steps`` steps (its ``config.steps - start_step`` if None), runs
    that share a program as lanes of one ``Trainer`` (``on_diverge`` as ``Trainer``'s);
    results in the order of ``runs``."""
    runs = list(runs)
    out: list[TrainResult | None] = [None] * len(runs)
    for group in group_runs(runs):
        members = [runs[i] for i in group]
        length = members[0].config.steps - start_step if steps is None else steps
        if length < 1:
            raise ValueError(f"train: steps must be >= 1, got {length} (start_step {start_step})")
        if any(m.config.steps != members[0].config.steps for m in members) and steps is None:
            raise ValueError("train_runs: runs of one program must train equally long")
        trainer = Trainer(members, start_step=start_step, on_diverge=on_diverge)
        trainer.run(start_step + length, on_chunk)
        for i, result in zip(group, trainer.results(), strict=True):
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
    ``config.mechanisms``."""
    runs = [Run(config, load_mechanism(name)) for name in config.mechanisms]
    return dict(zip(config.mechanisms, train_runs(runs, on_chunk=on_chunk), strict=True))
