"""Training the recall model: a compiled ``lax.scan`` over steps, vmapped over seeds.

For every mechanism the seeds are trained together: the per-seed training states are
stacked along a leading axis that is vmapped and sharded over all devices
(``attnlab.core.parallel``), and steps run inside ``jax.lax.scan`` in chunks of ``chunk_steps``
(``scan_steps``), each fed the chunk's batches drawn beforehand by a program of its own
(``draw_chunk``); Python only runs between chunks, to advance the progress bar and check
for divergence.

Identical means identical: for a given seed every mechanism starts from the parameters
drawn from the same initialisation key (the mechanisms differ only where documented in
``attnlab.core.temperature``) and sees the same batches in the same order, because batch ``t``
is drawn from ``fold_in(data_key(seed), t)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from attnlab.core.parallel import device_count, pad_to_multiple, shard_batch, unpad
from attnlab.core.softmax_stats import entropy, max_weight
from attnlab.core.temperature import MECHANISMS, Mechanism
from attnlab.harness.errors import RunError
from attnlab.studies.recall.model import INITS, SLOTS, RecallModel
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
    open (batch size, steps, widths, initialisation, smoothing); see README.

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
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if not self.mechanisms or unknown:
            raise ValueError(
                f"RecallConfig.mechanisms must name known mechanisms, got {self.mechanisms!r}"
            )
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


def make_optimizer(config: RecallConfig) -> optax.GradientTransformation:
    """Adam at the article's learning rate, nothing else."""
    return optax.adam(config.lr)


def init_params(config: RecallConfig, mechanism: Mechanism, seed: int) -> dict:
    """The parameters of ``mechanism`` at step 0 for ``seed``."""
    dummy = sample_batch(jax.random.key(0), 1, config.task)
    return make_model(config, mechanism).init(seed_keys(seed).init, dummy)["params"]


def loss_and_aux(model: RecallModel, params: dict, batch: Batch):
    """Mean cross-entropy of the value logits, with the logits and attention weights."""
    logits, weights = model.apply({"params": params}, batch)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch.target).mean()
    return loss, (logits, weights)


