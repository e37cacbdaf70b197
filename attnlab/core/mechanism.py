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
                      ``softpick_weights`` (``attnlab.core.hooks``) or any function of
                      that shape
``row_length``        pass ``n=``, the number of keys each query may attend (>= 1, shape
                      ``[..., Tq, 1]`` or a scalar), to ``logits`` (as naming ``n`` does)
``mask``              ``mask(q_pos, k_pos) -> bool``: keys a query may attend besides the
                      model's own mask (a sliding window); needs positions
``per_head``          names of ``params`` learned per head (a vector over heads, broadcast
                      as ``[H, 1, 1]``); the others stay one scalar per layer
``qk_init_exponent``  W_Q and W_K start ``d_k ** e`` times their default (-1/4 folds
                      ``1/sqrt(d_k)`` into the initialisation)
``normalize_qk``      L2-normalise q and k before ``logits`` sees them
``sink``              a learned logit per head in the softmax's normaliser, from this
                      initial value (gpt-oss; ``sink_softmax_weights``): a param ``sink``
``gate``              ``"head"`` or ``"element"``: the model multiplies each head's output
                      by ``sigmoid(x W_gate)`` of the block's input (``gated_output``)
====================  =====================================================================

``attnlab.core.mechanism_check.check_mechanism`` runs a new mechanism on random inputs,
eagerly and under ``jax.jit`` and ``jax.grad``, so a broken one stops with one line naming
it before any training starts; ``attnlab.core.references`` resolves the names a command
line gives (a built-in, ``MODULE:NAME``, ``path/to/file.py:NAME``).

Limits (what the API cannot express, and what ``check_mechanism`` refuses):

- ``logits`` returns *logits* ``z`` (any real numbers), not weights: ``weights`` turns them
  into weights. Under softmax weights, logits whose every row is non-negative and sums to
  one are refused (they would be softmaxed again); to give weights, set ``weights``.
- ``logits`` sees q, k, its scalars and, where its signature names them, the *context*
  (``CONTEXT_ARGS``): ``n`` (keys each row may attend), ``q_pos`` and ``k_pos`` (integer
  positions, ``[Tq, 1]`` and ``[1, Tk]``), ``head`` (``[H, 1, 1]``, 0-based) and ``n_heads``.
  A model that has no positions or heads (the recall task: one head over unordered slots)
  refuses a mechanism that asks for them, with one line (``needs_positions``). No values;
  one map per head: differential attention's ``softmax(z1) - lambda softmax(z2)`` needs
  two maps and a combination after the softmax, which ``weights(z, mask)`` of one map
  cannot express (a ``weights`` over a stacked ``[2, ...]`` map would be the place).
- Its learned and fixed values are scalars, each one number (or a function of ``d_k``
  giving one), except ``per_head`` params (one value per head, or a function of ``d_k``
  giving a vector of ``n_heads``); named neither like the context (``RESERVED_NAMES``)
  nor like the models' parameters (``RESERVED_PREFIXES``: ``E_*``, ``W_*``, ``b_*``).
- It is traced: ``jnp.where`` or ``jax.lax.cond``, not a Python ``if`` on an array;
  ``jax.numpy``, not numpy.
- A NaN it returns on purpose (to test what diverges) must come from the values, e.g.
  ``jnp.log(-1 - jnp.abs(z))``, not from a NaN constant: XLA's CPU compiler (jaxlib
  0.10.2) turns ``exp(x * nan)`` and ``exp(x + nan)`` into values read from memory it
  never wrote (``jax.jit(lambda x: jnp.exp(x * jnp.nan))`` gives finite numbers that
  change from run to run), so such a run records finite losses instead of diverging.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from attnlab.core.context import CONTEXT_ARGS, POSITION_ARGS, Context, asked_context
from attnlab.core.hooks import sink_softmax_weights, softmax_weights

Array = jax.Array
#: An initial value: a number, or a function of the head width ``d_k`` returning one.
Initial = float | Callable[[int], float]
Scalars = tuple[tuple[str, Initial], ...]

