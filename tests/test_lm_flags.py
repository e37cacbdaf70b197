"""attnlab.lm.flags: the warmup a run's length gives, QK-Clip's threshold held to float32's
normal numbers (both ways), and the optimizer flag offering the registry."""

from __future__ import annotations

import argparse

import pytest

from attnlab.harness import cli
from attnlab.lm.flags import add_optimizer_flag, add_qk_clip_flag, qk_clip_tau, warmup_for
from attnlab.training.optimizers import OPTIMIZERS


def test_warmup_is_a_tenth_of_the_steps_at_most_50():
    assert [warmup_for(s) for s in (500, 200, 100, 20)] == [50, 20, 10, 2]
    assert warmup_for(200, warmup=15) == 15


@pytest.mark.parametrize("text", ["1e-300", "1e-40", "1e39", "0", "-1", "nan"])
def test_a_tau_float32_cannot_hold_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        qk_clip_tau(text)


def test_a_tau_float32_holds_is_taken():
    assert qk_clip_tau("100") == 100.0 and qk_clip_tau("1e-30") == 1e-30


def test_the_flags_offer_the_registry():
    parser = cli.new_parser("test")
    add_optimizer_flag(parser, "adamw", "the optimizer")
    add_qk_clip_flag(parser, None, "the clip")
    args = parser.parse_args(["--optimizer", "lion", "--qk-clip", "20"])
    assert args.optimizer == "lion" and args.qk_clip == 20.0 and "lion" in OPTIMIZERS
