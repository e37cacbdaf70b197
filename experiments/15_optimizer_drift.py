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

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.text import byte_tokens
from attnlab.harness import cli
from attnlab.harness.io import write_results
from attnlab.lm.export import checkpoint_files, write_saved
from attnlab.studies import headline
from attnlab.studies.optimizer import flags
from attnlab.studies.optimizer.compute import possible_checkpoints, run_study, total_units
from attnlab.studies.optimizer.study import CURVES_CSV, LEDGER_CSV, RUNS_CSV


def build_parser():
    parser = cli.new_parser(__doc__, (RUNS_CSV,))  # --help: how long the run took
    flags.add_optimizer_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    config = flags.optimizer_config(args)
    out_dir = cli.prepare_out_dir(context)
    csvs = (RUNS_CSV, CURVES_CSV, LEDGER_CSV)
    cli.check_outputs(out_dir, csvs, checkpoint_files(possible_checkpoints(config)))  # before
    chosen = flags.texts(args, config)
    tokens = byte_tokens(chosen["--text"].text)
    started = time.perf_counter()
    with cli.progress(total_units(config, tokens), "15 optimizer", args.quiet, "step") as bar:
        *frames, saved = run_study(config, tokens, chosen["--long-text"], args.jobs, bar.update)
    wall = time.perf_counter() - started
    recorded = flags.sidecar_flags(context.sidecar_flags, config, chosen)
    with cli.staged_outputs(out_dir, context.written) as stage:
        write_results(dict(zip(csvs, frames, strict=True)), stage, recorded, wall)
        write_saved(stage, saved)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
