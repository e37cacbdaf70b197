"""tests/conftest.py: the fast tests' CPU budget fails a fast test over it, never a slow one;
and the layout of tests/: a test module imports what it shares with others from a support
module (tests/support.py, numpy_reference.py, damage.py, events.py), never from another
test module."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
TESTS = Path(__file__).parent

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


#: A test module's name as an import names it: ``test_x`` (tests/ is on the path) or
#: ``tests.test_x``.
TEST_MODULE = re.compile(r"^(?:tests\.)?test_\w+")


def imported_test_modules(source: str) -> list[str]:
    """The test modules that ``source`` imports, at its top or inside a function: ``import
    test_x``, ``from test_x import y``, ``from tests.test_x import y``, ``from tests import
    test_x`` and ``importlib.import_module("test_x")``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if TEST_MODULE.match(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if TEST_MODULE.match(node.module):
                found.append(node.module)
            elif node.module == "tests":
                found += [f"tests.{a.name}" for a in node.names if TEST_MODULE.match(a.name)]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and TEST_MODULE.match(str(node.args[0].value))
        ):
            found.append(node.args[0].value)
    return found


def test_no_test_module_imports_another():
    imports = {
        path.name: imported_test_modules(path.read_text(encoding="utf-8"))
        for path in sorted(TESTS.glob("test_*.py"))
    }
    offending = {name: found for name, found in imports.items() if found}
    assert offending == {}, "move what they share into tests/support.py (or another support module)"


def test_an_import_from_another_test_module_is_caught():
    source = """
import numpy_reference
from support import TINY_RECALL
from tests.support import TINY_CARD
import test_a
from test_b import helper
from tests.test_c import helper


def f():
    from tests import test_d, support
    importlib.import_module("test_e")
    importlib.import_module("support")
"""
    assert imported_test_modules(source) == [
        "test_a", "test_b", "tests.test_c", "tests.test_d", "test_e"
    ]  # fmt: skip
