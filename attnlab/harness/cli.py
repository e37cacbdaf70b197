"""Shared command-line conventions of the experiment scripts: the process wrapper.

Every script in ``experiments/`` is ``main = cli.entry_point(build_parser, run)``: flags are
parsed and validated *before* any computation, and bad input ends the process with one line
on stderr that names the flag, exit status 2, no traceback and no file written. A script
imports only this module: it re-exports the flags (``attnlab.harness.flags``), the output
rule (``attnlab.harness.outputs``) and staged writes (``attnlab.harness.staging``); the
wrapper, the progress bar, JAX's configuration and the single-table script live here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from attnlab.harness import signals
from attnlab.harness.errors import DataError, RunError, UsageError
from attnlab.harness.flags import (
    MAX_SEED,
    FlagParser,
    add_common_flags,
    add_dk_flag,
    add_int_flag,
    add_jobs_flag,
    add_rates_flag,
    add_seed_flag,
    add_table_flags,
    check_seeds,
    int_at_least,
    int_in_range,
    new_parser,
    one_line,
    positive_float,
    positive_int,
)
from attnlab.harness.outputs import (
    FIGURES_DIR,
    REPO_ROOT,
    RESULTS_DIR,
    RUNS_DIR,
    RunContext,
    a_path,
    add_out_dir_flag,
    add_quiet_flag,
    add_results_dir_flag,
    check_dir_exists,
    check_dir_writable,
    check_results_dir,
    check_writable,
    made_with_defaults,
    prepare_out_dir,
    run_context,
    table_path,
)
from attnlab.harness.staging import check_settled, check_target, staged_outputs

#: A script needs only ``cli``: the flags (``attnlab.harness.flags``), the output rule
#: (``attnlab.harness.outputs``), staged writes (``attnlab.harness.staging``) and the
#: process wrapper below.
__all__ = [
    "FIGURES_DIR",
    "MAX_SEED",
    "REPO_ROOT",
    "RESULTS_DIR",
    "RUNS_DIR",
    "DataError",
    "FlagParser",
    "RunContext",
    "RunError",
    "UsageError",
    "a_path",
    "add_common_flags",
    "add_dk_flag",
    "add_int_flag",
    "add_jobs_flag",
    "add_out_dir_flag",
    "add_quiet_flag",
    "add_rates_flag",
    "add_results_dir_flag",
    "add_seed_flag",
    "add_table_flags",
    "check_dir_exists",
    "check_dir_writable",
    "check_outputs",
    "check_results_dir",
    "check_seeds",
    "check_settled",
    "check_writable",
    "configure_jax",
    "entry_point",
    "int_at_least",
    "int_in_range",
    "made_with_defaults",
    "new_parser",
    "one_line",
    "positive_float",
    "positive_int",
    "prepare_out_dir",
    "progress",
    "run_context",
    "run_table",
    "staged_outputs",
    "table_path",
    "table_script",
]


def progress(total: int, desc: str, quiet: bool, unit: str = "it") -> tqdm:
    """A tqdm bar on stderr; silent with ``--quiet`` or when stderr is not a terminal."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=quiet or not sys.stderr.isatty(),
        leave=False,
        dynamic_ncols=True,
    )


def check_outputs(out_dir: Path, csvs: Iterable[str], files: Iterable[Path | str] = ()) -> None:
    """Before any work, every path a run will write into ``out_dir``: each of ``csvs``,
    its sidecar, and each of ``files`` (relative paths, such as a checkpoint's). A
    UsageError naming ``--out-dir`` where one could not be moved there at the end
    (``staged_outputs``, which would refuse it after the work; the same check,
    ``staging.check_target``): a path that leads outside ``out_dir`` (a symlinked folder on
    its way), a folder where it goes, or a file where one of its folders goes."""
    from attnlab.harness.io import sidecar_path

    paths = [Path(p) for csv in csvs for p in (csv, sidecar_path(Path(csv)))]
    for relative in [*paths, *map(Path, files)]:
        try:
            check_target(out_dir, relative, "--out-dir: the output")
        except OSError as err:  # a folder where a file goes, a file where a folder goes
            raise UsageError(
                f"--out-dir: {err.filename}: {err.strerror}, and the run writes {relative}"
            ) from None


