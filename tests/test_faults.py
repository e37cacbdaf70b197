"""Fault injection: whatever fails or arrives during a run's final move, its output folder
holds either every old file or every new one, and the stage is gone
(``attnlab.harness.staging.staged_outputs``); SIGINT, SIGTERM and SIGHUP end a run with one
line and ``128 + signum`` (``attnlab.harness.signals``); a path built from a name stays in
its folder (``staging.within``); an interrupted ``make`` keeps what its recipes wrote."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from events import EVENT_DEADLINE_S, HAS_PROC_SIGNALS, catches, wait_for

from attnlab.harness import cli, outputs, signals, staging

REPO_ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and flock")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def old_results(folder: Path, names: list[str]) -> dict[str, bytes]:
    """``folder/results`` holding an 'old' version of each of ``names`` and one file no run
    writes; returns its snapshot."""
    results = folder / "results"
    results.mkdir()
    for name in [*names, "unrelated.txt"]:
        (results / name).write_text(f"old {name}\n", encoding="utf-8")
    return snapshot(results)


class AtStep:
    """A ``_at_move_step`` that does ``act()`` at the ``n``-th step (0: before the first
    replace; 1 .. files: after each; files + 1: after the last) and records every step."""

    def __init__(self, n: int, act) -> None:
        self.n, self.act, self.steps = n, act, []

    def __call__(self, step: str) -> None:
        self.steps.append(step)
        if len(self.steps) - 1 == self.n:
            self.act()


def send(signum: int):
    return lambda: os.kill(os.getpid(), signum)


def fail():
    raise OSError(28, "No space left on device")


COMPANION = ["08_companion_claims.csv", "08_companion_claims.json"]


def test_a_defaults_run_cut_at_any_step_of_its_move_leaves_results_wholly_old(
    load_script, run_main, in_tmp_path, capsys, monkeypatch
):
    """08 at the committed defaults writes results/: a signal (each of the three) or a
    failure before the first replace, between the replaces and after the last leaves the
    old results byte for byte and no stage; uncut, every file is new."""
    script = load_script("08_companion_claims")
    old = old_results(in_tmp_path, COMPANION)
    results = in_tmp_path / "results"
    cuts = [(send(signal.SIGTERM), 143), (send(signal.SIGINT), 130), (fail, 1),
            (send(signal.SIGHUP), 129)]  # fmt: skip
    for n, (act, code) in enumerate(cuts):  # before, after each replace, after the last
        hook = AtStep(n, act)
        monkeypatch.setattr(staging, "_at_move_step", hook)
        assert run_main(script, ["--quiet"]) == code, (n, hook.steps)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "nothing written" in err, err
        assert snapshot(results) == old, (n, code)
    assert hook.steps == ["before", *(f"moved {n}" for n in COMPANION), "after"]
    monkeypatch.setattr(staging, "_at_move_step", lambda step: None)
    assert run_main(script, ["--quiet"]) == 0
    new = snapshot(results)
    assert sorted(new) == sorted(old) and all(new[n] != old[n] for n in COMPANION)


@pytest.mark.slow  # 07 at its defaults; every step of a move is cut in the 08 test above
def test_07s_default_run_cut_between_replaces_keeps_the_committed_correlation_csv(
    load_script, run_main, in_tmp_path, capsys, monkeypatch
):
    """The audit's case: Ctrl-C during the move of 07's default run deleted the committed
    07_failure_modes_correlation.csv."""
    names = [f"07_failure_modes_{p}.{e}" for p in ("correlation", "masks", "overflow")
             for e in ("csv", "json")]  # fmt: skip
    old = old_results(in_tmp_path, names)
    monkeypatch.setattr(staging, "_at_move_step", AtStep(3, send(signal.SIGINT)))
    assert run_main(load_script("07_failure_modes"), ["--quiet"]) == 130
    assert capsys.readouterr().err.endswith(": interrupted; nothing written\n")
    assert snapshot(in_tmp_path / "results") == old


def test_a_folder_in_the_way_fails_before_anything_moves(load_script, run_main, tmp_path, capsys):
    """The audit's case: the sidecar's path is a folder. Nothing moves, the earlier outputs
    stay, one line, exit 1, no stage."""
    (tmp_path / "01_logit_variance.csv").write_text("old\n", encoding="utf-8")
    (tmp_path / "01_logit_variance.json").mkdir()
    old = snapshot(tmp_path)
    argv = ["--dk", "1", "4", "--samples", "64", "--hp-samples", "64", "--quiet"]
    assert run_main(load_script("01_logit_variance"), [*argv, "--out-dir", tmp_path]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a folder is in the way" in err and "unchanged" in err
    assert snapshot(tmp_path) == old and sorted(p.name for p in tmp_path.iterdir()) == [
        "01_logit_variance.csv",
        "01_logit_variance.json",
    ]


def test_moves_into_one_folder_take_turns(tmp_path, monkeypatch):
    """A run's move waits while another holds the folder's lock, so two runs never pair a
    CSV with the other's sidecar. The check waits for the writer to ask for the lock."""
    asked, done = threading.Event(), threading.Event()
    flock = staging.fcntl.flock

    def asking(fd: int, operation: int) -> None:
        waits = operation == staging.fcntl.LOCK_EX  # the folder's lock (a stage's never waits)
        if waits and threading.current_thread() is not threading.main_thread():
            asked.set()
        flock(fd, operation)

    def write():
        with cli.staged_outputs(tmp_path) as stage:
            (stage / "x.csv").write_text("x\n", encoding="utf-8")
        done.set()

    monkeypatch.setattr(staging.fcntl, "flock", asking)
    with staging._locked(tmp_path):
        writer = threading.Thread(target=write)
        writer.start()
        assert asked.wait(timeout=EVENT_DEADLINE_S)
        assert not done.is_set() and not (tmp_path / "x.csv").exists()
    writer.join(timeout=EVENT_DEADLINE_S)
    assert done.is_set() and (tmp_path / "x.csv").read_text() == "x\n"


