"""Where a compiled program's time goes, kernel by kernel, from XLA's own trace.

``kernel_profile`` calls a compiled program under ``jax.profiler.trace``. On CPU, XLA's
thunk executor records every kernel it launches (a fusion, a dot, a sort, a copy) as one
trace event named after its HLO instruction, on the thread that ran it. A kernel that
computes a dot is charged to ``MATMUL`` (XLA's CPU passes drop the metadata of the dots
they rewrite, so a matmul's scope is often unknown); any other kernel to the
``jax.named_scope`` its instruction came from (``kernel_scopes``: the recall step names
``data``, ``forward_backward``, ``metrics`` and ``adam``), or ``OTHER``, what no scope names
(the loop's own bookkeeping). Control flow (a ``while`` around its body's kernels) is no
kernel and is left out.

Kernel seconds are summed over XLA's threads, which run independent kernels at once, so
they can exceed the wall time of the calls; the wall time is measured under the trace,
whose overhead (a few microseconds per kernel) it includes.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

#: The category of every kernel computing a dot, whatever its scope.
MATMUL = "matmul"
#: The category of a kernel that no named scope claims.
OTHER = "other"
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = ")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
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
            )
            current.append(match.group(1))
    return instructions, computations


def _scope_of(op_name: str, scopes: Sequence[str]) -> str | None:
    """The first of ``scopes`` that is a component of ``op_name`` (``a/adam/mul``; JAX
    writes a scope under a transform as ``transpose(jvp(scope))``)."""
    parts = re.split(r"[/()]", op_name)
    return next((s for s in scopes if s in parts), None)


def kernel_categories(hlo_text: str, scopes: Sequence[str]) -> dict[str, str]:
    """``{instruction: category}`` for every kernel of a compiled module (control flow
    left out): ``MATMUL`` when it, or anything it calls, is a ``dot`` or ``convolution``;
    else the first of ``scopes`` in its ``op_name`` metadata; else (a fusion often has no
    metadata of its own) the most common scope among the instructions it calls,
    recursively; else ``OTHER``.
    """
    instructions, computations = _parse(hlo_text)

    def votes(name: str, seen: frozenset[str]) -> tuple[Counter, bool]:
        ins = instructions[name]
        scope = _scope_of(ins.op_name, scopes)
        tally, dot = Counter([scope] if scope else []), ins.dot
        for callee in set(ins.calls) - seen:
            for inner in computations.get(callee, []):
                sub, sub_dot = votes(inner, seen | {callee})
                tally += Counter() if scope else sub
                dot = dot or sub_dot
        return tally, dot

    out = {}
    for name, ins in instructions.items():
        if ins.control:
            continue
        tally, dot = votes(name, frozenset())
        out[name] = MATMUL if dot else tally.most_common(1)[0][0] if tally else OTHER
    return out


@dataclass(frozen=True)
class KernelProfile:
    """Per unit of work (a step, when ``units`` is the number of steps a call runs):
    kernel seconds and launches per category (``kernel_categories``), and wall seconds."""

    seconds: dict[str, float]
    launches: dict[str, float]
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
    its category (``kernel_categories`` of ``compiled.as_text()``); divide by ``calls *
    units``. Events that are no kernel of ``compiled`` (the executor's own, Python's) are
    left out. ``MATMUL``, every scope and ``OTHER`` have an entry, zero if nothing ran."""
    table = kernel_categories(compiled.as_text(), scopes)
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
    for category, duration in events:
        seconds[category] += duration / n
        launches[category] += 1 / n
    return KernelProfile(seconds, launches, wall / n)


def combined(*profiles: KernelProfile) -> KernelProfile:
    """Profiles of programs that run one after the other (per the same unit), summed: every
    category of any of them, in order of first appearance."""
    names = list(dict.fromkeys(name for p in profiles for name in p.seconds))
    return KernelProfile(
        {n: sum(p.seconds.get(n, 0.0) for p in profiles) for n in names},
        {n: sum(p.launches.get(n, 0.0) for p in profiles) for n in names},
        sum(p.wall_seconds for p in profiles),
    )
