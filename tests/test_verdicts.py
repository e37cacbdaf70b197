"""attnlab.harness.verdicts: every rule at its boundaries, the counts, and every claim.

Three guarantees beyond the rules themselves:

* no measured or qualitative report row is frozen: for every such claim of
  ``attnlab.claims``, the row is built from tables edited so that the measured value lies
  just inside and just outside the boundary its rule states, and the verdict must change (a
  claim type or a check this file cannot perturb fails the test, by name);
* identities are never counted as reproduced or missed;
* every claim's quote is text of the article it comes from.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.claims import (
    ABOUT,
    MEDIAN_FACTOR,
    SEM_MULTIPLE,
    BoundClaim,
    CellClaim,
    CheckClaim,
    Claim,
    IdentityClaim,
    RatioClaim,
    SeedClaim,
)
from attnlab.harness import verdicts
from attnlab.harness.io import read_csv_checked
from attnlab.harness.tables import Tables, select
from attnlab.studies import STUDIES
from attnlab.studies.companion import report as companion_report
from attnlab.studies.companion.study import COMPANION_CSV
from attnlab.studies.condensation import report as condensation_report
from attnlab.studies.failure_modes import report as failure_report
from attnlab.studies.statics import report as statics_report
from attnlab.studies.statics.study import JACOBIAN_CSV, LOGIT_CSV, SATURATION_CSV
from attnlab.studies.widths import report as widths_report

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results"
ARTICLES = Path("/work/shared/article")
ARTICLE_004 = ARTICLES / "004_8a916520041d8e7f.txt"
ARTICLE_000 = ARTICLES / "000_7dad7dc0feecbf5a.txt"

#: Every study's claims (``Study.claims``), by study name.
CLAIM_LISTS: dict[str, tuple[Claim, ...]] = {s.name: s.claims for s in STUDIES if s.claims}
#: The checks each study's report section judges its check claims with.
STUDY_CHECKS: dict[str, dict[str, verdicts.Check]] = {
    "statics": statics_report.CHECKS,
    "recall": {},
    "condensation": condensation_report.CHECKS,
    "companion": companion_report.CHECKS,
    "failure_modes": failure_report.CHECKS,
    "widths": widths_report.CHECKS,
}
PASSING = {"measured": {verdicts.REPRODUCED, verdicts.WITHIN}, "qualitative": {verdicts.HOLDS}}

EPS = 1e-9  # a relative step across a boundary, far above float rounding


# --- tables over in-memory frames ------------------------------------------------------------


class FrameTables(Tables):
    """``Tables`` over frames in memory: given ones, else copies of the committed CSVs."""

    def __init__(self, frames: dict[str, pd.DataFrame] | None = None):
        super().__init__(RESULTS, lambda name: f"make {name}")
        self.frames = dict(frames or {})

    def get(self, name, columns=()):
        if name not in self.frames:
            self.frames[name] = _committed(name).copy(deep=True)
        frame = self.frames[name]
        missing = [c for c in columns if c not in frame.columns]
        assert not missing, f"{name} lacks {missing}"
        return frame


@functools.cache
def _committed(name: str) -> pd.DataFrame:
    frame = read_csv_checked(RESULTS / name, (), "committed")
    if name == LOGIT_CSV and "rel_error_hp" not in frame.columns:
        # An older 01 CSV without the high-precision columns: the bound claim's perturbation
        # overwrites them, so any values serve as a base.
        frame = frame.assign(rel_error_hp=frame.rel_error, rel_error_hp_se=frame.rel_error_se)
    return frame


# --- 1. the rules, on both sides of each boundary -------------------------------------------


def cell(article: float = 1.0, decimals: int = 2, where=None, kind="measured") -> CellClaim:
    return CellClaim("s", "q", "quote", article, decimals, "x.csv", "m", "se", where or {}, kind)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize(("article", "decimals", "sem"), [(1.0, 2, 0.01), (28.0, 0, 0.3)])
def test_cell_verdict_at_the_tolerance(sign, article, decimals, sem):
    claim = cell(article, decimals)
    tol = SEM_MULTIPLE * math.sqrt(2.0) * sem + 0.5 * 10.0**-decimals
    assert verdicts.tolerance(claim, sem) == pytest.approx(tol, rel=1e-12)
    assert (
        verdicts.cell_verdict(claim, article + sign * tol * (1 - EPS), sem) == verdicts.REPRODUCED
    )
    assert verdicts.cell_verdict(claim, article + sign * tol * (1 + EPS), sem) == verdicts.MISS


def test_cell_verdict_without_sem_is_half_a_unit():
    claim = cell(0.170, 3)
    assert verdicts.cell_verdict(claim, 0.1704999, 0.0) == verdicts.REPRODUCED
    assert verdicts.cell_verdict(claim, 0.1705001, 0.0) == verdicts.MISS
    # No SEM (NaN): never reproduced.
    assert verdicts.cell_verdict(claim, 0.170, float("nan")) == verdicts.MISS


def test_cell_row_reads_its_cell_and_reports_a_missing_one():
    claim = cell(1.0, 2, {"variant": "unscaled", "d_k": 64})
    frame = pd.DataFrame(
        {"variant": ["scaled", "unscaled"], "d_k": [64, 64], "m": [1.0, 1.2], "se": [0.01, 0.01]}
    )
    row = verdicts.cell_row(claim, FrameTables({"x.csv": frame}))
    assert row.verdict == verdicts.MISS and row.article == "1.00" and row.deviation == "+20.0"
    frame.loc[1, "m"] = 1.05
    assert verdicts.cell_row(claim, FrameTables({"x.csv": frame})).verdict == verdicts.REPRODUCED
    missing = verdicts.cell_row(cell(1.0, 2, {"d_k": 128}), FrameTables({"x.csv": frame}))
    assert missing.ours == "not measured" and "make x.csv" in missing.verdict
    assert verdicts.counts([missing]) == {
        "reproduced": 0,
        "missed": 1,
        "identities": 0,
        "holds": 0,
        "fails": 0,
    }


def test_bound_verdict_three_ways():
    b, se = 0.005, 0.0005
    edge = b - SEM_MULTIPLE * se  # |x| + 4 SE == b
    assert (
        verdicts.bound_verdict(b, [edge * (1 - EPS), -edge * (1 - EPS), 0.0], [se] * 3)
        == verdicts.REPRODUCED
    )
    assert verdicts.bound_verdict(b, [0.0, -edge * (1 + 1e-6)], [se, se]) == verdicts.UNDECIDED
    over = b + SEM_MULTIPLE * se  # |x| - 4 SE == b
    assert verdicts.bound_verdict(b, [0.0, -over * (1 - EPS)], [se, se]) == verdicts.UNDECIDED
    assert verdicts.bound_verdict(b, [0.0, -over * (1 + EPS)], [se, se]) == verdicts.MISS
    assert verdicts.bound_verdict(b, [0.0, over * (1 + EPS)], [se, se]) == verdicts.MISS


def test_bound_row_judges_the_band_on_the_high_precision_column():
    claim = BoundClaim("s", "q", "quote", 0.005, "b.csv", "hp", "hp_se", "x", "x_se", "d", 4, 16)
    frame = pd.DataFrame(
        {
            "d": [2, 4, 8, 16, 32],
            "hp": [0.9, 0.001, -0.002, 0.001, 0.9],  # rows outside [4, 16] do not count
            "hp_se": [0.0005] * 5,
            "x": [0.0, 0.02, 0.0, 0.0, 0.0],  # the headline column is shown, not decisive
            "x_se": [0.01] * 5,
        }
    )
    row = verdicts.bound_row(claim, FrameTables({"b.csv": frame}))
    assert row.verdict == verdicts.REPRODUCED
    assert "max 0.200%" in row.ours and "at d = 8" in row.ours and "2.00%" in row.ours
    frame.loc[3, "hp"] = -0.0071  # |x| - 4 SE = 0.0051 > 0.005 at the band's edge
    assert verdicts.bound_row(claim, FrameTables({"b.csv": frame})).verdict == verdicts.MISS
    frame.loc[3, "hp"] = -0.0060
    assert verdicts.bound_row(claim, FrameTables({"b.csv": frame})).verdict == verdicts.UNDECIDED


def seeds(*values: float) -> pd.Series:
    return pd.Series(values, dtype=float)


def test_seed_verdict_range_edges():
    # decimals 0: the range [10, 14] widens by 0.5 on each side; the median 12 is within 1.5.
    assert verdicts.seed_verdict(9.5, 0, seeds(10, 12, 14)) == verdicts.WITHIN
    assert verdicts.seed_verdict(9.5 - 1e-9, 0, seeds(10, 12, 14)) == verdicts.OUTSIDE
    assert verdicts.seed_verdict(14.5, 0, seeds(10, 12, 14)) == verdicts.WITHIN
    assert verdicts.seed_verdict(14.5 + 1e-9, 0, seeds(10, 12, 14)) == verdicts.OUTSIDE
    # decimals 2: half a unit is 0.005.
    assert verdicts.seed_verdict(0.995, 2, seeds(1.0, 1.1)) == verdicts.WITHIN
    assert verdicts.seed_verdict(0.9949, 2, seeds(1.0, 1.1)) == verdicts.OUTSIDE


def test_seed_verdict_median_factor_both_ways():
    assert MEDIAN_FACTOR == 1.5
    # Median above the article's number.
    assert verdicts.seed_verdict(100, 0, seeds(95, 150, 160)) == verdicts.WITHIN
    assert verdicts.seed_verdict(100, 0, seeds(95, 150.001, 160)) == verdicts.MEDIAN_OFF
    # Median below it.
    assert verdicts.seed_verdict(150, 0, seeds(100, 100, 151)) == verdicts.WITHIN
    assert verdicts.seed_verdict(150, 0, seeds(99.999, 99.999, 151)) == verdicts.MEDIAN_OFF
    # The range is decided before the median.
    assert verdicts.seed_verdict(100, 0, seeds(300, 310)) == verdicts.OUTSIDE


def test_seed_verdict_counts_seeds_and_ignores_nan():
    nan = float("nan")
    assert verdicts.seed_verdict(10, 0, seeds(10, 11, nan, nan, nan)) == "on 2 of 5 seeds"
    assert (
        verdicts.seed_verdict(10, 0, seeds(10, 11, 12, nan, nan)) == verdicts.WITHIN
    )  # 3 of 5: judged
    assert (
        verdicts.seed_verdict(10, 0, seeds(10, 11, nan, nan)) == verdicts.WITHIN
    )  # exactly half: judged
    assert verdicts.seed_verdict(10, 0, seeds(10, nan, nan, nan)) == "on 1 of 4 seeds"
    assert verdicts.seed_verdict(10, 0, seeds(nan, nan)) == "on 0 of 2 seeds"
    # NaN seeds take no part in min, max or median: [20, 21] excludes 10 whatever the NaNs.
    assert verdicts.seed_verdict(10, 0, seeds(nan, 20, 21)) == verdicts.OUTSIDE
    assert verdicts.counts([_row("measured", "on 1 of 4 seeds")])["missed"] == 1


def recall_frame(column: str, scaled, unscaled) -> pd.DataFrame:
    n = len(scaled)
    return pd.DataFrame(
        {
            "variant": ["scaled"] * n + ["unscaled"] * n,
            "seed": list(range(n)) * 2,
            column: list(scaled) + list(unscaled),
        }
    )


def test_seed_row_reads_one_variant():
    frame = recall_frame("step", [220, 230, 240], [400, 500, 600])
    scaled = SeedClaim("s", "q", "quote", 224, 0, "r.csv", "step", "scaled")
    row = verdicts.seed_row(scaled, FrameTables({"r.csv": frame}))
    assert (row.verdict, row.ours, row.article) == (verdicts.WITHIN, "230 [220, 240]", "224")
    unscaled = SeedClaim("s", "q", "quote", 224, 0, "r.csv", "step", "unscaled")
    assert verdicts.seed_row(unscaled, FrameTables({"r.csv": frame})).verdict == verdicts.OUTSIDE


def test_ratio_row_pairs_by_seed_and_divides():
    claim = RatioClaim("s", "q", "quote", 0.61, 2, "r.csv", "g", divide_by=16.0)
    scaled = [0.1, 0.2, 0.4]
    frame = recall_frame("g", scaled, [s * 16 * 0.61 for s in scaled])
    frame = frame.sample(frac=1.0, random_state=0)  # row order must not matter
    row = verdicts.ratio_row(claim, FrameTables({"r.csv": frame}))
    assert row.verdict == verdicts.WITHIN and row.ours == "0.61 [0.61, 0.61]"
    undivided = RatioClaim("s", "q", "quote", 0.61 * 16, 2, "r.csv", "g")
    assert verdicts.ratio_row(undivided, FrameTables({"r.csv": frame})).verdict == verdicts.WITHIN
    # Just past the widened edge: every ratio 0.6049 against 0.61 (half unit 0.005).
    frame = recall_frame("g", scaled, [s * 16 * 0.6049 for s in scaled])
    assert verdicts.ratio_row(claim, FrameTables({"r.csv": frame})).verdict == verdicts.OUTSIDE
    frame = recall_frame("g", scaled, [s * 16 * 0.6051 for s in scaled])
    assert verdicts.ratio_row(claim, FrameTables({"r.csv": frame})).verdict == verdicts.WITHIN
    # A seed without the quantity in either variant has no ratio.
    frame = recall_frame("g", [0.1, 0.2, np.nan], [0.976, np.nan, 1.0])
    assert verdicts.ratio_row(claim, FrameTables({"r.csv": frame})).verdict == "on 1 of 3 seeds"


@pytest.mark.parametrize(
    ("kind", "ok", "verdict"),
    [
        ("measured", True, verdicts.REPRODUCED),
        ("measured", False, verdicts.MISS),
        ("qualitative", True, verdicts.HOLDS),
        ("qualitative", False, verdicts.FAILS),
    ],
)
def test_check_row(kind, ok, verdict):
    claim = CheckClaim("s", "q", "quote", "text", "c", kind=kind)
    row = verdicts.check_row(claim, FrameTables(), {"c": lambda tables: ("ours", "detail", ok)})
    assert (row.verdict, row.ours, row.tolerance, row.kind) == (verdict, "ours", "detail", kind)
    assert row.article == "text" and row.quote == "quote"


def test_check_claim_without_its_check_is_an_error():
    claim = CheckClaim("s", "q", "quote", "text", "absent")
    with pytest.raises(KeyError):
        verdicts.claim_rows([claim], FrameTables(), {})


def test_identity_row_is_never_counted():
    agrees = IdentityClaim("s", "q", "quote", 22.6, 1, math.sqrt(512))
    differs = IdentityClaim("s", "q", "quote", 7, 0, math.exp(2.2))
    rows = verdicts.claim_rows([agrees, differs], FrameTables())
    assert [r.verdict for r in rows] == [verdicts.IDENTITY, verdicts.IDENTITY]
    assert [r.kind for r in rows] == ["identity", "identity"]
    assert rows[0].tolerance == "agrees to the printed digits"
    assert rows[1].tolerance == "differs from the printed digits"
    assert rows[0].article == "22.6" and rows[0].ours == "22.6274"
    assert verdicts.counts(rows) == {
        "reproduced": 0,
        "missed": 0,
        "identities": 2,
        "holds": 0,
        "fails": 0,
    }


# --- 2. counts and tally, one test per kind ---------------------------------------------------


def _row(kind: str, verdict: str) -> verdicts.Row:
    return verdicts.Row("s", "q", "a", "o", "", "", verdict, kind)


def test_counts_measured():
    judged = [
        verdicts.REPRODUCED,
        verdicts.WITHIN,
        verdicts.MISS,
        verdicts.UNDECIDED,
        verdicts.OUTSIDE,
        verdicts.MEDIAN_OFF,
    ]
    rows = [_row("measured", v) for v in judged + ["on 2 of 5 seeds", "missing: run x"]]
    assert verdicts.counts(rows) == {
        "reproduced": 2,
        "missed": 6,
        "identities": 0,
        "holds": 0,
        "fails": 0,
    }
    assert verdicts.tally(rows) == "2 of 8 measured reproduced, 6 missed."


def test_counts_identity():
    # An identity is never counted, whatever its verdict text says.
    rows = [
        _row("identity", verdicts.IDENTITY),
        _row("identity", verdicts.REPRODUCED),
        _row("measured", verdicts.MISS),
    ]
    assert verdicts.counts(rows) == {
        "reproduced": 0,
        "missed": 1,
        "identities": 2,
        "holds": 0,
        "fails": 0,
    }
    assert verdicts.tally(rows) == (
        "0 of 1 measured reproduced, 1 missed; 2 identities (shown, not counted)."
    )


def test_counts_qualitative():
    rows = [
        _row("qualitative", verdicts.HOLDS),
        _row("qualitative", verdicts.FAILS),
        _row("qualitative", verdicts.FAILS),
        _row("measured", verdicts.REPRODUCED),
    ]
    assert verdicts.counts(rows) == {
        "reproduced": 1,
        "missed": 0,
        "identities": 0,
        "holds": 1,
        "fails": 2,
    }
    assert verdicts.tally(rows) == (
        "1 of 1 measured reproduced, 0 missed; 3 qualitative (1 hold, 2 fail)."
    )
    block = verdicts.claims_block([*rows, _row("identity", verdicts.IDENTITY)])
    assert block.endswith(
        "1 of 1 measured reproduced, 0 missed; 3 qualitative (1 hold, 2 fail); "
        "1 identity (shown, not counted)."
    )


# --- 3. no report row is frozen ---------------------------------------------------------------


def test_every_claim_list_has_its_checks():
    assert set(CLAIM_LISTS) >= {
        "statics",
        "recall",
        "condensation",
        "companion",
        "failure_modes",
    }
    unknown = set(CLAIM_LISTS) - set(STUDY_CHECKS)
    assert not unknown, f"claim lists {unknown}: add their study's CHECKS to STUDY_CHECKS"
    for name, claims in CLAIM_LISTS.items():
        for claim in claims:
            if isinstance(claim, CheckClaim):
                assert claim.check in STUDY_CHECKS[name], f"{name}: no check {claim.check!r}"


def test_identity_kind_belongs_to_identity_claims():
    """Only an ``IdentityClaim`` may be uncounted: any other claim of kind "identity" would
    be a measured row that can never miss."""
    for claims in CLAIM_LISTS.values():
        for claim in claims:
            assert (claim.kind == "identity") == isinstance(claim, IdentityClaim), claim.quantity
            assert claim.kind in ("measured", "identity", "qualitative"), claim.quantity
            if not isinstance(claim, CheckClaim | IdentityClaim):
                assert claim.kind == "measured", claim.quantity


Edit = Callable[[FrameTables], None]
#: (name, edit putting the value just inside the boundary, edit putting it just outside).
Scenario = tuple[str, Edit, Edit]


def _float_column(frame: pd.DataFrame, column: str) -> None:
    frame[column] = frame[column].astype(float)


def _cell_scenarios(claim: CellClaim) -> list[Scenario]:
    def edit(factor: float) -> Edit:
        def apply(tables: FrameTables) -> None:
            frame = tables.get(claim.csv, [claim.mean_column, claim.sem_column])
            rows = select(frame, claim.where).index
            assert len(rows) == 1, f"{len(rows)} rows of {claim.csv} match {claim.where}"
            _float_column(frame, claim.mean_column)
            sem = float(frame.loc[rows[0], claim.sem_column])
            frame.loc[rows[0], claim.mean_column] = claim.article + factor * verdicts.tolerance(
                claim, sem
            )

        return apply

    return [("above", edit(0.99), edit(1.01)), ("below", edit(-0.99), edit(-1.01))]


def _bound_scenarios(claim: BoundClaim) -> list[Scenario]:
    se = claim.bound / 10

    def edit(outside: bool) -> Edit:
        def apply(tables: FrameTables) -> None:
            frame = tables.get(claim.csv, [claim.by, claim.column, claim.se_column])
            band = frame.index[(frame[claim.by] >= claim.low) & (frame[claim.by] <= claim.high)]
            assert len(band) > 1, f"no rows of {claim.csv} in [{claim.low}, {claim.high}]"
            _float_column(frame, claim.column)
            _float_column(frame, claim.se_column)
            signs = np.where(np.arange(len(band)) % 2 == 0, 1.0, -1.0)
            frame.loc[band, claim.se_column] = se
            frame.loc[band, claim.column] = signs * 0.99 * (claim.bound - SEM_MULTIPLE * se)
            if outside:
                frame.loc[band[-1], claim.column] = -1.01 * (claim.bound + SEM_MULTIPLE * se)

        return apply

    return [("bound", edit(False), edit(True))]


def _seed_scenarios(claim: SeedClaim) -> list[Scenario]:
    def edit(factor: float) -> Edit:
        def apply(tables: FrameTables) -> None:
            frame = tables.get(claim.csv, ["variant", "seed", claim.column])
            rows = frame.variant == claim.variant
            assert rows.sum() > 0, f"no {claim.variant} rows in {claim.csv}"
            _float_column(frame, claim.column)
            frame.loc[rows, claim.column] = claim.article * factor

        return apply

    return [("seeds", edit(1.0), edit(3.0))]


def _ratio_scenarios(claim: RatioClaim) -> list[Scenario]:
    def edit(factor: float) -> Edit:
        def apply(tables: FrameTables) -> None:
            frame = tables.get(claim.csv, ["variant", "seed", claim.column])
            _float_column(frame, claim.column)
            denominator = frame[frame.variant == claim.denominator].set_index("seed")[claim.column]
            assert len(denominator) > 0 and np.all(np.isfinite(denominator) & (denominator != 0))
            rows = frame.index[frame.variant == claim.numerator]
            assert len(rows) == len(denominator), "numerator and denominator seeds differ"
            frame.loc[rows, claim.column] = (
                denominator.loc[frame.loc[rows, "seed"]].to_numpy()
                * claim.article
                * claim.divide_by
                * factor
            )

        return apply

    return [("ratio", edit(1.0), edit(3.0))]


# Check perturbations: each edits exactly the cells its check reads.


def _three_quarters(low_d_k: int) -> Edit:
    """Unscaled max weight just above 0.75 (1 - ABOUT) everywhere but at ``low_d_k``."""
    threshold = 0.75 * (1 - ABOUT)

    def apply(tables: FrameTables) -> None:
        frame = tables.get(SATURATION_CSV)
        unscaled = frame.variant == "unscaled"
        assert (unscaled & (frame.d_k == low_d_k)).sum() == 1
        frame.loc[unscaled, "max_weight_mean"] = 1.01 * threshold
        frame.loc[unscaled & (frame.d_k == low_d_k), "max_weight_mean"] = 0.99 * threshold

    return apply


def _jacobian_curve(peak: int, last_above: int) -> Edit:
    """Scaled flat at 0.1; unscaled peaking at ``peak`` and above scaled through
    ``last_above`` (below it from the next grid d_k); ``last_above`` must follow ``peak``."""

    def apply(tables: FrameTables) -> None:
        frame = tables.get(JACOBIAN_CSV)
        log_d = np.log2(frame.d_k.to_numpy(float))
        above = np.log2(last_above) + 0.5 - log_d  # > 0 up to last_above, < 0 after
        bump = 0.05 * np.maximum(0, 3 - np.abs(log_d - np.log2(peak)))  # peak at ``peak``
        unscaled = np.where(above > 0, 0.01 + bump, -0.01)
        assert set([peak, last_above]) <= set(frame.d_k)
        frame["jacobian_fro_mean"] = np.where(frame.variant == "unscaled", 0.1 + unscaled, 0.1)

    return apply


def _condensation_below(weight_at_edge: float) -> Edit:
    """Cells with d_k <= 2 ln n: 0.49 except the one at the largest n, whose d_k is the
    largest below the threshold, at ``weight_at_edge``; cells above saturate."""

    def apply(tables: FrameTables) -> None:
        frame = tables.get(condensation_report.CSV)
        below = frame.d_k <= frame.threshold_dk
        frame["max_weight_unscaled_mean"] = np.where(below, 0.49, 0.9)
        edge = frame[below].sort_values(["n_keys", "d_k"]).index[-1]
        frame.loc[edge, "max_weight_unscaled_mean"] = weight_at_edge

    return apply


def _saturating_at_dk4(saturated: dict[int, float]) -> Edit:
    """Unscaled max weight at d_k = 4: the given n at the given weight, others 0.3."""

    def apply(tables: FrameTables) -> None:
        frame = tables.get(condensation_report.CSV)
        at4 = frame.d_k == 4
        frame.loc[at4, "max_weight_unscaled_mean"] = 0.3
        for n, weight in saturated.items():
            assert (at4 & (frame.n_keys == n)).sum() == 1, f"no d_k = 4, n = {n} cell"
            frame.loc[at4 & (frame.n_keys == n), "max_weight_unscaled_mean"] = weight

    return apply


def _companion_value(quantity: str, value: Callable[[pd.Series], float]) -> Edit:
    def apply(tables: FrameTables) -> None:
        frame = tables.get(COMPANION_CSV)
        rows = frame.index[frame.quantity == quantity]
        assert len(rows) == 1, f"{len(rows)} rows of {quantity!r}"
        _float_column(frame, "value")
        frame.loc[rows[0], "value"] = value(frame.loc[rows[0]])

    return apply


def _mask_cell(dtype: str, fill: str, row: str, **values) -> Edit:
    def apply(tables: FrameTables) -> None:
        frame = tables.get(failure_report.MASKS_CSV)
        rows = frame.index[(frame.dtype == dtype) & (frame.fill == fill) & (frame.row == row)]
        assert len(rows) == 1, f"{len(rows)} mask rows for {dtype}, {fill}, {row}"
        for column, value in values.items():
            frame.loc[rows[0], column] = value

    return apply


def _both(*edits: Edit) -> Edit:
    def apply(tables: FrameTables) -> None:
        for edit in edits:
            edit(tables)

    return apply


def _all_minus_inf_nan(tables: FrameTables) -> None:
    frame = tables.get(failure_report.MASKS_CSV)
    frame.loc[(frame.fill == "-inf") & (frame.row == "fully masked"), "output_nan"] = True


def _first_overflow(at: float) -> Edit:
    """float16 (no max subtraction): non-finite from max logit ``at`` on."""

    def apply(tables: FrameTables) -> None:
        frame = tables.get(failure_report.OVERFLOW_CSV)
        rows = frame.method == "float16"
        assert (rows & (frame.max_logit == at)).sum() == 1, f"no float16 row at s = {at}"
        _float_column(frame, "nonfinite_fraction")
        frame.loc[rows, "nonfinite_fraction"] = (frame.max_logit[rows] >= at).astype(float)

    return apply


def _base_rows(tables: FrameTables, mechanism: str, d_k: int | None = None) -> pd.Index:
    """Labels of the width summary's rows at the base learning rate (all seeds) of
    ``mechanism``, at ``d_k`` if given."""
    base, _, _ = widths_report.base_runs(tables)
    rows = base.mechanism == mechanism
    if d_k is not None:
        rows &= base.d_k == d_k
    assert rows.sum() > 0, f"no base {mechanism} rows at d_k {d_k}"
    return base.index[rows]


def _widths_summary(tables: FrameTables, *columns: str) -> pd.DataFrame:
    frame = tables.get(widths_report.SUMMARY_CSV, columns)
    for column in columns:
        _float_column(frame, column)
    return frame


def _widest(tables: FrameTables) -> int:
    base, _, _ = widths_report.base_runs(tables)
    return int(base.d_k.max())


def _frozen_at_widest(scaled: float, unscaled: float, accuracy: float) -> Edit:
    """Scaled routes (routing 1) and unscaled is far from frozen (0.9) at every width, but at
    the widest: scaled routing ``scaled``, unscaled routing ``unscaled`` and unscaled held-out
    accuracy ``accuracy``, each a function of (pairs, value tokens)."""

    def apply(tables: FrameTables) -> None:
        frame = _widths_summary(tables, "routing_accuracy_end", "eval_accuracy")
        _, pairs, values = widths_report.base_runs(tables)
        widest = _widest(tables)
        frame.loc[_base_rows(tables, "scaled"), "routing_accuracy_end"] = 1.0
        frame.loc[_base_rows(tables, "unscaled"), "routing_accuracy_end"] = 0.9
        frame.loc[_base_rows(tables, "unscaled"), "eval_accuracy"] = 0.9
        at = _base_rows(tables, "scaled", widest)
        frame.loc[at, "routing_accuracy_end"] = scaled(pairs, values)
        at = _base_rows(tables, "unscaled", widest)
        frame.loc[at, "routing_accuracy_end"] = unscaled(pairs, values)
        frame.loc[at, "eval_accuracy"] = accuracy(pairs, values)

    return apply


def _edge_gap(b: float, n: int) -> float:
    """The unscaled accuracy a < b whose gap b - a is exactly ``SE_MULTIPLE`` standard
    errors of the difference at ``n`` held-out sequences (bisection)."""

    def excess(a: float) -> float:
        se = math.sqrt((a * (1 - a) + b * (1 - b)) / n)
        return b - a - widths_report.SE_MULTIPLE * se

    low, high = 0.0, b  # excess(low) > 0 > excess(high)
    assert excess(low) > 0 > excess(high)
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if excess(mid) > 0 else (low, mid)
    return (low + high) / 2


def _quality_gap(shift: float, diverged: bool = False) -> Edit:
    """At the widest width, where scaled routes: scaled accuracy 0.9, unscaled ``shift``
    above the accuracy at exactly ``SE_MULTIPLE`` SE below it; no diverged base run, or
    (``diverged``) one unscaled run diverged at step 100."""

    def apply(tables: FrameTables) -> None:
        frame = _widths_summary(tables, "routing_accuracy_end", "eval_accuracy", "diverged_step")
        n = int(tables.flags(widths_report.SUMMARY_CSV).get("eval_size", 512))
        widest = _widest(tables)
        frame.loc[_base_rows(tables, "scaled", widest), "routing_accuracy_end"] = 1.0
        frame.loc[_base_rows(tables, "scaled", widest), "eval_accuracy"] = 0.9
        at = _base_rows(tables, "unscaled", widest)
        frame.loc[at, "eval_accuracy"] = _edge_gap(0.9, n) + shift
        base, _, _ = widths_report.base_runs(tables)
        frame.loc[base.index, "diverged_step"] = np.nan
        if diverged:
            frame.loc[at[0], "diverged_step"] = 100.0

    return apply


def _slowdown(jacobian: float, slowdown: float, reached: int | None = None) -> Edit:
    """Every width: J_scaled / J_unscaled ``jacobian`` and the loss-1.0 step 100 (scaled) and
    100 x 1.5 (unscaled), so the signs agree (+1); at the widest, slow-down ``slowdown``
    instead, and, given ``reached``, scaled reaching loss 1.0 on that many of its seeds
    only (the others never)."""

    def apply(tables: FrameTables) -> None:
        frame = _widths_summary(tables, "step_loss_below_1")
        jac = tables.get(widths_report.JACOBIAN_CSV, ["d_k", "ratio_unscaled_scaled"])
        _float_column(jac, "ratio_unscaled_scaled")
        widest = _widest(tables)
        assert (jac.d_k == widest).sum() == 1, f"no Jacobian row at d_k {widest}"
        jac["ratio_unscaled_scaled"] = 1 / 1.5
        jac.loc[jac.d_k == widest, "ratio_unscaled_scaled"] = 1 / jacobian
        frame.loc[_base_rows(tables, "scaled"), "step_loss_below_1"] = 100.0
        frame.loc[_base_rows(tables, "unscaled"), "step_loss_below_1"] = 150.0
        frame.loc[_base_rows(tables, "unscaled", widest), "step_loss_below_1"] = 100 * slowdown
        if reached is not None:
            at = _base_rows(tables, "scaled", widest)
            frame.loc[at[reached:], "step_loss_below_1"] = np.nan

    return apply


def _seeds_reaching(tables: FrameTables, judged: bool) -> int:
    """The most scaled seeds at the widest width reaching loss 1.0 that leave the width
    unjudged (under half), or the fewest that make it judged."""
    n = len(_base_rows(tables, "scaled", _widest(tables)))
    return math.ceil(n / 2) if judged else math.ceil(n / 2) - 1


def _identical_at_dk1(change: str | None = None) -> Edit:
    """Unscaled d_k = 1 rows of the summary and the curves copied from scaled's; then, given
    ``change`` (a file name), one cell of its first unscaled d_k = 1 row moved."""

    def apply(tables: FrameTables) -> None:
        for name in (widths_report.SUMMARY_CSV, widths_report.CURVES_CSV):
            frame = tables.get(name, ["d_k", "mechanism"])
            scaled = frame.index[(frame.d_k == 1) & (frame.mechanism == "scaled")]
            unscaled = frame.index[(frame.d_k == 1) & (frame.mechanism == "unscaled")]
            assert len(scaled) == len(unscaled) > 0, f"{name}: d_k = 1 rows differ in number"
            columns = [c for c in frame.columns if c != "mechanism"]
            for column in columns:
                frame.loc[unscaled, column] = frame.loc[scaled, column].to_numpy()
            if change == name:
                column = "eval_accuracy" if name == widths_report.SUMMARY_CSV else "smoothed_loss"
                _float_column(frame, column)
                value = frame.loc[unscaled[0], column]
                frame.loc[unscaled[0], column] = (0.0 if np.isnan(value) else value) + 1e-6

    return apply


def _best_lrs(scaled_top: int, inv_d_top: int) -> Edit:
    """Each mechanism's best rate the grid's lowest at every width but the widest, where it
    is the grid's rate of index ``scaled_top`` / ``inv_d_top``."""

    def apply(tables: FrameTables) -> None:
        frame = tables.get(widths_report.LR_CSV, ["mechanism", "d_k", "lr", "best"])
        grid = np.sort(frame.lr.unique())
        widest = frame.d_k.max()
        assert frame.d_k.nunique() > 1 and len(grid) > max(scaled_top, inv_d_top)
        frame["best"] = False
        for mechanism, top in (("scaled", scaled_top), ("inv_d", inv_d_top)):
            for d_k in frame.d_k[frame.mechanism == mechanism].unique():
                lr = grid[top] if d_k == widest else grid[0]
                row = (frame.mechanism == mechanism) & (frame.d_k == d_k) & (frame.lr == lr)
                assert row.sum() == 1, f"no {mechanism} row at d_k {d_k}, lr {lr}"
                frame.loc[row, "best"] = True

    return apply


