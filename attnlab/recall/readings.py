"""Readings of the recall demo: the choices article 004 leaves unstated, declared as a family.

The article's training demo fixes d_k = 256, 16 key-value pairs over 32 key and 32 value
tokens and Adam at 3e-4, and reports step-0 W_Q gradient norms (0.1085 scaled, 1.0610
unscaled), milestones and final losses; it does not say how a pair becomes a slot, how
parameters are initialised, whether projections have biases, the embedding width or the
batch size. This module declares the family of readings of those choices in one table,
before any fit result is seen; later stages screen and fit it openly. Each choice's law
(details: ``attnlab.recall.model``):

- slot: concat ``x_i = [E_key[k_i]; E_val[v_i]]`` | sum ``x_i = E_key[k_i] + E_val[v_i]`` |
  separate ``k_i = E_key[k_i] W_K, v_i = E_val[v_i] W_V`` | onehot: one-hot tokens into
  linear layers, no embeddings.
- init: natural (embeddings N(0, 1), projections LeCun-normal) | pytorch (embeddings
  N(0, 1), weights and biases U(+-1/sqrt(fan_in))) | glorot (weights and embeddings
  U(+-sqrt(6/(fan_in + fan_out))), biases 0) | gpt (weights and embeddings N(0, 0.02^2),
  biases 0).
- bias: biases on Q, K, V and the readout W_O, or none.
- d_model: embedding width of one token, 16 to 256 (onehot readings have none: recorded as
  ``None``, named without a ``-d`` part, and listed once per init, bias and batch size).
- batch_size: sequences per Adam step, 16 to 256.

``RUN_LENGTHS`` (training steps) only move final-loss numbers; a later stage uses them.

Stage 1 (``step0_fingerprints``, no training) screens every reading by the median over seeds
of its step-0 ``||grad W_Q||`` for scaled and unscaled attention, and ``kept`` keeps those
whose scaled median lies within a factor of the article's 0.1085.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
from jax import lax

from attnlab.core.curves import debiased_ema, trailing_mean
from attnlab.core.temperature import MECHANISMS
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.model import BIAS_PARAMS, INITS, SLOTS
from attnlab.recall.step import TrainState, recall_optimizer
from attnlab.recall.task import Batch, RecallTask, example_batch, sample_batch, sample_sequence

_SCALED = MECHANISMS["scaled"]

#: The declared choices, in table order.
BIASES: tuple[bool, ...] = (False, True)
D_MODELS: tuple[int, ...] = (16, 32, 64, 128, 256)
BATCH_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256)
#: Training lengths of a later stage (they only move final-loss numbers).
RUN_LENGTHS: tuple[int, ...] = (1000, 1500, 2000, 3000)
#: The article's step-0 ``||grad W_Q||`` of scaled attention, the screen's target.
ARTICLE_GRAD_NORM_WQ_SCALED = 0.1085

#: The second family (experiment 09's second pass), declared before any of its results:
#: finer grids of batch size and d_model (steps of about sqrt(2) instead of 2), the first
#: family's slots, inits and biases, and the smoothing of the loss the milestones are read
#: from. The first family is its subset at batch sizes and d_models of powers of 2 with the
#: trailing mean over 25 steps.
D_MODELS_2: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 192, 256)
BATCH_SIZES_2: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 192, 256)


@dataclass(frozen=True)
class Smoothing:
    """How the loss curve is smoothed before its milestones are read: a trailing mean over
    ``window`` steps (``attnlab.core.curves.trailing_mean``) or TensorBoard's debiased
    exponential moving average of weight ``weight`` (``debiased_ema``). Applied after
    training, so every smoothing of a reading shares its training run."""

    name: str
    window: int | None = None
    weight: float | None = None

    def __call__(self, losses: np.ndarray) -> np.ndarray:
        if self.window is not None:
            return trailing_mean(losses, self.window)
        return debiased_ema(losses, self.weight)


SMOOTHINGS: tuple[Smoothing, ...] = (
    *(Smoothing(f"mean{w}", window=w) for w in (10, 25, 50, 100)),
    *(Smoothing(f"ema{w}", weight=w) for w in (0.9, 0.95, 0.99)),
)
#: The first family's smoothing (``RecallConfig.smoothing``).
FIRST_SMOOTHING: Smoothing = SMOOTHINGS[1]


@dataclass(frozen=True)
class Reading:
    """One reading of what the article leaves open (laws: module docstring).

    ``d_model`` is None exactly for ``slot="onehot"``, which has no embeddings.
    """

    name: str
    slot: str
    init: str
    bias: bool
    d_model: int | None
    batch_size: int

    def __post_init__(self) -> None:
        if (self.d_model is None) != (self.slot == "onehot"):
            raise ValueError(
                f"Reading.d_model must be None exactly for slot 'onehot', got {self.d_model!r} "
                f"for slot {self.slot!r}"
            )
        expected = reading_name(self.slot, self.init, self.bias, self.d_model, self.batch_size)
        if self.name != expected:
            raise ValueError(f"Reading.name must be {expected!r}, got {self.name!r}")


def reading_name(slot: str, init: str, bias: bool, d_model: int | None, batch_size: int) -> str:
    """``concat-natural-nobias-d256-b64``; onehot readings have no ``-d`` part."""
    width = "" if d_model is None else f"-d{d_model}"
    return f"{slot}-{init}-{'bias' if bias else 'nobias'}{width}-b{batch_size}"


def _reading(slot: str, init: str, bias: bool, d_model: int | None, batch_size: int) -> Reading:
    name = reading_name(slot, init, bias, d_model, batch_size)
    return Reading(name, slot, init, bias, d_model, batch_size)


#: The declared family: slot x init x bias x d_model x batch size (onehot without d_model).
FAMILY: tuple[Reading, ...] = tuple(
    _reading(slot, init, bias, None if slot == "onehot" else d_model, batch_size)
    for slot, init, bias, d_model, batch_size in itertools.product(
        SLOTS, INITS, BIASES, D_MODELS, BATCH_SIZES
    )
    if slot != "onehot" or d_model == D_MODELS[0]
)

#: The readings of the second family (each trained once, whatever its smoothing).
FAMILY_2_READINGS: tuple[Reading, ...] = tuple(
    _reading(slot, init, bias, None if slot == "onehot" else d_model, batch_size)
    for slot, init, bias, d_model, batch_size in itertools.product(
        SLOTS, INITS, BIASES, D_MODELS_2, BATCH_SIZES_2
    )
    if slot != "onehot" or d_model == D_MODELS_2[0]
)
#: The second family: every reading with every smoothing, ``(reading, smoothing)``.
FAMILY_2: tuple[tuple[Reading, Smoothing], ...] = tuple(
    itertools.product(FAMILY_2_READINGS, SMOOTHINGS)
)


def pair_name(reading: Reading, smoothing: Smoothing) -> str:
    """A member of the second family by name: ``concat-natural-nobias-d24-b96/ema0.95``."""
    return f"{reading.name}/{smoothing.name}"


_BY_NAME: dict[str, Reading] = {r.name: r for r in FAMILY_2_READINGS}
#: Today's 04 defaults: concat slots, natural init, no biases, d_model 256, batch size 64.
NATURAL: Reading = _BY_NAME[reading_name("concat", "natural", False, 256, 64)]
_BY_NAME["natural"] = NATURAL


def get_reading(name: str) -> Reading:
    """The member named ``name`` (or ``"natural"``); ValueError listing close names."""
    try:
        return _BY_NAME[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_BY_NAME), n=5, cutoff=0.6)
        hint = f"; close names: {', '.join(close)}" if close else ""
        raise ValueError(f"unknown reading {name!r}{hint}") from None


def reading_config(reading: Reading, base: RecallConfig | None = None) -> RecallConfig:
    """``base`` (the 04 defaults if None) with the reading's slot, init, bias, d_model and
    batch size; a onehot reading keeps ``base.d_model`` (unused by its model)."""
    base = RecallConfig() if base is None else base
    return replace(
        base,
        slot=reading.slot,
        init=reading.init,
        bias=reading.bias,
        d_model=base.d_model if reading.d_model is None else reading.d_model,
        batch_size=reading.batch_size,
    )


# --------------------------------------------------------------------------- stage 1 screen


def first_batches(task: RecallTask, batch_size: int, seeds: Sequence[int]) -> Batch:
    """Batch 0 of every seed's training stream, stacked ``[seeds, batch_size, ...]``: what
    ``train`` trains on at step 0 (``stream_batch(seed_keys(s).data, 0, ...)``)."""
    data_keys = jnp.stack([seed_keys(s).data for s in seeds])
    draw = jax.jit(jax.vmap(lambda k: sample_batch(jax.random.fold_in(k, 0), batch_size, task)))
    return draw(data_keys)


def _first_batches_all(
    task: RecallTask, batch_sizes: Iterable[int], seeds: Sequence[int]
) -> dict[int, Batch]:
    """``first_batches`` for several batch sizes from one compiled sampler: the per-sequence
    keys of every (batch size, seed) are split eagerly, then one vmapped ``sample_sequence``
    draws them all (each sequence depends on its key only, so the draws are the same)."""
    sizes = sorted(set(batch_sizes))
    data_keys = [jax.random.fold_in(seed_keys(s).data, 0) for s in seeds]
    keys = [jax.random.split(k, b) for b in sizes for k in data_keys]
    flat = jax.jit(jax.vmap(lambda k: sample_sequence(k, task)))(jnp.concatenate(keys))
    out, start = {}, 0
    for b in sizes:
        n = b * len(seeds)
        out[b] = jax.tree.map(lambda x, n=n, start=start: x[start : start + n], flat)
        out[b] = jax.tree.map(lambda x, b=b: x.reshape(len(seeds), b, *x.shape[1:]), out[b])
        start += n
    return out


#: The mechanisms of the screen, in column order; both initialise like ``scaled``.
SCREENED: tuple[str, ...] = ("scaled", "unscaled")


def _initial_params(
    needed: Iterable[tuple[str, str, int | None]], base: RecallConfig, seeds: Sequence[int]
) -> dict[tuple[str, str, int | None], dict]:
    """``init_params(config, scaled, s)`` stacked over ``seeds``, with ``bias=True``, for
    every needed ``(slot, init, d_model)``, from one compiled program (vmapped over the
    seeds' init keys; a jitted init draws the same values as ``init_params``'s eager one).

    Flax draws parameter keys in creation order and the biases come after every weight, so
    a no-bias reading's weights are these without the biases. Each parameter's law is a
    function of the init convention, the parameter's name and its shape (a bias takes its
    fan-in from its weight's rows), so models whose parameter names and shapes agree (sum
    and separate slots) draw identical parameters and are initialised once.
    """
    dummy = example_batch(base.task)
    key0 = jax.random.key(0)
    models, signature_of = {}, {}
    for slot, init, d_model in needed:
        model = make_model(reading_config(_reading(slot, init, True, d_model, 1), base), _SCALED)
        shapes = jax.eval_shape(model.init, key0, dummy)["params"]
        signature = (init, tuple((k, v.shape) for k, v in sorted(shapes.items())))
        signature_of[slot, init, d_model] = signature
        models.setdefault(signature, model)

    @jax.jit
    def run(init_keys: jax.Array) -> dict:
        return {
            signature: jax.vmap(lambda k, m=model: m.init(k, dummy)["params"])(init_keys)
            for signature, model in models.items()
        }

    params = run(jnp.stack([seed_keys(s).init for s in seeds]))
    return {key: params[signature] for key, signature in signature_of.items()}


def _pad(params: dict, slot: str, d_model: int | None, width: int | None, bias: bool) -> dict:
    """Embed a reading's parameters in a ``width``-wide model of the same slot: zero
    embedding columns and zero projection rows (for concat, in each half), so that every
    embedding-space product gains only exact zeros; a no-bias reading's biases are 0."""
    out = dict(params)
    if not bias:
        out.update({name: jnp.zeros_like(params[name]) for name in BIAS_PARAMS})
    if slot == "onehot" or d_model == width:
        return out
    extra = width - d_model

    def rows(w):  # pad the rows of [..., rows, d_k] (a leading seed axis)
        return jnp.pad(w, [(0, 0), (0, extra), (0, 0)])

    for name in ("E_key", "E_val"):
        out[name] = jnp.pad(params[name], [(0, 0), (0, 0), (0, extra)])
    out["W_Q"] = rows(params["W_Q"])
    for name in ("W_K", "W_V"):
        w = params[name]
        halves = (w[:, :d_model], w[:, d_model:]) if slot == "concat" else (w,)
        out[name] = jnp.concatenate([rows(h) for h in halves], axis=1)
    return out


