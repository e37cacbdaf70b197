"""The card from Python: ``attnlab.card(mechanism)`` runs experiment 11's battery on a
``Mechanism``, a plain function ``logits(q, k)`` or a reference, and returns its tables
and verdicts as pandas objects (``task``: any task of ``attnlab.training.tasks.TASKS``,
``"lm"`` experiment 14's language model; what a card is on each: ``wings``); with
``out_dir`` it writes the files the script writes (the same CSVs, byte for byte, for the
same mechanism and settings). ``prepare`` checks and plans a run of cards for the script
too."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from attnlab.core.mechanism import Mechanism, MechanismError, as_mechanism
from attnlab.core.references import MechanismRef, resolve
from attnlab.harness import cli
from attnlab.studies.card import store, wings
from attnlab.studies.card.wings import CardWing
from attnlab.training.optimizers import OPTIMIZERS
from attnlab.training.tasks import TASKS

#: The card's default task (the script's ``--task``): experiment 04's recall.
DEFAULT_TASK = "recall"


def task_options(task: str, optimizer: str, qk_clip: float | None) -> dict:
    """The card's ``--optimizer`` and ``--qk-clip`` as the options ``task`` takes (its
    ``Task.flags``); ``CardInputError`` for one given that it does not take."""
    given = {"optimizer": (optimizer, optimizer != "adamw"),
             "qk_clip": (qk_clip, qk_clip is not None)}  # fmt: skip
    takes = TASKS[task].flags
    for dest, (_, off) in given.items():
        if off and dest not in takes:
            which = [n for n in TASKS if dest in TASKS[n].flags]
            raise CardInputError(
                f"--{dest.replace('_', '-')}",
                f"applies to --task {' or '.join(which)} only (the {task} task trains with "
                "its own optimizer)",
            )
    return {dest: value for dest, (value, _) in given.items() if dest in takes}


class CardInputError(MechanismError):
    """A card that cannot be run as asked; ``flag`` names the script's flag it comes from."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


@dataclass(frozen=True)
class CardJob:
    """One run of cards: ``targets`` against their baselines on ``task`` (``prepare``),
    with its configuration, its plan (what is computed, what is read from committed
    cards) and the function that computes it."""

    wing: CardWing
    config: Any
    plan: store.CardPlan

    @property
    def units(self) -> int:
        """The progress units of ``compute``."""
        return self.wing.work(self.config, self.plan.computed)

    def compute(self, on_progress=None, jobs: int = 1) -> tuple[list[store.CardResult], float]:
        """The cards, and the wall time they took (seconds)."""
        started = time.perf_counter()
        results = self.wing.run(self.config, self.plan, on_progress, jobs)
        return results, time.perf_counter() - started

    def write(self, results, wall: float, out_dir: Path, flags: dict, command: str,
              default_place: bool, record: list | None = None) -> None:  # fmt: skip
        """Every card of ``results`` into ``out_dir``, all or none (``store.write_cards``),
        the built-ins' into their committed folders where ``committed(default_place)``."""
        committed = self.committed(default_place)
        flags = {**flags, "card_settings": self.config.settings()}
        with cli.staged_outputs(out_dir, record) as stage:
            store.write_cards(results, stage, flags, wall, command, committed,
                              self.config.quick, self.wing)  # fmt: skip

    def committed(self, default_place: bool) -> bool:
        """Whether the built-ins' cards go to their committed folders: always elsewhere
        than the default place (``--out-dir``, a run folder), there only for ``make cards``
        (every built-in of the task); any other card at the default place goes to
        ``cards/user/``, which git ignores (``store.card_folder``)."""
        builtins = set(self.wing.builtins)
        return not default_place or (
            bool(builtins) and {r.reference for r in self.plan.targets} == builtins
        )

    def outputs_note(self, out_dir: Path, default_place: bool) -> str | None:
        """Where cards of mechanisms other than the built-ins go, if there are any."""
        committed = self.committed(default_place)
        if all(store.card_folder(r, committed).parts[1] != store.USER for r in self.plan.targets):
            return None
        private = out_dir / store.CARDS / store.USER
        if default_place:
            return (
                f"(cards of mechanisms other than `make cards`' built-ins go to {private}/; "
                f"the committed cards in {out_dir / store.CARDS}/ are unchanged)"
            )
        return f"(cards of your own mechanisms are in {private}/)"


