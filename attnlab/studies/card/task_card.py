"""The card on any registered task (``attnlab.training.tasks.TASKS``) the card has no
section of its own for: each mechanism trained on the task at every rate of the task's
``lrs`` (one seed, ``config.seed``), as lanes of the one engine
(``attnlab.training.tasks.train_task``), from the same initialisations on the same data.

One table, *training*: a row per (mechanism, rate) with the held-out loss at step 0 and
at the end (mean and SE over the evaluation's windows), the first non-finite step of the
loss (-1: none) and, where the task records it per step, the largest attention logit
over training (``max_logit``; empty where it does not).

Two verdicts, each by a stated rule that can come out either way:

- *trains*: at its best rate, the held-out loss at the end is below the loss at step 0 by
  more than ``LOSS_SES`` standard errors of the difference;
- *stable at every rate*: no rate's loss went non-finite.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from attnlab.core.mechanism import Mechanism
from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef
from attnlab.studies.card.markdown import QUICK_LINE, reused_lines, verdict_lines
from attnlab.studies.card.store import CardPlan, CardResult, card_results, merge_cards, reused_cards
from attnlab.studies.card.verdicts import Rule, Verdict, verdicts_frame
from attnlab.training.tasks import TASKS, train_task

#: Standard errors by which the loss must fall to count as trained (declared before any run).
LOSS_SES = 2.0


class TaskCard(NamedTuple):
    """A card's tables on a task of the registry."""

    training: pd.DataFrame


@dataclass(frozen=True)
class TaskCardConfig:
    """What a card on ``task`` trains: the task's configuration at its defaults (or its
    ``quick`` ones) from ``seed``, with ``options`` (the card's flags the task takes, as
    ``(name, value)`` pairs), at the task's rates."""

    task: str
    seed: int = 0
    quick: bool = False
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def training(self) -> Any:
        """The task's configuration."""
        return TASKS[self.task].defaults(self.quick, self.seed, **dict(self.options))

    @property
    def lrs(self) -> tuple[float, ...]:
        return TASKS[self.task].lrs

    def settings(self) -> dict:
        """Everything that decides a card's numbers but the mechanisms (``recorded``)."""
        return {"task": self.task, "seed": self.seed, "quick": self.quick,
                "options": recorded(dict(self.options)), "lrs": list(self.lrs),
                "training": recorded(self.training)}  # fmt: skip


