"""The open mechanism API: who sets the attention temperature, as a value anyone can write.

A mechanism turns queries and keys into attention weights in two steps,

    z = logits(q, k, **theta)        q [..., Tq, d], k [..., Tk, d]  ->  z [..., Tq, Tk]
    p = weights(z, mask)             z [..., Tq, Tk]                 ->  p [..., Tq, Tk]

where ``theta`` holds the mechanism's named scalars: *parameters*, learned, each with its
initial value, and *constants*, fixed. An initial value may depend on the head width, so
it is a number or a function of ``d_k`` (``1/sqrt(d_k)``). The output of attention is
``p v``; the rest of the model never looks inside the mechanism.

The simplest mechanism is a plain function ``logits(q, k) -> z``: softmax weights, no
scalars, the model's default initialisation (``as_mechanism``). Everything else is an
optional field of ``Mechanism``, in the manner of Optax's ``GradientTransformation``:

====================  =====================================================================
``params``            learned scalars and their initial values, passed to ``logits`` by name
``constants``         fixed scalars, passed to ``logits`` by name; traced, so mechanisms that
                      differ only in them share one compiled program (``program``)
``weights``           ``weights(z, mask)``: softmax (default), ``sigmoid_weights``,
                      ``softpick_weights`` or any function of that shape
``row_length``        pass ``n=``, the number of keys each query may attend (>= 1, shape
                      ``[..., Tq, 1]`` or a scalar), to ``logits``
``qk_init_exponent``  W_Q and W_K start ``d_k ** e`` times their default (-1/4 folds
                      ``1/sqrt(d_k)`` into the initialisation)
``normalize_qk``      L2-normalise q and k before ``logits`` sees them
====================  =====================================================================

``check_mechanism`` runs a new mechanism on random inputs, eagerly and under ``jax.jit``
and ``jax.grad``, so a broken one stops with one line naming it before any training
starts; ``attnlab.core.references`` resolves the names a command line gives (a built-in,
``MODULE:NAME``, ``path/to/file.py:NAME``).

Limits (what the API cannot express, and what ``check_mechanism`` refuses):

- ``logits`` returns *logits* ``z`` (any real numbers), not weights: ``weights`` turns them
  into weights. Under softmax weights, logits whose every row is non-negative and sums to
  one are refused (they would be softmaxed again); to give weights, set ``weights``.
- ``logits`` sees q and k only: no positions (the recall task's slots are unordered, so
  ALiBi or RoPE would run and mean nothing), no values, the mask only through ``n=`` and
  ``weights(z, mask)``; one head, one map per head (no mixtures of maps).
- Its learned and fixed values are scalars, each one number (or a function of ``d_k``
  giving one), named neither ``n`` nor like the model's parameters (``RESERVED_NAMES``).
- It is traced: ``jnp.where`` or ``jax.lax.cond``, not a Python ``if`` on an array;
  ``jax.numpy``, not numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from attnlab.core.attention import attention_logits, masked_softmax

Array = jax.Array
#: An initial value: a number, or a function of the head width ``d_k`` returning one.
Initial = float | Callable[[int], float]
Scalars = tuple[tuple[str, Initial], ...]

#: ``epsilon`` of ``softpick_weights`` (the authors' default).
SOFTPICK_EPS = 1e-8
#: ``epsilon`` inside ``l2_normalize``'s square root.
L2_EPS = 1e-6
#: Names a mechanism's scalars cannot take: ``n`` (the row length ``row_length`` passes)
#: and the recall model's own parameters (``attnlab.training.model.MODEL_PARAMS``),
#: beside which the learned scalars are stored.
RESERVED_NAMES = frozenset(
    {"n", "E_key", "E_val", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"}
)
#: How far a row of logits may be from summing to one and still "look like weights"
#: (``check_mechanism``): a float32 sum of ``n`` terms in [0, 1] is within ``n`` eps of
#: the exact sum, and weights of a softmax computed in float32 sum to 1 within a few eps;
#: 64 eps per key covers both with room.
WEIGHTS_LIKE_TOLERANCE_PER_KEY = 64 * 2.0**-23


class MechanismError(ValueError):
    """A mechanism that cannot be used: the message names it and what is wrong."""


class MechanismReferenceError(ValueError):
    """A reference (``NAME``, ``MODULE:NAME``, ``FILE.py:NAME``) that names no mechanism."""


# ----------------------------------------------------------------------------- hooks


def scaled_logits(q: ArrayLike, k: ArrayLike, scale: ArrayLike) -> Array:
    """``z = scale * q . k`` in float32 (the suite's one dot product, ``attention_logits``)."""
    return attention_logits(q, k, scale=scale)


def capped_logits(q: ArrayLike, k: ArrayLike, scale: ArrayLike, cap: ArrayLike) -> Array:
    """``z = cap * tanh(scale * q . k / cap)``: the soft-cap of Gemma 2 and Grok-1."""
    return attention_logits(q, k, scale=scale, logit_cap=cap)


def softmax_weights(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """``p = softmax(z)`` over the keys ``mask`` allows, in float32 for half-precision
    logits (``masked_softmax``); a fully masked row gives zeros."""
    return masked_softmax(jnp.asarray(z, jnp.promote_types(jnp.result_type(z), jnp.float32)), mask)


def sigmoid_weights(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """``p_j = sigmoid(z_j)`` where ``mask`` allows, 0 elsewhere: each weight on its own, the
    row not normalised (sigmoid attention, Ramapuram et al. 2024). Computed in float32."""
    z = jnp.asarray(z, jnp.promote_types(jnp.result_type(z), jnp.float32))
    p = jax.nn.sigmoid(z)
    return p if mask is None else jnp.where(jnp.asarray(mask, bool), p, 0.0)


def softpick_weights(z: ArrayLike, mask: ArrayLike | None = None) -> Array:
    """Softpick (Zuhri et al. 2025), ``p_j = ReLU(e^{z_j} - 1) / (sum_l |e^{z_l} - 1| + eps)``
    over the keys ``mask`` allows (masked keys are left out of the sum, as the authors' code
    leaves out non-finite logits), ``eps = SOFTPICK_EPS``.

    Computed stably as the authors do: numerator and denominator multiplied by ``e^{-m}``,
    ``m`` the row's largest allowed logit (held out of the gradient, which it does not
    change), so no exponent argument is positive:

        p_j = ReLU(e^{z_j - m} - e^{-m}) / (sum_l |e^{z_l - m} - e^{-m}| + eps e^{-m}).

    Rows need not sum to one; a row of logits <= 0 is all zeros; so is a fully masked row.
    """
    z = jnp.asarray(z, jnp.promote_types(jnp.result_type(z), jnp.float32))
    allowed = jnp.ones(z.shape, bool) if mask is None else jnp.broadcast_to(mask, z.shape)
    m = jnp.max(jnp.where(allowed, z, -jnp.inf), axis=-1, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    shifted = jnp.where(allowed, jnp.exp(jnp.where(allowed, z - m, 0.0)) - jnp.exp(-m), 0.0)
    denominator = jnp.sum(jnp.abs(shifted), axis=-1, keepdims=True) + SOFTPICK_EPS * jnp.exp(-m)
    return jax.nn.relu(shifted) / denominator


def l2_normalize(x: ArrayLike, eps: float = L2_EPS) -> Array:
    """``x / sqrt(|x|^2 + eps)`` along the last axis (QK-norm; finite at ``x = 0``)."""
    x = jnp.asarray(x)
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def row_lengths(mask: ArrayLike | None, n_keys: int) -> Array:
    """``n``: keys each query may attend, at least 1 (``[..., Tq, 1]``; ``n_keys`` unmasked)."""
    if mask is None:
        return jnp.asarray(float(n_keys), jnp.float32)
    count = jnp.sum(jnp.asarray(mask, jnp.float32), axis=-1, keepdims=True)
    return jnp.maximum(count, 1.0)


# ----------------------------------------------------------------------------- the value


def _as_scalars(value: Mapping[str, Initial] | Scalars, what: str) -> Scalars:
    """``value`` as ``(name, initial)`` pairs; ``what`` names the field in messages."""
    pairs = tuple(value.items()) if isinstance(value, Mapping) else tuple(value)
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise MechanismError(f"{what} must map names to initial values, got {_shown(pair)}")
        name, initial = pair
        if not name.isidentifier():
            raise MechanismError(f"{what}: {name!r} is not a usable keyword name")
        if name in RESERVED_NAMES:
            raise MechanismError(
                f"{what}: the name {name!r} is reserved (the row length n and the "
                "model's own parameters E_key, E_val, W_*, b_*); rename it"
            )
        if isinstance(initial, bool) or not (callable(initial) or isinstance(initial, int | float)):
            raise MechanismError(
                f"{what}[{name!r}] must be a number or a function of d_k, got {_shown(initial)}"
            )
    return pairs


def _shown(value: Any) -> str:
    """``value`` for a message: an array by its shape, anything else by its repr, cut short."""
    shape = getattr(value, "shape", None)
    if shape is not None and shape != ():
        return f"an array of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _value(initial: Initial, d_k: int, label: str) -> float:
    value = initial(d_k) if callable(initial) else initial
    if isinstance(value, bool) or getattr(value, "shape", ()) != () or not _is_number(value):
        raise MechanismError(
            f"{label} at d_k {d_k} must be one number (each learned or fixed value is a "
            f"scalar), got {_shown(value)}"
        )
    return float(value)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def explain(err: BaseException) -> str:
    """What went wrong, in words, for a one-line error: JAX's tracing errors as the rule
    they break, a syntax error with its line, anything else as its type and first line."""
    if isinstance(err, jax.errors.TracerBoolConversionError | jax.errors.ConcretizationTypeError):
        return (
            "it uses Python control flow (if, while, and, or, bool()) on a traced value, "
            "which jit cannot compile; use jnp.where or jax.lax.cond"
        )
    if isinstance(err, jax.errors.TracerArrayConversionError):
        return (
            "it calls numpy on a traced value (np.* or np.asarray inside the function), "
            "which jit cannot compile; use jax.numpy"
        )
    if isinstance(err, jax.errors.TracerIntegerConversionError):
        return "it converts a traced value to a Python int, which jit cannot compile"
    if isinstance(err, MechanismError):
        return str(err)
    if isinstance(err, TypeError) and "required positional argument" in str(err):
        return (
            f"{err}; a plain function is logits(q, k), and any other argument is a scalar "
            "declared in Mechanism.params or Mechanism.constants"
        )
    if isinstance(err, SyntaxError):
        where = f" at line {err.lineno}" if err.lineno else ""
        return f"syntax error{where}: {err.msg}"
    if isinstance(err, ModuleNotFoundError):
        return f"module {err.name!r} is not installed" if err.name else str(err)
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


@dataclass(frozen=True)
class Mechanism:
    """One way of setting the attention temperature (the module docstring's hooks).

    Attributes:
      name: the mechanism's name in CSVs, figures and the card.
      logits: ``logits(q, k, **theta) -> z``; ``theta`` are ``params`` and ``constants`` by
        name, and ``n=`` if ``row_length``. Logits of float32 inputs must be float32, and
        logits, not weights; traceable by ``jit`` and ``grad`` (the module's *Limits*).
      weights: ``weights(z, mask) -> p``, ``mask`` boolean or None.
      params: learned scalars, ``{name: initial value or function of d_k}``.
      constants: fixed scalars, the same way.
      qk_init_exponent: W_Q and W_K are initialised ``d_k ** qk_init_exponent`` times their
        default.
      normalize_qk: L2-normalise q and k (``l2_normalize``) before ``logits``.
      row_length: pass the row length ``n`` (``row_lengths``) to ``logits``.
    """

    name: str
    logits: Callable[..., Array]
    weights: Callable[[Array, Array | None], Array] = softmax_weights
    params: Scalars = field(default=())
    constants: Scalars = field(default=())
    qk_init_exponent: float = 0.0
    normalize_qk: bool = False
    row_length: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "," in self.name:
            raise MechanismError(f"Mechanism.name must be a non-empty name, got {self.name!r}")
        for hook in ("logits", "weights"):
            if not callable(getattr(self, hook)):
                raise MechanismError(f"mechanism {self.name!r}: {hook} must be callable")
        for what in ("params", "constants"):
            label = f"mechanism {self.name!r}: {what}"
            object.__setattr__(self, what, _as_scalars(getattr(self, what), label))
        names = [n for n, _ in self.params + self.constants]
        if len(set(names)) != len(names):
            raise MechanismError(f"mechanism {self.name!r}: a scalar name is used twice: {names}")
        e = self.qk_init_exponent
        if isinstance(e, bool) or not isinstance(e, int | float) or not math.isfinite(e):
            raise MechanismError(f"mechanism {self.name!r}: qk_init_exponent must be a number")
        for flag in ("normalize_qk", "row_length"):
            if not isinstance(getattr(self, flag), bool):
                raise MechanismError(f"mechanism {self.name!r}: {flag} must be True or False")

    def param_values(self, d_k: int) -> dict[str, float]:
        """The learned scalars' initial values at head width ``d_k``."""
        label = f"mechanism {self.name!r}: params"
        return {n: _value(initial, d_k, f"{label}[{n!r}]") for n, initial in self.params}

    def constant_values(self, d_k: int) -> dict[str, float]:
        """The fixed scalars at head width ``d_k``."""
        label = f"mechanism {self.name!r}: constants"
        return {n: _value(initial, d_k, f"{label}[{n!r}]") for n, initial in self.constants}

    def initial_theta(self, d_k: int) -> dict[str, float]:
        """Every scalar ``logits`` receives at step 0, at head width ``d_k``."""
        return {**self.param_values(d_k), **self.constant_values(d_k)}

    def prepare(self, q: ArrayLike, k: ArrayLike) -> tuple[Array, Array]:
        """q and k as ``logits`` sees them (normalised if ``normalize_qk``)."""
        q, k = jnp.asarray(q), jnp.asarray(k)
        return (l2_normalize(q), l2_normalize(k)) if self.normalize_qk else (q, k)

    def scores(
        self, q: ArrayLike, k: ArrayLike, theta: Mapping[str, ArrayLike], mask=None
    ) -> Array:
        """``logits(q, k, **theta)`` (and ``n=`` if ``row_length``), q and k as prepared."""
        kwargs = dict(theta)
        if self.row_length:
            kwargs["n"] = row_lengths(mask, jnp.shape(k)[-2])
        return self.logits(q, k, **kwargs)

    def __call__(
        self,
        q: ArrayLike,
        k: ArrayLike,
        mask: ArrayLike | None = None,
        theta: Mapping[str, ArrayLike] | None = None,
    ) -> Array:
        """Attention weights ``[..., Tq, Tk]`` of queries ``q`` and keys ``k``, with the
        scalars ``theta`` (default: ``initial_theta`` at ``d = q.shape[-1]``)."""
        theta = self.initial_theta(jnp.shape(q)[-1]) if theta is None else theta
        q, k = self.prepare(q, k)
        return self.weights(self.scores(q, k, theta, mask), mask)

    def program(self) -> Mechanism:
        """This mechanism with what only sets initial values put to canonical ones: two
        mechanisms with equal ``program()`` compute the same function of (q, k, theta), so
        their trainings can share one compiled program."""
        return replace(
            self,
            name="program",
            params=tuple((n, 0.0) for n, _ in self.params),
            constants=tuple((n, 0.0) for n, _ in self.constants),
            qk_init_exponent=0.0,
        )


def as_mechanism(obj: Any, name: str | None = None) -> Mechanism:
    """``obj`` if it is a ``Mechanism``; a plain function ``logits(q, k)`` as a mechanism
    with softmax weights and no scalars, named ``name`` or the function's ``__name__``."""
    if isinstance(obj, Mechanism):
        return obj
    if callable(obj):
        return Mechanism(name or getattr(obj, "__name__", "custom"), obj)
    raise MechanismError(f"{obj!r} is neither a Mechanism nor a function logits(q, k)")


def check_mechanism(mechanism: Mechanism, d_k: int = 16, n: int = 8) -> None:
    """Run ``mechanism`` on iid N(0, 1) queries and keys ``[2, 3, d_k]``, ``[2, n, d_k]`` at
    its initial scalars, eagerly, under ``jax.jit`` and under ``jax.grad`` (as training runs
    it, the scalars traced), so that whatever would stop a run stops here first. Raise
    ``MechanismError``, one line naming the mechanism and the cause in words, if

    - its scalars are not numbers at ``d_k`` (each learned or fixed value is one scalar);
    - its logits are not ``[2, 3, n]`` float32, or, with softmax weights, look like
      weights (every row non-negative and summing to one: softmax would be applied twice);
    - its weights are not ``[2, 3, n]`` and finite;
    - it cannot be traced: Python control flow or numpy on a traced value, or any other
      error under ``jit`` or ``grad`` (``explain`` words JAX's).
    """
    kq, kk = jax.random.split(jax.random.key(0))
    q = jax.random.normal(kq, (2, 3, d_k), jnp.float32)
    k = jax.random.normal(kk, (2, n, d_k), jnp.float32)
    label = f"mechanism {mechanism.name!r}"
    theta = mechanism.initial_theta(d_k)
    try:
        z = jnp.asarray(mechanism.scores(*mechanism.prepare(q, k), theta))
        if z.shape != (2, 3, n) or z.dtype != jnp.float32:
            raise MechanismError(
                f"{label}: logits of q [2, 3, {d_k}] and k [2, {n}, {d_k}] (float32) must be "
                f"float32 [2, 3, {n}], got {z.dtype} {list(z.shape)}"
            )
        p = jnp.asarray(mechanism.weights(z, None))
    except MechanismError:
        raise
    except Exception as err:
        raise MechanismError(f"{label} fails on random inputs: {explain(err)}") from None
    row_error = jnp.abs(jnp.sum(z, axis=-1) - 1.0)
    if (
        mechanism.weights is softmax_weights
        and bool(jnp.all(z >= 0))
        and bool(jnp.all(row_error <= n * WEIGHTS_LIKE_TOLERANCE_PER_KEY))
    ):
        raise MechanismError(
            f"{label}: its logits look like weights (every row non-negative and summing to "
            "one); logits(q, k) must return the logits z, which softmax turns into weights"
        )
    if p.shape != (2, 3, n):
        raise MechanismError(f"{label}: weights must have the logits' shape, got {list(p.shape)}")
    if not bool(jnp.all(jnp.isfinite(p))):
        raise MechanismError(f"{label} gives non-finite weights at its initial scalars")
    traced = {name: jnp.float32(value) for name, value in theta.items()}

    def objective(q: Array, k: Array, theta: dict[str, Array]) -> Array:
        return jnp.sum(mechanism(q, k, None, theta) ** 2)

    gradient = functools.partial(jax.grad, argnums=(0, 1, 2))
    for how, transform in (("jax.jit", jax.jit), ("jax.grad", gradient)):
        try:
            jax.block_until_ready(transform(objective)(q, k, traced))
        except Exception as err:
            raise MechanismError(
                f"{label} cannot run under {how} (as training runs it): {explain(err)}"
            ) from None
