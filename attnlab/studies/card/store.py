"""The card's persistence: what a card run gives (``CardResult``), where cards are written,
reading committed cards, and which baselines a run may read from them instead of computing
(``plan_cards``).

A card is a folder of CSVs (``Card``'s tables), each with a JSON sidecar whose flags record
the ``card_settings`` it was computed with; two cards with equal settings have equal rows
for a mechanism they share.

Committed cards belong to the built-ins: ``cards/NAME/`` in ``results/``, written by
``make cards``. Nothing else writes there or is read from there: a mechanism that is not
the built-in of its name (the object, not the name: ``references.is_builtin``) is carded
into ``cards/user/<file-stem>.<name>/`` (``card_folder``), which git ignores, and its rows
are never reused as a baseline; a card of a built-in made by any other run at the default
place goes to ``cards/user/NAME/``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from attnlab.core.references import MechanismRef, is_builtin
from attnlab.harness.io import read_csv_checked, sidecar_path, write_result
from attnlab.harness.staging import within
from attnlab.studies.card.markdown import comparison_markdown

#: The cards' folder inside an output folder (``results/cards/``).
CARDS = Path("cards")
#: Inside ``CARDS``: every card but the built-ins' committed ones (git ignores it in results/).
USER = "user"
#: A card's tables: a NamedTuple of DataFrames (``verdicts.Card``, ``lm_verdicts.LMCard``,
#: ``task_card.TaskCard``).
Tables = Any


class CardSettings(Protocol):
    """What the store reads of a card's configuration (``compute.CardConfig``)."""

    def settings(self) -> dict:
        """Everything that decides a card's numbers but the mechanisms."""
        ...


class Wing(Protocol):
    """What the store reads of a task's card (``wings.CardWing``): where its tables go
    inside a card's folder, their NamedTuple, ``card.md``'s text and the figure (or None)."""

    folder: str
    tables: type
    markdown: Callable[..., str]
    draw: Callable[[Tables, str, Path], None] | None


@dataclass(frozen=True)
class CardResult:
    """One carded mechanism: its tables and verdicts, with its baselines' rows."""

    name: str
    reference: MechanismRef
    card: Tables
    verdicts: pd.DataFrame
    read_from: dict[str, Path]


def card_folder(reference: MechanismRef, committed: bool) -> Path:
    """The folder of ``reference``'s card inside an output folder: ``cards/NAME`` for a
    built-in when ``committed`` (the run writes the built-ins' cards), else
    ``cards/user/LABEL``: ``NAME`` for a built-in or a Mechanism object,
    ``<file-stem>.NAME`` for ``path/to/file.py:NAME`` and ``<module>.NAME`` for
    ``MODULE:NAME``, so two files that both define ``logits`` keep their own cards."""
    name = reference.name
    if is_builtin(reference.mechanism):
        return CARDS / name if committed else CARDS / USER / name
    if reference.reference is None:
        return CARDS / USER / name
    where = reference.reference.rpartition(":")[0]
    source = Path(where).stem if where.endswith(".py") else where
    return CARDS / USER / f"{source}.{name}"


def comparison_folder(references: Sequence[MechanismRef], committed: bool) -> Path:
    """Where ``comparison.csv`` of several cards goes: beside the built-ins' committed cards
    only when every card is one of them, else in ``cards/user/``."""
    every = all(is_builtin(r.mechanism) for r in references)
    return CARDS if committed and every else CARDS / USER


def write_cards(
    results: Sequence[CardResult],
    out_dir: Path,
    flags: dict,
    wall: float,
    command: str,
    committed: bool,
    quick: bool,
    wing: Wing,
) -> list[Path]:
    """Write every card of ``results`` into ``out_dir`` (``card_folder``'s folders, and
    inside them the task's ``wing.folder``: ``lm/`` for the language model's): its tables,
    ``verdicts.csv`` (each with a sidecar of ``flags`` and ``wall``), the wing's figure
    (the recall card's ``card.png``/``.pdf``), and ``card.md`` (naming ``command``;
    ``quick``: a ``--quick`` card, said in its first line); with several,
    ``comparison.csv``/``.md`` (``comparison_folder``, ``/ wing.folder``). Returns the
    cards' folders, in order."""
    folders = []
    for result in results:
        where = card_folder(result.reference, committed) / wing.folder
        folder = within(out_dir, where, f"the card of {result.name!r}")
        folder.mkdir(parents=True)
        for field in result.card._fields:
            write_result(getattr(result.card, field), folder / f"{field}.csv", flags, wall)
        write_result(result.verdicts, folder / "verdicts.csv", flags, wall)
        read_from = {b: str(f) for b, f in result.read_from.items()}
        arguments = (result.card, result.verdicts, result.name, result.reference.text,
                     command, read_from, quick)  # fmt: skip
        if wing.draw is not None:
            wing.draw(result.card, result.name, folder)
        (folder / "card.md").write_text(wing.markdown(*arguments), encoding="utf-8")
        folders.append(folder)
    if len(results) > 1:
        comparison = pd.concat(
            [r.verdicts[r.verdicts.mechanism == r.name] for r in results], ignore_index=True
        )
        where = out_dir / comparison_folder([r.reference for r in results], committed)
        where = where / wing.folder
        where.mkdir(parents=True, exist_ok=True)
        write_result(comparison, where / "comparison.csv", flags, wall)
        (where / "comparison.md").write_text(comparison_markdown(comparison), encoding="utf-8")
    return folders


