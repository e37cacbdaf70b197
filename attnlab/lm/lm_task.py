"""14's byte-level language model as a ``Task`` of the registry (``attnlab.training.tasks``):
its configuration (``LMConfig``, at 300 steps with rotary positions, or 150 under
``quick``), its programs (``train.lm_programs``), the standard library's prose split once
(``train.split_text``), its seeds' keys and the mechanism's constants at its head width.
It takes the card's ``--optimizer`` and ``--qk-clip``."""

from __future__ import annotations

from functools import cache

import numpy as np

from attnlab.core.mechanism import Mechanism, MechanismError
from attnlab.core.text import byte_tokens, read_text
from attnlab.lm.train import LMConfig, lm_programs, seed_keys, split_text
from attnlab.training.tasks import Task


@cache
def prose() -> tuple[np.ndarray, str]:
    """The standard library's prose (14's text) as bytes, and its SHA-256 (the prose differs
    between Python versions, and so would the numbers)."""
    source = read_text(None)
    return byte_tokens(source.text), source.sha256


def lm_defaults(
    quick: bool = False, seed: int = 0, optimizer: str = "adamw", qk_clip: float | None = None
) -> LMConfig:
    """14's set-up at 300 steps with rotary positions (150 and 64 evaluation windows under
    ``quick``), trained with ``optimizer`` and QK-Clip at ``qk_clip``; ``seed`` is the
    lanes' (``train_task``'s ``seeds``), not the configuration's."""
    del seed
    steps, windows = (150, 64) if quick else (300, 128)
    return LMConfig(steps=steps, warmup=steps // 10, positions="rotary", eval_windows=windows,
                    optimizer=optimizer, qk_clip_tau=qk_clip)  # fmt: skip


def lm_data(config: LMConfig) -> tuple[np.ndarray, np.ndarray]:
    """The training bytes and the held-out windows (``split_text``)."""
    split = split_text(prose()[0], config)
    return split.train, split.held_out


def lm_refusal(mechanism: Mechanism, config: LMConfig) -> str | None:
    """Why the LM cannot train ``mechanism``: a per-head vector without one value per head."""
    try:
        mechanism.head_values(config.d_head, config.n_heads)
    except MechanismError as err:
        return f"{err} (d_model {config.d_model})"
    return None


#: Declared before any run: experiment 14's half-decade grid without its lowest (1e-3 is
#: never best there), so that the best rate and ten times it are both swept (the LM card's).
LM_RATES = (3e-3, 1e-2, 3e-2, 1e-1, 3e-1)

LM_TASK = Task(
    name="lm",
    about="experiment 14's byte-level causal language model on the standard library's prose",
    defaults=lm_defaults,
    programs=lm_programs,
    data=lm_data,
    seed_keys=seed_keys,
    constants=lambda config, mechanism: mechanism.constant_values(config.d_head),
    refusal=lm_refusal,
    lrs=LM_RATES,
    flags=("optimizer", "qk_clip"),
)
