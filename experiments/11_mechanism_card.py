"""Experiment 11: the mechanism card. Runs the suite's battery on any attention mechanism
and says, by stated rules, who owns its temperature (the weights, the mechanism or a cap),
whether it holds after the weights drift, whether it is stable at high learning rates,
keeps its temperature across widths, has scaled's float16 headroom, is mask-safe, trains
as fast as scaled and transfers its learning rate. A run that goes non-finite is a result:
the card says where (diverged), and a verdict whose premise fails is undetermined.

--task lm cards it in experiment 14's byte-level causal language model instead (a few
rates, two widths): held-out loss and LR sensitivity against scaled, the largest logit at
the top rate, who owns the temperature per layer, whether it holds at 10x the best rate,
and the loss on sequences 2x and 4x the training length; mechanisms that read positions,
heads or a mask of their own (ALiBi) run there only. Its tables go to the card's lm/.

--mechanism takes a built-in name, MODULE:NAME or path/to/file.py:NAME; NAME is a
function logits(q, k) (q [..., Tq, d], k [..., Tk, d] -> [..., Tq, Tk]; softmax weights)
or an attnlab.Mechanism. For example, a file my_attention.py holding

    import jax.numpy as jnp
    def logits(q, k):
        return jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5

is carded by `python experiments/11_mechanism_card.py --mechanism my_attention.py:logits`
into results/cards/user/my_attention.logits/ (git ignores results/cards/user/; the stem
keeps two files that both define logits apart). Each card is a folder of CSVs and
sidecars, card.png/.pdf and card.md; with several --mechanism values the work is shared
and comparison.csv/.md are written beside the cards (its figure: python
experiments/plot_figures.py fig10_cards --results-dir DIR). The built-ins' committed cards,
results/cards/NAME/, are written by `make cards` (every built-in at the defaults) or with
--out-dir; never by a mechanism of yours, whatever its name. A baseline that is not itself
carded is read from its committed card when it is that built-in and the card's settings
equal this run's (card.md says so), so a card of one mechanism trains only that one. From
Python: attnlab.card. Method: attnlab/studies/card/README.md.
"""

import sys
import time

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.positional import POSITIONAL
from attnlab.core.references import mechanism_reference, mechanism_references
from attnlab.core.temperature import BUILTINS
from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.card import api, store
from attnlab.studies.card.store import CARDS, LM, RECALL

#: One result CSV per part of the run: --help says how long they took.
TIMED_BY = ("cards/comparison.csv",)  # `make cards`: every built-in


def build_parser():
    parser = cli.new_parser(__doc__, TIMED_BY)
    parser.add_argument(
        "--mechanism",
        nargs="+",
        type=mechanism_reference,
        required=True,
        metavar="SPEC",
        help="the mechanisms to card: a built-in, MODULE:NAME or path/to/file.py:NAME",
    )
    parser.add_argument(
        "--against",
        type=mechanism_references,
        default=None,
        metavar="NAMES",
        help="comma-separated baselines every card compares with (default: scaled,unscaled; "
        "scaled with --task lm)",
    )
    parser.add_argument(
        "--task",
        choices=(RECALL, LM),
        default=RECALL,
        help="recall: experiment 04's task with the statics (the card); lm: experiment 14's "
        "causal language model",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every section at smaller sizes (fewer trials, steps, seeds and widths)",
    )
    cli.add_seed_flag(parser)
    cli.add_jobs_flag(parser, "the card's pieces (sections, training groups, widths)")
    cli.add_out_dir_flag(parser)
    # a card of any mechanism at the defaults is made with the defaults (where it goes: run)
    parser.subject_flags = frozenset({"mechanism", "task"})
    return parser


def run(args):
    args.against = against = args.against or list(api.AGAINST[args.task])
    config, run_cards, total_work = api.task_parts(args.task, args.quick, args.seed)
    cli.check_seeds(args.seed, 1 if args.task == LM else config.training.seeds, "--seed")
    for flag, references in (("--mechanism", args.mechanism), ("--against", against)):
        for reference in references:
            if problem := api.task_problem(reference, args.task, config):
                raise cli.UsageError(f"{flag}: {problem}")
    # The built-ins' committed cards are written by `make cards` (every built-in, at the
    # defaults) or on purpose (--out-dir); any other card at the default place goes to
    # results/cards/user/, which git ignores (store.card_folder).
    default_place = args.made_with_defaults and not args.out_dir_given
    builtins = {**BUILTINS, **POSITIONAL} if args.task == LM else BUILTINS
    committed = not default_place or set(args.mechanism) == set(builtins)
    out_dir = cli.prepare_out_dir(args)
    try:
        plan = store.plan_cards(config, args.mechanism, against, cli.RESULTS_DIR / CARDS,
                                args.task)  # fmt: skip
    except ValueError as err:
        raise cli.UsageError(f"--mechanism: {err}") from None
    flags = {**vars(args), "card_settings": config.settings()}
    if any(store.card_folder(r, committed).parts[1] == store.USER for r in plan.targets):
        private = out_dir / CARDS / store.USER
        args.outputs_note = (
            f"(cards of mechanisms other than `make cards`' built-ins go to {private}/; "
            f"the committed cards in {out_dir / CARDS}/ are unchanged)"
            if default_place
            else f"(cards of your own mechanisms are in {private}/)"
        )
    started = time.perf_counter()
    with cli.progress(total_work(config, plan.computed), f"11 {args.task} card", args.quiet) as bar:
        results = run_cards(config, plan, bar.update, args.jobs)
    wall = time.perf_counter() - started
    command = "python experiments/11_mechanism_card.py " + " ".join(sys.argv[1:])
    with cli.staged_outputs(out_dir, args.written) as stage:  # every card or none
        store.write_cards(results, stage, flags, wall, command, committed, config.quick,
                          args.task)  # fmt: skip


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
