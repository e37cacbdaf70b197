"""attnlab.recall.flags: the recall flags read into a ``RecallConfig`` (defaults, choices,
``--reading``'s five choices at once) and each conflict a ``cli.UsageError`` naming both
flags."""

from __future__ import annotations

import pytest

from attnlab.harness import cli
from attnlab.recall.config import RecallConfig
from attnlab.recall.flags import add_recall_flags, recall_config


def parse(*argv):
    parser = cli.new_parser("test")
    add_recall_flags(parser)
    return recall_config(parser.parse_args(list(argv)))


def test_flags_defaults_and_choices():
    assert parse() == RecallConfig()
    c = parse("--slot", "sum", "--init", "gpt", "--bias")
    assert (c.slot, c.init, c.bias) == ("sum", "gpt", True)
    assert parse("--no-bias").bias is False


def test_reading_flag_sets_the_five_choices():
    c = parse("--reading", "separate-gpt-bias-d64-b32", "--steps", "5")
    assert (c.slot, c.init, c.bias, c.d_model, c.batch_size, c.steps) == (
        "separate",
        "gpt",
        True,
        64,
        32,
        5,
    )
    assert parse("--reading", "natural") == RecallConfig()
    # the reading's own values may be repeated
    assert parse("--reading", "separate-gpt-bias-d64-b32", "--batch-size", "32", "--bias") == (
        parse("--reading", "separate-gpt-bias-d64-b32")
    )


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--batch-size", "64"], "--batch-size"),  # the default value, but typed
        (["--no-bias"], "--no-bias"),
        (["--slot", "concat"], "--slot"),
        (["--init", "natural"], "--init"),
        (["--d-model", "256"], "--d-model"),
    ],
)
def test_reading_flag_conflict_names_both_flags(flags, named):
    with pytest.raises(cli.UsageError) as err:
        parse("--reading", "separate-gpt-bias-d64-b32", *flags)
    assert named in str(err.value) and "--reading" in str(err.value)


def test_embed_init_std_only_with_natural_init():
    with pytest.raises(cli.UsageError, match="--embed-init-std"):
        parse("--init", "pytorch", "--embed-init-std", "2")
    assert parse("--embed-init-std", "2").embed_init_std == 2.0
