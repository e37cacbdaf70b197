"""attnlab.harness.cli: where outputs go (canonical results only from the committed
defaults), output paths refused up front, the report's flag on non-default results, and
Ctrl-C while a script is still importing."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from events import EVENT_DEADLINE_S, HAS_PROC_SIGNALS, catches, wait_for
from support import TINY_RECALL

from attnlab.harness import cli, outputs
from attnlab.harness.io import is_csv
from attnlab.report import not_from_defaults

REPO_ROOT = Path(__file__).resolve().parents[1]
#: A fast non-default run of 01 and of 04.
TINY_01 = ["--dk", "1", "4", "--samples", "64", "--hp-samples", "64", "--quiet"]
#: 04 at test_experiments_recall's tiny settings: the same programs, compiled once.
TINY_04 = TINY_RECALL


def _parser():
    parser = cli.new_parser("test")
    parser.add_argument("--steps", type=int, default=10)
    cli.add_out_dir_flag(parser)
    return parser


def test_defaults_write_results_and_other_flags_a_run_folder():
    parser = _parser()
    run = cli.run_context(parser, parser.parse_args(["--quiet"]))
    assert run.made_with_defaults and run.out_dir == cli.RESULTS_DIR and not run.run_folder
    assert run.sidecar_flags["out_dir"] == cli.RESULTS_DIR and run.quiet
    run = cli.run_context(parser, parser.parse_args(["--steps", "3"]))
    assert not run.made_with_defaults and run.out_dir.parent == cli.RUNS_DIR and run.run_folder
    assert run.out_dir.name.startswith(f"{Path(parser.prog).stem}-")
    args = parser.parse_args(["--steps", "3", "--out-dir", "results"])  # on purpose
    run = cli.run_context(parser, args)
    assert not run.made_with_defaults and run.out_dir == Path("results") and run.out_dir_given
    assert not run.sidecar_flags["made_with_defaults"] and not hasattr(args, "made_with_defaults")


def test_two_runs_in_one_process_in_one_second_get_two_folders(monkeypatch):
    """Issue 67, cause 2, in-process (``make verify``, a notebook): the pid is the same,
    the run's number in the process is not."""
    parser = _parser()
    monkeypatch.setattr(outputs.time, "strftime", lambda fmt, *rest: "20260101-000000")
    first, second = (cli.run_context(parser, parser.parse_args(["--steps", "3"])).out_dir
                     for _ in range(2))  # fmt: skip
    assert first != second and first.parent == second.parent == cli.RUNS_DIR
    assert f"-20260101-000000-{os.getpid()}" in first.name


def test_a_committed_argument_list_counts_as_defaults():
    """A parser's ``committed_arguments`` (13 on 14's checkpoints) write to results/ too;
    any other value of those flags still goes to a run folder."""
    parser = _parser()
    parser.declare_flags(committed=(["--steps", "3"],))
    run = cli.run_context(parser, parser.parse_args(["--steps", "3"]))
    assert run.made_with_defaults and run.out_dir == cli.RESULTS_DIR
    run = cli.run_context(parser, parser.parse_args(["--steps", "4"]))
    assert not run.made_with_defaults and run.out_dir.parent == cli.RUNS_DIR


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("script", "argv"), [("01_logit_variance", TINY_01), ("04_associative_recall", TINY_04)]
)
def test_a_non_default_run_leaves_results_untouched(
    script, argv, load_script, run_main, in_tmp_path, capsys
):
    results = in_tmp_path / "results"
    results.mkdir()
    (results / "04_recall_summary.csv").write_text("committed\n")
    before = _tree(results)
    loud = [a for a in argv if a != "--quiet"]  # the run folder is named unless --quiet
    assert run_main(load_script(script), loud) == 0
    runs = list((results / "runs").iterdir())
    assert len(runs) == 1 and any(runs[0].glob("*.csv"))
    after = {k: v for k, v in _tree(results).items() if not k.startswith("runs")}
    assert after == before
    sidecar = json.loads(next(runs[0].glob("*.json")).read_text())
    assert sidecar["made_with_defaults"] is False
    assert "results/runs/" in capsys.readouterr().out.replace(os.sep, "/")