def recorded(value: Any) -> Any:
    """``value`` as a sidecar records it, the same in every process: a dataclass by its
    fields, a mechanism reference by its text and a mechanism by its name, numbers and
    strings as they are; ``ValueError`` for anything else (a function: its text would hold
    its address, and no two runs would compare equal)."""
    if isinstance(value, Mechanism):
        return value.name
    if hasattr(value, "text") and hasattr(value, "mechanism"):  # a MechanismRef
        return value.text
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: recorded(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): recorded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [recorded(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise ValueError(f"a task's configuration holds {type(value).__name__} {value!r}, which a "
                     "card's sidecar cannot record the same way twice")  # fmt: skip


def task_card_config(
    task: str, quick: bool = False, seed: int = 0, **options: Any
) -> TaskCardConfig:
    """The card's configuration on ``task`` (its ``options``: the card's flags it takes)."""
    return TaskCardConfig(task, seed, quick, tuple(sorted(options.items())))


def training_rows(
    config: TaskCardConfig, reference: MechanismRef, on_progress: Progress = None
) -> pd.DataFrame:
    """One mechanism trained at every rate (the module docstring's *training* rows)."""
    task = TASKS[config.task]
    lanes = train_task(task, config.training, reference.mechanism, list(config.lrs),
                       [config.seed], on_progress)  # fmt: skip
    windows = lanes.initial_loss.shape[1]
    top = lanes.metrics.get("max_logit")
    return pd.DataFrame({
        "mechanism": reference.name,
        "lr": lanes.lrs.astype(float),
        "initial_loss": lanes.initial_loss.mean(axis=1),
        "initial_loss_se": lanes.initial_loss.std(axis=1, ddof=1) / math.sqrt(windows),
        "final_loss": lanes.final_loss.mean(axis=1),
        "final_loss_se": lanes.final_loss.std(axis=1, ddof=1) / math.sqrt(windows),
        "diverged_step": lanes.diverged_step,
        "max_logit": (np.nan if top is None
                      else np.max(top.reshape(len(top), -1), axis=1)),
    })  # fmt: skip


def task_work(config: TaskCardConfig, references: Sequence[MechanismRef]) -> int:
    """Progress units: lane-steps."""
    return len(references) * len(config.lrs) * config.training.steps


def run_task_cards(
    config: TaskCardConfig, plan: CardPlan, on_progress: Progress = None, jobs: int = 1
) -> list[CardResult]:
    """The cards of ``plan.targets`` on the task, with their baselines' rows (reused where
    ``plan.reused`` says) and verdicts; trained in turn (``jobs`` is the card's)."""
    del jobs
    cards = reused_cards(plan, TaskCard)
    if plan.computed:
        rows = [training_rows(config, r, on_progress) for r in plan.computed]
        cards.append(TaskCard(pd.concat(rows, ignore_index=True)))
    return card_results(plan, merge_cards(cards), task_verdicts_frame)


TRAINS = Rule("trains", f"at its best rate the held-out loss falls by more than {LOSS_SES:g} "
              "SE of the difference from step 0")  # fmt: skip
STABLE = Rule("stable at every rate", "no rate's loss goes non-finite")


def _rows(card: TaskCard, name: str) -> pd.DataFrame:
    return card.training[card.training.mechanism == name]


def trains(card: TaskCard, name: str) -> Verdict:
    rows = _rows(card, name)
    finite = rows[np.isfinite(rows.final_loss)]
    if finite.empty:
        return TRAINS.says("every rate diverged", False)
    best = finite.loc[finite.final_loss.idxmin()]
    drop = best.initial_loss - best.final_loss
    se = math.hypot(best.initial_loss_se, best.final_loss_se)
    value = f"lr {best.lr:g}: {best.initial_loss:.3f} -> {best.final_loss:.3f}"
    if not se > 0:  # one window, or every window alike: no SE to judge by
        return TRAINS.says(value + " (no spread over the windows)", None)
    return TRAINS.says(value + f" ({drop / se:.1f} SE)", bool(drop > LOSS_SES * se))


def stable(card: TaskCard, name: str) -> Verdict:
    rows = _rows(card, name)
    diverged = rows[rows.diverged_step >= 0]
    value = ", ".join(f"lr {r.lr:g} at step {r.diverged_step}" for r in diverged.itertuples())
    return STABLE.says(value or f"{len(rows)} rates, none diverged", diverged.empty)


TASK_VERDICTS = (trains, stable)


def task_verdicts_frame(card: TaskCard, names: list[str]) -> pd.DataFrame:
    """One row per (mechanism, verdict): ``verdict, rule, value, passed``."""
    return verdicts_frame(card, names, TASK_VERDICTS)


def task_card_markdown(
    card: TaskCard,
    verdicts: pd.DataFrame,
    name: str,
    reference: str,
    command: str,
    reused: Mapping[str, str],
    quick: bool = False,
) -> str:
    """``card.md`` of mechanism ``name`` on a task of the registry."""
    names = [name] + [n for n in dict.fromkeys(card.training.mechanism) if n != name]
    lines = [f"# {'Quick card' if quick else 'Card'} on a registered task: {name}", ""]
    lines += [QUICK_LINE, ""] if quick else []
    lines += [f"Mechanism `{reference}`, against {', '.join(names[1:]) or 'nothing'}. Made "
              f"by `{command}`; every number below is read from this folder's CSVs "
              "(attnlab/studies/card/task_card.py)."]  # fmt: skip
    lines += reused_lines(reused, "same task, initialisations and data")
    lines += ["", "## Verdicts", "", *verdict_lines(verdicts, names), "", "## Training", "",
              "| mechanism | lr | held-out loss, step 0 | at the end | diverged at |",
              "|---|---|---|---|---|"]  # fmt: skip
    for r in card.training[card.training.mechanism.isin(names)].itertuples():
        stop = "—" if r.diverged_step < 0 else str(r.diverged_step)
        lines.append(f"| {r.mechanism} | {r.lr:g} | {r.initial_loss:.3f} ± "
                     f"{r.initial_loss_se:.3f} | {r.final_loss:.3f} ± {r.final_loss_se:.3f} "
                     f"| {stop} |")  # fmt: skip
    return "\n".join(lines) + "\n"
