"""Experiment 11: the mechanism card. Runs the suite's battery on any attention mechanism
and says, by stated rules, who owns its temperature, whether it holds after the weights
drift, is stable at high learning rates, keeps its temperature across widths, has scaled's
float16 headroom, is mask-safe, trains as fast as scaled and transfers its learning rate;
--task lm asks it of experiment 14's causal LM (where mechanisms reading positions run),
with --optimizer muon and --qk-clip TAU as experiment 15 trains it.
--mechanism: a built-in, MODULE:NAME or path/to/file.py:NAME (logits(q, k) or an
attnlab.Mechanism); yours go to results/cards/user/. Method: attnlab/studies/card/README.md.
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.references import resolve
from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.card import api
from attnlab.studies.card.flags import add_card_flags

TIMED_BY = ("cards/comparison.csv",)  # --help says how long `make cards` took


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    add_card_flags(parser)
    return parser


def run(args, context):
    against = args.against or [resolve(a) for a in api.wings.wing_of(args.task).against]
    try:
        job = api.prepare(args.task, args.mechanism, against, args.quick, args.seed,
                          optimizer=args.optimizer, qk_clip=args.qk_clip)  # fmt: skip
    except api.CardInputError as err:
        raise cli.UsageError(f"{err.flag}: {err}") from None
    default_place = context.made_with_defaults and not context.out_dir_given  # not asked
    out_dir = cli.prepare_out_dir(context)
    context.add_note(job.outputs_note(out_dir, default_place))
    with cli.progress(job.units, f"11 {args.task} card", args.quiet) as bar:
        results, wall = job.compute(bar.update, args.jobs)
    command = "python experiments/11_mechanism_card.py " + " ".join(sys.argv[1:])
    flags = {**context.sidecar_flags, "mechanism": [m.text for m in args.mechanism],
             "against": [a.text for a in against]}  # fmt: skip
    job.write(results, wall, out_dir, flags, command, default_place, context.written)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
