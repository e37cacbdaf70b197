"""experiments/plot_figures.py on damaged inputs (issue 55): a CSV or sidecar that is there
but malformed draws nothing: one line naming it and the command that makes it, exit 2, no
traceback, and the figures folder as it was. (Drawing from a partial folder, and an empty
one: tests/test_cli.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from damage import (
    CSV_DAMAGES,
    SIDECAR_DAMAGES,
    assert_one_line_naming,
    copy_damaged,
    duplicated_row,
    listing,
    text_in,
)

from attnlab.harness.io import sidecar_path

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: Figure 1 draws 02's table alone: small, and no other CSV to read first.
FIGURE, CSV = "fig1_saturation", "02_saturation_sweep.csv"
DAMAGES = {
    **{f"csv {name}": (CSV, damage) for name, damage in CSV_DAMAGES.items()},
    "csv text in a number": (CSV, text_in("max_weight_mean")),
    "csv text in a key": (CSV, text_in("d_k")),
    "csv a row twice": (CSV, duplicated_row),
    **{f"sidecar {name}": (sidecar_path(Path(CSV)).name, damage)
       for name, damage in SIDECAR_DAMAGES.items()},
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_a_damaged_csv_or_sidecar_draws_nothing(case, load_script, run_main, in_tmp_path, capsys):
    name, damage = DAMAGES[case]
    results, figures = in_tmp_path / "results", in_tmp_path / "figures"
    results.mkdir(), figures.mkdir()
    for path in (RESULTS / CSV, sidecar_path(RESULTS / CSV)):
        copy_damaged(path, results, damage if path.name == name else None)
    (figures / f"{FIGURE}.png").write_bytes(b"the previous figure")
    before = listing(in_tmp_path)
    argv = [FIGURE, "--results-dir", results, "--figures-dir", figures]
    assert run_main(load_script("plot_figures"), argv) == 2
    captured = capsys.readouterr()
    assert_one_line_naming(captured.err, results / name, "experiments/02_saturation_sweep.py")
    assert captured.out == ""
    assert listing(in_tmp_path) == before


def test_a_figure_whose_csv_is_absent_is_still_skipped(load_script, run_main, in_tmp_path, capsys):
    """Beside a malformed CSV's refusal, an absent one still only skips its figures: with
    02 present and 03 absent, figure 1 is drawn and figure 2 skipped (exit 0)."""
    results, figures = in_tmp_path / "results", in_tmp_path / "figures"
    results.mkdir(), figures.mkdir()
    for path in (RESULTS / CSV, sidecar_path(RESULTS / CSV)):
        copy_damaged(path, results)
    argv = ["--study", "statics", "--results-dir", results, "--figures-dir", figures]
    assert run_main(load_script("plot_figures"), argv) == 0
    assert sorted(p.name for p in figures.iterdir()) == [f"{FIGURE}.pdf", f"{FIGURE}.png"]
    err = capsys.readouterr().err
    assert "skipped fig2_jacobian_norm" in err and "03_jacobian_norm.csv is missing" in err
