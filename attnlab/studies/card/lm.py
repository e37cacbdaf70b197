"""The card's language-model task (``--task lm``): a mechanism trained in experiment 14's
causal LM (``attnlab.lm.train``) at a few learning rates and two widths, read as
the card reads the recall task.

Per mechanism and width, every rate of ``lrs`` is a lane of one compiled program
(``train_lanes``), and the card keeps (``attnlab.lm.sweep``):

- *lm_sweep*: one row per lane: held-out loss at step 0 and at the end (nats per byte, mean
  and SE over windows), the largest attention logit per layer over training, and the
  QK-Clip threshold it trained under (``qk_clip_tau``, empty without the clip);
- *lm_ownership*: per layer and head, at the best rate and at ``drift_factor`` times it,
  the logit scale and the ownership elasticity of the trained weights;
- *lm_lengths*: the held-out loss of the best rate's model on sequences ``length_factors``
  times its training length.

Positions: rotary (Wortsman et al. 2023's proxy) for every mechanism, except one whose
logits read the key's position (``k_pos``: a relative bias of its own, as ALiBi), which is
trained with none, as Press et al. 2022 train ALiBi (``LMCardConfig.positions_for``).
Learned absolute positions would leave length generalisation unmeasurable: they have no
rows past the training length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnlab.core.mechanism import Mechanism
from attnlab.core.progress import Progress
from attnlab.core.references import MechanismRef
from attnlab.harness.workers import Piece, run_pieces
from attnlab.lm.lm_task import LM_TASK, prose
from attnlab.lm.sweep import length_rows, ownership_rows, sweep_rows
from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.lm.train import LMConfig, split_text, train_lanes
from attnlab.studies.card.lm_verdicts import DRIFT_FACTOR, LMCard, lm_verdicts_frame
from attnlab.studies.card.store import CardPlan, CardResult, card_results, merge_cards, reused_cards

#: The rates: the language model's task's (``lm_task.LM_RATES``, declared before any run).
LM_RATES = LM_TASK.lrs
#: Two widths at head width 16 (2 and 4 heads).
LM_WIDTHS = (32, 64)
#: Lengths the trained model reads, as multiples of its training length.
LENGTH_FACTORS = (1, 2, 4)


@dataclass(frozen=True)
class LMCardConfig:
    """What a language-model card trains. ``lm``: experiment 14's set-up at 300 steps with
    rotary positions (its ``d_model`` replaced by each of ``widths``); ``text_sha256``:
    the text's checksum (the standard library's prose differs between Python versions, and
    so would the numbers); ``quick``: a ``--quick`` card."""

    lm: LMConfig = field(default_factory=lambda: LMConfig(steps=300, warmup=30, positions="rotary"))
    widths: tuple[int, ...] = LM_WIDTHS
    lrs: tuple[float, ...] = LM_RATES
    length_factors: tuple[int, ...] = LENGTH_FACTORS
    drift_factor: float = DRIFT_FACTOR
    seed: int = 0
    text_sha256: str = ""
    quick: bool = False

    def settings(self) -> dict:
        """Everything that decides a card's numbers but the mechanisms."""
        return dataclasses.asdict(self)

    def positions_for(self, mechanism: Mechanism) -> str:
        """``none`` for a mechanism whose logits read ``k_pos``, else ``lm.positions``."""
        return "none" if "k_pos" in mechanism.asks else self.lm.positions

    def width(self, d_model: int, mechanism: Mechanism) -> LMConfig:
        return dataclasses.replace(self.lm, d_model=d_model,
                                   positions=self.positions_for(mechanism))  # fmt: skip


def lm_problem(reference: MechanismRef, config: LMCardConfig) -> str | None:
    """Why the language model cannot card the mechanism of ``reference``, in one line (None:
    it can): it needs one value per head of every per-head vector at each of its widths."""
    mechanism = reference.mechanism
    problems = (LM_TASK.refusal(mechanism, config.width(d, mechanism)) for d in config.widths)
    return next((p for p in problems if p is not None), None)