KILLED_MID_MOVE = """
import os, signal, sys
from pathlib import Path
from attnlab.harness import staging
folder = Path(sys.argv[1])
steps = []
def kill(step):
    steps.append(step)
    if len(steps) == 3:  # after the second replace
        os.kill(os.getpid(), signal.SIGKILL)
staging._at_move_step = kill
with staging.staged_outputs(folder) as stage:
    for name in ("a.csv", "b.csv", "c.csv", "sub/d.csv"):
        (stage / name).parent.mkdir(exist_ok=True)
        (stage / name).write_text("new\\n")
"""


def test_a_move_cut_by_sigkill_is_undone_by_the_next_run_into_the_folder(tmp_path):
    for name in ("a.csv", "b.csv", "c.csv"):
        (tmp_path / name).write_text("old\n", encoding="utf-8")
    old = snapshot(tmp_path)
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_MOVE, str(tmp_path)], check=False)
    assert killed.returncode == -signal.SIGKILL
    assert (tmp_path / "a.csv").read_text() == "new\n"  # left half moved
    assert any(tmp_path.glob(".staging-*"))
    with cli.staged_outputs(tmp_path) as stage:  # the next run: recovers, then writes e.csv
        (stage / "e.csv").write_text("e\n", encoding="utf-8")
    assert snapshot(tmp_path) == {**old, "e.csv": b"e\n"}
    assert not (tmp_path / "sub").exists()


SCRIPT = """
import os, signal, sys
from attnlab.harness import cli

def build_parser():
    parser = cli.new_parser("a test script")
    parser.add_argument("--steps", type=int, default=10)
    cli.add_out_dir_flag(parser)
    return parser

def run(args, context):
    out = cli.prepare_out_dir(context)
    try:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    finally:
        if len(sys.argv) > 2:  # a second signal while cleaning up
            os.kill(os.getpid(), signal.SIGINT)
            raise SystemExit("not reached")

sys.argv[0] = "script.py"
cli.configure_jax = lambda: None  # what is tested is the signals, not JAX: no JAX import
sys.exit(cli.entry_point(build_parser, run)(["--steps", "3"]))
"""


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_each_signal_is_one_line_its_status_and_no_run_folder(tmp_path, name, code):
    done = subprocess.run([sys.executable, "-c", SCRIPT, name], cwd=tmp_path, text=True,
                          capture_output=True, check=False)  # fmt: skip
    assert done.returncode == code
    assert done.stderr == "script.py: interrupted; nothing written\n"
    assert not any((tmp_path / "results" / "runs").iterdir())


