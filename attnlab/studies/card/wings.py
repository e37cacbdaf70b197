"""What carding a mechanism on each task means: one ``CardWing`` per task of the training
registry (``attnlab.training.tasks.TASKS``), which the card's API, store and script ask for
by the task's name and never branch on.

The recall task and the language model have sections of their own (``compute``: statics,
precision, masks, training, widths, learning rates, drift; ``lm``: sweep, ownership,
lengths); any other registered task gets ``task_card``'s (training at the task's rates,
two verdicts), so a new task is carded without a change here (``wing_of``).

=============  ============================================================================
``folder``     where its tables go inside a card's folder (the recall card's at its top)
``against``    its default baselines (the script's ``--against``)
``builtins``   the mechanisms ``make cards`` cards on it (their cards go to the committed
               folders)
``tables``     the NamedTuple of its tables
``configure``  ``(quick, seed, **options) -> config`` (``options``: the task's ``flags``)
``run``        ``(config, plan, on_progress, jobs) -> [CardResult]``
``work``       ``(config, references) -> progress units``
``problem``    ``(reference, config) -> why it cannot card a mechanism, or None``
``seeds``      ``config -> seeds its training runs`` (``--seed`` may not run past them)
``markdown``   ``card.md``'s text (the same arguments for every wing)
``draw``       the card's figure, or None
=============  ============================================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.core.references import ALL_BUILTINS, MechanismRef, recall_refusal
from attnlab.core.temperature import BUILTINS
from attnlab.studies.card.compute import QUICK, CardConfig, run_cards, total_work
from attnlab.studies.card.lm import lm_card_config, lm_problem, lm_total_work, run_lm_cards
from attnlab.studies.card.lm_report import lm_card_markdown
from attnlab.studies.card.lm_verdicts import LMCard
from attnlab.studies.card.recall_report import card_markdown
from attnlab.studies.card.task_card import (
    TaskCard,
    run_task_cards,
    task_card_config,
    task_card_markdown,
    task_work,
)
from attnlab.studies.card.verdicts import Card
from attnlab.training.tasks import TASKS


@dataclass(frozen=True)
class CardWing:
    """What the card needs of one task (module docstring)."""

    task: str
    folder: str
    against: tuple[str, ...]
    builtins: tuple[str, ...]
    tables: type
    configure: Callable[..., Any]
    run: Callable
    work: Callable
    problem: Callable[[MechanismRef, Any], str | None]
    seeds: Callable[[Any], int]
    markdown: Callable[..., str]
    draw: Callable[[Any, str, Path], None] | None = None


def draw_recall_card(card: Card, name: str, folder: Path) -> None:
    """``card.png`` and ``card.pdf`` of a recall card (``figure.draw_card``), the figure
    module imported here, when a card is drawn: computation never imports matplotlib
    (tests/test_csv_only.py)."""
    from attnlab.studies.card import figure

    figure.draw_card(card, name, folder)


def recall_card_config(quick: bool = False, seed: int = 0) -> CardConfig:
    """The recall card at its defaults or ``QUICK``'s, from ``seed``."""
    return dataclasses.replace(QUICK if quick else CardConfig(), seed=seed)


def recall_wing() -> CardWing:
    """The recall card (``compute``, ``recall_report``, ``figure``)."""
    return CardWing(
        task="recall",
        folder="",
        against=("scaled", "unscaled"),
        builtins=tuple(BUILTINS),
        tables=Card,
        configure=recall_card_config,
        run=run_cards,
        work=total_work,
        problem=lambda reference, config: recall_refusal(reference.mechanism),
        seeds=lambda config: config.training.seeds,
        markdown=card_markdown,
        draw=draw_recall_card,
    )


def lm_wing() -> CardWing:
    """The language model's card (``lm``, ``lm_report``), in a card's ``lm/``."""
    return CardWing(
        task="lm",
        folder="lm",
        against=("scaled",),
        builtins=tuple(ALL_BUILTINS),
        tables=LMCard,
        configure=lm_card_config,
        run=run_lm_cards,
        work=lm_total_work,
        problem=lm_problem,
        seeds=lambda config: 1,
        markdown=lm_card_markdown,
    )


#: The tasks with card sections of their own: name -> the function that builds its wing
#: (built when asked for, from this module's names).
WINGS = {"recall": recall_wing, "lm": lm_wing}


def task_wing(task: str) -> CardWing:
    """The card on a registered task without sections of its own (``task_card``)."""
    return CardWing(
        task=task,
        folder=task,
        against=("scaled",),
        builtins=(),
        tables=TaskCard,
        configure=lambda quick=False, seed=0, **options: task_card_config(
            task, quick, seed, **options
        ),
        run=run_task_cards,
        work=task_work,
        problem=lambda reference, config: TASKS[task].refusal(reference.mechanism, config.training),
        seeds=lambda config: 1,
        markdown=task_card_markdown,
    )


def wing_of(task: str) -> CardWing:
    """The card's wing of ``task`` (a name of ``TASKS``); ``KeyError`` (one line naming the
    tasks) for another."""
    if task in WINGS:
        return WINGS[task]()
    TASKS[task]  # the registry's one-line KeyError for a task it does not hold
    return task_wing(task)