_GRAD = "grad_ratio [W_Q, W_K * d_k^-1/4]"

#: Check name -> scenarios (name, just inside, just outside) of the cells it reads.
CHECK_SCENARIOS: dict[str, list[Scenario]] = {
    "three_quarters_at_production": [
        ("min at d_k = 256", _three_quarters(32), _three_quarters(256)),
        ("d_k = 64 is the band's edge", _three_quarters(32), _three_quarters(64)),
    ],
    "jacobian_peak": [
        ("peak 16 vs 32", _jacobian_curve(16, 512), _jacobian_curve(32, 512)),
        ("peak 16 vs 8", _jacobian_curve(16, 512), _jacobian_curve(8, 512)),
    ],
    "jacobian_crossing": [
        ("256-512 vs 128-256", _jacobian_curve(16, 256), _jacobian_curve(16, 128)),
        ("512-1024 vs none", _jacobian_curve(16, 512), _jacobian_curve(16, 1024)),
    ],
    "unsaturated_below_2ln_n": [
        ("max weight 1/2", _condensation_below(0.5 - 1e-6), _condensation_below(0.5)),
    ],
    "saturating_n_at_dk4": [
        (
            "n = 8",
            _saturating_at_dk4({4: 0.6, 8: 0.5 - 1e-6}),
            _saturating_at_dk4({4: 0.6, 8: 0.5}),
        ),
        ("none vs n = 8", _saturating_at_dk4({}), _saturating_at_dk4({8: 0.6})),
    ],
    "near_one_hot": [
        (
            "0.99",
            _companion_value("max_weight_unscaled", lambda r: 0.99 + 1e-6),
            _companion_value("max_weight_unscaled", lambda r: 0.99),
        )
    ],
    "fold_quarter_identical": [
        (
            "1e-5",
            _companion_value("logit_rel_diff [W_Q * d_k^-1/4 only]", lambda r: 0.99e-5),
            _companion_value("logit_rel_diff [W_Q * d_k^-1/4 only]", lambda r: 1.01e-5),
        )
    ],
    "fold_gradient_constant": [
        (
            f"1 {sign:+g}e-3 relative",
            _companion_value(_GRAD, lambda r, s=sign: (1 + 0.99e-3 * s) / r.predicted),
            _companion_value(_GRAD, lambda r, s=sign: (1 + 1.01e-3 * s) / r.predicted),
        )
        for sign in (1, -1)
    ],
    "minus_inf_fully_masked_nan": [
        (
            "float32 not NaN",
            _all_minus_inf_nan,
            _both(
                _all_minus_inf_nan, _mask_cell("float32", "-inf", "fully masked", output_nan=False)
            ),
        )
    ],
    "float16_minus_1e9_is_minus_inf": [
        (
            "stored as -65504",
            _mask_cell("float16", "-1e9", "fully masked", fill_stored=-np.inf, output_nan=True),
            _mask_cell("float16", "-1e9", "fully masked", fill_stored=-65504.0, output_nan=True),
        ),
        (
            "not NaN",
            _mask_cell("float16", "-1e9", "fully masked", fill_stored=-np.inf, output_nan=True),
            _mask_cell("float16", "-1e9", "fully masked", fill_stored=-np.inf, output_nan=False),
        ),
    ],
    "float32_minus_1e9_exact_zero": [
        (
            "leak",
            _mask_cell("float32", "-1e9", "partly masked", leaked_mass=0.0),
            _mask_cell("float32", "-1e9", "partly masked", leaked_mass=1e-30),
        )
    ],
    "float16_overflow_logit": [
        ("above 11", _first_overflow(12.0), _first_overflow(12.125)),
        ("below 11", _first_overflow(10.0), _first_overflow(9.875)),
    ],
    "frozen_routing": [
        (
            "routing 2x chance",
            _frozen_at_widest(lambda p, v: 1.0, lambda p, v: 2 / p, lambda p, v: 0.5),
            _frozen_at_widest(lambda p, v: 1.0, lambda p, v: 2 / p + 1e-6, lambda p, v: 0.5),
        ),
        (
            "payload 2x chance",
            _frozen_at_widest(lambda p, v: 1.0, lambda p, v: 1 / p, lambda p, v: 2 / v + 1e-6),
            _frozen_at_widest(lambda p, v: 1.0, lambda p, v: 1 / p, lambda p, v: 2 / v),
        ),
        (
            "scaled routes",
            _frozen_at_widest(lambda p, v: 0.5, lambda p, v: 1 / p, lambda p, v: 0.5),
            _frozen_at_widest(lambda p, v: 0.5 - 1e-6, lambda p, v: 1 / p, lambda p, v: 0.5),
        ),
    ],
    "silent_quality_loss": [
        ("gap 4 SE", _quality_gap(-1e-6), _quality_gap(1e-6)),
        ("a diverged run", _quality_gap(-0.1), _quality_gap(-0.1, diverged=True)),
    ],
    "slowdown_follows_jacobian": [
        ("slower, 1 + 0.1", _slowdown(1.5, 1.1 + 1e-6), _slowdown(1.5, 1.1 - 1e-6)),
        ("faster, 1 - 0.1", _slowdown(1 / 1.5, 0.9 - 1e-6), _slowdown(1 / 1.5, 0.9 + 1e-6)),
        ("equal, 1 + 0.1", _slowdown(1.0, 1.1 - 1e-6), _slowdown(1.0, 1.1 + 1e-6)),
        (
            "judged: scaled reaches on half its seeds",
            lambda t: _slowdown(1.5, 0.1, _seeds_reaching(t, judged=False))(t),
            lambda t: _slowdown(1.5, 0.1, _seeds_reaching(t, judged=True))(t),
        ),
    ],
    "identical_at_dk1": [
        ("summary", _identical_at_dk1(), _identical_at_dk1(widths_report.SUMMARY_CSV)),
        ("curves", _identical_at_dk1(), _identical_at_dk1(widths_report.CURVES_CSV)),
    ],
    "mup_lr_transfer": [
        ("fewer decades", _best_lrs(2, 1), _best_lrs(2, 2)),
        ("fewer decades, none", _best_lrs(1, 0), _best_lrs(1, 1)),
    ],
}


