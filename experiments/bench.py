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

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import atomic_write_text, write_result
from attnlab.studies.bench.compute import GROUPS, run_bench
from attnlab.studies.bench.config import REPRODUCE_COMMAND
from attnlab.studies.bench.flags import add_bench_flags, bench_config
from attnlab.studies.bench.report import bench_markdown
from attnlab.studies.real_model.study import GEMMA_ARGUMENTS, GEMMA_GGUF


def build_parser():
    parser = cli.new_parser(__doc__)
    add_bench_flags(parser)
    return parser


def run(args, context):
    out = cli.check_writable(args.out, "--out", suffix=".csv")
    config = bench_config(args)
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
