"""The committed language-model cards against the literature's and the closed forms'
answers (the card README's *Predictions for the language model*): every predicted cell
agrees with results/cards/lm/comparison.csv or is listed under *Where the language model
disagrees* with its cause; the parsing is shown to catch an unlisted disagreement."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from support import predicted_cells

REPO = Path(__file__).resolve().parents[1]
README = REPO / "attnlab" / "studies" / "card" / "README.md"
COMPARISON = REPO / "results" / "cards" / "lm" / "comparison.csv"
PREDICTIONS = "### Predictions for the language model"
DISAGREEMENTS = "### Where the language model disagrees"

pytestmark = pytest.mark.skipif(not COMPARISON.is_file(), reason="no committed LM cards")


def _section(heading: str) -> str:
    return README.read_text(encoding="utf-8").split(heading, 1)[1].split("\n#", 1)[0]


def predictions() -> dict[tuple[str, str], bool]:
    """``(mechanism, verdict) -> predicted`` from the README table (— cells left out)."""
    return predicted_cells(_section(PREDICTIONS))


def listed() -> set[tuple[str, str]]:
    """``(mechanism, verdict)`` of every ``- *mechanism*, *verdict*: ...`` line."""
    return set(re.findall(r"^- \*(\w+)\*, \*([^*]+)\*:", _section(DISAGREEMENTS), flags=re.M))


def differing(measured: pd.DataFrame) -> set[tuple[str, str]]:
    found = {
        (r.mechanism, r.verdict): None if pd.isna(r.passed) else bool(r.passed)
        for r in measured.itertuples()
    }
    return {key for key, answer in predictions().items() if found[key] is not answer}


def test_every_prediction_agrees_or_its_disagreement_is_listed():
    assert len(predictions()) >= 20  # the table parsed
    differ = differing(pd.read_csv(COMPARISON))
    assert differ - listed() == set(), "disagreements not listed in the card README"
    assert listed() - differ == set(), "listed disagreements that now agree"


def test_an_unlisted_disagreement_fails():
    measured = pd.read_csv(COMPARISON)
    flipped = measured.copy()
    row = (flipped.mechanism == "qk_norm") & (
        flipped.verdict == "LM: logits bounded at the top rate"
    )
    flipped.loc[row, "passed"] = not bool(measured.loc[row, "passed"].iloc[0])
    assert differing(flipped) - listed() != set()


def test_only_the_listed_verdicts_are_the_same_for_every_builtin():
    """The LM verdicts that come out one way for all fifteen built-ins are those the report
    says why of (``report.UNIFORM_WHY``; none in the committed cards); each is shown both
    ways on fixtures in test_card_lm_verdicts. A verdict that turns uniform, or a listed one
    that no longer is, fails here."""
    from attnlab.studies.card.report import UNIFORM_WHY

    measured = pd.read_csv(COMPARISON)
    uniform = {v for v, g in measured.groupby("verdict") if g.passed.astype(str).nunique() == 1}
    assert uniform == set(UNIFORM_WHY)