def scenarios(claim: Claim) -> list[Scenario]:
    """The edits that put ``claim``'s measured value just inside and just outside its rule."""
    if isinstance(claim, CheckClaim):
        if claim.check not in CHECK_SCENARIOS:
            pytest.fail(
                f"check {claim.check!r} ({claim.quantity}) has no perturbation in "
                "tests/test_verdicts.py CHECK_SCENARIOS: add one that edits the cells it reads, "
                "so the row is shown to change with the data"
            )
        return CHECK_SCENARIOS[claim.check]
    makers = {
        CellClaim: _cell_scenarios,
        BoundClaim: _bound_scenarios,
        SeedClaim: _seed_scenarios,
        RatioClaim: _ratio_scenarios,
    }
    if type(claim) not in makers:
        pytest.fail(
            f"claim type {type(claim).__name__} ({claim.quantity}) has no perturbation in "
            "tests/test_verdicts.py: add one, so no report row can be unfalsifiable"
        )
    return makers[type(claim)](claim)


JUDGED = [
    pytest.param(list_name, claim, id=f"{list_name}:{claim.quantity}")
    for list_name, claims in CLAIM_LISTS.items()
    for claim in claims
    if claim.kind != "identity"
]


@pytest.mark.parametrize(("list_name", "claim"), JUDGED)
def test_no_row_is_frozen(list_name, claim):
    assert list_name in STUDY_CHECKS, f"{list_name}: add its study's CHECKS to STUDY_CHECKS"
    checks = STUDY_CHECKS[list_name]
    for name, inside, outside in scenarios(claim):
        found = []
        for edit in (inside, outside):
            tables = FrameTables()
            edit(tables)
            (row,) = verdicts.claim_rows([claim], tables, checks)
            assert row.kind == claim.kind
            found.append(row.verdict)
        assert found[0] in PASSING[claim.kind], f"{name}: just inside gives {found[0]!r}"
        assert found[1] not in PASSING[claim.kind], f"{name}: just outside gives {found[1]}"


