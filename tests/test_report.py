"""Tests of attnlab/report.py and experiments/make_report.py: the summary's lines and its
headline, README's generated blocks (the answer, the tally), the report's opening, and the
report of a folder holding only some of the results."""

import json
import re
import shutil
from pathlib import Path

import pytest
from damage import (
    CSV_DAMAGES,
    SIDECAR_DAMAGES,
    assert_one_line_naming,
    copy_damaged,
    listing,
    text_in,
)
from support import TINY_RECALL

from attnlab.answer import QUESTION, opening
from attnlab.harness.io import MalformedError, sidecar_path, write_sidecar
from attnlab.report import (
    ALTERNATIVE,
    ANSWER_BEGIN,
    HEADLINE,
    LEFT_OUT,
    README_BEGIN,
    README_END,
    TITLE,
    build_report,
    headline_note,
    left_out,
    readme_blocks,
    replace_block,
    summary_lines,
    tables_for,
)
from attnlab.studies import STUDIES

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
README = REPO / "README.md"
TINY_04 = TINY_RECALL  # test_experiments_recall's too: the same programs, compiled once


def _block(text: str, begin: str = README_BEGIN) -> str:
    start = text.index(begin)
    return text[start : text.index(README_END, start) + len(README_END)]


def test_readme_blocks_are_current():
    """README's generated blocks (the answer, the tally, the cards' comparison) are what
    make_report writes from the committed CSVs."""
    blocks = readme_blocks(RESULTS)
    assert len(blocks) >= 3 and blocks[0].startswith(ANSWER_BEGIN)
    for block in blocks:
        begin = block.split("\n", 1)[0]
        assert _block(README.read_text(encoding="utf-8"), begin) == block, (
            f"README's {begin} block is stale: run `python experiments/make_report.py`"
        )


def _counts(cells: tuple[str, ...]) -> tuple[int, int]:
    """(reproduced, measured) of a summary line's "a of m" cell."""
    a, m = re.fullmatch(r"(\d+) of (\d+)", cells[1]).groups()
    return int(a), int(m)


def test_summary_has_a_line_per_reading_and_a_total_with_each():
    lines, dropped = summary_lines(tables_for(RESULTS))
    assert dropped == []
    recall = [c for c in lines if c[0].startswith("recall:")]
    assert [c[0].split("`")[0] for c in recall] == [
        "recall: 04's reading ",
        "recall: 09's first fit ",
        "recall: 09's second fit ",
    ]
    totals = [c for c in lines if c[0].startswith(("**all", f"{ALTERNATIVE} all"))]
    others = [c for c in lines if c not in recall and c not in totals]
    assert len(totals) == len(recall)
    for total, reading in zip(totals, recall, strict=True):
        assert total[0].endswith(reading[0])
        parts = [_counts(c) for c in [*others, reading]]
        assert _counts(total) == tuple(sum(p[i] for p in parts) for i in (0, 1))
    # exactly one headline, the total with 04's pre-declared reading; the fits' follow it
    assert [c[0] for c in totals] == [
        f"**all {HEADLINE}**, with recall: 04's reading `natural`",
        *(f"{ALTERNATIVE} all, with {c[0]}" for c in recall[1:]),
    ]


def test_the_headline_note_says_why():
    lines, _ = summary_lines(tables_for(RESULTS))
    note = headline_note(lines)
    assert note.startswith("The bold total is the headline: it counts the training demo "
                           "under 04's reading `natural`")  # fmt: skip
    assert "declared before any result was seen" in note and "*alternative*" in note
    assert headline_note([c for c in lines if not c[0].startswith(ALTERNATIVE)]) == ""
    assert headline_note([]) == ""
    readme = README.read_text(encoding="utf-8")
    assert f"\n\n{note}\n{README_END}" in _block(readme)


def test_the_report_and_readme_open_with_the_answer():
    """REPORT.md's first paragraph after its title is the answer, before any table, and
    README's answer block holds the same prose; README cites the articles by title, with no
    path to their texts (which are not in the repository)."""
    report = (RESULTS / "REPORT.md").read_text(encoding="utf-8")
    paragraphs = report.split("\n\n")
    assert paragraphs[0] == TITLE
    answer = paragraphs[1]
    assert answer.startswith(f"**{QUESTION}**") and "|" not in answer
    assert report.index(answer) < report.index("\n|")
    assert answer == opening(tables_for(RESULTS))
    readme = README.read_text(encoding="utf-8")
    assert _block(readme, ANSWER_BEGIN) == f"{ANSWER_BEGIN}\n{answer}\n{README_END}"
    assert readme.index(ANSWER_BEGIN) < readme.index("![Figure 1]")
    assert "shared/" not in readme
    for title in (
        "*Can Attention Work Without the sqrt(d) Scaling?*",
        "*Why Scaled Dot-Product Attention Divides by the Square Root of the Key Dimension*",
    ):
        assert title in " ".join(readme.split("\n\n", 2)[1].split())


