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

This reaches into JAX internals (``jax._src``): where they are not as expected, both do
nothing and say so by their return value, and results stay the same, only slower.
"""

from __future__ import annotations

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


def _register_cpu_lowering(unrolled: bool) -> bool:
    if _mlir is None:
        return False
    _mlir.register_lowering(_PRIMITIVE, _UNROLLED if unrolled else _ROLLED, platform="cpu")
    return True


def unroll_threefry_on_cpu() -> bool:
    """Lower threefry2x32 unrolled on CPU from now on (programs traced later); returns
    whether it could (False: JAX's internals differ, JAX's own lowering stays)."""
    return _register_cpu_lowering(unrolled=True)


@contextmanager
def rolled_threefry() -> Iterator[bool]:
    """Within the block, threefry2x32 lowers on CPU as JAX does by default (a rolled
    loop); afterwards unrolled. Yields whether the swap took place."""
    swapped = _register_cpu_lowering(unrolled=False)
    try:
        yield swapped
    finally:
        if swapped:
            _register_cpu_lowering(unrolled=True)
