"""The card from Python: ``attnlab.card(mechanism)`` runs experiment 11's battery on a
``Mechanism``, a plain function ``logits(q, k)`` or a reference, and returns its tables
and verdicts as pandas objects (``task="lm"``: in experiment 14's language model); with
``out_dir`` it writes the files the script writes (the same CSVs, byte for byte, for the
same mechanism and settings). ``prepare`` checks and plans a run of cards for the script
too."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from attnlab.core.mechanism import Mechanism, MechanismError, as_mechanism
from attnlab.core.references import ALL_BUILTINS, MechanismRef, recall_refusal, resolve
from attnlab.core.temperature import BUILTINS
from attnlab.harness import cli
from attnlab.studies.card import store
from attnlab.studies.card.compute import QUICK, CardConfig, run_cards, total_work
from attnlab.studies.card.lm import lm_card_config, lm_total_work, run_lm_cards
from attnlab.studies.card.store import LM, RECALL
from attnlab.studies.card.verdicts import Card
from attnlab.training.optimizers import OPTIMIZERS

#: The baselines of a card unless told otherwise (the script's ``--against``), per task.
AGAINST = {RECALL: ("scaled", "unscaled"), LM: ("scaled",)}


def task_parts(
    task: str, quick: bool, seed: int, optimizer: str = "adamw", qk_clip: float | None = None
) -> tuple:
    """``(config, run, total_work)`` of a card on ``task``: its configuration at the
    defaults or ``quick``'s from ``seed`` (on ``LM``, with ``optimizer`` and QK-Clip at
    ``qk_clip``), the function that computes its cards (``run(config, plan, on_progress,
    jobs)``) and its progress units."""
    if task == LM:
        return lm_card_config(quick, seed, optimizer, qk_clip), run_lm_cards, lm_total_work
    config = dataclasses.replace(QUICK if quick else CardConfig(), seed=seed)
    return config, run_cards, total_work


def task_problem(reference: MechanismRef, task: str, config) -> str | None:
    """Why ``task`` cannot run the mechanism of ``reference``, in one line (None: it can):
    the recall task has no positions or heads (``recall_refusal``); the language model
    needs one value per head of every per-head vector at each of its widths."""
    mechanism = reference.mechanism
    if task == RECALL:
        return recall_refusal(mechanism)
    for d_model in config.widths:
        try:
            mechanism.head_values(config.lm.d_head, d_model // config.lm.d_head)
        except MechanismError as err:
            return f"{err} (d_model {d_model})"
    return None


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

    task: str
    config: Any
    plan: store.CardPlan
    run: Callable
    work: Callable

    @property
    def units(self) -> int:
        """The progress units of ``compute``."""
        return self.work(self.config, self.plan.computed)

    def compute(self, on_progress=None, jobs: int = 1) -> tuple[list[store.CardResult], float]:
        """The cards, and the wall time they took (seconds)."""
        started = time.perf_counter()
        results = self.run(self.config, self.plan, on_progress, jobs)
        return results, time.perf_counter() - started

    def write(self, results, wall: float, out_dir: Path, flags: dict, command: str,
              default_place: bool, record: list | None = None) -> None:  # fmt: skip
        """Every card of ``results`` into ``out_dir``, all or none (``store.write_cards``),
        the built-ins' into their committed folders where ``committed(default_place)``."""
        committed = self.committed(default_place)
        flags = {**flags, "card_settings": self.config.settings()}
        with cli.staged_outputs(out_dir, record) as stage:
            store.write_cards(results, stage, flags, wall, command, committed,
                              self.config.quick, self.task)  # fmt: skip

    def committed(self, default_place: bool) -> bool:
        """Whether the built-ins' cards go to their committed folders: always elsewhere
        than the default place (``--out-dir``, a run folder), there only for ``make cards``
        (every built-in of the task); any other card at the default place goes to
        ``cards/user/``, which git ignores (``store.card_folder``)."""
        builtins = ALL_BUILTINS if self.task == LM else BUILTINS
        return not default_place or {r.reference for r in self.plan.targets} == set(builtins)

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
    enters, unless it already is: ``references.resolve``) on ``task``, at the defaults or
    ``quick``'s from ``seed`` (on ``LM``, trained with ``optimizer`` and QK-Clip at
    ``qk_clip``), reading built-in baselines from the committed cards in ``committed``
    (default: ``results/cards/``) where their settings match. Raises ``CardInputError``
    (one line, and the flag it comes from) before any work: a task, seeds past the
    largest, an optimizer or clip off the LM task, a mechanism the task cannot run, two of
    the same name; ``MechanismReferenceError`` or ``MechanismError`` for a reference that
    names no mechanism that runs."""
    if task not in AGAINST:
        raise CardInputError("--task", f"task must be one of {list(AGAINST)}, got {task!r}")
    if optimizer not in OPTIMIZERS:
        raise CardInputError("--optimizer", f"must be one of {list(OPTIMIZERS)}, got {optimizer!r}")
    for flag, off in (("--optimizer", optimizer != "adamw"), ("--qk-clip", qk_clip is not None)):
        if off and task != LM:
            raise CardInputError(flag, "applies to --task lm only (the recall task trains "
                                 "with 04's optimizer)")  # fmt: skip
    if qk_clip is not None and not (math.isfinite(qk_clip) and qk_clip > 0):
        raise CardInputError("--qk-clip", f"must be a finite number > 0, got {qk_clip!r}")
    config, run, work = task_parts(task, quick, seed, optimizer, qk_clip)
    try:
        cli.check_seeds(seed, 1 if task == LM else config.training.seeds, "--seed")
    except cli.UsageError as err:
        raise CardInputError("--seed", str(err).partition(": ")[2]) from None
    targets, against = [resolve(r) for r in targets], [resolve(r) for r in against]
    for flag, references in (("--mechanism", targets), ("--against", against)):
        for reference in references:
            if problem := task_problem(reference, task, config):
                raise CardInputError(flag, problem)
    folder = cli.RESULTS_DIR / store.CARDS if committed is None else committed
    try:
        plan = store.plan_cards(config, targets, against, Path(folder), task)
    except ValueError as err:
        raise CardInputError("--mechanism", str(err)) from None
    return CardJob(task, config, plan, run, work)


@dataclass(frozen=True)
class CardReport:
    """One mechanism's card: ``tables`` (``Card``: statics, precision, masks, training,
    training_curves, widths, lr, drift; each a DataFrame with a ``mechanism`` column, the
    baselines' rows beside its own), ``verdicts`` (one row per mechanism and verdict:
    ``verdict, rule, value, passed``), ``markdown`` (``card.md``'s text) and ``folder``,
    where it was written (None without ``out_dir``)."""

    name: str
    tables: Card
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
    task: str = RECALL,
    optimizer: str = "adamw",
    qk_clip: float | None = None,
) -> CardReport:
    """The card of ``mechanism`` (a ``Mechanism``, a function ``logits(q, k)``, named
    ``name`` or its ``__name__``, or a reference ``load_mechanism`` resolves) against the
    baselines ``against`` (references or Mechanisms; a string is split at commas; default
    ``AGAINST[task]``), at the script's default settings or ``quick``'s, from ``seed``, on
    ``task``: ``"recall"`` (the card) or ``"lm"`` (experiment 14's language model, the
    tables in ``lm/``). On ``"lm"``, ``optimizer`` (``"adamw"``, 14's, or ``"muon"``) and
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
    against = AGAINST.get(task, ()) if against is None else against
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
    command += f", task={task!r}" if task != RECALL else ""
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
        written = out_dir / store.card_folder(target, committed=True) / store.TASK_FOLDER[task]
    read_from = {b: str(f) for b, f in result.read_from.items()}
    text = store.card_text(task, result.card, result.verdicts, result.name,
                           target.text, command, read_from,
                           config.quick)  # fmt: skip
    return CardReport(result.name, result.card, result.verdicts, text, written)
