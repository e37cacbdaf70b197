"""Experiment 07: failure modes at the boundaries (companion article, article 000).

(a) overflow: softmax entirely in float16, with and without subtracting the row maximum,
against float32 upcasting, over rows whose largest logit s runs from 1 to 40; (b) masks:
naive fills -inf, -1e9 and finfo(dtype).min in float16, bfloat16 and float32 on partly and
fully masked rows, against attnlab.masked_softmax; (c) correlated queries and keys: mean
and std of q . k at corr(q_i, k_i) = rho against d_k rho and sqrt(d_k (1 + rho^2)).
Writes 07_failure_modes_{overflow,masks,correlation}.csv, each with a JSON sidecar, into
--out-dir.
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import write_results
from attnlab.studies import headline
from attnlab.studies.failure_modes.compute import run_failure_modes
from attnlab.studies.failure_modes.flags import add_failure_modes_flags, failure_modes_configs
from attnlab.studies.failure_modes.study import PART_CSVS

TIMED_BY = (PART_CSVS["masks"],)  # --help says how long the committed run took


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    add_failure_modes_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    out_dir = cli.prepare_out_dir(context)
    overflow, correlation = failure_modes_configs(args)
    started = time.perf_counter()
    with cli.progress(correlation.samples, "07 failure modes", args.quiet) as bar:
        frames = run_failure_modes(overflow, correlation, bar.update)
    wall = time.perf_counter() - started
    with cli.staged_outputs(out_dir, context.written) as stage:
        named = {PART_CSVS[part]: frame for part, frame in frames.items()}
        write_results(named, stage, context.sidecar_flags, wall)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
