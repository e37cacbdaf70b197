"""The memory this process may use (attnlab/core/machine.py): the machine's physical
memory, ``ATTNLAB_MEMORY_BYTES`` in its stead, a fallback where the platform cannot say, or
the room the process's limits (``ulimit -v``, ``ulimit -d``) leave where tighter."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.core import machine

GIB = 2**30


@pytest.fixture
def machine_bytes(monkeypatch: pytest.MonkeyPatch):
    """``machine_bytes(n)`` makes this a machine of ``n`` bytes (``ATTNLAB_MEMORY_BYTES``)."""

    def set_bytes(n: int) -> None:
        monkeypatch.setenv(machine.MEMORY_ENV, str(n))

    return set_bytes


def test_machine_memory_is_the_physical_memory_or_the_override(monkeypatch, machine_bytes):
    monkeypatch.delenv(machine.MEMORY_ENV, raising=False)
    assert machine.machine_memory_bytes() > 0
    machine_bytes(12345)
    assert machine.machine_memory_bytes() == 12345
    assert machine.memory_budget_bytes() == int(machine.MEMORY_FRACTION * 12345)


@pytest.mark.parametrize("given", ["", "0", "-5", "lots"])
def test_a_bad_override_is_ignored(monkeypatch, machine_bytes, given):
    monkeypatch.delenv(machine.MEMORY_ENV, raising=False)
    physical = machine.machine_memory_bytes()
    machine_bytes(given)
    assert machine.machine_memory_bytes() == physical


def test_without_sysconf_the_fallback_is_used(monkeypatch):
    monkeypatch.delenv(machine.MEMORY_ENV, raising=False)

    def unknown(name):
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(machine.os, "sysconf", unknown)
    assert machine.machine_memory_bytes() == machine.FALLBACK_MEMORY_BYTES


def _limits(monkeypatch, limits: dict[str, int], held_pages: tuple[int, ...]) -> None:
    """This process as if under soft ``limits`` (``resource`` names -> bytes; the others
    unlimited) and holding ``held_pages`` (``/proc/self/statm``'s fields)."""
    unlimited = resource.RLIM_INFINITY

    def getrlimit(which):
        soft = {getattr(resource, name): n for name, n in limits.items()}.get(which, unlimited)
        return soft, unlimited

    monkeypatch.setattr(machine.resource, "getrlimit", getrlimit)
    monkeypatch.setattr(machine, "_read_statm", lambda: " ".join(map(str, held_pages)))


def test_the_memory_is_the_room_a_process_limit_leaves_where_tighter(monkeypatch, machine_bytes):
    """Under ``ulimit -v`` the budget counted the physical memory (and the safetensors
    reader then died of a MemoryError): the memory is the room the tightest of the address
    space (``RLIMIT_AS``) and data (``RLIMIT_DATA``) limits leaves, what the process holds
    of each (``/proc/self/statm``: all pages, data pages) taken off; the machine's where
    that is smaller or no limit is set."""
    page = os.sysconf("SC_PAGE_SIZE")
    machine_bytes(64 * GIB)
    held = (GIB // page, 0, 0, 0, 0, GIB // (2 * page), 0)  # 1 GiB mapped, 0.5 GiB data
    _limits(monkeypatch, {"RLIMIT_AS": 3 * GIB}, held)
    assert machine.machine_memory_bytes() == 2 * GIB
    assert machine.memory_budget_bytes() == GIB
    _limits(monkeypatch, {"RLIMIT_AS": 3 * GIB, "RLIMIT_DATA": 2 * GIB}, held)
    assert machine.machine_memory_bytes() == 3 * GIB // 2
    _limits(monkeypatch, {"RLIMIT_AS": 100 * GIB}, held)
    assert machine.machine_memory_bytes() == 64 * GIB
    _limits(monkeypatch, {}, held)
    assert machine.machine_memory_bytes() == 64 * GIB
    _limits(monkeypatch, {"RLIMIT_AS": GIB // 2}, held)  # over it already: nothing is left
    assert machine.machine_memory_bytes() == 1


@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="no /proc (not Linux)")
def test_ulimit_v_is_read_by_a_fresh_process():
    """A real ``RLIMIT_AS`` (``ulimit -v``) of 4 GiB on a process told its machine has 64:
    its memory is under 4 GiB (less what it holds), not 64."""
    limit = 4 * GIB
    code = (  # the limit set by the process itself: no preexec_fn in a process running JAX
        f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
        "from attnlab.core import machine; print(machine.machine_memory_bytes())"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, machine.MEMORY_ENV: str(64 * GIB)},
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    assert 0 < int(run.stdout) < limit
