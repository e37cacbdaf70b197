"""Bench rows of experiment 13 on a real model, Gemma 3 270M as llama.cpp's GGUF (``bench.py
--gemma``, after ``make gemma``): reading the file (its header, every tensor dequantized to
float32, the tokenizer built from its metadata), and 13 at its committed arguments on it
(the script passes the real_model study's ``GEMMA_ARGUMENTS``: no study imports another)
from an empty compilation cache, each against the time the issue that asked for them
allows."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnlab.harness.cli import REPO_ROOT
from attnlab.harness.errors import RunError
from attnlab.models.gguf_checkpoint import load_gguf
from attnlab.studies.bench.config import Row, make_row

#: The seconds each row is allowed (reading: dequantization within a minute; 13 at its
#: defaults within five minutes on two cores).
READ_BUDGET_S, RUN_BUDGET_S = 60.0, 300.0


def time_gemma(path: Path, arguments: str) -> list[Row]:
    """Rows ``gemma3_read_seconds`` (``load_gguf`` of the GGUF ``path``) and
    ``gemma3_13_seconds`` (experiment 13 with ``arguments``, its ``--out-dir`` a temporary
    folder, a fresh compilation cache); RunError where the file is missing (``make gemma``
    assembles it) or 13 fails."""
    if not path.is_file():
        raise RunError(f"{path} is missing: run `make gemma` first")
    start = time.perf_counter()
    checkpoint = load_gguf(path)
    read = time.perf_counter() - start
    parameters = sum(t.size for t in checkpoint.tensors.values())
    rows = [make_row("gemma3_read_seconds", read, detail=(
        f"load_gguf of {path.name}: header, {parameters:,} parameters dequantized to float32, "
        f"the tokenizer from its metadata; allowed {READ_BUDGET_S:g} s; {os.cpu_count()} CPUs"
    ))]  # fmt: skip
    del checkpoint
    with tempfile.TemporaryDirectory(prefix="attnlab-gemma-") as scratch:
        out, cache = Path(scratch) / "out", Path(scratch) / "cache"
        out.mkdir()
        command = [sys.executable, str(REPO_ROOT / "experiments" / "13_real_model.py"),
                   *arguments.split(),
                   "--out-dir", str(out), "--quiet"]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "ATTNLAB_JAX_CACHE":
                              str(cache)}, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, errors="replace", check=False)  # fmt: skip
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-2:])
        raise RunError(f"experiment 13 on {path.name} exited with {done.returncode}: {tail}")
    rows.append(make_row("gemma3_13_seconds", seconds, detail=(
        f"experiment 13 {arguments} (the file read, both models' heads tables at every "
        f"length, the counterfactuals, float16, the ledger), compilation cache empty; allowed "
        f"{RUN_BUDGET_S:g} s; {os.cpu_count()} CPUs; load average at start "
        f"{os.getloadavg()[0]:.1f}"
    )))  # fmt: skip
    return rows