@pytest.mark.parametrize("out", ["x.json", "x", "/proc/x.csv"])
def test_bad_output_paths_are_refused_before_computing(
    out, load_script, run_main, in_tmp_path, capsys
):
    assert run_main(load_script("01_logit_variance"), [*TINY_01, "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err
    assert not any(in_tmp_path.rglob("*.*"))


def test_an_unwritable_out_dir_is_refused_before_computing(
    load_script, run_main, in_tmp_path, capsys
):
    assert run_main(load_script("04_associative_recall"), [*TINY_04, "--out-dir", "/proc"]) == 2
    assert "--out-dir: cannot write in /proc" in capsys.readouterr().err


def test_the_report_flags_csvs_not_made_with_the_defaults(tmp_path):
    for name, flag in (("a.csv", True), ("b.csv", False), ("c.csv", None)):
        (tmp_path / name).write_text("x\n")
        meta = {} if flag is None else {"made_with_defaults": flag}
        (tmp_path / name).with_suffix(".json").write_text(json.dumps(meta))
    assert not_from_defaults(tmp_path, ["a.csv", "b.csv", "c.csv"]) == ["b.csv"]


def test_the_committed_report_is_made_from_defaults_only():
    """Every committed CSV's sidecar says it was made with the committed defaults."""
    results = REPO_ROOT / "results"
    names = sorted(p.name for p in results.iterdir() if is_csv(p) and p.name != "bench.csv")
    assert not_from_defaults(results, names) == []


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC_SIGNALS, reason="waits on /proc/<pid>/status")
def test_ctrl_c_while_importing_exits_130_with_one_line(tmp_path):
    """SIGINT while the script imports JAX: sent once the script's first import
    (``experiments/_interrupt.py``) has installed its handlers, not after a fixed time."""
    shutil.copytree(REPO_ROOT / "experiments", tmp_path / "experiments")
    process = subprocess.Popen(
        [sys.executable, str(tmp_path / "experiments" / "01_logit_variance.py"), "--help"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: catches(process.pid, signal.SIGHUP) or process.poll() is not None)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=EVENT_DEADLINE_S)
    if process.returncode == 0:  # the whole import ran between two looks at /proc
        pytest.skip("the script had finished before the signal")
    assert process.returncode == 130, err
    assert err == "01_logit_variance.py: interrupted; nothing written\n"


@pytest.mark.slow
def test_figures_are_drawn_from_a_folder_holding_only_a_tiny_04_run(
    load_script, run_main, in_tmp_path, capsys
):
    """Figure 3 from 04's CSVs alone (09's panel left out); every other figure skipped with
    the command that makes its CSVs; exit 0."""
    runs, figures = in_tmp_path / "mine", in_tmp_path / "figs"
    runs.mkdir(), figures.mkdir()
    assert run_main(load_script("04_associative_recall"), [*TINY_04, "--out-dir", runs]) == 0
    argv = ["--results-dir", runs, "--figures-dir", figures]
    assert run_main(load_script("plot_figures"), argv) == 0
    assert sorted(p.name for p in figures.iterdir()) == ["fig3_training.pdf", "fig3_training.png"]
    err = capsys.readouterr().err
    assert "skipped fig1_saturation" in err and "experiments/02_saturation_sweep.py" in err


def test_plotting_an_empty_folder_draws_nothing_and_exits_2(load_script, run_main, in_tmp_path):
    (in_tmp_path / "empty").mkdir()
    argv = ["--results-dir", in_tmp_path / "empty", "--figures-dir", in_tmp_path]
    assert run_main(load_script("plot_figures"), argv) == 2
    assert not any(in_tmp_path.rglob("*.png"))


def test_a_failed_final_move_puts_everything_back_and_says_so(
    load_script, run_main, tmp_path, capsys, monkeypatch
):
    """The second rename into the folder fails (a full disk): the first goes back, nothing
    is left in the output folder (no stage either), and one line says nothing was written.
    (tests/test_faults.py fails and signals each step of a move.)"""
    calls = []

    def replace(src, dst):  # the atomic writes inside the stage rename too: let them
        if Path(dst).parent == tmp_path:
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
        os.rename(src, dst)

    monkeypatch.setattr(cli.os, "replace", replace)
    code = run_main(load_script("01_logit_variance"), [*TINY_01, "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "No space left on device" in err
    assert "nothing written, the previous outputs are unchanged" in err
    assert list(tmp_path.iterdir()) == []


def test_staged_outputs_move_subfolders_all_or_none(tmp_path):
    with cli.staged_outputs(tmp_path) as stage:
        (stage / "cards" / "a").mkdir(parents=True)
        (stage / "cards" / "a" / "x.csv").write_text("x\n")
        (stage / "top.csv").write_text("t\n")
    assert (tmp_path / "cards" / "a" / "x.csv").read_text() == "x\n"
    with pytest.raises(KeyboardInterrupt), cli.staged_outputs(tmp_path) as stage:
        (stage / "cards" / "b").mkdir(parents=True)
        (stage / "cards" / "b" / "y.csv").write_text("y\n")
        raise KeyboardInterrupt
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "cards", "cards/a", "cards/a/x.csv", "top.csv"
    ]  # fmt: skip


# --- a failed or interrupted run leaves no empty run folder; --quiet still says where ---


def _entry(fail: BaseException | None, note: str | None = None):
    """A script whose run makes its run folder (``--steps`` other than the default), then
    raises ``fail`` or writes one file."""

    def run(args, context):
        out = cli.prepare_out_dir(context)
        if fail is not None:
            raise fail
        context.add_note(note)
        with cli.staged_outputs(out, context.written) as stage:
            (stage / "x.csv").write_text("x\n1\n")

    return cli.entry_point(_parser, run)


@pytest.mark.parametrize(
    ("fail", "code"),
    [
        (cli.UsageError("bad"), 2),
        (cli.DataError("bad"), 2),
        (cli.RunError("bad"), 1),
        (KeyboardInterrupt(), 130),
    ],
)
def test_no_empty_run_folder_is_left_by_any_failure(fail, code, in_tmp_path, capsys):
    assert _entry(fail)(["--steps", "3"]) == code
    assert capsys.readouterr().err.count("\n") == 1
    assert not any((in_tmp_path / "results" / "runs").iterdir())


def test_no_empty_run_folder_is_left_by_an_unexpected_exception(in_tmp_path):
    with pytest.raises(ZeroDivisionError):
        _entry(ZeroDivisionError("a bug"))(["--steps", "3"])
    assert not any((in_tmp_path / "results" / "runs").iterdir())


def test_quiet_keeps_the_line_that_says_where_outputs_went(in_tmp_path, capsys):
    assert _entry(None, note="(a note)")(["--steps", "3", "--quiet"]) == 0
    out = capsys.readouterr().out.replace(os.sep, "/")
    lines = out.splitlines()
    assert len(lines) == 2 and "run folder results/runs/" in lines[0] and lines[1] == "(a note)"
    assert _entry(None)(["--quiet"]) == 0  # the defaults: results/, nothing to say
    assert capsys.readouterr().out == ""


# --- what a run wrote is its own: a run inside another announces only its files ---------


def test_a_run_nested_in_another_announces_only_its_own_files(tmp_path, capsys):
    """The outer run writes one file, runs an inner script in-process (as make verify does)
    whose file it then deletes, and writes a second: each announces only its own files,
    and the outer one no file that no longer exists (with a module-level record shared
    by both runs, the outer announced the inner's deleted file and crashed)."""
    inner_dir, outer_dir = tmp_path / "inner", tmp_path / "outer"
    inner_dir.mkdir()
    outer_dir.mkdir()

    def inner_run(args, context):
        with cli.staged_outputs(context.out_dir, context.written) as stage:
            (stage / "inner.csv").write_text("x\n1\n2\n")

    inner = cli.entry_point(_parser, inner_run)

    def outer_run(args, context):
        with cli.staged_outputs(context.out_dir, context.written) as stage:
            (stage / "first.csv").write_text("x\n1\n")
        assert inner(["--out-dir", str(inner_dir)]) == 0
        (inner_dir / "inner.csv").unlink()
        with cli.staged_outputs(context.out_dir, context.written) as stage:
            (stage / "second.csv").write_text("x\n1\n")

    assert cli.entry_point(_parser, outer_run)(["--out-dir", str(outer_dir)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {inner_dir / 'inner.csv'} (2 rows)",
        f"wrote {outer_dir / 'first.csv'} (1 rows)",
        f"wrote {outer_dir / 'second.csv'} (1 rows)",
    ]


def test_announce_written_skips_files_that_are_gone(tmp_path, capsys):
    kept, gone = tmp_path / "kept.csv", tmp_path / "gone.csv"
    kept.write_text("x\n1\n")
    cli.announce_written([gone, kept])
    assert capsys.readouterr().out == f"wrote {kept} (1 rows)\n"


def test_rates_flag_takes_positive_rates_and_refuses_others_in_one_line(capsys):
    parser = cli.new_parser("rates")
    cli.add_rates_flag(parser, (1e-3,))
    assert parser.parse_args([]).lrs == [1e-3]
    assert parser.parse_args(["--lrs", "3e-4", "2"]).lrs == [3e-4, 2.0]
    for bad in ("-1", "0", "inf", "fast"):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(["--lrs", bad])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--lrs" in err


# --- a run's state lives in its RunContext, never on the argparse objects ---------------

#: An assignment to an attribute of the parsed flags or of a parser (``args.x = ...``,
#: ``parser.x = ...``, ``setattr(namespace, ...)``), as the run's state used to be kept.
ARGPARSE_ASSIGNMENT = re.compile(
    r"^\s*(?:args|namespace|parser)\.\w+(?:\s*:[^=]+)?\s*=(?!=)|setattr\(\s*(?:args|namespace|parser)\b",
    re.MULTILINE,
)


def test_the_assignment_pattern_finds_what_it_looks_for():
    for line in ("    args.written = []", "parser.flag_groups = {}", "setattr(namespace, 'x', 1)"):
        assert ARGPARSE_ASSIGNMENT.search(line), line
    for line in ("    if args.steps == 3:", "    out = args.out_dir", "context.notes.append(x)"):
        assert not ARGPARSE_ASSIGNMENT.search(line), line


def test_no_attribute_is_set_on_argparse_objects_outside_the_harness():
    """Outside ``attnlab/harness`` (whose actions record typed flags on the namespace, as
    argparse's actions do) nothing sets an attribute of a parser or of the parsed flags: a
    run's state is its ``RunContext`` (a parser's declarations, its ``FlagParser``'s fields:
    tests/test_harness_flags.py)."""
    root = Path(__file__).resolve().parents[1]
    files = [*root.glob("attnlab/**/*.py"), *root.glob("experiments/*.py")]
    offenders = [
        f"{path.relative_to(root)}: {match.group(0).strip()}"
        for path in files
        if "harness" not in path.relative_to(root).parts
        for match in ARGPARSE_ASSIGNMENT.finditer(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


#: What a default looks like when argparse prints an object's repr instead of the text a
#: user would type (a resolved mechanism, a function).
REPR_MARKS = re.compile(r"object at 0x|<function |MechanismRef\(|Mechanism\(")


@pytest.mark.parametrize(
    "script", sorted(p.name for p in (REPO_ROOT / "experiments").glob("[0-9][0-9]_*.py"))
)
def test_help_shows_defaults_as_a_user_types_them(script, load_script, run_main, capsys):
    assert run_main(load_script(script), ["--help"]) == 0
    shown = capsys.readouterr().out
    assert not REPR_MARKS.search(shown), REPR_MARKS.search(shown).group(0)
