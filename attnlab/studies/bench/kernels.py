"""Where a compiled program's time goes, kernel by kernel, from XLA's own trace.

``kernel_profile`` calls a compiled program under ``jax.profiler.trace``. On CPU, XLA's
thunk executor records every kernel it launches (a fusion, a dot, a sort, a copy) as one
trace event named after its HLO instruction, on the thread that ran it. ``kernel_table``
reads the compiled HLO: a kernel that computes a dot is charged to ``MATMUL`` (XLA's CPU
passes drop the metadata of the dots they rewrite, so a matmul's scope is often unknown),
with its FLOPs from the dot's shapes; any other kernel to the ``jax.named_scope`` its
instruction came from (the recall step names ``data``, ``forward_backward``, ``metrics``
and ``adam``), or to ``OTHER``, what no scope names (the loop's own bookkeeping). Control
flow (a ``while`` around its body's kernels) is no kernel and is left out.

Kernel seconds are summed over XLA's threads, which run independent kernels at once, so
they can exceed the wall time of the calls; the wall time is measured under the trace,
whose overhead (a few microseconds per kernel) it includes.
"""

from __future__ import annotations

import math
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax

#: The category of every kernel computing a dot, whatever its scope.
MATMUL = "matmul"
#: The category of a kernel that no named scope claims.
OTHER = "other"
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = ")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_SHAPE = re.compile(r" = [a-z]+\d*\[([\d,]*)\]")
_DOT_OPERAND = re.compile(r" dot\(%?([\w.\-]+),")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_APPLIES = re.compile(r"to_apply=%?([\w.\-]+)")
# An instruction line is ``name = type opcode(operands), attributes``; a tuple type may
# hold ``/*index=5*/`` comments, so an opcode is matched as a word before "(".
_DOT = re.compile(r" (?:dot|convolution)\(")
_CONTROL = re.compile(r" (?:while|conditional|call)\(")


@dataclass(frozen=True)
class _Instruction:
    op_name: str
    calls: tuple[str, ...]
    dot: bool
    control: bool
    shape: tuple[int, ...] | None  # None for a tuple
    line: str


def _parse(hlo_text: str) -> tuple[dict[str, _Instruction], dict[str, list[str]]]:
    """Every instruction of an HLO module's text by name, and each computation's
    instructions."""
    instructions: dict[str, _Instruction] = {}
    computations: dict[str, list[str]] = {}
    current: list[str] = []
    for line in hlo_text.splitlines():
        if (match := _COMPUTATION.match(line)) and " = " not in line:
            current = computations.setdefault(match.group(1), [])
        elif match := _INSTRUCTION.match(line):
            op_name = _OP_NAME.search(line)
            instructions[match.group(1)] = _Instruction(
                op_name.group(1) if op_name else "",
                tuple(_CALLS.findall(line)),
                bool(_DOT.search(line)),
                bool(_CONTROL.search(line)),
                _shape(line),
                line,
            )
            current.append(match.group(1))
    return instructions, computations


def _shape(line: str) -> tuple[int, ...] | None:
    match = _SHAPE.search(line)
    return tuple(int(d) for d in match.group(1).split(",") if d) if match else None


def _dot_flops(ins: _Instruction, instructions: dict[str, _Instruction]) -> float:
    """``2 x (output elements) x (contracted size)`` of a ``dot``, the contracted size read
    from its left operand's shape; 0 where a shape is unknown."""
    operand, dims = _DOT_OPERAND.search(ins.line), _LHS_CONTRACTING.search(ins.line)
    lhs = instructions.get(operand.group(1)) if operand else None
    if ins.shape is None or lhs is None or lhs.shape is None or dims is None:
        return 0.0
    contracted = math.prod(lhs.shape[int(d)] for d in dims.group(1).split(",") if d)
    return 2.0 * math.prod(ins.shape) * contracted


def _scope_of(op_name: str, scopes: Sequence[str]) -> str | None:
    """The first of ``scopes`` that is a component of ``op_name`` (``a/adam/mul``; JAX
    writes a scope under a transform as ``transpose(jvp(scope))``)."""
    parts = re.split(r"[/()]", op_name)
    return next((s for s in scopes if s in parts), None)


class Kernel(NamedTuple):
    """A kernel's category, and the FLOPs of its dots per launch (0 if it has none)."""

    category: str
    flops: float


