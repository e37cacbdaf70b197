"""attnlab.harness.workers: pieces run here or in worker processes give the same results,
in the order given, with every unit of progress reported; the workers print nothing on
Ctrl-C and never outlive their parent, however it ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from events import EVENT_DEADLINE_S, HAS_PROC_SIGNALS, wait_for

from attnlab.harness.workers import Piece, run_pieces


def noisy_sum(seed: int, n: int, on_progress=None) -> np.ndarray:
    """A small JAX computation whose bits a worker must reproduce."""
    x = jax.random.normal(jax.random.key(seed), (n, 16))
    if on_progress is not None:
        on_progress(n)
    return np.asarray(jnp.sum(jnp.tanh(x) @ x.T, axis=0))


def fails(on_progress=None):
    raise ValueError("piece failed: the message travels back")


PIECES = [Piece(noisy_sum, (seed, n), units=n, cost=n) for seed, n in [(0, 8), (1, 64), (2, 16)]]


def test_pieces_run_here_in_order_with_progress():
    seen = []
    out = run_pieces(PIECES, jobs=1, on_progress=seen.append)
    assert [len(x) for x in out] == [8, 64, 16]
    assert seen == [8, 64, 16]


def test_workers_give_the_same_bits_in_the_given_order():
    """Two spawned workers, costliest first: each result bit-identical to running here
    (the same program on the same inputs), returned in the order of the pieces."""
    here = run_pieces(PIECES, jobs=1)
    seen = []
    there = run_pieces(PIECES, jobs=2, on_progress=seen.append)
    for a, b in zip(here, there, strict=True):
        assert a.tobytes() == b.tobytes()
    assert sorted(seen) == [8, 16, 64]


def test_a_workers_error_is_raised_here():
    with pytest.raises(ValueError, match="the message travels back"):
        run_pieces([PIECES[0], Piece(fails, ())], jobs=2)


def test_jobs_must_be_positive():
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        run_pieces(PIECES, jobs=0)


# --- the workers and the signals that end a run (issue 67, cause 7) ------------------------

#: A script whose run gives two pieces to two workers, each of which says it is running (a
#: file named by its pid in $ATTNLAB_TEST_EVENTS) and then waits until it is killed: in its
#: piece, or (``ATTNLAB_TEST_PHASE=import``) while ``spawn`` imports the script into it.
BLOCKING_SCRIPT = """\
import os
import sys
import threading
from pathlib import Path


def block(on_progress=None):
    (Path(os.environ["ATTNLAB_TEST_EVENTS"]) / str(os.getpid())).write_text("")
    threading.Event().wait()


if __name__ == "__mp_main__" and os.environ["ATTNLAB_TEST_PHASE"] == "import":
    block()

from attnlab.harness import cli
from attnlab.harness.workers import Piece, run_pieces


def build_parser():
    return cli.new_parser("two pieces that block, in two workers")


def run(args, context):
    run_pieces([Piece(block, ()), Piece(block, ())], jobs=2)


if __name__ == "__main__":
    sys.exit(cli.entry_point(build_parser, run)())
"""
INTERRUPTED = "blocks.py: interrupted; nothing written\n"


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (``/proc/<pid>/stat``'s state)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def _blocked_workers(folder: Path, phase: str) -> Iterator[tuple[subprocess.Popen, list[int]]]:
    """``BLOCKING_SCRIPT`` started in a process group of its own, once both its workers
    run (in ``phase``): the process and the workers' pids. Whatever is left is killed
    after the block, so a failing test leaves no process behind."""
    script, events = folder / "blocks.py", folder / "events"
    script.write_text(BLOCKING_SCRIPT, encoding="utf-8")
    events.mkdir()
    env = {**os.environ, "ATTNLAB_TEST_EVENTS": str(events), "ATTNLAB_TEST_PHASE": phase}
    with open(folder / "stderr", "w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    workers: list[int] = []
    try:
        wait_for(lambda: len(list(events.iterdir())) == 2 or process.poll() is not None)
        workers = [int(p.name) for p in events.iterdir()]
        assert process.poll() is None, (folder / "stderr").read_text(encoding="utf-8")
        yield process, workers
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.kill()
        process.wait()


@pytest.mark.skipif(not HAS_PROC_SIGNALS, reason="reads /proc/<pid>/stat")
@pytest.mark.parametrize("phase", ["import", "piece"])
def test_ctrl_c_to_the_process_group_is_one_line_and_leaves_no_worker(tmp_path, phase):
    """SIGINT to the whole group (Ctrl-C) while the workers import the script or run their
    pieces: the parent's one line and exit 130, no worker's traceback, no worker left."""
    with _blocked_workers(tmp_path, phase) as (process, workers):
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=EVENT_DEADLINE_S) == 130
        wait_for(lambda: not any(map(_running, workers)))  # a bound on a hang only
        assert (tmp_path / "stderr").read_text(encoding="utf-8") == INTERRUPTED


@pytest.mark.skipif(not HAS_PROC_SIGNALS, reason="reads /proc/<pid>/stat")
def test_sigterm_and_another_while_it_cleans_up_leave_no_worker(tmp_path):
    """SIGTERM to the parent alone (a scheduler, ``kill``), sent again at every look until
    it ends, so that a second one comes while it cleans up (which exits at once) or after:
    exit 143 (or the default action of a SIGTERM after the run), and no worker left."""
    with _blocked_workers(tmp_path, "piece") as (process, workers):

        def ended() -> bool:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            return process.poll() is not None

        wait_for(ended)
        assert process.returncode in (143, -signal.SIGTERM)
        wait_for(lambda: not any(map(_running, workers)))  # a bound on a hang only
        assert "Traceback" not in (tmp_path / "stderr").read_text(encoding="utf-8")
