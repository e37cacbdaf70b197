"""The interface of a study's report module (``attnlab/studies/<study>/report.py``), written
once: what it defines, which members are optional and their defaults, and the one accessor
(``study_report``) through which the report, the headlines and the tally read it.

A study in the report (``Study.in_report``) defines in its ``report.py``:

* ``section(tables) -> str`` (required): its section of ``REPORT.md``, from the CSVs alone;
  a ``DataError`` when its CSVs are absent (the report then lists it as left out).
* ``HEADLINES`` (required): CSV name -> ``Headline``, the line a script prints beside
  ``wrote PATH`` (``attnlab.studies.headline``).
* ``CHECKS`` (optional, default none): check name -> ``Check``, the functions that judge
  its ``CheckClaim``s (``Claim.check`` names one).
* ``tallies(tables) -> list[Tally]`` (optional): its lines of the report's summary. Default
  (None here; ``attnlab.report`` applies it, beside the verdict rules): one line named after
  the study, judging its ``claims`` with ``CHECKS``. The training demo defines it, a line
  per reading of its set-up.
* ``readme(tables) -> str`` (optional, default none): a block of README.md between the
  markers ``<!-- BEGIN GENERATED: <study> -->`` and ``<!-- END GENERATED -->``.

This module imports nothing of the harness at run time, so the registry
(``attnlab.studies``), which every script imports, reads the headlines through it without
pandas or the verdict rules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from attnlab.harness.declaration import Study
    from attnlab.harness.headlines import Headline
    from attnlab.harness.tables import Tables
    from attnlab.harness.verdicts import Check, Row

#: One line of the report's summary: its label and the thunk that judges its claims (it
#: raises a DataError when their CSVs are absent).
Tally: TypeAlias = "tuple[str, Callable[[], list[Row]]]"
#: The members every report module in the report defines; the others have defaults.
REQUIRED = ("section", "HEADLINES")
#: Every member of the interface, as ``report.py`` names it.
MEMBERS = (*REQUIRED, "CHECKS", "tallies", "readme")


@dataclass(frozen=True)
class StudyReport:
    """A study's report module with its optional members resolved (module docstring); the
    fields are the members, in lower case."""

    section: Callable[[Tables], str]
    headlines: Mapping[str, Headline]
    checks: Mapping[str, Check]
    tallies: Callable[[Tables], list[Tally]] | None
    readme: Callable[[Tables], str] | None


def study_report(study: Study) -> StudyReport:
    """The report module of ``study``, its optional members filled in by their defaults; a
    ``TypeError`` naming what a module lacks of ``REQUIRED``."""
    module = importlib.import_module(f"{study.package}.report")
    members = vars(module)
    missing = [name for name in REQUIRED if name not in members]
    if missing:
        raise TypeError(
            f"{module.__name__} lacks {', '.join(missing)} (attnlab.harness.study_report)"
        )
    return StudyReport(
        section=members["section"],
        headlines=members["HEADLINES"],
        checks=members.get("CHECKS", {}),
        tallies=members.get("tallies"),
        readme=members.get("readme"),
    )
