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
from attnlab.core.hooks import softmax_weights
from attnlab.core.mechanism import Mechanism, MechanismError, is_one_number

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


#: The shapes ``check_mechanism`` also traces a mechanism at, after its main check (2 heads
#: of ``d_k`` 16, 3 queries over 8 keys): ``(heads, d_k, queries, keys)``, one query over a
#: few keys in one narrow head (the recall task's rows) and a square causal map of 12
#: positions in 4 wide heads (the language model's), and one query over the card's most
#: keys at its widest head (d_k 1024, 4096 keys: the statics and the float16 cells), so
#: that a mechanism that raises or gives the wrong shape only at another width, length or
#: number of heads stops here too, not in a run. Traced for shapes only
#: (``jax.eval_shape``: nothing compiled or run, a few milliseconds): the main check has
#: already run it under ``jit``, so tracing it is what every run does first.
OTHER_SHAPES = ((1, 8, 1, 5), (4, 64, 12, 12), (1, 1024, 1, 4096))


def _inputs(mechanism: Mechanism, heads: int, d_k: int, n_q: int, n: int):
    """``H``, the initial scalars at ``d_k`` (a ``per_head`` vector ``[H, 1, 1]``), the
    ``Context`` of queries at the last ``n_q`` of ``n`` positions in ``H`` heads and, for
    a mechanism that needs positions, the causal mask; ``H`` is ``heads``, or the length
    of its ``per_head`` vectors at ``d_k``. ``MechanismError`` if an initial value is not
    one number or fails."""
    try:
        theta: dict[str, Any] = mechanism.initial_theta(d_k)
        lengths = {len(v) for _, v in _vectors(mechanism, d_k)}
    except MechanismError:
        raise
    except Exception as err:  # a function of d_k that raises
        raise MechanismError(
            f"mechanism {mechanism.name!r}: its initial values fail at d_k {d_k}: {explain(err)}"
        ) from None
    heads = lengths.pop() if len(lengths) == 1 else heads
    theta |= {name: v[:, None, None] for name, v in mechanism.head_values(d_k, heads).items()}
    positions = jnp.arange(n)
    context = Context(positions[-n_q:, None], positions[None, :],
                      jnp.arange(heads)[:, None, None], heads)  # fmt: skip
    mask = context.k_pos <= context.q_pos if mechanism.needs_positions() else None
    return heads, theta, mask, context


def _attend(mechanism: Mechanism, label: str, q, k, theta, mask, context, at: str = ""):
    """Logits and weights of ``mechanism.attend`` (eagerly; abstractly, ``jax.eval_shape``,
    where ``q`` is a ``jax.ShapeDtypeStruct``); ``MechanismError`` (``label``, and ``at``
    where the inputs are not the main check's) if it raises or its logits are not float32
    of shape ``[H, Tq, Tk]``, its mask does not broadcast to them or its weights do not
    have their shape."""
    expected = (*q.shape[:-1], k.shape[-2])
    try:
        if isinstance(q, jax.ShapeDtypeStruct):
            z, p, used = jax.eval_shape(
                lambda q, k, theta: mechanism.attend(q, k, theta, mask, context), q, k, theta
            )
        else:
            z, p, used = mechanism.attend(q, k, theta, mask, context)
            z, p = jnp.asarray(z), jnp.asarray(p)
        if z.shape != expected or z.dtype != jnp.float32:
            raise MechanismError(
                f"{label}: logits of q {list(q.shape)} and k {list(k.shape)} (float32) must be "
                f"float32 {list(expected)}, got {z.dtype} {list(z.shape)}"
            )
        if used is not None and jnp.broadcast_shapes(jnp.shape(used), z.shape) != z.shape:
            raise MechanismError(f"{label}: its mask must broadcast to the logits' shape{at}")
    except MechanismError:
        raise
    except Exception as err:
        raise MechanismError(f"{label} fails on random inputs{at}: {explain(err)}") from None
    if p.shape != expected:
        raise MechanismError(
            f"{label}: weights must have the logits' shape{at}, got {list(p.shape)}"
        )
    return z, p


def check_mechanism(mechanism: Mechanism, d_k: int = 16, n: int = 8) -> None:
    """Run ``mechanism`` on iid N(0, 1) queries and keys ``[H, 3, d_k]``, ``[H, n, d_k]`` at
    its initial scalars, eagerly, under ``jax.jit`` and under ``jax.jit(jax.grad(...))`` (as
    training runs it, the scalars traced), so that whatever would stop a run stops here
    first; then traced at ``OTHER_SHAPES`` (other widths, lengths and numbers of heads).
    The leading axis is ``H`` heads (2, or the length of its ``per_head`` vectors) with
    their ``Context``: the queries at the last 3 of ``n`` positions, and, for a mechanism
    that needs positions, a causal mask and its own. Raise ``MechanismError``, one line
    naming the mechanism and the cause in words, if

    - its scalars are not numbers at ``d_k`` (each learned or fixed value is one scalar);
    - its logits are not ``[H, 3, n]`` float32, or, with softmax weights, look like
      weights (every row non-negative and summing to one: softmax would be applied twice);
    - its weights are not ``[H, 3, n]`` and finite;
    - it cannot be traced: Python control flow or numpy on a traced value, or any other
      error under ``jit`` or ``grad`` (``explain`` words JAX's);
    - at ``OTHER_SHAPES`` it raises, or its logits, mask or weights have the wrong shape
      or dtype (the line names the shapes). Non-finite weights there are not refused: a
      mechanism may diverge at some widths on purpose, and runs record that.
    """
    label = f"mechanism {mechanism.name!r}"
    heads, theta, mask, context = _inputs(mechanism, 2, d_k, 3, n)
    kq, kk = jax.random.split(jax.random.key(0))
    q = jax.random.normal(kq, (heads, 3, d_k), jnp.float32)
    k = jax.random.normal(kk, (heads, n, d_k), jnp.float32)
    z, p = _attend(mechanism, label, q, k, theta, mask, context)
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
    for heads, width, n_q, n_k in OTHER_SHAPES:  # shapes only: nothing compiled or run
        h, values, causal, where = _inputs(mechanism, heads, width, n_q, n_k)
        q_at = jax.ShapeDtypeStruct((h, n_q, width), jnp.float32)
        k_at = jax.ShapeDtypeStruct((h, n_k, width), jnp.float32)
        abstract = {n: jax.ShapeDtypeStruct(jnp.shape(v), jnp.float32) for n, v in values.items()}
        at = f" at d_k {width} (q {list(q_at.shape)}, k {list(k_at.shape)})"
        _attend(mechanism, label, q_at, k_at, abstract, causal, where, at)
