"""Every study's ``figure.py`` and ``report.py`` works from the CSVs alone (README's layout):
importing them loads no JAX, and no function of theirs imports anything, so no JAX comes in
later through a deferred import either (their constants live in ``study.py``, their shared
pandas readers in a JAX-free module of the study). The other way round, computation never
imports matplotlib: every module of the package but the figures' imports without it. Two
more modules import without JAX: the README's answer and the card's declaration."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Every figure and report module of every study folder (a card's pages and what they share
#: too: ``*_report.py``, ``markdown.py``), found on disk (not only the ones
#: the registry lists), as module names.
MODULES = sorted(
    ".".join(path.relative_to(REPO).with_suffix("").parts)
    for kind in ("figure", "report", "*_report", "markdown")
    for path in (REPO / "attnlab" / "studies").glob(f"*/{kind}.py")
)


#: What must import without JAX: the figures and reports, the README's answer (written by
#: make_report from the CSVs) and the card's declaration (it names the built-in mechanisms
#: without importing them: ``make cards`` and every report and figure process read it).
JAX_FREE = [*MODULES, "attnlab.answer", "attnlab.studies.card.study"]


def test_there_are_figure_and_report_modules():
    assert "attnlab.studies.card.figure" in MODULES and "attnlab.studies.card.report" in MODULES


def fresh_interpreter(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a new Python that imports this checkout's package."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env
    )


def test_figures_and_reports_import_without_jax():
    """One fresh interpreter imports all of ``JAX_FREE``; JAX must not be among its modules
    after any of them."""
    code = (
        "import importlib, sys\n"
        f"for name in {JAX_FREE!r}:\n"
        "    importlib.import_module(name)\n"
        "    assert 'jax' not in sys.modules, name + ' loads JAX'\n"
    )
    probe = fresh_interpreter(code)
    assert probe.returncode == 0, probe.stderr.strip().splitlines()[-1:]


def _deferred_imports(path: Path) -> list[str]:
    """``line: text`` of every import inside a function of ``path``, and of every call to
    ``import_module`` or ``__import__`` anywhere in it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            found += [
                f"{inner.lineno}: {ast.unparse(inner)}"
                for inner in ast.walk(node)
                if isinstance(inner, ast.Import | ast.ImportFrom)
            ]
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ("import_module", "__import__"):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return list(dict.fromkeys(found))  # a nested function's imports are met twice


@pytest.mark.parametrize("module", MODULES)
def test_no_function_imports_anything(module):
    path = REPO.joinpath(*module.split(".")).with_suffix(".py")
    assert _deferred_imports(path) == [], module


def test_computation_imports_without_matplotlib():
    """One fresh interpreter imports every module of ``attnlab`` but the figures' (a
    ``figure`` in its name, and ``attnlab.harness.figures``, their shared style); matplotlib
    must not be among its modules after any of them (a card drawn imports it when it draws)."""
    code = (
        "import importlib, pkgutil, sys, attnlab\n"
        "for info in pkgutil.walk_packages(attnlab.__path__, 'attnlab.'):\n"
        "    if 'figure' in info.name.rsplit('.', 1)[-1]:\n"
        "        continue\n"
        "    importlib.import_module(info.name)\n"
        "    assert 'matplotlib' not in sys.modules, info.name + ' loads matplotlib'\n"
    )
    probe = fresh_interpreter(code)
    assert probe.returncode == 0, probe.stderr.strip().splitlines()[-1:]
