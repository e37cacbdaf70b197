"""The flags every study that trains the language model shares (11's card on ``--task lm``,
14, 15), declared once here: the optimizer (``attnlab.training.optimizers``' registry),
QK-Clip's threshold (a float32 normal number: ``qk_clip_tau``), and the warmup a run's
length gives (the peak rates: ``harness.flags.add_rates_flag``)."""

from __future__ import annotations

import argparse

from attnlab.harness import cli
from attnlab.lm.qk_clip import FLOAT32_MAX, FLOAT32_TINY, check_tau
from attnlab.lm.train import LMConfig
from attnlab.training.optimizers import OPTIMIZERS

#: 14's warmup at its 500 steps.
WARMUP = LMConfig().warmup


def warmup_for(steps: int, warmup: int = WARMUP) -> int:
    """The warmup of a run of ``steps``: ``min(warmup, steps // 10)`` (50 at the default
    500 steps, 20 at 200)."""
    return min(warmup, steps // 10)


def qk_clip_tau(text: str) -> float:
    """An argparse type: QK-Clip's ``tau``, a finite float ``> 0`` that float32 (the
    clip's arithmetic) holds as a normal number (``attnlab.lm.qk_clip.check_tau``): a
    smaller one would clip with tau 0 while the tables record the value given."""
    value = cli.positive_float(text)
    try:
        return check_tau(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text} is outside float32's normal numbers ({FLOAT32_TINY:g} to "
            f"{FLOAT32_MAX:g}), in which the clip computes: it would clip at another tau"
        ) from None


def add_optimizer_flag(parser: argparse.ArgumentParser, default: str, help: str) -> None:
    """``--optimizer``: one of the registry's optimizers."""
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=default, help=help)


def add_qk_clip_flag(parser: argparse.ArgumentParser, default: float | None, help: str) -> None:
    """``--qk-clip TAU``: QK-Clip's threshold (``qk_clip_tau``)."""
    parser.add_argument("--qk-clip", type=qk_clip_tau, default=default, metavar="TAU", help=help)
