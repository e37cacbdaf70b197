"""attnlab.studies: the registry agrees with the scripts, the results and the figures; and
the layout around it: no study imports another, modules and scripts stay short."""

from __future__ import annotations

from pathlib import Path

from attnlab.harness.io import is_csv, open_csv_text
from attnlab.studies import FIGURES, STUDIES, made_by

REPO = Path(__file__).resolve().parents[1]


def test_every_result_csv_belongs_to_one_study():
    owners = [csv for study in STUDIES for csv in study.csvs]
    elsewhere = [csv for study in STUDIES for csv in study.made_elsewhere]
    assert len(owners + elsewhere) == len(set(owners + elsewhere))
    committed = {p.name for p in (REPO / "results").iterdir() if is_csv(p)}
    assert committed <= set(owners + elsewhere), committed - set(owners + elsewhere)
    for csv in owners:
        assert made_by(csv).startswith("python experiments/")
    for csv in elsewhere:  # a model to install first: a make target of its own
        assert made_by(csv).startswith("make ") and made_by(csv) != "make all"


def test_scripts_and_figures_exist():
    """Each study's package and scripts, each figure's function and committed PNG (each
    reported study's section: tests/test_study_report.py)."""
    for study in STUDIES:
        assert (REPO / "attnlab" / "studies" / study.name / "__init__.py").is_file()
        for script in study.scripts:
            assert (REPO / "experiments" / script).is_file(), script
    for name, study in FIGURES.items():
        assert callable(study.figure(name))
        assert (REPO / "figures" / f"{name}.png").is_file()


def test_made_by_unknown_csv_points_to_make_all():
    assert made_by("nothing.csv") == "make all"


def test_discovery_orders_studies_by_position():
    positions = [study.position for study in STUDIES]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert {s.name for s in STUDIES} == {
        p.parent.name for p in (REPO / "attnlab" / "studies").glob("*/study.py")
    }


def test_declared_columns_are_the_committed_headers():
    """Each verified output declares the columns of its committed CSV, in their order."""
    for study in STUDIES:
        for csv, output in study.outputs.items():
            if output.verified:
                with open_csv_text(REPO / "results" / csv) as handle:
                    header = handle.readline().rstrip("\n")
                assert header.split(",") == output.column_names, csv


def test_the_language_model_cards_are_made_by_their_own_run():
    from attnlab.studies import made_by

    assert made_by("cards/lm/comparison.csv").startswith(
        "python experiments/11_mechanism_card.py --task lm --mechanism scaled"
    )
    assert "--task" not in made_by("cards/comparison.csv")


def test_no_study_imports_another():
    """A study's modules import the shared core, engine and harness, never another study's
    (a script may pass one study's value to another: ``bench.py --gemma``)."""
    import ast

    for folder in sorted((REPO / "attnlab" / "studies").iterdir()):
        if not (folder / "__init__.py").is_file():
            continue
        for path in folder.glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                for name in names:
                    parts = name.split(".")
                    if parts[:2] == ["attnlab", "studies"] and len(parts) > 2:
                        assert parts[2] == folder.name, f"{path.relative_to(REPO)}: {name}"


#: The most lines a module of the package may have (one idea per module), and a script of
#: experiments/ (it parses its flags and hands the work to its study's modules).
MODULE_LINES, SCRIPT_LINES = 450, 60


def longer_than(paths: list[Path], limit: int) -> list[str]:
    """``path: lines`` of each of ``paths`` with more than ``limit`` lines."""
    counts = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    return [f"{p.relative_to(REPO)}: {n}" for p, n in sorted(counts.items()) if n > limit]


def test_every_module_is_short():
    modules = sorted((REPO / "attnlab").rglob("*.py"))
    assert "attnlab/core/mechanism.py" in {str(p.relative_to(REPO)) for p in modules}
    too_long = longer_than(modules, MODULE_LINES)
    assert too_long == [], too_long


def test_every_script_is_short():
    scripts = sorted((REPO / "experiments").glob("*.py"))
    assert "experiments/bench.py" in {str(p.relative_to(REPO)) for p in scripts}
    too_long = longer_than(scripts, SCRIPT_LINES)
    assert too_long == [], too_long
