"""The Makefile's rules for every study, written from the studies' declarations.

``make rules`` runs ``python -m attnlab.studies.make_rules``, which writes
``attnlab/studies/studies.mk`` (the Makefile includes it): for each study its CSV and
figure lists (``NAME_CSVS``, ``NAME_FIGURES``), one rule per script and one per study's
figures, and the totals ``CSVS`` and ``FIGURES``. A result's prerequisites are its script
and every package file the script imports at run time, found by reading the imports
(``import_closure``), so editing any module a result's code imports makes it stale; a
figure's are ``experiments/plot_figures.py``, its study's ``figure.py`` and what they
import, and the CSVs it draws. ``tests/test_make_rules.py`` fails when the file is stale.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

from attnlab.harness.cli import REPO_ROOT as REPO
from attnlab.harness.declaration import Study
from attnlab.harness.io import atomic_write_text
from attnlab.studies import STUDIES

STUDIES_DIR = REPO / "attnlab" / "studies"
RULES_FILE = STUDIES_DIR / "studies.mk"
PLOT = "experiments/plot_figures.py"
WIDTH = 96


def _module_file(name: str) -> Path | None:
    path = REPO.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
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
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
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
    """Every package file reachable by imports from ``paths``, repository-relative.

    The registry imports every study's ``study.py`` by discovery; those count only where
    the code imports them by name (a script's own study, a study its figures read): a
    result depends on its own declaration, not on its neighbours'."""
    seen: set[Path] = set()
    todo = list(paths)
    while todo:
        imported = set(_direct_imports(todo.pop()))
        for path in imported - seen:
            seen.add(path)
            todo.append(path)
    return {str(p.relative_to(REPO)) for p in seen}


def _figure_module(study: Study) -> list[Path]:
    path = STUDIES_DIR / study.name / "figure.py"
    return [path] if path.is_file() else []


def _declarations(studies: Iterable[Study]) -> list[Path]:
    return [STUDIES_DIR / study.name / "study.py" for study in studies]


def _with_imports(*paths: Path) -> set[str]:
    """``paths`` (repository-relative) and every package file they import."""
    return {str(p.relative_to(REPO)) for p in paths} | import_closure(*paths)


def script_prerequisites(script: str, studies: Iterable[Study] = STUDIES) -> set[str]:
    """What a result of ``experiments/<script>`` depends on: the script, the declaration of
    the study it writes for, and their imports."""
    own = _declarations(s for s in studies if script in s.scripts)
    return _with_imports(REPO / "experiments" / script, *own)


def figure_prerequisites(study: Study, studies: Iterable[Study]) -> set[str]:
    """What the figures of ``study`` depend on: the plotting script, the study's
    ``figure.py`` and their imports, its CSVs and those of the studies it ``reads``."""
    drawn = [s for s in studies if s.name == study.name or s.name in study.reads]
    figure = _figure_module(study)
    code = _with_imports(REPO / PLOT, *figure, *_declarations(drawn))
    return code | {f"results/{csv}" for s in drawn for csv in s.csvs}


def _variable(study: Study, kind: str) -> str:
    return f"{study.name.upper()}_{kind}"


def _wrapped(head: str, words: Iterable[str], indent: str = "\t") -> str:
    """``head`` then ``words``, continued with backslashes under ``WIDTH`` columns."""
    lines, line = [], head
    for word in words:
        if len(line) + 1 + len(word) + 2 > WIDTH:
            lines.append(line + " \\")
            line = indent + word
        else:
            line = f"{line} {word}"
    return "\n".join([*lines, line])


def rules_text(studies: Iterable[Study]) -> str:
    """The whole of ``studies.mk`` for ``studies``."""
    made = [s for s in studies if not s.timing]
    scripts = {script for s in made for script in s.scripts}
    closures = {script: script_prerequisites(script, made) for script in sorted(scripts)}
    figure_closures = {s.name: figure_prerequisites(s, made) for s in made if s.figures}
    shared = set.intersection(*closures.values(), *figure_closures.values())
    out = [
        "# Generated by `make rules` (python -m attnlab.studies.make_rules) from the studies'",
        "# declarations, attnlab/studies/*/study.py: do not edit. tests/test_make_rules.py fails",
        "# when this file is stale.",
        "",
        _wrapped("SHARED :=", sorted(shared)),
    ]
    for study in made:
        out += ["", f"# {'-' * 60} {study.name}"]
        out.append(_wrapped(f"{_variable(study, 'CSVS')} :=", (f"results/{c}" for c in study.csvs)))
        figures = [f"figures/{f}.png" for f in study.figures]
        if figures:
            out.append(_wrapped(f"{_variable(study, 'FIGURES')} :=", figures))
        for script, arguments in study.runs:
            targets = [f"results/{csv}" for csv in study.csvs_of(script, arguments)]
            prerequisites = [f"experiments/{script}", "$(SHARED)"]
            prerequisites += sorted(closures[script] - shared - {f"experiments/{script}"})
            head = [*targets[:-1], targets[-1] + (" &:" if len(targets) > 1 else ":")]
            out.append(_wrapped(head[0], [*head[1:], *prerequisites, "| $(STAMP)"]))
            out.append(_wrapped("\t$(PY) $<", arguments.split(), indent="\t\t"))
        if figures:
            prerequisites = [
                PLOT,
                "$(SHARED)",
                *sorted(figure_closures[study.name] - shared - {PLOT}),
            ]
            out.append(
                _wrapped(f"$({_variable(study, 'FIGURES')}) &:", [*prerequisites, "| $(STAMP)"])
            )
            out.append(f"\t$(PY) {PLOT} --study {study.name}")
    out += [
        "",
        _wrapped("CSVS :=", (f"$({_variable(s, 'CSVS')})" for s in made)),
        _wrapped("FIGURES :=", (f"$({_variable(s, 'FIGURES')})" for s in made if s.figures)),
    ]
    return "\n".join(out) + "\n"


def main() -> None:
    atomic_write_text(RULES_FILE, rules_text(STUDIES))
    print(f"wrote {RULES_FILE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
