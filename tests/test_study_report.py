"""attnlab.harness.study_report: every registered study's report module satisfies the
interface written there (required members present, optional ones of the right kind, no
member misspelled), and the accessor's defaults and refusal."""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping

import pytest

from attnlab.harness.declaration import Study
from attnlab.harness.study_report import MEMBERS, REQUIRED, study_report
from attnlab.studies import STUDIES

REPORTED = [s for s in STUDIES if s.in_report]


@pytest.mark.parametrize("study", REPORTED, ids=lambda s: s.name)
def test_every_report_module_satisfies_the_interface(study):
    report = study_report(study)
    assert callable(report.section)
    assert isinstance(report.headlines, Mapping) and report.headlines  # their CSVs: test_headlines
    assert all(callable(h) for h in report.headlines.values())
    # CHECKS serve exactly the study's check claims: none missing, none left over.
    assert set(report.checks) == {c.check for c in study.claims if hasattr(c, "check")}
    assert all(callable(c) for c in report.checks.values())
    assert report.tallies is None or callable(report.tallies)
    assert report.readme is None or callable(report.readme)


@pytest.mark.parametrize("study", REPORTED, ids=lambda s: s.name)
def test_no_member_is_misspelled(study):
    """A name that differs from a member only in case (``checks``, ``Headlines``) would be
    silently ignored: none is allowed."""
    study_report(study)  # imports the module
    module = sys.modules[f"{study.package}.report"]
    lowered = {m.lower(): m for m in MEMBERS}
    near = [n for n in vars(module) if n.lower() in lowered and n != lowered[n.lower()]]
    assert near == [], study.name


def _fake(monkeypatch, **members) -> Study:
    study = Study("fake_study", 99, {})
    module = types.ModuleType(f"{study.package}.report")
    vars(module).update(members)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return study


def test_optional_members_default(monkeypatch):
    study = _fake(monkeypatch, section=lambda tables: "", HEADLINES={})
    report = study_report(study)
    assert (report.checks, report.tallies, report.readme) == ({}, None, None)


@pytest.mark.parametrize("missing", REQUIRED)
def test_a_module_without_a_required_member_is_refused(monkeypatch, missing):
    members = {"section": lambda tables: "", "HEADLINES": {}}
    del members[missing]
    with pytest.raises(TypeError, match=missing):
        study_report(_fake(monkeypatch, **members))
