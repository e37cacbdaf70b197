"""Experiment 11: the mechanism card. Runs the suite's battery on any attention mechanism
and says, by stated rules, who owns its temperature (the weights, the mechanism or a cap),
whether it holds after the weights drift, whether it is stable at high learning rates,
keeps its temperature across widths, has scaled's float16 headroom, is mask-safe, trains
as fast as scaled and transfers its learning rate. A run that goes non-finite is a result:
the card says where (diverged), and a verdict whose premise fails is undetermined.

--mechanism takes a built-in name, MODULE:NAME or path/to/file.py:NAME; NAME is a
function logits(q, k) (q [..., Tq, d], k [..., Tk, d] -> [..., Tq, Tk]; softmax weights)
or an attnlab.Mechanism. For example, a file my_attention.py holding

    import jax.numpy as jnp
    def logits(q, k):
        return jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5

is carded by `python experiments/11_mechanism_card.py --mechanism my_attention.py:logits`.
Each card is a folder cards/NAME/ in --out-dir (default results/, so results/cards/NAME/)
with CSVs and sidecars, card.png/.pdf and card.md; with several --mechanism values the
work is shared and cards/comparison.csv/.md are written beside the cards (its figure:
python experiments/plot_figures.py fig10_cards --results-dir DIR). `make cards` cards
every built-in. A baseline that is not itself carded is read from its committed card in
results/cards/ when that card's settings equal this run's (card.md says so), so a card of
one mechanism trains only that one. Method: attnlab/studies/card/README.md.
"""

import dataclasses
import sys
import time
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)
import pandas as pd

from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.studies import headline
from attnlab.studies.card.compute import QUICK, CardConfig, plan_cards, run_cards
from attnlab.studies.card.figure import draw_card
from attnlab.studies.card.report import card_markdown, comparison_markdown
from attnlab.studies.recall.flags import mechanism_reference, mechanism_references

CARDS = Path("cards")
DEFAULT_AGAINST = "scaled,unscaled"


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
        default=DEFAULT_AGAINST,  # argparse passes a string default through the type
        metavar="NAMES",
        help="comma-separated baselines every card compares with",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every section at smaller sizes (fewer trials, steps, seeds and widths)",
    )
    cli.add_seed_flag(parser)
    cli.add_out_dir_flag(parser)
    parser.subject_flags = frozenset({"mechanism"})  # a card of any mechanism is canonical
    return parser


def run(args):
    config = dataclasses.replace(QUICK if args.quick else CardConfig(), seed=args.seed)
    cli.check_seeds(args.seed, config.training.seeds, "--seed")
    out_dir = cli.prepare_out_dir(args)
    try:
        plan = plan_cards(config, args.mechanism, args.against, cli.RESULTS_DIR / CARDS)
    except ValueError as err:
        raise cli.UsageError(f"--mechanism: {err}") from None

    flags = {**vars(args), "card_settings": config.settings()}
    started = time.perf_counter()
    with cli.progress(plan.work, "11 card", args.quiet) as bar:
        results = run_cards(config, plan, bar.update)
    wall = time.perf_counter() - started
    command = "python experiments/11_mechanism_card.py " + " ".join(sys.argv[1:])

    with cli.staged_outputs(out_dir) as stage:  # every card or none
        for result in results:
            folder = stage / CARDS / result.name
            folder.mkdir(parents=True)
            for field in result.card._fields:
                write_result(getattr(result.card, field), folder / f"{field}.csv", flags, wall)
            write_result(result.verdicts, folder / "verdicts.csv", flags, wall)
            draw_card(result.card, result.name, folder)
            read_from = {b: str(f) for b, f in result.read_from.items()}
            text = card_markdown(
                result.card,
                result.verdicts,
                result.name,
                result.reference,
                command,
                read_from,
                config.quick,
            )
            (folder / "card.md").write_text(text, encoding="utf-8")
        if len(results) > 1:
            comparison = pd.concat(
                [r.verdicts[r.verdicts.mechanism == r.name] for r in results], ignore_index=True
            )
            write_result(comparison, stage / CARDS / "comparison.csv", flags, wall)
            (stage / CARDS / "comparison.md").write_text(
                comparison_markdown(comparison), encoding="utf-8"
            )


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
