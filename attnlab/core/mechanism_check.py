"""A mechanism checked before it trains: ``check_mechanism`` runs it on random inputs,
eagerly, under ``jax.jit`` and under ``jax.grad``, and stops a broken one with one line
naming it and the cause in words (``explain``, which also words the errors of importing a
user's mechanism, ``attnlab.core.references``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from attnlab.core.context import Context
from attnlab.core.mechanism import (
    Mechanism,
    MechanismError,
    is_one_number,
    softmax_weights,
)

Array = jax.Array

#: How far a row of logits may be from summing to one and still "look like weights"
#: (``check_mechanism``): a float32 sum of ``n`` terms in [0, 1] is within ``n`` eps of
#: the exact sum, and weights of a softmax computed in float32 sum to 1 within a few eps;
#: 64 eps per key covers both with room.
WEIGHTS_LIKE_TOLERANCE_PER_KEY = 64 * 2.0**-23


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


def _vectors(mechanism: Mechanism, d_k: int) -> list[tuple[str, Any]]:
    """The ``per_head`` params whose initial value at ``d_k`` is a vector, with it."""
    out = []
    for name, initial in mechanism.params:
        if name in mechanism.per_head and not is_one_number(initial, d_k):
            out.append((name, initial(d_k) if callable(initial) else initial))
    return out


def check_mechanism(mechanism: Mechanism, d_k: int = 16, n: int = 8) -> None:
    """Run ``mechanism`` on iid N(0, 1) queries and keys ``[H, 3, d_k]``, ``[H, n, d_k]`` at
    its initial scalars, eagerly, under ``jax.jit`` and under ``jax.jit(jax.grad(...))`` (as
    training runs it, the scalars traced), so that whatever would stop a run stops here
    first. The leading axis is ``H`` heads (2, or the length of its ``per_head`` vectors)
    with their ``Context``: the queries at the last 3 of ``n`` positions, and, for a
    mechanism that needs positions, a causal mask and its own. Raise ``MechanismError``,
    one line naming the mechanism and the cause in words, if

    - its scalars are not numbers at ``d_k`` (each learned or fixed value is one scalar);
    - its logits are not ``[2, 3, n]`` float32, or, with softmax weights, look like
      weights (every row non-negative and summing to one: softmax would be applied twice);
    - its weights are not ``[2, 3, n]`` and finite;
    - it cannot be traced: Python control flow or numpy on a traced value, or any other
      error under ``jit`` or ``grad`` (``explain`` words JAX's).
    """
    label = f"mechanism {mechanism.name!r}"
    theta = mechanism.initial_theta(d_k)
    lengths = {len(v) for n_, v in _vectors(mechanism, d_k)}
    heads = lengths.pop() if len(lengths) == 1 else 2
    theta |= {name: v[:, None, None] for name, v in mechanism.head_values(d_k, heads).items()}
    kq, kk = jax.random.split(jax.random.key(0))
    q = jax.random.normal(kq, (heads, 3, d_k), jnp.float32)
    k = jax.random.normal(kk, (heads, n, d_k), jnp.float32)
    positions = jnp.arange(n)
    context = Context(positions[-3:, None], positions[None, :],
                      jnp.arange(heads)[:, None, None], heads)  # fmt: skip
    mask = context.k_pos <= context.q_pos if mechanism.needs_positions() else None
    try:
        z, p, used = mechanism.attend(q, k, theta, mask, context)
        z, p = jnp.asarray(z), jnp.asarray(p)
        if z.shape != (heads, 3, n) or z.dtype != jnp.float32:
            raise MechanismError(
                f"{label}: logits of q [{heads}, 3, {d_k}] and k [{heads}, {n}, {d_k}] (float32) "
                f"must be float32 [{heads}, 3, {n}], got {z.dtype} {list(z.shape)}"
            )
        if used is not None and jnp.broadcast_shapes(jnp.shape(used), z.shape) != z.shape:
            raise MechanismError(f"{label}: its mask must broadcast to the logits' shape")
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
    if p.shape != (heads, 3, n):
        raise MechanismError(f"{label}: weights must have the logits' shape, got {list(p.shape)}")
    if not bool(jnp.all(jnp.isfinite(p))):
        raise MechanismError(f"{label} gives non-finite weights at its initial scalars")
    traced = {name: jnp.asarray(value, jnp.float32) for name, value in theta.items()}

    def objective(q: Array, k: Array, theta: dict[str, Array]) -> Array:
        return jnp.sum(mechanism.attend(q, k, theta, mask, context)[1] ** 2)

    def gradient(f: Callable) -> Callable:  # compiled, as training runs it: one program
        return jax.jit(jax.grad(f, argnums=(0, 1, 2)))

    for how, transform in (("jax.jit", jax.jit), ("jax.grad", gradient)):
        try:
            jax.block_until_ready(transform(objective)(q, k, traced))
        except Exception as err:
            raise MechanismError(
                f"{label} cannot run under {how} (as training runs it): {explain(err)}"
            ) from None