def test_the_committed_report_leaves_nothing_out():
    assert left_out(build_report(RESULTS)) == []


def test_replace_block():
    text = f"intro\n{README_BEGIN}\nold\n{README_END}\nend\n"
    block = f"{README_BEGIN}\nnew\n{README_END}"
    assert replace_block(text, block) == f"intro\n{block}\nend\n"
    for bad in ("no markers\n", text + README_BEGIN, f"{README_END}\n{README_BEGIN}\n"):
        with pytest.raises(Exception, match="README.md needs one"):
            replace_block(bad, block)
    other = "<!-- BEGIN GENERATED: other -->\nnew other\n" + README_END
    two = f"{text}<!-- BEGIN GENERATED: other -->\nold\n{README_END}\n"
    assert replace_block(two, other) == f"{text}{other}\n"
    assert replace_block(replace_block(two, other), block).count("new") == 2


@pytest.fixture(scope="module")
def tiny_04_run(load_script, tmp_path_factory) -> Path:
    """A folder holding only a tiny run of experiment 04."""
    out = tmp_path_factory.mktemp("tiny04")
    module = load_script("04_associative_recall")
    assert module.main([*TINY_04, "--out-dir", str(out)]) == 0
    return out


def test_report_of_a_tiny_04_run(tiny_04_run, load_script, run_main, capsys):
    """The sections it can, and for every study left out its absent CSVs and the command
    that makes them into the same folder; README is untouched."""
    readme = README.read_bytes()
    out = tiny_04_run / "REPORT.md"
    module = load_script("make_report")
    assert run_main(module, ["--results-dir", tiny_04_run, "--out", out]) == 0
    err = capsys.readouterr().err
    report = out.read_text(encoding="utf-8")
    paragraphs = report.split("\n\n")
    answer = paragraphs[paragraphs.index(TITLE) + 1]  # after the "not the committed" warning
    assert answer.startswith(f"**{QUESTION}** On the article's recall task")
    assert "language model" not in answer and "standard deviation" not in answer
    assert "## Training demo (experiment 04)" in report
    assert "recall: 04's reading `natural`" in report
    assert LEFT_OUT in report
    lines = left_out(report)
    assert err.splitlines() == [f"left out {line}" for line in lines]
    assert [line.split(" (")[0] for line in lines] == [
        *(s.name for s in STUDIES if s.claims),
        *(s.name for s in STUDIES if s.in_report and not s.claims),
    ]
    absent = [s for s in STUDIES if (s.claims or s.in_report) and s.name != "recall"]
    for study in absent:
        for script in study.scripts:
            command = " ".join(filter(None, [f"python experiments/{script}", study.arguments]))
            assert f"`{command} --out-dir {tiny_04_run}`" in report
    assert "09_article_fit.py --out-dir" in report.split("## Training demo")[1]
    assert README.read_bytes() == readme


def test_from_results_it_rewrites_readmes_tally(load_script, run_main, tmp_path, monkeypatch):
    """From results/ into the canonical report path it rewrites a stale tally block (here
    README and report are copies in a temporary folder)."""
    module = load_script("make_report")
    readme = tmp_path / "README.md"
    stale = replace_block(README.read_text(encoding="utf-8"), f"{README_BEGIN}\n{README_END}")
    readme.write_text(stale, encoding="utf-8")
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(module, "README", readme)
    monkeypatch.setattr(module, "REPORT", tmp_path / "REPORT.md")
    assert run_main(module, []) == 0
    written = readme.read_text(encoding="utf-8")
    for block in readme_blocks(RESULTS):
        assert _block(written, block.split("\n", 1)[0]) == block
    report = (tmp_path / "REPORT.md").read_text(encoding="utf-8")
    assert report == build_report(RESULTS)


# --- a damaged CSV or sidecar: one line, exit 2, nothing written (issue 55) ---------------