def kernel_table(hlo_text: str, scopes: Sequence[str]) -> dict[str, Kernel]:
    """``{instruction: Kernel}`` for every kernel of a compiled module: the instructions of
    its entry, loop and branch computations, less control flow (a fusion's or a reduction's
    own computation runs inside its kernel). A kernel's category is ``MATMUL`` when it, or
    anything it calls, is a ``dot`` or ``convolution``; else the first of ``scopes`` in its
    ``op_name`` metadata; else (a fusion often has no metadata of its own) the most common
    scope among the instructions it calls, recursively; else ``OTHER``. Its FLOPs are those
    of every dot it is or calls, ``2 x (output elements) x (contracted size)``.
    """
    instructions, computations = _parse(hlo_text)

    def visit(name: str, seen: frozenset[str]) -> tuple[Counter, float, bool]:
        ins = instructions[name]
        scope = _scope_of(ins.op_name, scopes)
        tally = Counter([scope] if scope else [])
        flops, dot = (_dot_flops(ins, instructions) if ins.dot else 0.0), ins.dot
        for callee in set(ins.calls) - seen:
            for inner in computations.get(callee, []):
                sub, sub_flops, sub_dot = visit(inner, seen | {callee})
                if not scope:
                    tally += sub
                flops, dot = flops + sub_flops, dot or sub_dot
        return tally, flops, dot

    inner = {c for ins in instructions.values() for c in ins.calls} | {
        m for ins in instructions.values() for m in _APPLIES.findall(ins.line)
    }
    out = {}
    for name in (n for c, names in computations.items() if c not in inner for n in names):
        ins = instructions[name]
        if ins.control:
            continue
        tally, flops, dot = visit(name, frozenset())
        category = MATMUL if dot else tally.most_common(1)[0][0] if tally else OTHER
        out[name] = Kernel(category, flops)
    return out


@dataclass(frozen=True)
class KernelProfile:
    """Per unit of work (a step, when ``units`` is the number of steps a call runs):
    kernel seconds and launches per category (``kernel_table``), the FLOPs of the matmul
    kernels, and wall seconds."""

    seconds: dict[str, float]
    launches: dict[str, float]
    matmul_flops: float
    wall_seconds: float


def kernel_profile(
    compiled: Any,
    call: Callable[[], Any],
    scopes: Sequence[str],
    units: int,
    calls: int = 3,
) -> KernelProfile:
    """Trace ``calls`` calls of ``call`` (which runs ``compiled``, a ``jax.stages.Compiled``,
    and returns its outputs), after one untraced warm-up, and charge every kernel event to
    its category (``kernel_table`` of ``compiled.as_text()``); divide by ``calls *
    units``. Events that are no kernel of ``compiled`` (the executor's own, Python's) are
    left out. ``MATMUL``, every scope and ``OTHER`` have an entry, zero if nothing ran."""
    table = kernel_table(compiled.as_text(), scopes)
    jax.block_until_ready(call())
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            start = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(call())
            wall = time.perf_counter() - start
        (path,) = Path(trace_dir).rglob("*.xplane.pb")
        data = jax.profiler.ProfileData.from_file(str(path))
        events = [
            (table[e.name], e.duration_ns * 1e-9)
            for plane in data.planes
            for line in plane.lines
            for e in line.events
            if e.name in table
        ]
    n = calls * units
    names = [MATMUL, *scopes, OTHER]
    seconds, launches = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
    for kernel, duration in events:
        seconds[kernel.category] += duration / n
        launches[kernel.category] += 1 / n
    flops = sum(kernel.flops for kernel, _ in events) / n
    return KernelProfile(seconds, launches, flops, wall / n)


def combined(*profiles: KernelProfile) -> KernelProfile:
    """Profiles of programs that run one after the other (per the same unit), summed: every
    category of any of them, in order of first appearance."""
    names = list(dict.fromkeys(name for p in profiles for name in p.seconds))
    return KernelProfile(
        {n: sum(p.seconds.get(n, 0.0) for p in profiles) for n in names},
        {n: sum(p.launches.get(n, 0.0) for p in profiles) for n in names},
        sum(p.matmul_flops for p in profiles),
        sum(p.wall_seconds for p in profiles),
    )