def configure_jax() -> None:
    """Persist compiled XLA programs under ``.cache/jax`` (ignored by git), and lower
    random-bit generation unrolled on CPU (``attnlab.core.prng``: same bits, faster steps).

    The static experiments compile one program per head width; with the cache a second
    script or a rerun loads them instead of compiling again. Results depend on neither.
    """
    import jax

    from attnlab.core.prng import unroll_threefry_on_cpu

    unroll_threefry_on_cpu()

    cache_dir = os.environ.get("ATTNLAB_JAX_CACHE", str(REPO_ROOT / ".cache" / "jax"))
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def entry_point(
    build_parser: Callable[[], FlagParser],
    run: Callable[[argparse.Namespace, RunContext], None],
    headline: Callable[[str, Any], str | None] | None = None,
) -> Callable[[list[str] | None], int]:
    """Wrap a script: parse, make the run's context (``outputs.run_context``), run, and turn
    a UsageError into one line and exit status 2, a RunError or a file-system error into
    one line and 1, and SIGINT, SIGTERM or SIGHUP (``signals``) into one line and
    ``128 + signum``, whenever they come (parsing too). On success, one line per file the
    run wrote (``announce_written``; ``headline(csv_name, frame)`` gives a CSV's headline
    number, ``attnlab.studies.headline``). A run folder made for the run is removed again
    if the run ends with nothing in it (an error, Ctrl-C, an exception of any kind).

    What a run wrote is its own: ``context.written``, a new list per call of ``main``,
    which the script passes to ``staged_outputs`` (or appends to), so a run started inside
    another (``make verify`` runs the scripts in-process) announces only its own files,
    and its caller none of them."""

    def main(argv: list[str] | None = None) -> int:
        with signals.raising_handlers():
            return _main(argv)

    def _main(argv: list[str] | None) -> int:
        # experiments/_interrupt.py exits on a signal while a script imports; from here on
        # a signal is an ``Interrupted`` (a KeyboardInterrupt), handled below.
        prog = Path(sys.argv[0]).name or "attnlab"
        context = None
        try:
            parser = build_parser()
            prog = parser.prog
            args = parser.parse_args(argv)  # a mechanism's check may run here
            context = run_context(parser, args)
            configure_jax()
            run(args, context)
        except (UsageError, DataError) as err:
            print(f"{prog}: error: {one_line(str(err))}", file=sys.stderr)
            return 2
        except RunError as err:
            print(f"{prog}: failed: {one_line(str(err))}", file=sys.stderr)
            return 1
        except OSError as err:  # the file system: full, read-only, a loop of links
            where = f": {err.filename}" if err.filename else ""
            print(f"{prog}: failed: {err.strerror or err}{where}", file=sys.stderr)
            return 1
        except KeyboardInterrupt as err:
            # Outputs are moved into place all or none (staged_outputs): nothing is left,
            # unless the signal came after the move.
            done = "its outputs were written" if context and context.written else "nothing written"
            print(f"{prog}: interrupted; {done}", file=sys.stderr)
            return signals.exit_status(err)
        finally:
            if context is not None and context.run_folder:
                with contextlib.suppress(OSError):
                    context.out_dir.rmdir()  # an empty run folder goes, whatever ended the run
        used = context.run_folder and context.out_dir.is_dir()  # not with --out
        announce_written(
            context.written,
            used and context.out_dir,
            headline,
            quiet=context.quiet,
            note="\n".join(context.notes) or None,
        )
        return 0

    return main


def announce_written(
    written: list[Path],
    run_folder: Path | None = None,
    headline: Callable[[str, Any], str | None] | None = None,
    quiet: bool = False,
    note: str | None = None,
) -> None:
    """One line per file of ``written`` (the run's own record) that still exists (a CSV
    with its row count and, where ``headline`` gives one, its headline number; sidecars
    left out), unless ``quiet``; then, even if ``quiet``, where the outputs went when it is
    not where the committed results are: the run folder chosen, and the script's ``note``
    (``context.notes``)."""
    from attnlab.harness.io import is_csv, open_csv_text, sidecar_path

    present = [p for p in written if p.is_file()]  # a caller may have removed its files
    sidecars = {sidecar_path(p) for p in present if is_csv(p)}
    for path in [] if quiet else present:
        if path in sidecars:
            continue
        rows = ""
        if is_csv(path) and headline is not None:
            import pandas as pd

            frame = pd.read_csv(path)
            text = headline(path.name, frame)
            rows = f" ({len(frame)} rows)" + (f": {text}" if text else "")
        elif is_csv(path):
            with open_csv_text(path) as handle:
                rows = f" ({sum(1 for _ in handle) - 1} rows)"
        print(f"wrote {path}{rows}")
    if run_folder:
        print(
            f"(flags other than the committed defaults: written to the run folder {run_folder}/;"
            " results/ is unchanged)"
        )
    if note:
        print(note)


#: A script's plan: from its flags, the progress total and the computation of its table.
Plan = Callable[[argparse.Namespace], tuple[int, Callable[[Callable[[int], None]], object]]]


def table_script(
    description: str,
    csv_name: str,
    desc: str,
    add_flags: Callable[[argparse.ArgumentParser], None],
    plan: Plan,
) -> tuple[Callable[[], FlagParser], Callable[[argparse.Namespace, RunContext], None]]:
    """``(build_parser, run)`` of a script that writes one table, ``<out-dir>/<csv_name>``:
    its own flags, then ``add_table_flags``; ``plan(args)`` gives the progress total and
    the computation, run under ``run_table``."""

    def build_parser() -> FlagParser:
        parser = new_parser(description, (csv_name,))
        add_flags(parser)
        add_table_flags(parser, csv_name)
        return parser

    def run(args: argparse.Namespace, context: RunContext) -> None:
        out = table_path(args, context, csv_name)
        total, compute = plan(args)
        run_table(context, out, desc, total, compute)

    return build_parser, run


def run_table(
    context: RunContext,
    out: Path,
    desc: str,
    total: int,
    compute: Callable[[Callable[[int], None]], object],
) -> None:
    """Run ``compute(progress_callback)`` under a progress bar of ``total`` units and write
    the DataFrame it returns to ``out`` with its provenance sidecar."""

    from attnlab.harness.io import write_result

    start = time.perf_counter()
    with progress(total, desc, context.quiet) as bar:
        frame = compute(bar.update)
    with staged_outputs(out.parent, context.written) as stage:
        write_result(frame, stage / out.name, context.sidecar_flags, time.perf_counter() - start)
