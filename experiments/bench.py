"""Benchmarks: the suite against plain baselines, every figure a ratio from one run.

Times the statics of 02/03 against numpy, our attention against jax.nn's, the recall step
against the step before the speed-ups (and its parts), and the language model's step against
the same model written with flax.linen and optax, with the temperature ledger, under Muon and
with QK-Clip, each round-robin: the median of --repeats rounds after a compiling call (3-4
minutes on 2 CPU cores); --reproduce also times `make reproduce` from an empty compilation
cache (about an hour more). Writes --out, its sidecar and the table as Markdown, and prints it.
"""

import sys
import time
from dataclasses import replace

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import atomic_write_text, write_result
from attnlab.studies.bench.compute import GROUPS, REPRODUCE_COMMAND, run_bench
from attnlab.studies.bench.config import QUICK, BenchConfig
from attnlab.studies.bench.report import bench_markdown
from attnlab.studies.real_model.study import GEMMA_ARGUMENTS, GEMMA_GGUF


def build_parser():
    parser = cli.new_parser(__doc__)
    add = parser.add_argument
    # fmt: off
    add("--repeats", type=cli.positive_int, default=5, help="timed rounds per measurement")
    add("--statics-dk", type=cli.positive_int, nargs="+", default=None,
        help="d_k timed by the statics rows (default 64 256 1024; 1 2 4 ... 1024 is the "
        "whole default sweep of 02/03)")
    add("--quick", action="store_true", help="tiny sizes, for the tests (seconds, not minutes)")
    add("--gemma", action="store_true",
        help="also time experiment 13 on Gemma 3 270M (rows gemma3_read_seconds, "
        "gemma3_13_seconds; `make gemma` first, about 6 minutes more)")
    add("--reproduce", action="store_true",
        help="also time `make reproduce` from an empty compilation cache (row "
        "make_reproduce_seconds; regenerates every result in results/ and figures/)")
    # fmt: on
    cli.add_common_flags(parser, cli.RESULTS_DIR / "bench.csv")
    parser.declare_flags(committed=(["--gemma"],))  # make bench after make gemma
    return parser


def run(args, context):
    out = cli.check_writable(args.out, "--out", suffix=".csv")
    config = replace(QUICK if args.quick else BenchConfig(), repeats=args.repeats, seed=args.seed)
    if args.statics_dk is not None:
        config = replace(config, statics_dks=tuple(args.statics_dk))
    started = time.perf_counter()
    reproduce = REPRODUCE_COMMAND if args.reproduce else None
    gemma = (cli.REPO_ROOT / GEMMA_GGUF, GEMMA_ARGUMENTS) if args.gemma else None
    groups = GROUPS + args.gemma + args.reproduce
    with cli.progress(groups, "bench", args.quiet, unit="group") as bar:
        frame = run_bench(config, bar.update, reproduce_command=reproduce, gemma=gemma)
    table = bench_markdown(frame)
    with cli.staged_outputs(out.parent, context.written) as stage:
        write_result(frame, stage / out.name, context.sidecar_flags, time.perf_counter() - started)
        atomic_write_text(stage / out.with_suffix(".md").name, table)
    print(table, end="")


main = cli.entry_point(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())
