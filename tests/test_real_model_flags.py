"""attnlab.studies.real_model.flags: experiment 13's flags read once into a
``RealModelRequest`` (each as given) and into a ``RealModelConfig`` (the defaults, lengths
sorted and deduplicated), each contradiction between them a ``cli.UsageError`` naming its
flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import parse_real_model_flags as parse
from support import real_model_request as request

from attnlab.harness import cli
from attnlab.studies.real_model.flags import (
    DEFAULT,
    fitted_lengths,
    real_model_config,
    resolved,
)
from attnlab.studies.real_model.study import CAUSAL_TABLES


def test_the_request_holds_the_flags_as_given():
    given = request("--checkpoint", "a", "b", "--lengths", "64", "16", "--mechanisms", "scaled")
    assert given.checkpoint == (Path("a"), Path("b")) and given.lengths == (64, 16)
    assert given.mechanisms == ("scaled",) and given.config is None
    default = request()
    assert (default.checkpoint, default.lengths, default.counterfactual_length) == (None,) * 3
    assert (default.tables, default.mechanisms) == (CAUSAL_TABLES, ())


def test_no_flags_give_the_default_configuration():
    assert parse() == DEFAULT


def test_lengths_are_sorted_and_deduplicated():
    config = parse("--lengths", "64", "16", "64", "--counterfactual-length", "16")
    assert config.lengths == (16, 64)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--lengths", "16", "32", "--counterfactual-length", "64"], "--counterfactual-length"),
        (["--lengths", "64", "--counterfactual-length", "64", "--tokens", "61"], "--tokens"),
    ],
)
def test_contradicting_flags_name_the_flag(argv, flag):
    with pytest.raises(cli.UsageError, match=f"^{flag}: "):
        parse(*argv)


def test_a_row_of_tokens_with_two_special_tokens_is_enough():
    # an encoder row holds [CLS] and [SEP] beside T - 2 text tokens
    assert parse("--lengths", "64", "--counterfactual-length", "64", "--tokens", "62").tokens == 62


def test_lengths_not_given_fit_a_shorter_context():
    """14's models have 64 positions: 13's defaults (32, 128, 256) failed twice on them
    (--lengths too long, then --counterfactual-length not among them)."""
    assert fitted_lengths(None) == fitted_lengths(512) == DEFAULT.lengths
    assert fitted_lengths(64) == (16, 32, 64)
    assert fitted_lengths(8) == (3, 4, 8)
    fitted = real_model_config(request(), 64)
    assert (fitted.lengths, fitted.counterfactual_length) == ((16, 32, 64), 64)
    given = real_model_config(request("--lengths", "16", "32"), 64)
    assert (given.lengths, given.counterfactual_length) == ((16, 32), 32)  # the longest given
    assert resolved(fitted) == {"lengths": [16, 32, 64], "counterfactual_length": 64}