def padded_groups(
    readings: Sequence[Reading], base: RecallConfig
) -> list[tuple[RecallConfig, list[Reading], list[TrainState]]]:
    """Step-0 training states of ``readings``, grouped so that each group trains as lanes of
    one compiled program (``Trainer``).

    A group is the readings of one slot, bias and batch size (groups in order of first
    member), inside one model: ``base`` with that slot, bias and batch size and the group's
    widest ``d_model``. Each reading's ``TrainState``, stacked over ``base.seed_values``, is
    its step-0 parameters (``init_params``'s draw, from ``_initial_params``: one compiled
    initialiser for every group) zero-padded to that width (``_pad``) and Adam's step-0
    state. Training a padded state trains the reading: a padded embedding column or
    projection row only ever meets exact zeros, so its gradient is exactly 0 and Adam's
    update of it is ``0 / (0 + eps) = 0``; it stays 0, and every other number gains only
    zero terms (float32 summation order may differ).
    """
    readings = list(readings)
    params = _initial_params(
        dict.fromkeys((r.slot, r.init, r.d_model) for r in readings), base, base.seed_values
    )
    init_adam = jax.vmap(recall_optimizer(1.0).init)
    groups: dict[tuple, list[Reading]] = {}
    for r in readings:
        groups.setdefault((r.slot, r.bias, r.batch_size), []).append(r)
    out = []
    for (slot, bias, batch_size), members in groups.items():
        width = None if slot == "onehot" else max(r.d_model for r in members)
        states = []
        for r in members:
            padded = _pad(params[r.slot, r.init, r.d_model], slot, r.d_model, width, bias)
            padded = {k: v for k, v in padded.items() if bias or k not in BIAS_PARAMS}
            states.append(TrainState(padded, init_adam(padded)))
        config = reading_config(_reading(slot, "natural", bias, width, batch_size), base)
        out.append((config, members, states))
    return out


