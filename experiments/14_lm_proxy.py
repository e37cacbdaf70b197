"""Experiment 14: the small-scale proxy of Wortsman et al. 2023 on a byte-level causal
language model. Trains a GPT-2-layout model (pre-LN, causal, learned positions, no
biases, untied head) on CPython's own prose at every learning rate of a half-decade grid,
per mechanism and width, and records the held-out loss (nats per byte), the largest
attention logit per layer over training, entropy and q/k norms; then reads who owns the
attention temperature in the trained weights at the best rate and at 10x it.

--mechanisms are swept at every --widths, --one-width-mechanisms at --one-width only; each
takes a built-in name, MODULE:NAME or path/to/file.py:NAME (your own mechanism, as for 11).
Each mechanism's model at its best rate at --one-width (first seed; learned positions only)
is saved as a GPT-2 checkpoint (--layout llama: Llama's) in --out-dir/checkpoints/14_lm_
<mechanism>_d<width>/ (config.json, model.safetensors, tokenizer.json), which experiment 13
reads (a mechanism of your own: name its file to 13 again, --mechanisms). Method and the
paper's set-up beside ours: attnlab/studies/lm_proxy/README.md.
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import write_results
from attnlab.harness.workers import run_pieces
from attnlab.lm.export import checkpoint_files, write_saved
from attnlab.studies import headline
from attnlab.studies.lm_proxy import flags
from attnlab.studies.lm_proxy.compute import pieces, saved_names, tables
from attnlab.studies.lm_proxy.study import CSVS, SWEEP_CSV


def build_parser():
    parser = cli.new_parser(__doc__, (SWEEP_CSV,))  # --help: how long the sweep took
    flags.add_proxy_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    config = flags.proxy_config(args)
    out_dir = cli.prepare_out_dir(context)
    cli.check_outputs(out_dir, CSVS, checkpoint_files(saved_names(config)))  # before the work
    if (note := flags.warmup_note(config)) and not args.quiet:
        print(note, file=sys.stderr)
    source, tokens = flags.text_tokens(args.text, config)
    work = pieces(config, tokens)
    started = time.perf_counter()
    with cli.progress(sum(p.units for p in work), "14 LM sweep", args.quiet, "step") as bar:
        *frames, saved = tables(run_pieces(work, flags.proxy_jobs(config, args.jobs), bar.update))
    wall = time.perf_counter() - started
    recorded = flags.sidecar_flags(context.sidecar_flags, config, source)
    with cli.staged_outputs(out_dir, context.written) as stage:
        write_results(dict(zip(CSVS, frames, strict=True)), stage, recorded, wall)
        write_saved(stage, saved, {k: recorded[k] for k in ("text_source", "text_sha256")})


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
