"""attnlab.studies and attnlab.harness.make_rules: the registry agrees with the scripts,
the results and the figures, and the generated Makefile rules are current and cover every
module each output's code imports."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from attnlab.harness.make_rules import (
    RULES_FILE,
    figure_prerequisites,
    import_closure,
    rules_text,
    script_prerequisites,
)
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


@pytest.mark.parametrize("study", [s for s in STUDIES if not s.timing], ids=lambda s: s.name)
def test_make_rules_cover_every_import(study, prerequisites):
    """make's own database (the Makefile with studies.mk included) gives every output the
    script or figure module it comes from and everything they import."""
    for csv, output in study.outputs.items():
        assert script_prerequisites(output.script) <= prerequisites[f"results/{csv}"], csv
    for figure in study.figures:
        needed = figure_prerequisites(study, STUDIES)
        assert needed <= prerequisites[f"figures/{figure}.png"], figure
    if study.in_report:
        report = REPO / "experiments" / "make_report.py"
        needed = import_closure(report) | {f"results/{csv}" for csv in study.csvs}
        report_module = REPO / "attnlab" / "studies" / study.name / "report.py"
        needed |= import_closure(report_module) | {str(report_module.relative_to(REPO))}
        assert needed <= prerequisites["results/REPORT.md"]


def test_every_output_is_part_of_make_all(prerequisites):
    targets = prerequisites["all"]
    for study in STUDIES:
        if study.timing:
            continue
        assert {f"results/{csv}" for csv in study.csvs} <= targets
        assert {f"figures/{fig}.png" for fig in study.figures} <= targets


def test_make_rules_are_current():
    """attnlab/studies/studies.mk is what `make rules` writes from the declarations now."""
    assert RULES_FILE.read_text(encoding="utf-8") == rules_text(STUDIES), "run `make rules`"


def test_declared_columns_are_the_committed_headers():
    """Each verified output declares the columns of its committed CSV, in their order."""
    for study in STUDIES:
        for csv, output in study.outputs.items():
            if output.verified:
                header = (REPO / "results" / csv).read_text(encoding="utf-8").split("\n")[0]
                assert header.split(",") == output.column_names, csv
