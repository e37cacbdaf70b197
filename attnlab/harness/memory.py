"""Sizes checked before work: a run whose flags ask for more memory than the machine has
is refused in one line naming the flag, before anything is compiled or allocated.

Each study estimates, from its configuration alone (no JAX), the largest arrays its run
allocates: a list of ``Need``s, each the bytes of one allocation (or a few that live
together) and the ``Size``s of the flags it grows with. ``check_needs`` adds them up and,
when the sum exceeds ``MEMORY_FRACTION`` of the machine's memory, raises a ``UsageError``
naming, of the largest need, the flag that grew most from its committed default (the one
to make smaller). The estimates count float32 numbers as 4 bytes and PRNG keys as 8 (two
uint32 words), times small stated factors for the temporaries beside them; they are meant
to be within a small factor of the truth, far below the budget at the committed defaults
and far above it at the sizes that used to end in a traceback, an abort or a hang.

"The machine's memory", ``MEMORY_FRACTION`` and the budget are ``attnlab.core.machine``'s:
what this process may use (the physical memory, or where tighter the room its limits leave:
``ulimit -v``, ``ulimit -d``), ``ATTNLAB_MEMORY_BYTES`` standing in for it in tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from attnlab.core.machine import MEMORY_FRACTION, machine_memory_bytes, memory_budget_bytes
from attnlab.harness.errors import UsageError

#: Bytes of one float32 number, and of one PRNG key (two uint32 words of threefry).
FLOAT32_BYTES = 4
KEY_BYTES = 8
#: Temporaries per float32 number a chunk of random draws holds (``attnlab.core.parallel``'s
#: chunks): the random bits, the draws and one result of the same size.
DRAW_COPIES = 3


def format_bytes(n: int) -> str:
    """``n`` bytes in decimal units, one decimal: ``64.0 GB``, ``512.0 MB``, ``3.2 TB``;
    past ``1000 YB`` a power of ten (``10^40 bytes``: a flag of forty digits)."""
    n = int(n)
    if n < 1000:
        return f"{n} B"
    for power, unit in enumerate(("kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"), start=1):
        if n < 1000 ** (power + 1):
            return f"{n / 1000**power:.1f} {unit}"
    return f"10^{len(str(n)) - 1} bytes"


def _ratio(value: int, default: int) -> float:
    """``value / default`` as a float, ``inf`` where it would overflow one."""
    try:
        return value / max(default, 1)
    except OverflowError:
        return math.inf


def _share(fraction: float) -> str:
    return "half" if fraction == 0.5 else f"{fraction:.0%} of"


def check_memory(needed_bytes: int, flag: str, what: str, value: object = None) -> None:
    """Raise a ``UsageError`` naming ``flag`` (and its ``value``, if given) when
    ``needed_bytes > MEMORY_FRACTION * machine_memory_bytes()``, e.g.

        --dk: 4000000000 needs about 64.0 GB for <what>, over half the 23.4 GB this process
        may use; use a smaller value
    """
    total = machine_memory_bytes()
    if needed_bytes <= memory_budget_bytes(total):
        return
    named = flag if value is None else f"{flag}: {value}"
    raise UsageError(
        f"{named} needs about {format_bytes(needed_bytes)} for {what}, over "
        f"{_share(MEMORY_FRACTION)} the {format_bytes(total)} this process may use; use a "
        "smaller value"
    )


class Size(NamedTuple):
    """A flag a need grows with: how the message shows its value, and ``growth``, the
    value over its committed default (the flag of largest growth is the one named)."""

    flag: str
    shown: str
    growth: float


def size(flag: str, value: int | Sequence[int], default: int | Sequence[int]) -> Size:
    """``flag``'s ``Size``: a number, or the largest of a list (shown as that number),
    against the default's (largest)."""
    value = max(value) if isinstance(value, Sequence) else value
    default = max(default) if isinstance(default, Sequence) else default
    return Size(flag, str(value), _ratio(value, default))


def count(flag: str, values: Sequence[object], defaults: Sequence[object]) -> Size:
    """``flag``'s ``Size`` by how many values it was given (e.g. mechanisms, widths)."""
    return Size(flag, f"a list of {len(values)} values", _ratio(len(values), len(defaults)))


class Need(NamedTuple):
    """``nbytes`` held at once by ``what`` (e.g. "the keys of one chunk"), growing with
    the flags of ``sizes``."""

    nbytes: int
    what: str
    sizes: tuple[Size, ...]


def total_bytes(needs: Iterable[Need]) -> int:
    """The needs' bytes added up (the estimate ``check_needs`` compares with the budget)."""
    return sum(need.nbytes for need in needs)


def check_needs(needs: Iterable[Need]) -> None:
    """``check_memory`` of the needs' total: over the budget, the ``UsageError`` names
    the largest need's flag of largest growth from its default, and what that need is."""
    needs = list(needs)
    needed = total_bytes(needs)
    if not needs or needed <= memory_budget_bytes():
        return
    largest = max(needs, key=lambda need: need.nbytes)
    blamed = max(largest.sizes, key=lambda s: s.growth, default=None)
    if blamed is None:
        check_memory(needed, "the flags", largest.what)
    else:
        check_memory(needed, blamed.flag, largest.what, blamed.shown)


def fitting_jobs(needs_at: Callable[[int], Iterable[Need]], jobs: int) -> int:
    """The most worker processes, at most ``jobs``, whose needs (``needs_at(j)``: the pieces
    ``j`` workers hold at once) fit the budget; 1 where none does (``check_needs`` of one
    worker then refuses the run). The results do not depend on how many workers run."""
    for j in range(max(1, jobs), 1, -1):
        if total_bytes(needs_at(j)) <= memory_budget_bytes():
            return j
    return 1


def product(*factors: int) -> int:
    """The product of ``factors`` as a Python int (never overflows, unlike numpy's)."""
    return math.prod(int(f) for f in factors)
