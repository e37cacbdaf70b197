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

from attnlab.core.references import resolve, resolved_mechanism, resolved_mechanisms
from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.card import api
from attnlab.training.optimizers import OPTIMIZERS
from attnlab.training.tasks import TASKS

TIMED_BY = ("cards/comparison.csv",)  # --help says how long `make cards` took


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    add = parser.add_argument
    # fmt: off
    add("--mechanism", nargs="+", type=resolved_mechanism, required=True, metavar="SPEC",
        help="the mechanisms to card: a built-in, MODULE:NAME or path/to/file.py:NAME")
    add("--against", type=resolved_mechanisms, default=None, metavar="NAMES",
        help="comma-separated baselines (default: scaled,unscaled; scaled on another task)")
    add("--task", choices=TASKS, default=api.DEFAULT_TASK,
        help="recall: experiment 04's task and the statics; lm: experiment 14's causal LM; "
        "any task registered in attnlab/training/tasks.py")
    add("--optimizer", choices=OPTIMIZERS, default="adamw",
        help="--task lm: adamw (14's), or muon on the hidden matrices and adamw on the rest")
    add("--qk-clip", type=cli.positive_float, default=None, metavar="TAU",
        help="--task lm: QK-Clip after every step at TAU (Kimi K2: 100; default: none); "
        "where it still fires late in training, the owner verdict names the clip")
    # fmt: on
    add("--quick", action="store_true", help="every section at smaller sizes")
    cli.add_seed_flag(parser)
    cli.add_jobs_flag(parser, "the card's pieces (sections, training groups, widths)")
    cli.add_out_dir_flag(parser)
    parser.declare_flags(subject=frozenset({"mechanism", "task"}))  # what, not how
    return parser


def run(args, context):
    against = args.against or [resolve(a) for a in api.wings.wing_of(args.task).against]
    try:
        job = api.prepare(
            args.task,
            args.mechanism,
            against,
            args.quick,
            args.seed,
            optimizer=args.optimizer,
            qk_clip=args.qk_clip,
        )
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