def test_a_second_signal_exits_at_once(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, "SIGTERM", "again"], cwd=tmp_path,
                          text=True, capture_output=True, check=False)  # fmt: skip
    assert done.returncode == 130
    assert done.stderr == "script.py: interrupted again; exiting at once\n"


def test_ctrl_c_while_flags_are_parsed_is_one_line(capsys):
    def interrupted(text):
        raise KeyboardInterrupt

    def build_parser():
        parser = cli.new_parser("test")
        parser.add_argument("--mechanism", type=interrupted, default="x")
        return parser

    main = cli.entry_point(build_parser, lambda args, context: None)
    assert main(["--mechanism", "mine.py:x"]) == 130
    assert capsys.readouterr().err.endswith(": interrupted; nothing written\n")


def test_deferred_signals_wait_for_the_block_and_are_redelivered():
    with signals.raising_handlers(), pytest.raises(signals.Interrupted) as raised:
        with signals.deferred() as pending:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)  # handlers run between bytecodes: give it some
            assert pending == [signal.SIGTERM]
        signals.redeliver(pending)
    assert signals.exit_status(raised.value) == 143
    assert signal.getsignal(signal.SIGTERM) is not signals._raise  # handlers put back


@pytest.mark.parametrize("relative", ["../x", "a/../../x", "/etc/x"])
def test_a_path_that_leads_out_of_its_folder_is_refused(tmp_path, relative):
    with pytest.raises(cli.UsageError, match="would be written outside"):
        staging.within(tmp_path, relative, "the card of 'm'")


def test_a_symlink_that_leads_out_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "cards").symlink_to(tmp_path)
    with pytest.raises(cli.UsageError, match="would be written outside"):
        staging.within(tmp_path / "out", "cards/x", "the card of 'x'")
    assert staging.within(tmp_path, "cards/user/a.b", "x") == tmp_path / "cards/user/a.b"


@pytest.mark.skipif(not HAS_PROC_SIGNALS, reason="waits on /proc/<pid>/status")
def test_experiment_scripts_handle_sigterm_while_importing(tmp_path):
    """SIGTERM while the script imports: sent once the script's first import
    (``experiments/_interrupt.py``) has installed its handlers, not after a fixed time
    (before that, the default action kills the process)."""
    process = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "experiments" / "08_companion_claims.py"), "--help"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(lambda: catches(process.pid, signal.SIGHUP) or process.poll() is not None)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=EVENT_DEADLINE_S)
    if process.returncode == 0:  # the whole import ran between two looks at /proc
        pytest.skip("the script had finished before the signal")
    assert process.returncode == 143
    assert err == "08_companion_claims.py: interrupted; nothing written\n"