def test_every_check_scenario_is_used():
    used = {c.check for claims in CLAIM_LISTS.values() for c in claims if hasattr(c, "check")}
    assert set(CHECK_SCENARIOS) <= used, set(CHECK_SCENARIOS) - used


# --- 4. every quote is the article's text -----------------------------------------------------


def _normalise(text: str) -> str:
    """Lower case, without spaces, TeX markup or parentheses: ``$\\sqrt{256} = 16$`` and
    ``sqrt(256) = 16`` both read ``sqrt256=16``; ``\\infty``, ``\\lesssim`` and
    ``\\partial`` read ``inf``, ``<~`` and ``d``."""
    text = text.lower().replace("−", "-").replace("…", "...")
    text = text.replace("\\infty", "inf").replace("\\lesssim", "<~").replace("\\partial", "d")
    text = re.sub(r"\\(mathrm|text|operatorname)", "", text)
    return re.sub(r"[\s$\\{}()]", "", text)


@functools.cache
def _article(path: Path) -> str:
    return _normalise(path.read_text(encoding="utf-8"))


ALL_CLAIMS = [
    pytest.param(claim, id=f"{list_name}:{claim.quantity}")
    for list_name, claims in CLAIM_LISTS.items()
    for claim in claims
]


@pytest.mark.parametrize("claim", ALL_CLAIMS)
def test_quote_is_in_the_article(claim):
    assert claim.quote.strip(), f"{claim.quantity}: empty quote"
    path = ARTICLE_000 if claim.section.startswith("000:") else ARTICLE_004
    text = _article(path)
    start = 0
    for piece in claim.quote.split("..."):
        piece = _normalise(piece)
        if not piece:
            continue
        found = text.find(piece, start)
        assert found >= 0, f"{claim.quantity}: {piece!r} of the quote is not in {path.name}"
        start = found + len(piece)
