"""Random bits on CPU: JAX's threefry2x32 lowered unrolled, as on every other backend.

Every random draw here (``jax.random`` with the default threefry keys) evaluates the
Threefry-2x32 block cipher: 20 rounds of uint32 additions, rotations and xors. On CPU, JAX
lowers each call as a *rolled* loop (a ``while`` over 5 groups of 4 rounds), which keeps
compile time down for programs that draw once. Inside a training step that draws its batch
(the recall step folds, splits and samples 9 times) every iteration of those loops runs as
separate small kernels plus copies of the loop carry; unrolled, the program has no such
loops and compiles faster (the bench's reference step keeps the rolled loop).

``unroll_threefry_on_cpu()`` registers JAX's generic (unrolled) lowering for the CPU too.
The bits are identical, integer arithmetic has no rounding, so every result is unchanged;
only the compiled program differs (fewer, fused kernels). ``rolled_threefry()`` restores
JAX's CPU lowering inside a ``with`` block (the bench traces its reference step there).

Not under XLA's older CPU emitters (``XLA_FLAGS=--xla_cpu_use_fusion_emitters=false``,
``legacy_cpu_emitters``): there an unrolled threefry fused into a concatenate (the key
split inside ``jax.random.gamma``'s rejection loop, as in ``jax.random.chisquare``) gives
LLVM a kernel it takes minutes to optimise, so ``unroll_threefry_on_cpu`` leaves JAX's
rolled lowering, which compiles in seconds there.

This reaches into JAX internals (``jax._src``): where they are not as expected, both do
nothing and say so by their return value, and results stay the same, only slower.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

try:  # JAX internals: absent or renamed in another JAX version, then we leave JAX alone.
    from jax._src.interpreters import mlir as _mlir
    from jax._src.random import threefry2x32 as _threefry

    _PRIMITIVE = _threefry.threefry2x32_p
    _UNROLLED = _threefry._threefry2x32_lowering_rule
    _ROLLED = _threefry._threefry2x32_cpu_lowering_rule
except (ImportError, AttributeError):
    _mlir = None


#: Whether the unrolled lowering is the one registered for the CPU now.
_unrolled_now = False


def _register_cpu_lowering(unrolled: bool) -> bool:
    global _unrolled_now
    if _mlir is None:
        return False
    _mlir.register_lowering(_PRIMITIVE, _UNROLLED if unrolled else _ROLLED, platform="cpu")
    _unrolled_now = unrolled
    return True


def legacy_cpu_emitters(xla_flags: str | None = None) -> bool:
    """Whether ``xla_flags`` (default: the environment's ``XLA_FLAGS``) turns XLA's CPU
    fusion emitters off (``--xla_cpu_use_fusion_emitters=false`` or ``=0``; the last
    occurrence wins, as in XLA's parser)."""
    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    value = None
    for token in flags.split():
        name, _, given = token.partition("=")
        if name == "--xla_cpu_use_fusion_emitters":
            value = given
    return value in ("false", "0")


def unroll_threefry_on_cpu() -> bool:
    """Lower threefry2x32 unrolled on CPU from now on (programs traced later); returns
    whether it did (False: JAX's internals differ, or ``legacy_cpu_emitters()``; JAX's
    own lowering stays)."""
    if legacy_cpu_emitters():
        return False
    return _register_cpu_lowering(unrolled=True)


@contextmanager
def rolled_threefry() -> Iterator[bool]:
    """Within the block, threefry2x32 lowers on CPU as JAX does by default (a rolled
    loop); afterwards as before. Yields whether the swap took place."""
    restore = _unrolled_now
    swapped = _register_cpu_lowering(unrolled=False)
    try:
        yield swapped
    finally:
        if swapped and restore:
            _register_cpu_lowering(unrolled=True)