def test_no_stage_is_left_by_a_failed_block_or_a_dead_process(tmp_path):
    """A block that raises leaves no stage; a stage of a dead process with no plan is swept."""
    with pytest.raises(ValueError), cli.staged_outputs(tmp_path) as stage:
        (stage / "x.csv").write_text("x\n", encoding="utf-8")
        raise ValueError
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (tmp_path / f"{staging.STAGE_PREFIX}{dead}-abc" / "new").mkdir(parents=True)
    with cli.staged_outputs(tmp_path) as stage:
        (stage / "y.csv").write_text("y\n", encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["y.csv"]


@pytest.mark.parametrize("flag", ["--out-dir", "--out"])
def test_an_empty_output_path_is_one_line_and_writes_nothing(
    load_script, run_main, in_tmp_path, capsys, flag
):
    """``Path("")`` is the current folder: the audit's ``--out-dir ''`` wrote into it."""
    assert run_main(load_script("08_companion_claims"), [flag, ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {flag}: an empty path" in err
    assert list(in_tmp_path.iterdir()) == []


def _make_database() -> str:
    """The real Makefile's database (``make -pn``), nothing run."""
    shown = subprocess.run(["make", "-pn", "lint"], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=EVENT_DEADLINE_S)  # fmt: skip
    return shown.stdout


def test_make_keeps_every_output_an_interrupted_recipe_changed():
    """No .DELETE_ON_ERROR, and every result, figure and the report are .PRECIOUS (the
    mechanism: ``test_an_interrupted_make_deletes_a_changed_target_unless_precious``)."""
    database = _make_database().splitlines()
    assert ".DELETE_ON_ERROR:" not in database
    precious = set(next(x for x in database if x.startswith(".PRECIOUS:")).split()[1:])
    names = ("CSVS", "FIGURES", "CARD_CSVS", "CARD_FIGURES")
    variables = dict(line.split(" := ", 1) for line in database
                     if line.split(" := ", 1)[0] in names)  # fmt: skip
    outputs = {"results/REPORT.md", *(p for v in variables.values() for p in v.split())}
    assert len(outputs) > 40 and outputs <= precious, sorted(outputs - precious)


#: The recipe's last command: SIGINT's default action restored (a shell may start it with
#: SIGINT ignored), then a marker written, then a wait no shorter than the test's: once the
#: marker exists, a SIGINT kills it, so the recipe dies of the signal and make acts on it.
BLOCKER = (
    "import os, pathlib, signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "pathlib.Path('running').write_text(str(os.getpid())); time.sleep(3600)"
)


#: Runs ``argv`` with SIGINT's default action: a test run in the background of a script
#: (``make test-under-load`` once did) inherits SIGINT ignored, and make ignores an
#: interrupt it starts ignoring (the recipe then fails with 130 and make keeps the target).
DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.parametrize("precious", [True, False])
def test_an_interrupted_make_deletes_a_changed_target_unless_precious(tmp_path, precious):
    """GNU make, interrupted (SIGINT to its process group, as Ctrl-C) while a recipe runs,
    deletes the target if the recipe changed it, unless the target is .PRECIOUS: what a
    script of several parts had already written whole would be lost.

    The interrupt waits for an event, not a clock: the recipe writes the target, then its
    blocking command writes ``running`` once SIGINT would kill it. (A SIGINT sent while
    the shell was between commands let the recipe run on and succeed: the flake of
    issue 72.) The deadline only turns a hang into a failure."""
    (tmp_path / "out.csv").write_text("old\n", encoding="utf-8")
    os.utime(tmp_path / "out.csv", (0, 0))
    (tmp_path / "input").write_text("", encoding="utf-8")
    rules = ".PRECIOUS: out.csv\n" if precious else ""
    rules += (
        "out.csv: input\n\tprintf 'new\\n' > out.csv.tmp && mv out.csv.tmp out.csv"
        f" && {shlex.quote(sys.executable)} -c {shlex.quote(BLOCKER)}\n"
    )
    (tmp_path / "Makefile").write_text(rules, encoding="utf-8")
    make = subprocess.Popen([sys.executable, "-c", DEFAULT_SIGINT, "make"], cwd=tmp_path,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: (tmp_path / "running").is_file() or make.poll() is not None)
        assert make.poll() is None and (tmp_path / "out.csv").read_text() == "new\n"
        os.killpg(make.pid, signal.SIGINT)
        make.wait(timeout=EVENT_DEADLINE_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
    assert make.returncode != 0
    assert (tmp_path / "out.csv").exists() is precious


# --- issue 67: a leftover stage never reaches outside its folder ---------------------------
TINY_01 = ["--dk", "4", "8", "--samples", "1000", "--hp-samples", "1000", "--quiet"]


def _dead_pid() -> int:
    """The pid of a process that has ended (as a killed run's stage names)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def _plant(folder: Path, plan: dict, link_new_to: Path | None = None) -> Path:
    """A stage of a dead process in ``folder`` holding ``plan`` as its move (and its
    ``new`` folder a link to ``link_new_to``, where given)."""
    stage = folder / f"{staging.STAGE_PREFIX}{_dead_pid()}-planted"
    stage.mkdir()
    if link_new_to is not None:
        (stage / staging.NEW).symlink_to(link_new_to, target_is_directory=True)
    (stage / staging.PLAN).write_text(json.dumps(plan), encoding="utf-8")
    return stage


def _ids(*paths: Path) -> list[list[int]]:
    """The files' true identities, as a planter who can read the folder would write them."""
    fields = ("st_dev", "st_ino", "st_size", "st_mtime_ns")
    return [[getattr(os.lstat(p), f) for f in fields] for p in paths]


@pytest.mark.parametrize("case", ["file", "folder", "linked stage"])
def test_a_planted_plan_never_reaches_outside_its_folder(
    load_script, run_main, tmp_path, capsys, case
):
    """Issue 67, cause 1, end to end: a plan naming ``../victim.txt`` (with the victim's
    own identity), a made folder ``../somedir``, or a stage whose ``new`` is a link out is
    set aside with one line when 01 next writes into the folder; nothing outside changes,
    and 01 writes its outputs."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir(), outside.mkdir(), (tmp_path / "somedir").mkdir()
    (tmp_path / "victim.txt").write_text("victim\n", encoding="utf-8")
    (out / "x.csv").write_text("mine\n", encoding="utf-8")
    for name in ("new", "old"):  # where the old code's undo moved a planted file to
        (tmp_path / name).mkdir()
    plans = {
        "file": ({"files": ["../victim.txt"], "ids": _ids(tmp_path / "victim.txt"), "made": []},
                 None),
        "folder": ({"files": [], "ids": [], "made": ["../somedir"]}, None),
        "linked stage": ({"files": ["x.csv"], "ids": _ids(out / "x.csv"), "made": []}, outside),
    }  # fmt: skip
    stage = _plant(out, *plans[case])
    before = snapshot(tmp_path)
    assert run_main(load_script("01_logit_variance"), [*TINY_01, "--out-dir", out]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set aside" in err and "no file of" in err, err
    after = snapshot(tmp_path)
    unchanged = [p for p in before if not p.startswith("out/")]
    assert all(after.get(p) == before[p] for p in unchanged), case
    assert (tmp_path / "somedir").is_dir() and after["out/x.csv"] == b"mine\n"
    assert "out/01_logit_variance.csv" in after and not stage.exists()
    (aside,) = out.glob(f"{staging.SET_ASIDE_PREFIX}*")
    assert aside.name.endswith("-planted")


FROZEN_SECOND = """
import os, runpy, sys, time
time.strftime = lambda fmt, *rest: "20260101-000000"  # every run starts in one second
sys.argv = [sys.argv[1], *sys.argv[2:]]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_runs_started_in_the_same_second_keep_their_own_folders(tmp_path):
    """Issue 67, cause 2, end to end: three runs of 01 with other seeds, started together
    in one (frozen) second, write three run folders, each with its own seed's CSV."""
    script = str(REPO_ROOT / "experiments" / "01_logit_variance.py")
    runs = [
        subprocess.Popen([sys.executable, "-c", FROZEN_SECOND, script, *TINY_01, "--seed", s],
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for s in ("1", "2", "3")
    ]  # fmt: skip
    for run in runs:
        _, err = run.communicate(timeout=EVENT_DEADLINE_S)
        assert run.returncode == 0, err
    folders = sorted((tmp_path / "results" / "runs").iterdir())
    assert len(folders) == 3 and all("20260101-000000" in f.name for f in folders)
    seeds = {json.loads((f / "01_logit_variance.json").read_text())["flags"]["seed"]
             for f in folders}  # fmt: skip
    assert seeds == {1, 2, 3}


def test_a_dead_runs_plan_is_never_revived_over_newer_results(tmp_path):
    """Issue 67, cause 3, end to end: a run killed mid-move leaves its plan; its pid then
    names a live process (here: the stage renamed to a live process's pid) while a newer
    run writes the folder; once that process ends, a third run into the folder must not
    put the killed run's old files back over the newer ones."""
    for name in ("a.csv", "b.csv", "c.csv"):
        (tmp_path / name).write_text("old\n", encoding="utf-8")
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_MOVE, str(tmp_path)], check=False)
    assert killed.returncode == -signal.SIGKILL
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)  # fmt: skip
    try:
        (stage,) = tmp_path.glob(f"{staging.STAGE_PREFIX}*")
        stage.rename(tmp_path / f"{staging.STAGE_PREFIX}{live.pid}-reused")
        with cli.staged_outputs(tmp_path) as new:  # the newer run
            for name in ("a.csv", "b.csv", "c.csv"):
                (new / name).write_text("newer\n", encoding="utf-8")
    finally:
        live.communicate(b"", timeout=EVENT_DEADLINE_S)  # the pid's process ends
    with cli.staged_outputs(tmp_path) as new:  # an unrelated run
        (new / "e.csv").write_text("e\n", encoding="utf-8")
    newer = {name: b"newer\n" for name in ("a.csv", "b.csv", "c.csv")}
    assert snapshot(tmp_path) == {**newer, "e.csv": b"e\n"}


def test_a_stale_plan_takes_back_only_the_files_it_placed(tmp_path):
    """The undo's identity check alone (cause 3's second guard): a complete plan read
    after later runs replaced its files touches none of them."""
    (tmp_path / "a.csv").write_text("old\n", encoding="utf-8")
    stage = tmp_path / f"{staging.STAGE_PREFIX}0-stale"
    (stage / staging.NEW).mkdir(parents=True)
    (stage / staging.NEW / "a.csv").write_text("placed\n", encoding="utf-8")
    move = staging._Move.plan(stage, tmp_path)
    move.run()  # the stale run's move: a.csv placed, the old one aside
    (tmp_path / "a.csv").unlink()
    (tmp_path / "a.csv").write_text("later\n", encoding="utf-8")  # a later run's file
    move.undo()
    assert (tmp_path / "a.csv").read_text() == "later\n"


@pytest.mark.parametrize("plan", ["", '{"files": ["a.c', "[]", '{"files": 5}'])
def test_an_unreadable_plan_is_set_aside_in_one_line_before_work(tmp_path, capsys, plan):
    """Issue 67, cause 9: an empty, cut-off or malformed plan no longer fails every later
    run into the folder with a traceback after its work: the stage is set aside with one
    line when the run checks its folder, before it computes."""
    (tmp_path / "a.csv").write_text("old\n", encoding="utf-8")
    stage = tmp_path / f"{staging.STAGE_PREFIX}{_dead_pid()}-cut"
    stage.mkdir()
    (stage / staging.PLAN).write_text(plan, encoding="utf-8")
    context = outputs.RunContext({}, tmp_path, made_with_defaults=False, out_dir_given=True)
    assert cli.prepare_out_dir(context) == tmp_path
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set aside" in err
    assert not stage.exists() and (tmp_path / "a.csv").read_text() == "old\n"
    with cli.staged_outputs(tmp_path) as new:
        (new / "a.csv").write_text("new\n", encoding="utf-8")
    assert (tmp_path / "a.csv").read_text() == "new\n"


def test_the_plan_is_on_disk_whole_before_anything_moves(tmp_path, monkeypatch):
    """Issue 67, cause 9: the plan is written to a temporary file, flushed to disk and
    renamed into place; a failure while writing it (here the flush) moves nothing."""
    (tmp_path / "a.csv").write_text("old\n", encoding="utf-8")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(staging.os, "fsync", full)
    with pytest.raises(cli.RunError, match="nothing written"), cli.staged_outputs(tmp_path) as new:
        (new / "a.csv").write_text("new\n", encoding="utf-8")
    assert snapshot(tmp_path) == {"a.csv": b"old\n"}


def test_readers_refuse_a_folder_left_mid_move_until_it_is_repaired(
    load_script, run_main, in_tmp_path, capsys
):
    """Issue 67, cause 9: after a kill -9 mid-move, the report, the figures and 13 refuse
    the folder in one line naming the command that repairs it; that command puts the old
    files back. (Run from a temporary folder: a reader that failed to refuse writes its
    default outputs there, never over the committed ones.)"""
    folder = in_tmp_path / "folder"
    for made in (folder, in_tmp_path / "results", in_tmp_path / "figures"):  # readers' outputs
        made.mkdir()
    for name in ("a.csv", "b.csv", "c.csv"):
        (folder / name).write_text("old\n", encoding="utf-8")
    old = snapshot(folder)
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_MOVE, str(folder)], check=False)
    assert killed.returncode == -signal.SIGKILL
    for script in ("make_report", "plot_figures"):
        assert run_main(load_script(script), ["--results-dir", folder]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and staging.REPAIR_COMMAND in err, err
    (folder / "ckpt").mkdir()  # a checkpoint folder below the one left mid-move
    argv = ["--checkpoint", folder / "ckpt", "--quiet", "--out-dir", folder / "ckpt"]
    assert run_main(load_script("13_real_model"), argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--checkpoint: " in err and staging.REPAIR_COMMAND in err
    (folder / "ckpt").rmdir()
    repair = [sys.executable, "-m", "attnlab.harness.staging", str(folder)]
    repaired = subprocess.run(repair, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert repaired.returncode == 0 and "undid" in repaired.stdout
    assert snapshot(folder) == old
    assert cli.check_settled(folder, "--results-dir") == folder
