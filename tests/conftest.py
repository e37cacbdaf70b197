"""Shared fixtures: load an experiment script as a module and run its ``main`` in-process."""

from __future__ import annotations

import functools
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

from attnlab.harness import cli

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS_DIR = REPO_ROOT / "experiments"
sys.path.insert(0, str(EXPERIMENTS_DIR))  # the scripts import experiments/_interrupt.py

# Every property test's base settings: no clock decides a pass (a busy machine slows drawing
# and running examples alike), so no deadline and no too-slow health check.
settings.register_profile("attnlab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("attnlab")


@functools.cache
def _load_script(name: str) -> ModuleType:
    """Import ``experiments/<name>.py`` (names start with digits, so not importable by name)."""
    path = EXPERIMENTS_DIR / f"{name.removesuffix('.py')}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no experiment script {path}")
    module_name = f"attnlab_experiment_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _run_main(module: ModuleType, argv: Sequence[str | Path]) -> int:
    """``module.main(argv)`` as an exit status: argparse errors raise SystemExit, a
    UsageError is returned as 2, success returns 0."""
    try:
        code = module.main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    return 0 if code is None else code


#: The budget of one fast test (not marked slow), in CPU seconds of the test process and the
#: subprocesses it waited for, over its setup, call and teardown (fixtures it is the first
#: to use included): CPU time, not wall time, so that other processes on a shared machine
#: do not count. Over it, the test fails and asks to be made smaller or marked slow.
#: 20 s on the reference machine (2 cores of the class CI runs on), where the calibration
#: below takes REFERENCE_CALIBRATION_S; on a machine that calibrates slower (a slower CPU,
#: or a shared one on a busy day) the budget grows in proportion, never shrinks, so the
#: guard against a test growing does not fail a run for the machine it ran on.
#: ``ATTNLAB_FAST_TEST_BUDGET_S`` sets it outright (0: no budget; ``.ci/test-matrix`` sets
#: 0, its configurations compile more slowly).
FAST_TEST_BUDGET_S = 20.0
#: The calibration's median on the reference machine with both test workers busy (its
#: tries there spread from 0.42 to 0.57 s).
REFERENCE_CALIBRATION_S = 0.5
_budget_s = FAST_TEST_BUDGET_S


def _calibration_seconds(tries: int = 3) -> float:
    """Median CPU seconds to compile and run a fresh jitted gradient of three tanh layers:
    compiling small programs is what the fast tests mostly do. Each try's program holds a
    constant no earlier run used (the clock's nanoseconds), so no cache holds it and it
    compiles. (Switching the persistent cache off instead would keep it off for the whole
    worker: JAX decides whether a process uses it at the process's first compile.)"""
    import jax
    import jax.numpy as jnp

    def once(bias: float) -> float:
        def loss(w, x):
            for layer in w:
                x = jnp.tanh(x @ layer + bias)
            return jnp.log(jnp.sum(jnp.exp(x)))

        start = _cpu_seconds()
        jax.block_until_ready(
            jax.jit(jax.value_and_grad(loss))(jnp.ones((3, 32, 32)), jnp.ones((8, 32)))
        )
        return _cpu_seconds() - start

    salt = time.time_ns() % 1_000_003 / 1_000_003
    return statistics.median(once(salt + i) for i in range(tries))


def _fast_test_budget() -> float:
    given = os.environ.get("ATTNLAB_FAST_TEST_BUDGET_S")
    if given is not None:
        return float(given)
    return FAST_TEST_BUDGET_S * max(1.0, _calibration_seconds() / REFERENCE_CALIBRATION_S)


_CPU_SECONDS = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    """User and system CPU time of this process and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _timed_phase(item: pytest.Item):
    start = _cpu_seconds()
    yield
    item.stash[_CPU_SECONDS] = item.stash.get(_CPU_SECONDS, 0.0) + _cpu_seconds() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    yield from _timed_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    yield from _timed_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    yield from _timed_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A fast test over the budget (``_fast_test_budget``) fails at its teardown."""
    outcome = yield
    report = outcome.get_result()
    used = item.stash.get(_CPU_SECONDS, 0.0)
    over = _budget_s > 0 and used > _budget_s
    if call.when == "teardown" and over and item.get_closest_marker("slow") is None:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} used {used:.1f} s of CPU, over the fast tests' budget of "
            f"{_budget_s:.3g} s (tests/conftest.py): share or shrink its work, or "
            "mark it @pytest.mark.slow"
        )