#: ``epsilon`` inside ``l2_normalize``'s square root.
L2_EPS = 1e-6
#: Names a mechanism's scalars cannot take: the context's (``CONTEXT_ARGS``).
RESERVED_NAMES = frozenset(CONTEXT_ARGS)
#: Every model of the suite names its own parameters ``E_*`` (embeddings), ``W_*``
#: (weights) and ``b_*`` (biases), and stores a mechanism's learned scalars beside them:
#: a scalar may not take a name of that form (the models declare their names themselves).
RESERVED_PREFIXES = ("E_", "W_", "b_")
#: A mechanism's name: a letter or ``_``, then letters, digits, ``_`` or ``-``, at most 64 in
#: all. It names rows of CSVs and a card's folder, so it can hold no separator, dot or space
#: that would lead a path out of its folder or split a row.
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
#: The learned per-head param a ``sink`` adds, read by the weights, not by ``logits``.
SINK = "sink"
#: What ``gate`` may be: one gate per head, or one per element of the head's output.
GATES = ("head", "element")


class MechanismError(ValueError):
    """A mechanism that cannot be used: the message names it and what is wrong."""


class MechanismReferenceError(ValueError):
    """A reference (``NAME``, ``MODULE:NAME``, ``FILE.py:NAME``) that names no mechanism."""


# ------------------------------------------------------------ around the hooks