def _grad_norm_program(config: RecallConfig):
    """``||grad W_Q||`` at step 0 of the model of ``config`` (with biases), for many readings
    at once: ``(params [readings, seeds, ...], batch [seeds, ...], scales [n]) -> [readings,
    seeds, n]``; readings run one after another (``lax.map``), seeds and scales vmapped.

    The logit scale is a traced argument: the model is built with the ``learned_temperature``
    mechanism, whose ``scale`` parameter is set to each fixed scale, so ``tau * q.k`` is
    the scaled or unscaled logit and one program serves both. The loss is ``train``'s mean
    cross-entropy; its gradient is ``train_step``'s.
    """
    model = make_model(replace(config, bias=True), MECHANISMS["learned_temperature"])

    def norm(params: dict, batch: Batch, scale: jax.Array) -> jax.Array:
        def loss(p):
            logits, _ = model.apply({"params": {**p, "scale": scale}}, batch)
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch.target).mean()

        return jnp.linalg.norm(jax.grad(loss)(params)["W_Q"])

    per_seed = jax.vmap(jax.vmap(norm, in_axes=(None, None, 0)), in_axes=(0, 0, None))
    return jax.jit(
        lambda params, batch, scales: lax.map(lambda p: per_seed(p, batch, scales), params)
    )


