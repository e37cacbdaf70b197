"""Where a script's outputs go: the output-folder rule (the committed defaults write
``results/``, any other flags a run folder of their own) and the checks of output and
input paths; how they get there, all or none, is ``attnlab.harness.staging``."""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from attnlab.harness.errors import UsageError
from attnlab.harness.staging import check_settled, recover_stages


class FlagParser(Protocol):
    """What this module reads of a script's parser (``attnlab.harness.flags.FlagParser``,
    which imports this module): its arguments, subject flags and committed argument lists,
    and its parse."""

    @property
    def arguments(self) -> tuple[argparse.Action, ...]: ...

    @property
    def subject_flags(self) -> frozenset[str]: ...

    @property
    def committed_arguments(self) -> tuple[list[str], ...]: ...

    def parse_args(self, args: list[str] | None = ...) -> argparse.Namespace: ...


REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where the scripts write by default, relative to the repository root they run from.
RESULTS_DIR = Path("results")
FIGURES_DIR = Path("figures")
#: Where a run with other than the committed defaults writes unless told otherwise (git
#: ignores it): ``results/runs/<script>-<time>-<pid>/`` (the process id: runs started in the
#: same second never share one).
RUNS_DIR = RESULTS_DIR / "runs"
#: Flags that say where outputs go, which of them to make (09's ``--stage``), how a run
#: reports or how many processes compute it (the card's ``--jobs``), not what it computes:
#: a run that differs from the defaults only in these still makes canonical results.
OUTPUT_FLAGS = frozenset({"out", "out_dir", "quiet", "stage", "jobs"})


OUT_DIR_HELP = (
    "directory for the CSVs and sidecars (default: results/ with the committed defaults; with "
    "any other flags a run folder of its own, results/runs/<script>-<time>-<pid>/, which git "
    "ignores)"
)


def a_path(text: str) -> Path:
    """A path flag's type: ``Path(text)``, refusing an empty one (``Path("")`` is the
    current folder, which nobody means by leaving the value out)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a file or folder")
    return Path(text)


def add_out_dir_flag(parser: argparse.ArgumentParser) -> None:
    """``--out-dir`` and ``--quiet``; the default ``--out-dir`` is ``run_context``'s."""
    parser.add_argument("--out-dir", type=a_path, default=None, help=OUT_DIR_HELP)
    add_quiet_flag(parser)


def made_with_defaults(parser: FlagParser, args: argparse.Namespace) -> bool:
    """Whether every argument of ``args`` but the ``OUTPUT_FLAGS`` and the parser's
    ``subject_flags`` (what a run is about, not how it runs: the card's ``--mechanism``) has
    its default value, or the value one of the parser's ``committed_arguments`` gives it
    (argument lists of other committed runs of the script: 13 on 14's checkpoints)."""
    skip = OUTPUT_FLAGS | parser.subject_flags
    actions = [a for a in parser.arguments if a.dest not in skip and hasattr(args, a.dest)]
    references = [{a.dest: _parsed_default(a) for a in actions}]
    for argv in parser.committed_arguments:
        committed = vars(parser.parse_args(argv))
        references.append({a.dest: committed[a.dest] for a in actions})
    return any(all(getattr(args, d) == v for d, v in ref.items()) for ref in references)


def _parsed_default(action: argparse.Action) -> Any:
    """The value argparse gives a flag left out: a string default goes through its type."""
    if isinstance(action.default, str) and callable(action.type):
        return action.type(action.default)
    return action.default


@dataclass(frozen=True)
class RunContext:
    """One run of a script, made once from its parsed flags (``run_context``) and passed
    where the run needs it: where its outputs go, whether its flags are the committed
    defaults, the record of what it wrote and the notes it leaves after the file list.

    ``flags`` are the parsed flags with ``--out-dir`` resolved: what each sidecar records
    (``sidecar_flags``). ``written`` and ``notes`` are the run's own lists (a run started
    inside another, as ``make verify`` does, announces only its own files)."""

    flags: dict[str, Any]
    out_dir: Path | None
    made_with_defaults: bool
    out_dir_given: bool
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def run_folder(self) -> bool:
        """Whether ``out_dir`` is a run folder of its own: not given, and flags other than
        the committed defaults."""
        return self.out_dir is not None and not self.out_dir_given and not self.made_with_defaults

    @property
    def quiet(self) -> bool:
        """``--quiet`` (False for a script without it)."""
        return bool(self.flags.get("quiet", False))

    def add_note(self, text: str | None) -> None:
        """Say ``text`` after the list of written files (even with ``--quiet``); None:
        nothing to say."""
        if text:
            self.notes.append(text)

    @property
    def sidecar_flags(self) -> dict[str, Any]:
        """The flags as the sidecars record them (``io.provenance``), with whether they are
        the committed defaults."""
        return {**self.flags, "made_with_defaults": self.made_with_defaults}


