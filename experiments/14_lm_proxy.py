"""Experiment 14: the small-scale proxy of Wortsman et al. 2023 on a byte-level causal
language model. Trains a GPT-2-layout model (pre-LN, causal, learned positions, no
biases, untied head) on CPython's own prose at every learning rate of a half-decade grid,
per mechanism and width, and records the held-out loss (nats per byte), the largest
attention logit per layer over training, entropy and q/k norms; then reads who owns the
attention temperature in the trained weights at the best rate and at 10x it.

--mechanisms are swept at every --widths, --one-width-mechanisms at --one-width only; each
takes a built-in name, MODULE:NAME or path/to/file.py:NAME (your own mechanism, as for
experiment 11). Each mechanism's model at its best rate at --one-width (first seed; learned
positions only) is saved as a GPT-2 checkpoint (--layout llama: Llama's) in
--out-dir/checkpoints/14_lm_<mechanism>_d<width>/ (config.json, model.safetensors,
tokenizer.json), which experiment 13 reads (a mechanism of your own: name its file to 13
again, --mechanisms). Method and the paper's set-up beside ours:
attnlab/studies/lm_proxy/README.md.
"""

import dataclasses
import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.harness.workers import run_pieces
from attnlab.lm.export import checkpoint_files, write_saved
from attnlab.studies import headline
from attnlab.studies.lm_proxy.compute import pieces, saved_names, tables
from attnlab.studies.lm_proxy.flags import (
    DEFAULT,
    add_proxy_flags,
    proxy_config,
    ran,
    text_tokens,
)
from attnlab.studies.lm_proxy.study import CURVES_CSV, OWNERSHIP_CSV, SWEEP_CSV


def build_parser():
    parser = cli.new_parser(__doc__, (SWEEP_CSV,))  # --help: how long the sweep took
    add_proxy_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    config = proxy_config(args)
    out_dir = cli.prepare_out_dir(context)
    csvs = (SWEEP_CSV, CURVES_CSV, OWNERSHIP_CSV)
    cli.check_outputs(out_dir, csvs, checkpoint_files(saved_names(config)))  # before the work
    if config.lm.warmup != DEFAULT.lm.warmup and not args.quiet:
        print(f"warmup: {config.lm.warmup} steps (min(50, steps // 10) of --steps "
              f"{config.lm.steps})", file=sys.stderr)  # fmt: skip
    source, tokens = text_tokens(args.text, config)
    work = pieces(config, tokens)
    started = time.perf_counter()
    with cli.progress(sum(p.units for p in work), "14 LM sweep", args.quiet, "step") as bar:
        sweep, curves, ownership, saved = tables(run_pieces(work, args.jobs, bar.update))
    wall = time.perf_counter() - started
    text = {"text_source": source.source, "text_sha256": source.sha256}
    flags = {
        **context.sidecar_flags,
        **ran(config),
        **text,
        "lm_config": dataclasses.asdict(config.lm),
    }
    with cli.staged_outputs(out_dir, context.written) as stage:
        for frame, name in zip((sweep, curves, ownership), csvs, strict=True):
            write_result(frame, stage / name, flags, wall)
        write_saved(stage, saved, text)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
