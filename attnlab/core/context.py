"""The context of a map of logits: where its queries and keys sit and which head it is,
as a model with positions and heads passes it to a mechanism (``Context``), and which of
it a logits function asks for by naming it in its signature (``asked_context``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

#: The context a logits function may ask for by naming it in its signature.
CONTEXT_ARGS = ("n", "q_pos", "k_pos", "head", "n_heads")
#: The context only a model with positions and heads gives (the causal LM, not recall).
POSITION_ARGS = ("q_pos", "k_pos", "head", "n_heads")


class Context(NamedTuple):
    """Where a map of logits ``[..., H, Tq, Tk]`` sits: the queries' and keys' positions
    (integers, ``[Tq, 1]`` and ``[1, Tk]``), the heads' indices (``[H, 1, 1]``) and their
    number. A model with positions and heads passes one to ``Mechanism.scores``."""

    q_pos: Array
    k_pos: Array
    head: Array
    n_heads: int


def causal_context(length: int, n_heads: int) -> Context:
    """The context of ``n_heads`` heads over a sequence of ``length`` (queries and keys at
    positions ``0 .. length - 1``)."""
    positions = jnp.arange(length)
    return Context(positions[:, None], positions[None, :],
                   jnp.arange(n_heads)[:, None, None], n_heads)  # fmt: skip


def asked_context(logits: Callable[..., Array]) -> frozenset[str]:
    """The ``CONTEXT_ARGS`` that ``logits``' signature names (a ``**kwargs`` asks for none)."""
    try:
        parameters = inspect.signature(logits).parameters
    except (TypeError, ValueError):  # a builtin or C function: no names to read
        return frozenset()
    return frozenset(n for n in CONTEXT_ARGS if n in parameters
                     and parameters[n].kind is not inspect.Parameter.POSITIONAL_ONLY)  # fmt: skip
