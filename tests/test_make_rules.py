"""attnlab.studies.make_rules: the generated Makefile rules (attnlab/studies/studies.mk)
are current, and make's own database gives every output what its code imports."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from attnlab.studies import STUDIES
from attnlab.studies.make_rules import (
    RULES_FILE,
    figure_prerequisites,
    import_closure,
    rules_text,
    script_prerequisites,
)

REPO = Path(__file__).resolve().parents[1]


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


def test_a_result_depends_on_no_other_studys_code(prerequisites):
    """Editing one study (its declaration, compute, figure or report) leaves every other
    study's results and figures current: only the studies a figure reads (Figure 3 reads
    09's fit) and those that run the same script are shared."""
    for study in STUDIES:
        if study.timing:
            continue
        # studies that run the same script (13: BERT, then GPT-2) share its declarations
        sharing = {s.name for s in STUDIES if set(s.scripts) & set(study.scripts)}
        mine = {study.name, *study.reads, *sharing}
        targets = [f"results/{csv}" for csv in study.csvs]
        targets += [f"figures/{fig}.png" for fig in study.figures]
        for target in targets:
            folders = {p.split("/")[2] for p in prerequisites[target]
                       if p.startswith("attnlab/studies/") and p.count("/") == 3}  # fmt: skip
            assert folders <= mine, (target, folders - mine)


def test_make_rules_are_current():
    """attnlab/studies/studies.mk is what `make rules` writes from the declarations now."""
    assert RULES_FILE.read_text(encoding="utf-8") == rules_text(STUDIES), "run `make rules`"


def test_import_closure_follows_imports_and_skips_type_checking(tmp_path):
    """A script importing one module gets that module, its parents and what it imports;
    an import under ``if TYPE_CHECKING:`` is not a run-time prerequisite."""
    script = tmp_path / "script.py"
    script.write_text(
        "from typing import TYPE_CHECKING\n"
        "from attnlab.core.curves import trailing_mean\n"
        "if TYPE_CHECKING:\n"
        "    from attnlab.studies.card.figure import draw_card\n",
        encoding="utf-8",
    )
    closure = import_closure(script)
    assert {"attnlab/__init__.py", "attnlab/core/__init__.py", "attnlab/core/curves.py"} <= closure
    assert "attnlab/studies/card/figure.py" not in closure


def test_make_gemma_runs_13_with_the_committed_gemma_arguments():
    """``make gemma`` spells out 13's committed arguments on Gemma 3 270M
    (``real_model.study.GEMMA_ARGUMENTS``, which 13 counts as committed defaults): its
    recipe, as make would run it, holds them word for word."""
    from attnlab.studies.real_model.study import GEMMA_ARGUMENTS

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        ["make", "-n", "gemma", "-C", str(REPO)],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    words = " ".join(out.replace("\\\n", " ").split())
    assert f"experiments/13_real_model.py {GEMMA_ARGUMENTS}" in words
