"""The card's persistence: reading committed cards and deciding which baselines a run may
read from them instead of computing (``plan_cards``).

A card is a folder of CSVs (``Card``'s tables), each with a JSON sidecar whose flags record
the ``card_settings`` it was computed with; two cards with equal settings have equal rows
for a mechanism they share.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.core.references import load_mechanism
from attnlab.harness.io import read_csv_checked, sidecar_path
from attnlab.studies.card.verdicts import Card

if TYPE_CHECKING:
    from attnlab.studies.card.compute import CardConfig


@dataclass(frozen=True)
class CardPlan:
    """What a card run computes and what it reads: ``targets`` are carded, ``against`` are
    their baselines; ``computed`` are the references run here, ``reused`` the baselines
    read from committed cards (name -> folder) because their settings equal the run's."""

    targets: tuple[str, ...]
    against: tuple[str, ...]
    computed: tuple[str, ...]
    reused: dict[str, Path]


def plan_cards(
    config: CardConfig, targets: Sequence[str], against: Sequence[str], committed: Path
) -> CardPlan:
    """The plan of carding ``targets`` against ``against``. A baseline that is not itself a
    target is read from ``committed / NAME`` when that card's settings equal ``config``'s.
    ``ValueError`` when two of the mechanisms share a name."""
    targets, against = tuple(dict.fromkeys(targets)), tuple(dict.fromkeys(against))
    everything = list(dict.fromkeys(targets + against))
    names = [load_mechanism(r).name for r in everything]
    if len(set(names)) != len(names):
        raise ValueError(f"two mechanisms share a name among {names}")
    reused = {}
    for reference in against:
        folder = committed / load_mechanism(reference).name
        if reference not in targets and same_settings(config, card_settings(folder)):
            reused[load_mechanism(reference).name] = folder
    computed = tuple(r for r in everything if load_mechanism(r).name not in reused)
    return CardPlan(targets, against, computed, reused)


def read_card(folder: Path, columns_of: Callable[[str], Sequence[str]] = lambda _: ()) -> Card:
    """The tables of the card in ``folder`` (``DataError`` naming a missing file)."""
    made_by = "python experiments/11_mechanism_card.py"
    return Card(
        *(read_csv_checked(folder / f"{f}.csv", columns_of(f), made_by) for f in Card._fields)
    )


def card_settings(folder: Path) -> dict | None:
    """The ``card_settings`` recorded in the sidecars of the card in ``folder``, if every
    table has the same."""
    found = []
    for name in Card._fields:
        path = sidecar_path(folder / f"{name}.csv")
        if not path.is_file() or not (folder / f"{name}.csv").is_file():
            return None
        found.append(json.loads(path.read_text(encoding="utf-8"))["flags"].get("card_settings"))
    return found[0] if all(f == found[0] for f in found) else None


def same_settings(config: CardConfig, recorded: dict | None) -> bool:
    """Whether ``recorded`` (a sidecar's ``card_settings``) equals ``config.settings()``."""
    return recorded is not None and recorded == json.loads(json.dumps(config.settings()))