def step0_fingerprints(
    readings: Iterable[Reading],
    seeds: int = 8,
    seed: int = 0,
    base: RecallConfig | None = None,
) -> pd.DataFrame:
    """Stage 1 of the fit: every reading's step-0 ``||grad W_Q||``, no training.

    One row per reading: its fields, then ``grad_norm_wq_scaled`` and
    ``grad_norm_wq_unscaled``, the medians over seeds ``seed .. seed + seeds - 1`` of the
    gradient ``train_step`` computes at step 0 (``train``'s ``grad_norm_wq`` at step 0):
    params from the seed's init key, batch 0 of the seed's data stream; and ``ratio``,
    unscaled / scaled of the medians. ``base`` (the 04 defaults if None) supplies what a
    reading does not set (d_k, task sizes).

    Compiled programs: one data sampler, one initialiser, and one gradient program
    per (slot, batch size), which runs every init, bias and d_model of that slot, every seed
    and both mechanisms: readings without biases run with zero biases, and narrower
    embeddings are zero-padded to the slot's widest d_model (``_pad``). Both change only
    float32 summation order, not the function: the norms equal ``train``'s to rounding
    (the tests compare them with a direct ``jax.grad``).
    """
    readings = list(readings)
    base = RecallConfig() if base is None else base
    seed_list = list(range(seed, seed + seeds))
    if not readings or seeds < 1:
        raise ValueError("step0_fingerprints needs at least one reading and one seed")
    if any(MECHANISMS[m].qk_init_exponent != 0 for m in SCREENED):
        raise ValueError(f"step0_fingerprints: {SCREENED} must all initialise like scaled")
    scales = [MECHANISMS[m].constant_values(base.d_k)["scale"] for m in SCREENED]
    scales = jnp.array(scales, jnp.float32)
    batches = _first_batches_all(base.task, [r.batch_size for r in readings], seed_list)
    params = _initial_params(
        dict.fromkeys((r.slot, r.init, r.d_model) for r in readings), base, seed_list
    )

    medians: dict[str, np.ndarray] = {}
    for slot in SLOTS:
        members = [r for r in readings if r.slot == slot]
        if not members:
            continue
        width = None if slot == "onehot" else max(r.d_model for r in members)
        for batch_size in sorted({r.batch_size for r in members}):
            group = [r for r in members if r.batch_size == batch_size]
            stacked = jax.tree.map(
                lambda *xs: jnp.stack(xs),
                *[
                    _pad(params[slot, r.init, r.d_model], slot, r.d_model, width, r.bias)
                    for r in group
                ],
            )
            template = _reading(slot, "natural", True, width, batch_size)
            program = _grad_norm_program(reading_config(template, base))
            norms = np.asarray(program(stacked, batches[batch_size], scales))
            for r, per_seed in zip(group, norms, strict=True):
                medians[r.name] = np.median(per_seed, axis=0)  # [mechanisms]

    frame = pd.DataFrame([asdict(r) for r in readings])
    frame["d_model"] = frame["d_model"].astype("Int64")  # onehot: <NA>
    for i, m in enumerate(SCREENED):
        frame[f"grad_norm_wq_{m}"] = [float(medians[r.name][i]) for r in readings]
    frame["ratio"] = frame.grad_norm_wq_unscaled / frame.grad_norm_wq_scaled
    return frame


def kept(
    frame: pd.DataFrame, target: float = ARTICLE_GRAD_NORM_WQ_SCALED, factor: float = 1.5
) -> pd.Series:
    """Readings whose scaled median lies within ``[target / factor, target * factor]``."""
    x = frame["grad_norm_wq_scaled"]
    return (x >= target / factor) & (x <= target * factor)