def prepare(
    task: str,
    targets: Sequence[MechanismRef | Mechanism | str],
    against: Sequence[MechanismRef | Mechanism | str],
    quick: bool = False,
    seed: int = 0,
    committed: Path | None = None,
    optimizer: str = "adamw",
    qk_clip: float | None = None,
) -> CardJob:
    """The run of cards of ``targets`` against ``against`` (each resolved here, where it
    enters, unless it already is: ``references.resolve``) on ``task`` (a name of
    ``TASKS``; its card: ``wings.wing_of``), at the defaults or ``quick``'s from ``seed``
    (on a task that takes them, trained with ``optimizer`` and QK-Clip at ``qk_clip``),
    reading built-in baselines from the committed cards in ``committed`` (default:
    ``results/cards/``) where their settings match. Raises ``CardInputError`` (one line,
    and the flag it comes from) before any work: a task, seeds past the largest, an
    optimizer or clip the task does not take, a mechanism the task cannot run, two of the
    same name; ``MechanismReferenceError`` or ``MechanismError`` for a reference that names
    no mechanism that runs."""
    try:
        wing = wings.wing_of(task)
    except KeyError as err:
        raise CardInputError("--task", str(err.args[0])) from None
    if optimizer not in OPTIMIZERS:
        raise CardInputError("--optimizer", f"must be one of {list(OPTIMIZERS)}, got {optimizer!r}")
    if qk_clip is not None and not (math.isfinite(qk_clip) and qk_clip > 0):
        raise CardInputError("--qk-clip", f"must be a finite number > 0, got {qk_clip!r}")
    config = wing.configure(quick, seed, **task_options(task, optimizer, qk_clip))
    try:
        cli.check_seeds(seed, wing.seeds(config), "--seed")
    except cli.UsageError as err:
        raise CardInputError("--seed", str(err).partition(": ")[2]) from None
    targets, against = [resolve(r) for r in targets], [resolve(r) for r in against]
    for flag, references in (("--mechanism", targets), ("--against", against)):
        for reference in references:
            if problem := wing.problem(reference, config):
                raise CardInputError(flag, problem)
    folder = cli.RESULTS_DIR / store.CARDS if committed is None else committed
    try:
        plan = store.plan_cards(config, targets, against, Path(folder), wing)
    except ValueError as err:
        raise CardInputError("--mechanism", str(err)) from None
    return CardJob(wing, config, plan)


@dataclass(frozen=True)
class CardReport:
    """One mechanism's card: ``tables`` (the task's NamedTuple of tables, the recall card's
    ``Card``: statics, precision, masks, training, training_curves, widths, lr, drift; each
    a DataFrame with a ``mechanism`` column, the baselines' rows beside its own),
    ``verdicts`` (one row per mechanism and verdict: ``verdict, rule, value, passed``),
    ``markdown`` (``card.md``'s text) and ``folder``, where it was written (None without
    ``out_dir``)."""

    name: str
    tables: Any
    verdicts: pd.DataFrame
    markdown: str
    folder: Path | None


def card(
    mechanism: Mechanism | Callable | str,
    against: Sequence[Mechanism | str] | str | None = None,
    quick: bool = False,
    seed: int = 0,
    out_dir: Path | str | None = None,
    name: str | None = None,
    progress: bool = True,
    committed: Path | None = None,
    task: str = DEFAULT_TASK,
    optimizer: str = "adamw",
    qk_clip: float | None = None,
) -> CardReport:
    """The card of ``mechanism`` (a ``Mechanism``, a function ``logits(q, k)``, named
    ``name`` or its ``__name__``, or a reference ``load_mechanism`` resolves) against the
    baselines ``against`` (references or Mechanisms; a string is split at commas; default
    the task's card's ``against``), at the script's default settings or ``quick``'s, from
    ``seed``, on ``task``: ``"recall"`` (the card), ``"lm"`` (experiment 14's language
    model, the tables in ``lm/``) or any task registered in ``TASKS`` (its tables in a
    folder of its name). On a task that takes them (its ``Task.flags``: ``"lm"``),
    ``optimizer`` (any of the registry's: ``"adamw"``, 14's, ``"muon"``, ...) and
    ``qk_clip`` (QK-Clip's tau, None: none) train every mechanism of the card, baselines
    included, as the script's ``--optimizer`` and ``--qk-clip``.

    Baselines that are built-ins are read from their committed cards in ``committed``
    (default: this repository's ``results/cards/``) when the settings match, as the
    script does. With ``out_dir``, the card is written there as
    ``experiments/11_mechanism_card.py --out-dir OUT_DIR`` writes it (``cards/NAME/`` for
    a built-in, ``cards/user/NAME/`` for a mechanism of yours); nothing is written
    without it. Raises ``MechanismError`` or ``MechanismReferenceError`` (one line naming
    the mechanism and the cause) before any work."""
    target = resolve(mechanism if isinstance(mechanism, str) else as_mechanism(mechanism, name))
    if against is None:
        try:
            against = wings.wing_of(task).against
        except KeyError as err:
            raise CardInputError("--task", str(err.args[0])) from None
    baselines = [resolve(b) for b in (against.split(",") if isinstance(against, str) else against)]
    folder = cli.REPO_ROOT / cli.RESULTS_DIR / store.CARDS if committed is None else committed
    job = prepare(task, [target], baselines, quick, seed, folder, optimizer, qk_clip)
    config = job.config
    cli.configure_jax()
    with tqdm(total=job.units, desc="card", disable=not progress) as bar:
        (result,), wall = job.compute(bar.update)
    shown = target.reference or target.name
    command = f"attnlab.card({shown}, against={[b.text for b in baselines]}"
    command += f"{', quick=True' if quick else ''}, seed={seed}"
    command += f", task={task!r}" if task != DEFAULT_TASK else ""
    command += f", optimizer={optimizer!r}" if optimizer != "adamw" else ""
    command += f", qk_clip={qk_clip!r})" if qk_clip is not None else ")"
    written = None
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        flags = {
            "mechanism": [target.text],
            "against": [b.text for b in baselines],
            "quick": quick,
            "seed": seed,
            "task": task,
            "optimizer": optimizer,
            "qk_clip": qk_clip,
        }
        job.write([result], wall, out_dir, flags, command, default_place=False)
        written = out_dir / store.card_folder(target, committed=True) / job.wing.folder
    read_from = {b: str(f) for b, f in result.read_from.items()}
    text = job.wing.markdown(result.card, result.verdicts, result.name, target.text, command,
                             read_from, config.quick)  # fmt: skip
    return CardReport(result.name, result.card, result.verdicts, text, written)