def pytest_configure(config: pytest.Config) -> None:
    """Configure JAX as every script does (persistent compilation cache, see
    ``cli.configure_jax``), whatever the test order: identical programs compile once. Done
    before any test, so importing JAX and the budget's calibration are charged to no test's
    budget."""
    global _budget_s
    cli.configure_jax()
    xdist_controller = config.getoption("numprocesses", None) and not hasattr(config, "workerinput")
    if not xdist_controller:  # the controller of ``-n 2`` runs no test: no budget to calibrate
        _budget_s = _fast_test_budget()


@pytest.fixture(scope="session")
def load_script() -> Callable[[str], ModuleType]:
    """``load_script("02_saturation_sweep")`` -> the script's module (cached per session)."""
    return _load_script


@pytest.fixture(scope="session")
def run_main() -> Callable[[ModuleType, Sequence[str | Path]], int]:
    """``run_main(module, argv)`` -> exit status of ``module.main(argv)``, SystemExit included."""
    return _run_main


@pytest.fixture(scope="session")
def run_twice(tmp_path_factory) -> Callable[[str, Sequence[str]], list[Path]]:
    """``run_twice(script, argv)`` -> two fresh directories, each holding the outputs of
    the script run once with ``argv`` and ``--out-dir`` that directory (exit status 0)."""

    def run(script: str, argv: Sequence[str]) -> list[Path]:
        module = _load_script(script)
        dirs = []
        for name in ("a", "b"):
            out = tmp_path_factory.mktemp(name)
            assert _run_main(module, [*argv, "--out-dir", out]) == 0
            dirs.append(out)
        return dirs

    return run


@pytest.fixture
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test with ``tmp_path`` as the working directory; returns it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


#: What the suite must never change: the committed outputs (a test that writes to the
#: default place, results/, would replace them; tests write into tmp folders).
COMMITTED_OUTPUTS = ("results", "figures", "README.md")


def _committed_outputs_status() -> str | None:
    """``git status`` of ``COMMITTED_OUTPUTS`` (None outside a git checkout)."""
    import subprocess

    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--", *COMMITTED_OUTPUTS],
            cwd=REPO_ROOT, capture_output=True, text=True, check=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # once: the controller, or a run without -n
        session.config.stash[_OUTPUTS_KEY] = _committed_outputs_status()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a test changed a committed output (issue 55: a fuzz test once ran the
    scripts into results/ and replaced 65 committed files)."""
    if hasattr(session.config, "workerinput"):
        return
    before = session.config.stash.get(_OUTPUTS_KEY, None)
    after = _committed_outputs_status()
    if before is not None and after != before:
        changed = sorted(set(after.splitlines()) - set(before.splitlines()))
        sys.stderr.write(
            "\nthe tests changed committed outputs (restore them with "
            f"`git checkout -- {' '.join(COMMITTED_OUTPUTS)}`): {', '.join(changed[:8])}\n"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_OUTPUTS_KEY = pytest.StashKey[str | None]()


#: Outside known answers for Gemma 3 270M's GGUF (tests/fixtures/README.md).
GEMMA3_REFERENCE = Path(__file__).parent / "fixtures" / "gemma3_270m_reference.json"


@pytest.fixture(scope="session")
def gemma3_reference() -> dict:
    """``GEMMA3_REFERENCE``, parsed."""
    import json

    return json.loads(GEMMA3_REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def gemma3_gguf(tmp_path_factory) -> Path:
    """Gemma 3 270M's GGUF, assembled from the model package and checked by its SHA-256
    (``attnlab.models.gemma3_gguf``); the test is skipped where the package is not installed
    (``make gemma`` installs it)."""
    from attnlab.models import gemma3_gguf

    if not gemma3_gguf.installed():
        pytest.skip(f"the model package {gemma3_gguf.PACKAGE} is not installed (make gemma)")
    return gemma3_gguf.assemble(tmp_path_factory.mktemp("gemma3") / "gemma-3-270m-q4_k_m.gguf")
