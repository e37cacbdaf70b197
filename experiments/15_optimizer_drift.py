"""Experiment 15: when the optimizer owns the temperature, in Kimi K2's regime. Trains 14's
byte-level causal LM under three arms (AdamW; Muon with AdamW on the rest at one rate,
Moonlight's; Muon with that AdamW side pinned at --side-lr), weight decay 0.1 coupled to
each side's rate: scaled and qk_norm attention, and scaled with QK-Clip (K2's rule, tau
100), at every rate of a half-decade grid (the sweep, 14's length and text); then per arm
scaled with QK-Clip at each tau of --taus at its best rate and 3x it (the tau sweep); then
per arm, at its best rate and 3x it, scaled without and with QK-Clip at --long-tau (a tau
that binds), on 14's cosine and, with the clip, on K2's warmup-stable-decay schedule, for
6x as many steps on the standard library's source (the long run), with the temperature
ledger of every head along it and the clip's probe (S before the update, after it and
after the clip, on the same batch). Judges K2's and 14's known answers by stated rules.
Each long-run lane's model at 0, 5, 10, 20, 50 and 100% of --long-steps is saved as a
GPT-2 checkpoint in --out-dir/checkpoints/15_<arm>_<scaled|clipped>_<schedule>_lr<rate>
_step<step>/, which experiment 13 reads (--checkpoint). Method, and K2's and Megatron-LM's
set-ups beside ours: attnlab/studies/optimizer/README.md.
"""

import dataclasses
import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.text import byte_tokens
from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.harness.workers import run_pieces
from attnlab.lm.export import checkpoint_files, write_saved
from attnlab.studies import headline
from attnlab.studies.optimizer.compute import (
    joined,
    long_pieces,
    long_tables,
    possible_checkpoints,
    sweep_pieces,
    tau_pieces,
)
from attnlab.studies.optimizer.flags import (
    add_optimizer_flags,
    optimizer_config,
    ran,
    sidecar_text,
    texts,
)
from attnlab.studies.optimizer.study import CURVES_CSV, LEDGER_CSV, RUNS_CSV


def build_parser():
    parser = cli.new_parser(__doc__, (RUNS_CSV,))  # --help: how long the run took
    add_optimizer_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    config = optimizer_config(args)
    out_dir = cli.prepare_out_dir(context)
    saved_files = checkpoint_files(possible_checkpoints(config))
    cli.check_outputs(out_dir, (RUNS_CSV, CURVES_CSV, LEDGER_CSV), saved_files)  # before the work
    chosen = texts(args, config)
    tokens = byte_tokens(chosen["--text"].text)
    sweep_work = sweep_pieces(config, tokens)
    later = config.tau_lanes * config.lm.steps + config.long_lanes * config.long_steps
    started = time.perf_counter()
    total = sum(p.units for p in sweep_work) + later  # at most: an arm may not be swept
    with cli.progress(total, "15 optimizer", args.quiet, "step") as bar:
        sweep = joined(run_pieces(sweep_work, args.jobs, bar.update))
        tau_work = tau_pieces(config, sweep[0], tokens)  # the best rates: the sweep's
        runs, curves = joined([sweep, *run_pieces(tau_work, args.jobs, bar.update)])
        long_work = long_pieces(config, runs, chosen["--long-text"])
        parts = run_pieces(long_work, args.jobs, bar.update)
    if parts:
        long_runs, long_curves, ledger, saved = long_tables(parts)
        runs, curves = joined([(runs, curves), (long_runs, long_curves)])
    else:
        ledger, saved = None, []
    wall = time.perf_counter() - started
    flags = {**context.sidecar_flags, **ran(config), **sidecar_text(chosen),
             "lm_config": dataclasses.asdict(config.lm)}  # fmt: skip
    with cli.staged_outputs(out_dir, context.written) as stage:
        for frame, name in ((runs, RUNS_CSV), (curves, CURVES_CSV), (ledger, LEDGER_CSV)):
            if frame is not None:
                write_result(frame, stage / name, flags, wall)
        write_saved(stage, saved)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
