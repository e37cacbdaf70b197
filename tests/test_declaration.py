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


def test_one_script_run_two_ways_is_two_runs():
    """An output's own ``arguments`` make a run of their own; the others take the study's."""
    from attnlab.harness.declaration import Study

    study = Study(
        "example",
        1,
        {
            "a.csv": Output("99_example.py"),
            "b.csv": Output("99_example.py"),
            "lm/a.csv": Output("99_example.py", arguments="--task lm"),
        },
        arguments="--all",
    )
    assert study.runs == (("99_example.py", "--all"), ("99_example.py", "--task lm"))
    assert study.csvs_of("99_example.py", "--all") == ["a.csv", "b.csv"]
    assert study.csvs_of("99_example.py") == ["a.csv", "b.csv", "lm/a.csv"]
    assert study.arguments_of("lm/a.csv") == "--task lm" and study.arguments_of("a.csv") == "--all"
