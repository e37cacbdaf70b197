"""attnlab/core/references.py: a Mechanism is its own reference, and a built-in is told
from a namesake by identity, not by name; a name resolved once is carried with its
reference and crosses a process as it; a file that loops, waits or exits at import, or a
mechanism whose check never ends, is refused in one line within the time limit."""

from __future__ import annotations

import argparse
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jax.numpy as jnp
import pytest
from events import EVENT_DEADLINE_S

from attnlab.core.mechanism import Mechanism, MechanismError, MechanismReferenceError
from attnlab.core.references import (
    IMPORT_TIMEOUT_ENV,
    IMPORT_TIMEOUT_S,
    MechanismRef,
    _can_time,
    import_timeout_s,
    is_builtin,
    load_mechanism,
    resolve,
    resolved_mechanism,
    resolved_mechanisms,
)
from attnlab.core.temperature import BUILTINS


def _logits(q, k):
    return jnp.einsum("...qd,...kd->...qk", q, k)


def test_a_mechanism_object_is_checked_and_returned_as_it_is():
    mechanism = Mechanism("mine", _logits)
    assert load_mechanism(mechanism) is mechanism
    with pytest.raises(MechanismError, match="'bad'"):
        load_mechanism(Mechanism("bad", lambda q, k: q))


@pytest.mark.parametrize("name", list(BUILTINS))
def test_only_the_builtin_itself_is_a_builtin(name):
    assert is_builtin(load_mechanism(name))
    assert not is_builtin(Mechanism(name, _logits))


def test_a_name_is_resolved_once_and_carried_with_its_reference(tmp_path):
    path = tmp_path / "carried.py"
    path.write_text("def logits(q, k):\n    return q @ k.swapaxes(-1, -2)\n", encoding="utf-8")
    reference = f"{path}:logits"
    found = resolved_mechanism(reference)
    assert found == resolve(reference) and resolve(found) is found
    assert found.mechanism is load_mechanism(reference) and found.text == reference
    assert (found.name, found.portable) == ("logits", True)
    # it crosses a process as its reference, and is resolved once more on arrival
    assert pickle.loads(pickle.dumps(found)) == found
    assert [r.reference for r in resolved_mechanisms(f"scaled,{reference}")] == [
        "scaled",
        reference,
    ]
    with pytest.raises(argparse.ArgumentTypeError, match="not a built-in"):
        resolved_mechanism("no_such_mechanism")


def test_a_mechanism_object_has_no_reference_and_stays_in_its_process():
    mine = resolve(Mechanism("mine", _logits))
    assert mine == MechanismRef(None, mine.mechanism) and not mine.portable
    assert mine.text == "mine (a Mechanism object)"
    with pytest.raises(TypeError, match="no reference"):
        pickle.dumps(mine)


# --- a file that loops, waits or exits at import; a check that never ends -------------------

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The limit the tests set (``IMPORT_TIMEOUT_ENV``), instead of the real 60 s.
LIMIT_S = 0.5


