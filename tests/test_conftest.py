"""tests/conftest.py: the fast tests' CPU budget fails a fast test over it, never a slow one."""

from __future__ import annotations

import shutil
from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")

BUSY = """
import subprocess
import sys
import time

import pytest


def _spin(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_quick():
    pass


def test_busy():
    _spin(0.6)


@pytest.mark.slow
def test_busy_but_slow():
    _spin(0.6)


def test_busy_in_a_subprocess():
    spin = "import time\\ns = time.process_time()\\nwhile time.process_time() - s < 0.6: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)


@pytest.fixture(scope="module")
def costly():
    _spin(0.6)


def test_pays_for_its_fixture(costly):
    pass
"""


def test_a_fast_test_over_the_budget_fails(pytester, monkeypatch):
    # One subprocess (it imports JAX through the conftest): a budget of 0.3 s against
    # tests that spin 0.6 s of CPU in their call, a subprocess or a fixture, one marked slow.
    shutil.copy(CONFTEST, pytester.path / "conftest.py")
    pytester.makeini("[pytest]\nmarkers = slow: long\n")
    pytester.makepyfile(test_busy=BUSY)
    monkeypatch.setenv("ATTNLAB_FAST_TEST_BUDGET_S", "0.3")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, errors=3)  # an error at teardown; the call passed
    result.stdout.fnmatch_lines(["*test_busy.py::test_busy used * s of CPU, over*"])
    result.stdout.fnmatch_lines(["*test_busy.py::test_pays_for_its_fixture used * s of CPU*"])
    result.stdout.fnmatch_lines(["*test_busy.py::test_busy_in_a_subprocess used * s of CPU*"])
    assert "test_busy_but_slow used" not in result.stdout.str()
    assert "test_quick used" not in result.stdout.str()