def train_step(
    model: RecallModel,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batch: Batch,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One Adam step on ``batch``; the ``METRICS`` are taken before the update.

    Its parts run under ``jax.named_scope`` (``forward_backward``, ``metrics``, ``adam``),
    which names them in profiles and compiled HLO and changes nothing computed.
    """
    with jax.named_scope("forward_backward"):
        grad_fn = jax.value_and_grad(lambda p: loss_and_aux(model, p, batch), has_aux=True)
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


@partial(jax.jit, static_argnums=(2, 3))
def draw_chunk(data_keys: jax.Array, steps: jax.Array, batch_size: int, task: RecallTask) -> Batch:
    """The batches of a chunk for every seed: ``stream_batches`` of each key of ``data_keys``
    (``[seeds]``), fields ``[seeds, len(steps), batch_size, ...]``. One compiled program per
    batch size, task, chunk length and seed count, whatever the model or mechanism: a
    training program (``scan_steps``) then compiles without the random number generation
    (a third less compile time: 1.1-1.4 against 1.6-1.7 s for experiment 09's readings)."""
    return jax.vmap(lambda key: stream_batches(key, steps, batch_size, task))(data_keys)


def scan_steps(
    model: RecallModel,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batches: Batch,
    metrics: tuple[str, ...] = METRICS,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """``train_step`` on each of ``batches`` (fields ``[steps, batch_size, ...]``) in turn, a
    ``lax.scan``. Returns the state after the last step and the ``metrics`` named, each
    ``[steps]``. Every training loop of the package compiles this, vmapped over seeds (or
    lanes), and feeds it ``draw_chunk``'s batches."""

    def body(s: TrainState, batch: Batch) -> tuple[TrainState, dict[str, jax.Array]]:
        s, m = train_step(model, optimizer, s, batch)
        return s, {k: m[k] for k in metrics}

    return jax.lax.scan(body, state, batches)


def held_out_batches(config: RecallConfig) -> Batch:
    """Every seed's held-out set, stacked: ``eval_size`` sequences from its eval key."""
    keys = jnp.stack([seed_keys(s).eval for s in config.seed_values])
    return jax.vmap(lambda k: sample_batch(k, config.eval_size, config.task))(keys)


def evaluate(model: RecallModel, params: dict, batch: Batch) -> jax.Array:
    """Accuracy of the predicted value on a held-out batch."""
    logits, _ = model.apply({"params": params}, batch)
    return jnp.mean(jnp.argmax(logits, -1) == batch.target)


@dataclass
class TrainResult:
    """A mechanism trained on every seed: per-step metrics ``[seeds, steps]`` and more."""

    mechanism: str
    seeds: list[int]
    start_step: int
    metrics: dict[str, np.ndarray]
    eval_accuracy: np.ndarray
    state: TrainState  # stacked over seeds (padded to the device count)


def stack_states(states: list[TrainState]) -> TrainState:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def initial_state(config: RecallConfig, mechanism: Mechanism) -> TrainState:
    """Step-0 training states of every seed, stacked along a leading seed axis."""
    optimizer = make_optimizer(config)
    states = []
    for seed in config.seed_values:
        params = init_params(config, mechanism, seed)
        states.append(TrainState(params, optimizer.init(params)))
    return stack_states(states)


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
    if start_step < 0:
        raise ValueError(f"train: start_step must be >= 0, got {start_step}")
    steps = config.steps - start_step if steps is None else steps
    if steps < 1:
        raise ValueError(f"train: steps must be >= 1, got {steps} (start_step {start_step})")
    model, optimizer = make_model(config, mechanism), make_optimizer(config)
    state = initial_state(config, mechanism) if state is None else state
    seeds = config.seed_values
    data_keys = jnp.stack([seed_keys(s).data for s in seeds])
    n_dev = device_count()
    (state, data_keys), _ = pad_to_multiple((state, data_keys), n_dev)
    state, data_keys = shard_batch((state, data_keys))

    run_chunk = jax.jit(jax.vmap(partial(scan_steps, model, optimizer)))
    chunks = []
    for chunk_start in range(start_step, start_step + steps, config.chunk_steps):
        chunk_end = min(chunk_start + config.chunk_steps, start_step + steps)
        chunk = jnp.arange(chunk_start, chunk_end)
        batches = draw_chunk(data_keys, chunk, config.batch_size, config.task)
        state, metrics = run_chunk(state, batches)
        metrics = {k: np.asarray(v)[: len(seeds)] for k, v in metrics.items()}
        _check_finite(metrics["loss"], mechanism.name, seeds, chunk_start)
        chunks.append(metrics)
        if on_chunk is not None:
            on_chunk(chunk_end - chunk_start)
    metrics = {k: np.concatenate([c[k] for c in chunks], axis=1) for k in METRICS}

    params = unpad(state.params, len(seeds))
    accuracy = jax.jit(jax.vmap(lambda p, b: evaluate(model, p, b)))(
        params, held_out_batches(config)
    )
    return TrainResult(mechanism.name, seeds, start_step, metrics, np.asarray(accuracy), state)


def _check_finite(losses: np.ndarray, mechanism: str, seeds: list[int], chunk_start: int) -> None:
    bad = ~np.isfinite(losses)
    if bad.any():
        seed_index, offset = min(np.argwhere(bad), key=lambda ij: (ij[1], ij[0]))  # earliest
        raise DivergenceError(
            f"loss is {losses[seed_index, offset]} for mechanism {mechanism}, "
            f"seed {seeds[seed_index]}, at step {chunk_start + offset}"
        )


def train_and_evaluate(
    config: RecallConfig, on_chunk: Callable[[int], None] | None = None
) -> dict[str, TrainResult]:
    """Train every mechanism of ``config`` on every seed; results keyed by mechanism."""
    return {name: train(config, MECHANISMS[name], on_chunk=on_chunk) for name in config.mechanisms}