#: Runs made so far in this process: a later one's folder name carries its number.
_RUNS_IN_PROCESS = itertools.count()


def run_folder_name(script: str) -> str:
    """``<script>-<YYYYMMDD-HHMMSS>-<pid>``, and ``-<n>`` for this process's ``n``-th run
    after its first (``make verify`` and notebooks run scripts in-process): no two runs,
    in one process or in several started in one second, share a run folder."""
    n = next(_RUNS_IN_PROCESS)
    return f"{script}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}" + (f"-{n}" if n else "")


def run_context(parser: FlagParser, args: argparse.Namespace) -> RunContext:
    """The run's context. Where ``--out-dir`` was not given the output folder is
    ``results/`` for the committed defaults and a new run folder otherwise (so that no
    experiment replaces a canonical result by accident); a script without ``--out-dir``
    has none."""
    defaults = made_with_defaults(parser, args)
    given = getattr(args, "out_dir", None)
    out_dir = given
    if given is None and hasattr(args, "out_dir"):
        out_dir = RESULTS_DIR if defaults else RUNS_DIR / run_folder_name(Path(parser.prog).stem)
    flags = vars(args) | ({"out_dir": out_dir} if hasattr(args, "out_dir") else {})
    return RunContext(flags, out_dir, made_with_defaults=defaults, out_dir_given=given is not None)


def add_results_dir_flag(parser: argparse.ArgumentParser) -> None:
    """``--results-dir``: where the result CSVs are read from."""
    parser.add_argument(
        "--results-dir", type=a_path, default=RESULTS_DIR, help="directory holding the result CSVs"
    )


def table_path(args: argparse.Namespace, context: RunContext, csv_name: str) -> Path:
    """The checked output CSV of ``add_table_flags``; a run folder is created here."""
    if args.out is not None:
        if context.out_dir_given:  # unused, but a bad value is still an error
            check_dir_writable(context.out_dir, "--out-dir")
        return check_writable(args.out, "--out", suffix=".csv")
    return prepare_out_dir(context) / csv_name


def add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar on stderr and no 'wrote FILE' lines (where the outputs went, if "
        "not results/, is still said)",
    )


def check_writable(path: Path, flag: str, suffix: str | None = None) -> Path:
    """Fail with a UsageError naming ``flag`` unless a file can be created at ``path`` (and,
    with ``suffix``, its name ends in it: a CSV's sidecar is its path with ``.json``)."""
    parent = path.parent if str(path.parent) else Path(".")
    if suffix is not None and path.suffix != suffix:
        raise UsageError(f"{flag}: {path} must end in {suffix}")
    if path.exists() and path.is_dir():
        raise UsageError(f"{flag}: {path} is a directory")
    if not parent.is_dir():
        raise UsageError(f"{flag}: directory {parent} does not exist")
    check_dir_writable(parent, flag)
    return path


def check_dir_exists(path: Path, flag: str) -> Path:
    """Fail with a UsageError naming ``flag`` unless ``path`` is an existing directory."""
    if not path.is_dir():
        raise UsageError(f"{flag}: {path} is not an existing directory")
    return path


def check_results_dir(path: Path, flag: str) -> Path:
    """Fail with a UsageError or DataError naming ``flag`` unless ``path`` is an existing
    directory that no killed run left mid-move (``check_settled``): a folder to read."""
    return check_settled(check_dir_exists(path, flag), flag)


def check_dir_writable(path: Path, flag: str, create: bool = False) -> Path:
    """Fail with a UsageError naming ``flag`` unless ``path`` is a writable directory
    (``create``: made first, with its parents): a file is created in it and removed, so a
    location that says it is writable but is not (``/proc``) fails before any work."""
    if create:
        path.mkdir(parents=True, exist_ok=True)
    check_dir_exists(path, flag)
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise UsageError(f"{flag}: cannot write in {path} ({err.strerror})") from None
    return path


def prepare_out_dir(context: RunContext) -> Path:
    """The run's output folder, checked writable (a run folder is created here), with any
    move a killed run left there undone (``recover_stages``) before the run computes."""
    out_dir = check_dir_writable(context.out_dir, "--out-dir", create=context.run_folder)
    recover_stages(out_dir)
    return out_dir
