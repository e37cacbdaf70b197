"""Row ``make_reproduce_seconds`` (``bench.py --reproduce``): the wall time of ``make
reproduce`` from an empty compilation cache, the XLA programs it compiled (the entries
written to that cache) and each experiment's seconds from the sidecars it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from attnlab.harness.cli import REPO_ROOT
from attnlab.harness.errors import RunError
from attnlab.studies.bench.config import REPRODUCE_COMMAND, Row, make_row


def script_seconds(results: Path) -> dict[str, float]:
    """Each experiment's seconds in the sidecars under ``results`` (``NN_``, 11 for ``cards/``,
    ``runs/`` left out), distinct times summed (a script's stages)."""
    found: dict[str, set] = {}
    for path in results.rglob("*.json"):
        parts = path.relative_to(results).parts
        number = "11" if parts[0] == "cards" else path.name[:2]
        if parts[0] != "runs" and number.isdigit():
            found.setdefault(number, set()).add(json.loads(path.read_text()).get("wall_time_s"))
    return {number: sum(filter(None, times)) for number, times in sorted(found.items())}


def time_reproduce(command: Sequence[str] = REPRODUCE_COMMAND, cwd: os.PathLike = REPO_ROOT) -> Row:
    """Row ``make_reproduce_seconds``: ``command`` in ``cwd`` with ``ATTNLAB_JAX_CACHE`` a fresh
    empty directory (the programs written there counted), each experiment's share; RunError."""
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attnlab-jax-cache-") as cache:
        start = time.perf_counter()
        env = {**os.environ, "ATTNLAB_JAX_CACHE": cache}
        done = subprocess.run(list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", check=False)  # fmt: skip
        seconds = time.perf_counter() - start
        programs = len(list(Path(cache).glob("*-cache")))
    shown = " ".join(command)
    if done.returncode != 0:
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        raise RunError(f"`{shown}` exited with status {done.returncode}: {tail}")
    shares = ", ".join(f"{n} {s:.0f}" for n, s in script_seconds(Path(cwd) / "results").items())
    detail = (f"wall time of `{shown}` (every result regenerated); compilation cache empty: "
              f"{programs} XLA programs compiled; each experiment's seconds (its sidecars): "
              f"{shares}; {os.cpu_count()} CPUs; load average at start {load[0]:.1f}")  # fmt: skip
    return make_row("make_reproduce_seconds", seconds, detail=detail)