def lm_card_config(
    quick: bool = False, seed: int = 0, optimizer: str = "adamw", qk_clip: float | None = None
) -> LMCardConfig:
    """The defaults (or ``QUICK``'s) with ``seed``, this Python's text checksum, the
    ``optimizer`` (``attnlab.training.optimizers``) and QK-Clip at ``qk_clip`` (None: none)
    for every mechanism of the card, baselines included."""
    base = LM_QUICK if quick else LMCardConfig()
    lm = dataclasses.replace(base.lm, optimizer=optimizer, qk_clip_tau=qk_clip)
    return dataclasses.replace(base, lm=lm, seed=seed, text_sha256=prose()[1])


#: ``--quick``: one width, three rates, 150 steps (about a minute for a mechanism and its
#: baseline); the drift verdict is undetermined where ten times the best rate is not swept.
LM_QUICK = LMCardConfig(
    lm=LMConfig(steps=150, warmup=15, positions="rotary", eval_windows=64),
    widths=(32,),
    lrs=(3e-3, 3e-2, 3e-1),
    quick=True,
)


def lm_cell(
    config: LMCardConfig, reference: MechanismRef, d_model: int, on_progress: Progress = None
) -> LMCard:
    """One mechanism at one width: every rate a lane (one seed, ``config.seed``), and the
    three tables of the module docstring."""
    mechanism = reference.mechanism
    lm = config.width(d_model, mechanism)
    tokens, _ = prose()
    split = split_text(tokens, lm)
    result = train_lanes(lm, mechanism, list(config.lrs), [config.seed], split, on_progress)
    sweep = sweep_rows(result)
    sweep.insert(2, "positions", lm.positions)
    sweep.insert(3, "qk_clip_tau", np.nan if lm.qk_clip_tau is None else float(lm.qk_clip_tau))
    ownership = ownership_rows(result, sweep, split, mechanism, config.drift_factor)
    best, _ = best_lane_rates(sweep, config.drift_factor)
    lengths = length_rows(result, best, split, mechanism, config.length_factors)
    return LMCard(sweep, ownership, lengths)


def lm_card_pieces(config: LMCardConfig, references: Sequence[MechanismRef]) -> list[Piece]:
    """One piece per (mechanism, width); its units are its lane-steps (the progress bar's),
    its cost those times ``(d_model / 64)^2``."""
    units = len(config.lrs) * config.lm.steps
    return [
        Piece(lm_cell, (config, reference, d), units, units * (d / 64) ** 2)
        for reference in references
        for d in config.widths
    ]


def lm_card_tables(
    config: LMCardConfig,
    references: Sequence[MechanismRef],
    on_progress: Progress = None,
    jobs: int = 1,
) -> LMCard:
    """Every table for ``references``, mechanism by mechanism, widths in order (the pieces
    run by ``jobs`` workers; the tables do not depend on ``jobs``). A mechanism without a
    reference (not ``portable``) makes them run here."""
    if not all(r.portable for r in references):
        jobs = 1
    cells = run_pieces(lm_card_pieces(config, references), jobs, on_progress)
    return merge_cards(cells)


def lm_total_work(config: LMCardConfig, references: Sequence[MechanismRef]) -> int:
    """Progress units of ``lm_card_tables``."""
    return sum(piece.units for piece in lm_card_pieces(config, references))


def run_lm_cards(
    config: LMCardConfig, plan: CardPlan, on_progress: Progress = None, jobs: int = 1
) -> list[CardResult]:
    """The language-model cards of ``plan.targets``, each with its baselines' rows (read
    from their committed cards where ``plan.reused`` says, else trained here by ``jobs``
    workers) and its verdicts."""
    cards = reused_cards(plan, LMCard)
    if plan.computed:
        cards.append(lm_card_tables(config, plan.computed, on_progress, jobs))
    return card_results(plan, merge_cards(cards), lm_verdicts_frame)
