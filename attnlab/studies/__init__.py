"""The registry of studies: every folder of ``attnlab/studies`` with a ``study.py``.

A study owns its declaration (``study.py``: its outputs, their columns and ``make verify``
rules, its figures, claims and place in the report; see ``attnlab.harness.declaration``),
its computation (``compute.py``, JAX, no matplotlib), its figures (``figure.py``, one
function per figure, drawn from CSVs only) and its report section (``report.py``,
``section(tables) -> str``). The report builder, ``experiments/plot_figures.py``,
``make verify``, the Makefile's rules (``studies.mk``, written by ``make rules``) and every
"run ... to make it" error message read the declarations collected here.

Adding a study: its folder (with ``study.py``), its script in ``experiments/``, then
``make rules``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.harness.declaration import Study
from attnlab.harness.study_report import study_report

if TYPE_CHECKING:
    import pandas as pd


def _discover() -> tuple[Study, ...]:
    """Every folder's ``study.py`` ``STUDY``, in the order of their positions."""
    found = []
    for path in sorted(Path(__file__).parent.glob("*/study.py")):
        study = importlib.import_module(f"{__name__}.{path.parent.name}.study").STUDY
        if study.name != path.parent.name:
            raise ValueError(f"{path}: declares study {study.name!r}")
        found.append(study)
    return tuple(sorted(found, key=lambda study: study.position))


STUDIES: tuple[Study, ...] = _discover()

#: Figure name -> the study that draws it.
FIGURES: dict[str, Study] = {fig: study for study in STUDIES for fig in study.figures}


def predictions(kind: str = "summary") -> tuple[tuple[str, str], ...]:
    """``(csv, fit)`` of every declared prediction of the training demo (``Output.prediction``),
    its per-seed summaries (``kind="summary"``) or its curves (``"curves"``), in declaration
    order: the recall study judges the article's numbers on each fit's best reading."""
    return tuple(
        (csv, output.prediction)
        for study in STUDIES
        for csv, output in study.outputs.items()
        if output.prediction and (output.curve_step is not None) == (kind == "curves")
    )


def made_by(csv_name: str) -> str:
    """The command that makes ``results/<csv_name>``, run from the repository root."""
    for study in STUDIES:
        if csv_name in study.made_elsewhere:
            return study.made_elsewhere[csv_name]
        if csv_name in study.outputs:
            command = f"python experiments/{study.outputs[csv_name].script}"
            arguments = study.arguments_of(csv_name)
            return f"{command} {arguments}" if arguments else command
    return "make all"


def headline(csv_name: str, frame: pd.DataFrame) -> str | None:
    """The headline of result ``csv_name`` (its study's ``report.HEADLINES``), if any."""
    for study in STUDIES:
        names = [n for n in study.outputs if csv_name in (n, Path(n).name)]
        if names and study.in_report:
            headlines = study_report(study).headlines
            if names[0] in headlines:
                return headlines[names[0]](frame) or None
    return None