@dataclass(frozen=True)
class CardPlan:
    """What a card run computes and what it reads: ``targets`` are carded, ``against`` are
    their baselines; ``computed`` are the references run here, ``reused`` the baselines
    read from committed cards (name -> folder) because their settings equal the run's."""

    targets: tuple[MechanismRef, ...]
    against: tuple[MechanismRef, ...]
    computed: tuple[MechanismRef, ...]
    reused: dict[str, Path]


def plan_cards(
    config: CardSettings,
    targets: Sequence[MechanismRef],
    against: Sequence[MechanismRef],
    committed: Path,
    wing: Wing,
) -> CardPlan:
    """The plan of carding ``targets`` against ``against`` on ``wing``'s task. A baseline
    that is not itself a target is read from its committed card (``committed / NAME /
    wing.folder``) when it is the built-in of that name and that card's settings equal
    ``config``'s. ``ValueError`` when two of the mechanisms share a
    name (a card tells its rows apart by name)."""
    targets, against = tuple(dict.fromkeys(targets)), tuple(dict.fromkeys(against))
    everything = list(dict.fromkeys(targets + against))
    names = [r.name for r in everything]
    for name in dict.fromkeys(n for n in names if names.count(n) > 1):
        alike = [r for r, n in zip(everything, names, strict=True) if n == name]
        advice = (
            f"rename yours, or leave {name!r} out of --against"
            if any(r in against and is_builtin(r.mechanism) for r in alike)
            else "rename one of them"
        )
        raise ValueError(
            f"{' and '.join(repr(r.text) for r in alike)} are both named {name!r}, "
            f"and a card tells mechanisms apart by name: {advice}"
        )
    reused = {}
    for reference in against:
        folder = committed / reference.name / wing.folder
        if (
            reference not in targets
            and is_builtin(reference.mechanism)
            and same_settings(config, card_settings(folder, wing.tables))
        ):
            reused[reference.name] = folder
    computed = tuple(r for r in everything if r.name not in reused)
    return CardPlan(targets, against, computed, reused)


def read_card(
    folder: Path, tables: type, columns_of: Callable[[str], Sequence[str]] = lambda _: ()
) -> Tables:
    """The tables (the NamedTuple ``tables``: ``Card``, ``LMCard``, ...) of the card in
    ``folder`` (``DataError`` naming a missing file)."""
    made_by = "python experiments/11_mechanism_card.py"
    return tables(
        *(read_csv_checked(folder / f"{f}.csv", columns_of(f), made_by) for f in tables._fields)
    )


def card_settings(folder: Path, tables: type) -> dict | None:
    """The ``card_settings`` recorded in the sidecars of the card in ``folder`` (the tables
    of the NamedTuple ``tables``), if every table has the same."""
    found = []
    for name in tables._fields:
        path = sidecar_path(folder / f"{name}.csv")
        if not path.is_file() or not (folder / f"{name}.csv").is_file():
            return None
        found.append(json.loads(path.read_text(encoding="utf-8"))["flags"].get("card_settings"))
    return found[0] if all(f == found[0] for f in found) else None


def same_settings(config: CardSettings, recorded: dict | None) -> bool:
    """Whether ``recorded`` (a sidecar's ``card_settings``) equals ``config.settings()``."""
    return recorded is not None and recorded == json.loads(json.dumps(config.settings()))


def merge_cards(cards: Sequence[Tables]) -> Tables:
    """The tables of several cards (all of one NamedTuple) concatenated, table by table."""
    kind = type(cards[0])
    return kind(
        *(pd.concat([getattr(c, f) for c in cards], ignore_index=True) for f in kind._fields)
    )


def in_order(frame: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """``frame``'s rows of the mechanisms ``names``, in that order (stable within one); a
    table with no rows at all (no ``mechanism`` column) as it is."""
    if "mechanism" not in frame:
        return frame
    order = {n: i for i, n in enumerate(names)}
    rows = frame[frame.mechanism.isin(names)]
    rank = rows.mechanism.map(order)
    return rows.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)


def only(card: Tables, names: Sequence[str]) -> Tables:
    """``card``'s rows of the mechanisms ``names``, in that order."""
    return type(card)(*(in_order(getattr(card, f), names) for f in card._fields))


def reused_cards(plan: CardPlan, kind: type) -> list[Tables]:
    """The rows of each baseline ``plan`` reads from its committed card (tables ``kind``)."""
    return [only(read_card(folder, kind), [name]) for name, folder in plan.reused.items()]


def card_results(
    plan: CardPlan, tables: Tables, verdicts_frame: Callable[[Tables, list[str]], pd.DataFrame]
) -> list[CardResult]:
    """Each target of ``plan``: its and its baselines' rows of ``tables`` (every mechanism's,
    merged) and their ``verdicts_frame``."""
    results = []
    for reference in plan.targets:
        name = reference.name
        baselines = [r.name for r in plan.against]
        baselines = [b for b in baselines if b != name]
        card = only(tables, [name, *baselines])
        table = verdicts_frame(card, [name, *baselines])
        read_from = {b: plan.reused[b] for b in baselines if b in plan.reused}
        results.append(CardResult(name, reference, card, table, read_from))
    return results
