"""The card from Python: ``attnlab.card(mechanism)`` runs experiment 11's battery on a
``Mechanism``, a plain function ``logits(q, k)`` or a reference, and returns its tables
and verdicts as pandas objects; with ``out_dir`` it writes the files the script writes
(the same CSVs, byte for byte, for the same mechanism and settings)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from attnlab.core.mechanism import Mechanism, MechanismError, as_mechanism, refusal
from attnlab.core.references import load_mechanism
from attnlab.harness import cli
from attnlab.studies.card import store
from attnlab.studies.card.compute import QUICK, CardConfig, run_cards, total_work
from attnlab.studies.card.report import card_markdown
from attnlab.studies.card.verdicts import Card

#: The baselines of a card unless told otherwise (the script's ``--against``).
AGAINST = ("scaled", "unscaled")


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
    against: Sequence[Mechanism | str] | str = AGAINST,
    quick: bool = False,
    seed: int = 0,
    out_dir: Path | str | None = None,
    name: str | None = None,
    progress: bool = True,
    committed: Path | None = None,
) -> CardReport:
    """The card of ``mechanism`` (a ``Mechanism``, a function ``logits(q, k)``, named
    ``name`` or its ``__name__``, or a reference ``load_mechanism`` resolves) against the
    baselines ``against`` (references or Mechanisms; a string is split at commas), at the
    script's default settings or ``quick``'s, from ``seed``.

    Baselines that are built-ins are read from their committed cards in ``committed``
    (default: this repository's ``results/cards/``) when the settings match, as the
    script does. With ``out_dir``, the card is written there as
    ``experiments/11_mechanism_card.py --out-dir OUT_DIR`` writes it (``cards/NAME/`` for
    a built-in, ``cards/user/NAME/`` for a mechanism of yours); nothing is written
    without it. Raises ``MechanismError`` or ``MechanismReferenceError`` (one line naming
    the mechanism and the cause) before any work."""
    target = mechanism if isinstance(mechanism, str) else as_mechanism(mechanism, name)
    baselines = against.split(",") if isinstance(against, str) else list(against)
    for reference in [target, *baselines]:
        loaded = load_mechanism(reference)
        if loaded.needs_positions():  # the card trains the recall task: no positions
            raise MechanismError(refusal(loaded, loaded.needs_positions()))
    config = dataclasses.replace(QUICK if quick else CardConfig(), seed=seed)
    folder = cli.REPO_ROOT / cli.RESULTS_DIR / store.CARDS if committed is None else committed
    plan = store.plan_cards(config, [target], baselines, Path(folder))
    cli.configure_jax()
    started = time.perf_counter()
    with tqdm(total=total_work(config, plan.computed), desc="card", disable=not progress) as bar:
        (result,) = run_cards(config, plan, bar.update)
    wall = time.perf_counter() - started
    shown = target if isinstance(target, str) else target.name
    command = f"attnlab.card({shown}, against={[store.reference_text(b) for b in baselines]}"
    command += f"{', quick=True' if quick else ''}, seed={seed})"
    written = None
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        flags = {
            "mechanism": [store.reference_text(target)],
            "against": [store.reference_text(b) for b in baselines],
            "quick": quick,
            "seed": seed,
            "card_settings": config.settings(),
        }
        with cli.staged_outputs(out_dir) as stage:
            store.write_cards([result], stage, flags, wall, command, True, config.quick)
        written = out_dir / store.card_folder(target, committed=True)
    read_from = {b: str(f) for b, f in result.read_from.items()}
    text = card_markdown(result.card, result.verdicts, result.name,
                         store.reference_text(target), command, read_from,
                         config.quick)  # fmt: skip
    return CardReport(result.name, result.card, result.verdicts, text, written)
