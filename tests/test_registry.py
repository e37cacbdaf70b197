"""attnlab.studies: the registry agrees with the scripts, the results, the figures and the
Makefile, whose prerequisites must cover every module each output's code imports."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from attnlab.core.temperature import BUILTINS
from attnlab.studies import FIGURES, STUDIES, made_by

REPO = Path(__file__).resolve().parents[1]


def test_every_result_csv_belongs_to_one_study():
    owners = [csv for study in STUDIES for csv in study.csvs]
    assert len(owners) == len(set(owners))
    committed = {p.name for p in (REPO / "results").glob("*.csv")}
    assert committed <= set(owners), committed - set(owners)
    for csv in owners:
        assert made_by(csv).startswith("python experiments/")


def test_scripts_figures_and_sections_exist():
    for study in STUDIES:
        assert (REPO / "attnlab" / "studies" / study.name / "__init__.py").is_file()
        for script in study.scripts:
            assert (REPO / "experiments" / script).is_file(), script
        if study.in_report:
            assert callable(study.section())
    for name, study in FIGURES.items():
        assert callable(study.figure(name))
        assert (REPO / "figures" / f"{name}.png").is_file()


def test_made_by_unknown_csv_points_to_make_all():
    assert made_by("nothing.csv") == "make all"


def _module_file(name: str) -> Path | None:
    path = REPO.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


@cache
def _direct_imports(path: Path) -> frozenset[Path]:
    """The package files ``path`` imports at run time (at any depth of its code), parents
    included."""
    found: set[Path] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if not name.startswith("attnlab"):
                continue
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                file = _module_file(".".join(parts[:i]))
                if file is not None:
                    found.add(file)
    return frozenset(found)


def import_closure(*paths: Path) -> set[str]:
    """Every package file reachable by imports from ``paths``, repository-relative."""
    seen: set[Path] = set()
    todo = list(paths)
    while todo:
        for imported in _direct_imports(todo.pop()):
            if imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return {str(p.relative_to(REPO)) for p in seen}


@pytest.fixture(scope="module")
def prerequisites() -> dict[str, set[str]]:
    """Target -> its prerequisites, from make's own database (``make -pq``: runs nothing)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        ["make", "-pqR", "-C", str(REPO)], capture_output=True, text=True, check=False
    ).stdout
    rules: dict[str, set[str]] = {}
    for line in out.splitlines():
        if ":" not in line or line.startswith(("#", "\t", " ")) or "=" in line.split(":")[0]:
            continue
        target, _, rest = line.partition(":")
        rules.setdefault(target.strip(), set()).update(rest.split("|")[0].split())
    return rules


def _study_files(study_name: str, module: str) -> list[Path]:
    path = REPO / "attnlab" / "studies" / study_name / f"{module}.py"
    return [path] if path.is_file() else []


@pytest.mark.parametrize("study", [s for s in STUDIES if not s.timing], ids=lambda s: s.name)
def test_make_rules_cover_every_import(study, prerequisites):
    for csv, script in study.outputs.items():
        rule = prerequisites[f"results/{csv}"]
        needed = import_closure(REPO / "experiments" / script) | {f"experiments/{script}"}
        assert needed <= rule, (csv, sorted(needed - rule))
    plot = REPO / "experiments" / "plot_figures.py"
    for figure in study.figures:
        rule = prerequisites[f"figures/{figure}.png"]
        needed = import_closure(plot, *_study_files(study.name, "figure"))
        needed |= {f"results/{csv}" for csv in study.csvs}
        assert needed <= rule, (figure, sorted(needed - rule))
    if study.in_report:
        rule = prerequisites["results/REPORT.md"]
        report = REPO / "experiments" / "make_report.py"
        needed = import_closure(report, *_study_files(study.name, "report"))
        needed |= {f"results/{csv}" for csv in study.csvs}
        assert needed <= rule, sorted(needed - rule)


def test_every_output_is_part_of_make_all(prerequisites):
    targets = prerequisites["all"]
    for study in STUDIES:
        if study.timing:
            continue
        assert {f"results/{csv}" for csv in study.csvs} <= targets
        assert {f"figures/{fig}.png" for fig in study.figures} <= targets


def test_make_cards_cards_every_builtin():
    """The Makefile's BUILTIN_MECHANISMS (what `make cards` cards) lists BUILTINS in order."""
    text = (REPO / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    listed = re.search(r"^BUILTIN_MECHANISMS := (.*)$", text, re.MULTILINE)
    assert listed is not None
    assert listed.group(1).split() == list(BUILTINS)