@pytest.fixture
def limited(monkeypatch):
    """The limit set to ``LIMIT_S``; the test skipped where no limit can be set (it would
    hang): off the main thread, or with SIGALRM someone else's (a test runner's timeout)."""
    if not _can_time():
        pytest.skip("the limit is a SIGALRM timer: main thread, SIGALRM free")
    monkeypatch.setenv(IMPORT_TIMEOUT_ENV, str(LIMIT_S))


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _no_timer_left() -> None:
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_file_that_loops_at_import_is_refused_within_the_limit_even_with_help(tmp_path):
    """argparse converts --mechanism's value as it reads it, before a later --help acts: the
    loop is cut at the limit (1 s here), one line naming the reference and the limit, exit 2,
    nothing written. The file notes that its import began; the message says the timer cut
    it (with no timer the loop never ends, and the run fails at its deadline). No upper
    bound on the time taken: that is the machine's load, not the limit."""
    began = tmp_path / "began"
    loop = _write(
        tmp_path,
        "loop.py",
        f"""
        import pathlib
        pathlib.Path({str(began)!r}).write_text("began")
        while True:
            pass
        """,
    )
    process = subprocess.run(
        [sys.executable, str(REPO_ROOT / "experiments" / "11_mechanism_card.py"),
         "--mechanism", f"{loop}:x", "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=EVENT_DEADLINE_S,
        env=os.environ | {IMPORT_TIMEOUT_ENV: "1"},
    )  # fmt: skip
    assert process.returncode == 2, process.stderr
    assert process.stdout == ""
    assert process.stderr.count("\n") == 1 and "Traceback" not in process.stderr
    assert f"'{loop}:x': importing its file did not finish within 1 s" in process.stderr
    assert IMPORT_TIMEOUT_ENV in process.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["began", "loop.py"]


@pytest.mark.parametrize(
    "body",
    [
        "while True:\n    pass\n",
        "import time\ntime.sleep(600)\n",
        # an exception swallowed is raised again
        "while True:\n    try:\n        pass\n    except BaseException:\n        pass\n",
    ],
)
def test_a_file_that_loops_or_waits_is_refused_and_forgotten(tmp_path, limited, body):
    path = _write(tmp_path, "stuck.py", body)
    modules = set(sys.modules)
    started = time.monotonic()
    with pytest.raises(MechanismReferenceError, match=f"within {LIMIT_S:g} s") as caught:
        load_mechanism(f"{path}:x")
    assert time.monotonic() - started >= LIMIT_S  # a lower bound holds on any load
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    assert set(sys.modules) == modules  # the half-imported module is not kept
    _no_timer_left()


def test_a_mechanism_whose_check_never_ends_is_refused(tmp_path, limited):
    path = _write(tmp_path, "endless.py", "def logits(q, k):\n    while True:\n        pass\n")
    with pytest.raises(
        MechanismError, match=f"checking mechanism 'logits' did not finish within {LIMIT_S:g} s"
    ):
        load_mechanism(f"{path}:logits")
    with pytest.raises(MechanismError, match="^checking mechanism 'endless' did not finish"):
        load_mechanism(Mechanism("endless", lambda q, k: _endless()))
    _no_timer_left()


def _endless():
    while True:
        pass


@pytest.mark.parametrize(
    ("body", "code"),
    [("import sys\nsys.exit(0)\n", "0"), ("raise SystemExit(3)\n", "3"),
     ("import sys\nsys.exit('bye')\n", "'bye'")],
)  # fmt: skip
def test_a_file_that_exits_at_import_is_refused_in_one_line(tmp_path, body, code):
    path = _write(tmp_path, "exits.py", body)
    modules = set(sys.modules)
    with pytest.raises(MechanismReferenceError, match=re.escape(f"called sys.exit({code})")):
        load_mechanism(f"{path}:x")
    assert set(sys.modules) == modules


def test_a_mechanism_that_exits_while_checked_is_refused():
    with pytest.raises(MechanismError, match=r"checking mechanism 'quits' called sys\.exit\(1\)"):
        load_mechanism(Mechanism("quits", lambda q, k: sys.exit(1)))


def test_ctrl_c_while_importing_goes_through(tmp_path):
    path = _write(tmp_path, "interrupted.py", "raise KeyboardInterrupt\n")
    modules = set(sys.modules)
    with pytest.raises(KeyboardInterrupt):
        load_mechanism(f"{path}:x")
    assert set(sys.modules) == modules
    _no_timer_left()


def test_off_the_main_thread_there_is_no_limit(tmp_path, monkeypatch):
    """Signals reach the main thread only: a worker thread imports without a limit."""
    monkeypatch.setenv(IMPORT_TIMEOUT_ENV, "0.05")
    path = _write(
        tmp_path,
        "slow.py",
        """
        import time
        import jax.numpy as jnp
        time.sleep(0.3)
        def slow(q, k):
            return jnp.einsum("...qd,...kd->...qk", q, k)
        """,
    )
    found = []
    worker = threading.Thread(target=lambda: found.append(load_mechanism(f"{path}:slow")))
    worker.start()
    worker.join(timeout=EVENT_DEADLINE_S)
    assert [m.name for m in found] == ["slow"]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", ""])
def test_a_bad_limit_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(IMPORT_TIMEOUT_ENV, value)
    with pytest.raises(MechanismReferenceError, match=f"^{IMPORT_TIMEOUT_ENV}="):
        import_timeout_s()
    monkeypatch.delenv(IMPORT_TIMEOUT_ENV)
    assert import_timeout_s() == IMPORT_TIMEOUT_S == 60
