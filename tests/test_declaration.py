"""attnlab.harness.declaration: an output's rules group by kind, as make verify applies them,
and a standard error without its mean (or a mean without its SE column) is refused."""

from __future__ import annotations

import pytest

from attnlab.harness.declaration import (
    CHAOTIC,
    EXACT,
    KEY,
    SE,
    SEED_RANGE,
    UNCHECKED,
    CsvSpec,
    Output,
    close,
    mean,
)


def test_spec_groups_the_columns_by_rule_in_csv_order():
    output = Output(
        "99_example.py",
        {
            "d_k": KEY,
            "seed": KEY,
            "trials": UNCHECKED,
            "value": mean("value_se"),
            "value_se": SE,
            "verdict": EXACT,
            "error": close(2.0**-10, 0.0),
            "step_loss_below_1": SEED_RANGE,
            "plateau_start": CHAOTIC,
        },
        spread_floor=1.0,
    )
    assert output.column_names[:3] == ["d_k", "seed", "trials"]
    assert output.spec() == CsvSpec(
        "--out-dir",
        ("d_k", "seed"),
        se=(("value", "value_se"),),
        exact=("verdict",),
        close=(("error", 2.0**-10, 0.0),),
        seed_range=("step_loss_below_1", "plateau_start"),
        unchecked=("trials",),
        spread_floor=1.0,
        chaotic=("plateau_start",),
    )
    assert sorted(output.spec().columns()) == sorted(output.column_names)
    assert output.verified and not Output("99_example.py").verified


@pytest.mark.parametrize(
    "columns",
    [{"value": mean("value_se")}, {"value": EXACT, "value_se": SE}],
    ids=["mean without its SE column", "SE column without its mean"],
)
def test_unpaired_standard_errors_are_refused(columns):
    with pytest.raises(ValueError, match="99_example.py"):
        Output("99_example.py", columns)
