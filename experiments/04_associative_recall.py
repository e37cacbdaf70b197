"""Experiment 04: associative recall, scaled vs unscaled attention (article 004, Figure 3).

Trains the single-head model of attnlab.recall.model on the recall task (16 key-value
pairs over 32 key and 32 value tokens, d_k = 256, Adam at 3e-4) for every seed, once with
scaled and once with unscaled attention, from identical initialisations on identical data streams.
Writes 04_recall_curves.csv (per step) and 04_recall_summary.csv (per variant and seed),
each with a JSON sidecar, into --out-dir.
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.memory import check_needs
from attnlab.recall.flags import add_recall_flags, recall_config, recall_needs
from attnlab.recall.tables import write_recall_outputs
from attnlab.recall.trainer import train_and_evaluate
from attnlab.studies import headline
from attnlab.studies.recall.study import CURVES_CSV, SUMMARY_CSV

#: One result CSV per part of the run: --help says how long they took.
TIMED_BY = (SUMMARY_CSV,)


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    add_recall_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    out_dir = cli.prepare_out_dir(context)
    config = recall_config(args)
    check_needs(recall_needs(config))
    total = len(config.mechanisms) * config.steps
    started = time.perf_counter()
    with cli.progress(total, "04 recall", args.quiet, unit="step") as bar:
        results = train_and_evaluate(config, bar.update)
    wall = time.perf_counter() - started
    with cli.staged_outputs(out_dir, context.written) as stage:
        write_recall_outputs(
            results, config, stage, (CURVES_CSV, SUMMARY_CSV), context.sidecar_flags, wall
        )


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