def compute_dtype(x: ArrayLike) -> jnp.dtype:
    """The dtype ``logits`` sees ``x`` in: float32 for half precision (float16, bfloat16) or
    float32 inputs, float64 for float64. The built-ins' dot product (``attention_logits``)
    computes in it, and so does every mechanism: a user's ``einsum`` on float16 q and k
    would otherwise add float16 rounding the built-ins do not have."""
    return jnp.promote_types(jnp.result_type(x), jnp.float32)


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
        if name in RESERVED_NAMES or name == SINK or name.startswith(RESERVED_PREFIXES):
            raise MechanismError(
                f"{what}: the name {name!r} is reserved (the context n, q_pos, k_pos, head, "
                "n_heads, the sink (Mechanism.sink), and E_*, W_*, b_*: the models' own "
                "parameters); rename it"
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


def is_one_number(initial: Initial, d_k: int) -> bool:
    """Whether an initial value is one number at ``d_k`` (not a per-head vector)."""
    value = initial(d_k) if callable(initial) else initial
    return getattr(value, "shape", ()) == () and not isinstance(value, list | tuple)


def refusal(mechanism: Mechanism, missing) -> str:
    """The one line that refuses ``mechanism`` where positions and heads are absent."""
    return (
        f"mechanism {mechanism.name!r} needs {', '.join(missing)}, which the recall task "
        "does not have (one head over unordered slots); run it in the causal language "
        "model (experiments/14_lm_proxy.py --mechanisms ...)"
    )


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Mechanism:
    """One way of setting the attention temperature (the module docstring's hooks).

    Attributes:
      name: the mechanism's name in CSVs, figures and the card (``NAME_PATTERN``: like a
        Python identifier, ``-`` allowed, at most 64 characters).
      logits: ``logits(q, k, **theta) -> z``; ``theta`` are ``params`` and ``constants`` by
        name, and ``n=`` if ``row_length``. It receives q and k in float32 whatever the
        model's dtype (float16 and bfloat16 are cast up first, ``compute_dtype``); logits of
        float32 inputs must be float32, and logits, not weights; traceable by ``jit`` and
        ``grad`` (the module's *Limits*).
      weights: ``weights(z, mask) -> p``, ``mask`` boolean or None.
      params: learned scalars, ``{name: initial value or function of d_k}``.
      constants: fixed scalars, the same way.
      qk_init_exponent: W_Q and W_K are initialised ``d_k ** qk_init_exponent`` times their
        default.
      normalize_qk: L2-normalise q and k (``l2_normalize``) before ``logits``.
      row_length: pass the row length ``n`` (``row_lengths``) to ``logits`` (also done
        when its signature names ``n``).
      mask: ``mask(q_pos, k_pos) -> bool``, True where a query may attend; combined with
        the model's mask (``mask_for``). Needs positions.
      per_head: names of ``params`` learned one per head.
      sink: None, or the initial value of a learned sink logit per head (softmax weights
        only): ``params`` and ``per_head`` then hold ``SINK``, and the weights are
        ``sink_softmax_weights`` (``normalise``).
      gate: None, ``"head"`` or ``"element"``: an output gate the model applies
        (``attnlab.core.hooks.gated_output``; its ``W_gate`` is the model's parameter).
    """

    name: str
    logits: Callable[..., Array]
    weights: Callable[[Array, Array | None], Array] = softmax_weights
    params: Scalars = field(default=())
    constants: Scalars = field(default=())
    qk_init_exponent: float = 0.0
    normalize_qk: bool = False
    row_length: bool = False
    mask: Callable[..., Array] | None = None
    per_head: tuple[str, ...] = ()
    sink: Initial | None = None
    gate: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise MechanismError(
                "Mechanism.name must be a letter or _ then letters, digits, _ or - (at most 64; "
                f"a lambda needs name=), got {self.name!r}"
            )
        for hook in ("logits", "weights"):
            if not callable(getattr(self, hook)):
                raise MechanismError(f"mechanism {self.name!r}: {hook} must be callable")
        if not isinstance(self.params, Mapping):  # from replace(): drop the sink added before
            kept = (p for p in self.params if not (isinstance(p, tuple) and p[:1] == (SINK,)))
            object.__setattr__(self, "params", tuple(kept))
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
        if self.mask is not None and not callable(self.mask):
            raise MechanismError(f"mechanism {self.name!r}: mask must be a function or None")
        per_head = (self.per_head,) if isinstance(self.per_head, str) else tuple(self.per_head)
        object.__setattr__(self, "per_head", tuple(n for n in per_head if n != SINK))
        unknown = [n for n in self.per_head if n not in dict(self.params)]
        if unknown:
            raise MechanismError(
                f"mechanism {self.name!r}: per_head names {unknown}, which are not its params"
            )
        self._add_sink()
        if self.gate is not None and self.gate not in GATES:
            raise MechanismError(f"mechanism {self.name!r}: gate must be None or one of {GATES}")

    def _add_sink(self) -> None:
        """With ``sink``: ``SINK`` among the params (learned per head), softmax weights only."""
        if self.sink is None:
            return
        if self.weights is not softmax_weights:
            raise MechanismError(f"mechanism {self.name!r}: a sink belongs to softmax weights")
        ((_, initial),) = _as_scalars({"initial": self.sink}, f"mechanism {self.name!r}: sink")
        object.__setattr__(self, "params", (*self.params, (SINK, initial)))
        object.__setattr__(self, "per_head", (*self.per_head, SINK))

    @property
    def asks(self) -> frozenset[str]:
        """The context ``logits`` receives: what its signature names, and ``n`` if
        ``row_length``."""
        return asked_context(self.logits) | ({"n"} if self.row_length else set())

    def needs_positions(self) -> tuple[str, ...]:
        """What of the context only a model with positions and heads gives (and ``mask``
        if it has one): empty for a mechanism the recall task can run."""
        asks = self.asks
        asked = tuple(n for n in POSITION_ARGS if n in asks)
        return asked + (("mask",) if self.mask is not None else ())

    def head_values(self, d_k: int, n_heads: int) -> dict[str, Array]:
        """The ``per_head`` params' initial values, each a vector ``[n_heads]`` (a scalar
        initial value is repeated); a ``MechanismError`` on a vector of another length."""
        label = f"mechanism {self.name!r}: params"
        out = {}
        for name, initial in self.params:
            if name not in self.per_head:
                continue
            value = jnp.asarray(initial(d_k) if callable(initial) else initial, jnp.float32)
            if value.ndim == 0:
                value = jnp.full((n_heads,), value)
            if value.shape != (n_heads,):
                raise MechanismError(
                    f"{label}[{name!r}] is learned per head: it must be one number or "
                    f"{n_heads} (one per head), got shape {list(value.shape)}"
                )
            out[name] = value
        return out

    def mask_for(self, mask: ArrayLike | None, context: Context | None) -> Array | None:
        """The model's ``mask`` combined (and) with the mechanism's own, if it has one."""
        if self.mask is None:
            return mask
        if context is None:  # no positions to mask by: the same one line as scores'
            raise MechanismError(refusal(self, ["mask"]))
        own = jnp.asarray(self.mask(context.q_pos, context.k_pos), bool)
        return own if mask is None else jnp.logical_and(own, mask)

    def param_values(self, d_k: int) -> dict[str, float]:
        """The learned scalars' initial values at head width ``d_k`` (``per_head`` ones
        included only where they are one number: one head's value)."""
        label = f"mechanism {self.name!r}: params"
        return {n: _value(initial, d_k, f"{label}[{n!r}]") for n, initial in self.params
                if n not in self.per_head or is_one_number(initial, d_k)}  # fmt: skip

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
        self,
        q: ArrayLike,
        k: ArrayLike,
        theta: Mapping[str, ArrayLike],
        mask=None,
        context: Context | None = None,
    ) -> Array:
        """``logits(q, k, **theta)`` and the context it asks for (``asks``: ``n`` from
        ``mask``, the rest from ``context``), q and k as prepared and then in at least
        float32 (``compute_dtype``), as the built-ins compute theirs, whatever function
        computes them; ``mask`` is the model's and the mechanism's own together
        (``mask_for``)."""
        q, k = (jnp.asarray(x, compute_dtype(x)) for x in (q, k))
        kwargs = {n: v for n, v in theta.items() if n != SINK}  # the sink's is the weights
        asks = self.asks
        if "n" in asks:
            kwargs["n"] = row_lengths(mask, jnp.shape(k)[-2])
        missing = [n for n in POSITION_ARGS if n in asks and context is None]
        if missing:
            raise MechanismError(refusal(self, missing))
        for name in POSITION_ARGS:
            if name in asks:
                kwargs[name] = getattr(context, name)
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
        return self.normalise(self.scores(q, k, theta, mask), mask, theta)

    def normalise(self, z: ArrayLike, mask: ArrayLike | None, theta: Mapping[str, ArrayLike]):
        """The weights of logits ``z``: ``weights(z, mask)``, or with a ``sink``
        ``sink_softmax_weights(z, mask, theta[SINK])``."""
        if self.sink is None:
            return self.weights(z, mask)
        return sink_softmax_weights(z, mask, theta[SINK])

    def attend(
        self,
        q: ArrayLike,
        k: ArrayLike,
        theta: Mapping[str, ArrayLike],
        mask: ArrayLike | None = None,
        context: Context | None = None,
    ) -> tuple[Array, Array, Array | None]:
        """Logits, weights and the mask they used, of q and k as they leave the model's
        projections: ``prepare``, the mask with the mechanism's own (``mask_for``),
        ``scores``, ``weights``. The path every model with heads takes where the mechanism is
        a parameter (the recall model, the causal LM, the GPT-2 family); the encoder
        (``models.bert``) calls ``attention.dot_product_attention``, the same attention
        with scaled logits and a padding mask."""
        q, k = self.prepare(q, k)
        mask = self.mask_for(mask, context)
        z = self.scores(q, k, theta, mask, context)
        return z, self.normalise(z, mask, theta), mask

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
            sink=None if self.sink is None else 0.0,
        )


def as_mechanism(obj: Any, name: str | None = None) -> Mechanism:
    """``obj`` if it is a ``Mechanism``; a plain function ``logits(q, k)`` as a mechanism
    with softmax weights and no scalars, named ``name`` or the function's ``__name__``."""
    if isinstance(obj, Mechanism):
        return obj
    if callable(obj):
        return Mechanism(name or getattr(obj, "__name__", "custom"), obj)
    raise MechanismError(f"{obj!r} is neither a Mechanism nor a function logits(q, k)")