STATICS = ("01_logit_variance.csv", "02_saturation_sweep.csv", "03_jacobian_norm.csv")
DAMAGED = "02_saturation_sweep.csv"
REPORT_DAMAGES = {
    **{f"csv {name}": (DAMAGED, damage) for name, damage in CSV_DAMAGES.items()},
    "csv text in a number": (DAMAGED, text_in("max_weight_mean")),
    "csv text in a key": (DAMAGED, text_in("d_k")),
    **{f"sidecar {name}": (sidecar_path(Path(DAMAGED)).name, damage)
       for name, damage in SIDECAR_DAMAGES.items()},
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REPORT_DAMAGES))
def test_a_damaged_csv_or_sidecar_stops_the_report(
    case, load_script, run_main, in_tmp_path, capsys
):
    """The statics' CSVs and sidecars with one of them damaged: one line naming it and the
    command that makes it, exit 2, no traceback; the previous report stays as it was and
    nothing else is written; README is untouched."""
    name, damage = REPORT_DAMAGES[case]
    results, out = in_tmp_path / "results", in_tmp_path / "out"
    results.mkdir(), out.mkdir()
    for csv in STATICS:
        for path in (RESULTS / csv, sidecar_path(RESULTS / csv)):
            copy_damaged(path, results, damage if path.name == name else None)
    (out / "REPORT.md").write_text("the previous report\n", encoding="utf-8")
    before, readme = listing(in_tmp_path), README.read_bytes()
    argv = ["--results-dir", results, "--out", out / "REPORT.md"]
    assert run_main(load_script("make_report"), argv) == 2
    captured = capsys.readouterr()
    assert_one_line_naming(captured.err, results / name, "experiments/02_saturation_sweep.py")
    assert captured.out == ""
    assert listing(in_tmp_path) == before
    assert README.read_bytes() == readme


def test_a_value_the_checks_let_through_is_one_line_naming_what_was_read(tmp_path):
    """A ValueError (TypeError, KeyError, ...) in code reading the tables, from a value no
    check caught, names the CSVs that code read and the commands that make them."""
    shutil.copy(RESULTS / DAMAGED, tmp_path)
    tables = tables_for(tmp_path)
    with pytest.raises(MalformedError) as info, tables.values_of("the section of statics"):
        float(tables.get(DAMAGED, ["variant"]).variant.iloc[0])
    message = str(info.value)
    assert "\n" not in message
    assert f"{tmp_path / DAMAGED} or its sidecar holds a malformed value" in message
    assert "the section of statics failed (ValueError: could not convert" in message
    assert "experiments/02_saturation_sweep.py" in message
    with pytest.raises(MalformedError, match="KeyError"), tables.values_of("a figure"):
        tables.flags(DAMAGED)["absent"]  # no sidecar: no flags


# --- every CSV's provenance, and only its own (issue 67, cause 11) -------------------------


def _statics_into(folder: Path) -> Path:
    """The statics' committed CSVs and sidecars copied into ``folder/results``."""
    results = folder / "results"
    results.mkdir()
    for csv in STATICS:
        for path in (RESULTS / csv, sidecar_path(RESULTS / csv)):
            shutil.copy(path, results)
    return results


def _provenance_line(report: str, csv: str) -> str:
    return next(
        line for line in report.split("## Provenance")[1].splitlines() if f"`{csv}`" in line
    )


def test_a_csv_without_its_sidecar_is_listed_in_the_provenance_as_such(tmp_path):
    """Its line is not dropped: it says there is no sidecar and names the command."""
    results = _statics_into(tmp_path)
    sidecar_path(results / DAMAGED).unlink()
    line = _provenance_line(build_report(results), DAMAGED)
    assert "no sidecar" in line and "experiments/02_saturation_sweep.py" in line


def test_another_scripts_sidecar_copied_in_is_refused_in_one_line(
    load_script, run_main, in_tmp_path, capsys
):
    """Sidecars name their CSV: 01's sidecar copied in as 03's is refused naming the file
    and 03's command, exit 2, nothing written (the report gave 01's provenance as 03's)."""
    results, out = _statics_into(in_tmp_path), in_tmp_path / "out"
    out.mkdir()
    flags = json.loads(sidecar_path(RESULTS / STATICS[0]).read_text(encoding="utf-8"))["flags"]
    write_sidecar(results / STATICS[0], flags, wall_time_s=1.0)  # a sidecar as written now
    shutil.copy(sidecar_path(results / STATICS[0]), sidecar_path(results / STATICS[2]))
    before = listing(in_tmp_path)
    argv = ["--results-dir", results, "--out", out / "REPORT.md"]
    assert run_main(load_script("make_report"), argv) == 2
    captured = capsys.readouterr()
    named = sidecar_path(results / STATICS[2])
    assert_one_line_naming(captured.err, named, "experiments/03_jacobian_norm.py")
    assert captured.out == "" and listing(in_tmp_path) == before
