"""Experiment 14: the small-scale proxy of Wortsman et al. 2023 on a byte-level causal
language model. Trains a GPT-2-layout model (pre-LN, causal, learned positions, no
biases, untied head) on CPython's own prose at every learning rate of a half-decade grid,
per mechanism and width, and records the held-out loss (nats per byte), the largest
attention logit per layer over training, entropy and q/k norms; then reads who owns the
attention temperature in the trained weights at the best rate and at 10x it.

--mechanisms are swept at every --widths, --one-width-mechanisms at --one-width only; each
takes a built-in name, MODULE:NAME or path/to/file.py:NAME (your own mechanism, as for
experiment 11). Each mechanism's model at its best rate at --one-width (first seed; learned
positions only) is saved as a GPT-2 checkpoint in --out-dir/checkpoints/14_lm_<mechanism>_d<width>/
(config.json, model.safetensors, tokenizer.json), which experiment 13 reads. Method and the
paper's set-up beside ours: attnlab/studies/lm_proxy/README.md.
"""

import dataclasses
import itertools
import sys
import time
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.mechanism import MechanismError
from attnlab.core.references import load_mechanism, mechanism_reference
from attnlab.core.text import byte_tokens, read_text
from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.harness.workers import run_pieces
from attnlab.models.causal_lm import POSITIONS
from attnlab.studies import headline
from attnlab.studies.lm_proxy.checkpoints import write_saved
from attnlab.studies.lm_proxy.compute import ProxyConfig, pieces, tables
from attnlab.studies.lm_proxy.study import CURVES_CSV, OWNERSHIP_CSV, SWEEP_CSV

DEFAULT = ProxyConfig()
#: ``--quick``: a one-minute look (one width, three rates, fewer steps).
QUICK = dataclasses.replace(
    DEFAULT,
    lm=dataclasses.replace(DEFAULT.lm, steps=200, warmup=20),
    widths=(32,),
    one_width=(),
    lrs=(1e-3, 1e-2, 1e-1),
)
TIMED_BY = (SWEEP_CSV,)


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    parser.add_argument(
        "--mechanisms",
        nargs="+",
        type=mechanism_reference,
        default=list(DEFAULT.swept),
        metavar="SPEC",
        help="mechanisms swept at every width",
    )
    parser.add_argument(
        "--one-width-mechanisms",
        nargs="*",
        type=mechanism_reference,
        default=list(DEFAULT.one_width),
        metavar="SPEC",
        help="mechanisms swept at --one-width only",
    )
    cli.add_int_flag(parser, "--widths", list(DEFAULT.widths), "d_model values (head width 16)", 2)
    cli.add_int_flag(
        parser, "--one-width", DEFAULT.one_width_d_model, "d_model of the one-width mechanisms", 2
    )
    parser.add_argument(
        "--lrs",
        nargs="+",
        type=cli.positive_float,
        default=list(DEFAULT.lrs),
        metavar="LR",
        help="peak learning rates",
    )
    cli.add_int_flag(parser, "--steps", DEFAULT.lm.steps, "training steps", 2)
    cli.add_int_flag(parser, "--seeds", DEFAULT.seeds, "seeds per rate")
    parser.add_argument(
        "--positions",
        choices=POSITIONS,
        default="learned",
        help="learned absolute positions (GPT-2), rotary (Wortsman et al.) or none (NoPE)",
    )
    parser.add_argument(
        "--text",
        type=Path,
        default=None,
        help="a UTF-8 text file to train on (default: pydoc_data's prose)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a one-minute look: d_model 32, rates 1e-3, 1e-2, 1e-1, 200 steps",
    )
    cli.add_seed_flag(parser)
    cli.add_jobs_flag(parser, "the sweep's pieces (one per mechanism and width)")
    cli.add_out_dir_flag(parser)
    return parser


def proxy_config(args) -> ProxyConfig:
    """The flags as a ``ProxyConfig`` (``--quick`` replaces the defaults it names)."""
    base = QUICK if args.quick else DEFAULT
    steps = base.lm.steps if args.steps == DEFAULT.lm.steps else args.steps
    try:
        lm = dataclasses.replace(
            base.lm, steps=steps, warmup=min(base.lm.warmup, steps // 10), positions=args.positions
        )
    except ValueError as err:
        raise cli.UsageError(f"--steps: {err}") from None
    pick = {  # a flag left at its default keeps --quick's value
        "swept": (args.mechanisms, list(DEFAULT.swept), base.swept),
        "one_width": (args.one_width_mechanisms, list(DEFAULT.one_width), base.one_width),
        "widths": (args.widths, list(DEFAULT.widths), base.widths),
        "lrs": (args.lrs, list(DEFAULT.lrs), base.lrs),
    }
    chosen = {k: tuple(v if v != default else kept) for k, (v, default, kept) in pick.items()}
    for d in (*chosen["widths"], args.one_width):
        if d % lm.d_head:
            raise cli.UsageError(f"--widths: {d} is not a multiple of the head width {lm.d_head}")
    for flag, references, widths in (("--mechanisms", chosen["swept"], chosen["widths"]),
                                     ("--one-width-mechanisms", chosen["one_width"],
                                      (args.one_width,))):  # fmt: skip
        for reference, d in itertools.product(references, widths):
            try:  # per-head vectors must have one value per head at every width
                load_mechanism(reference).head_values(lm.d_head, d // lm.d_head)
            except MechanismError as err:
                raise cli.UsageError(f"{flag}: {err}") from None
    return dataclasses.replace(
        base, lm=lm, one_width_d_model=args.one_width, seeds=args.seeds, seed=args.seed, **chosen
    )


def run(args):
    config = proxy_config(args)
    cli.check_seeds(args.seed, config.seeds, "--seeds")
    out_dir = cli.prepare_out_dir(args)
    try:
        source = read_text(args.text)
    except (OSError, UnicodeDecodeError) as err:
        raise cli.UsageError(f"--text: cannot read {args.text} ({err})") from None
    tokens = byte_tokens(source.text)
    if len(tokens) * config.lm.held_out < config.lm.seq_len + 1:
        raise cli.UsageError(f"--text: {len(tokens)} bytes are too few for a held-out window")
    work = pieces(config, tokens)
    started = time.perf_counter()
    with cli.progress(sum(p.units for p in work), "14 LM sweep", args.quiet, "step") as bar:
        sweep, curves, ownership, saved = tables(run_pieces(work, args.jobs, bar.update))
    wall = time.perf_counter() - started
    flags = {
        **vars(args),
        "text_source": source.source,
        "text_sha256": source.sha256,
        "lm_config": dataclasses.asdict(config.lm),
    }
    with cli.staged_outputs(out_dir, args.written) as stage:
        for frame, name in ((sweep, SWEEP_CSV), (curves, CURVES_CSV), (ownership, OWNERSHIP_CSV)):
            write_result(frame, stage / name, flags, wall)
        write_saved(stage, saved, {"text_source": source.source, "text_sha256": source.sha256})


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
