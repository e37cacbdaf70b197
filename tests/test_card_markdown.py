"""attnlab.studies.card.markdown: a verdict's mark each way (yes, no, undetermined, and
diverged over either), markdown tables, the closing question answered each way and the
comparison with and without its owner column."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from attnlab.studies.card.markdown import (
    closing_lines,
    comparison_markdown,
    mark,
    owner_of,
    pm,
    table,
)
from attnlab.studies.card.verdicts import DRIFT_VERDICT, HIGH_LR_VERDICT, OWNER_VERDICT


@pytest.mark.parametrize(
    "passed, value, shown",
    [
        (True, "x1.07", "yes"),
        (False, "x3", "**no**"),
        (None, "", "undetermined"),
        (math.nan, "", "undetermined"),
        (True, "diverged at step 40", "**diverged**"),
    ],
)
def test_mark(passed, value, shown):
    assert mark(passed, value) == shown


def test_table_and_pm():
    assert table(["a", "b"], [[1, "x"]]) == ["| a | b |", "|---|---|", "| 1 | x |"]
    assert pm(0.123456, 0.01234) == "0.123 ± 0.012"
    assert pm(math.inf, 0.1) == "—"


def verdicts(owner: str, drift: bool, stable: bool, name: str = "m") -> pd.DataFrame:
    rows = [
        (OWNER_VERDICT, f"{owner}: e = 0.1", owner != "weights"),
        (DRIFT_VERDICT, "x1.0", drift),
        (HIGH_LR_VERDICT, "0.3 vs 0.3", stable),
    ]
    return pd.DataFrame(
        [{"mechanism": name, "verdict": v, "rule": "r", "value": x, "passed": p}
         for v, x, p in rows]
    )  # fmt: skip


def test_closing_lines_both_ways():
    (held,) = closing_lines(verdicts("mechanism", True, True))
    assert "owner **mechanism**" in held and "holds" in held and "stable;" not in held
    assert held.endswith("at high learning rates stable.")
    (lost,) = closing_lines(verdicts("weights", False, False))
    assert "owner **weights**" in lost and "does **not** hold" in lost
    assert "**less** stable than scaled" in lost


def test_owner_of_reads_the_value_and_falls_back_to_undetermined():
    assert owner_of("cap: e = 1.2") == "cap"
    assert owner_of("nan") == "undetermined"


def test_comparison_with_and_without_the_owner_column():
    both = pd.concat([verdicts("weights", False, True, "a"), verdicts("cap", True, True, "b")])
    plain = comparison_markdown(both).splitlines()
    assert plain[0].startswith("| mechanism | the mechanism") and len(plain) == 4
    assert plain[2] == "| a | **no** | **no** | yes |"
    owned = comparison_markdown(both, owner=True).splitlines()
    assert (
        owned[0].startswith("| mechanism | owner |") and owned[3] == "| b | cap | yes | yes | yes |"
    )
