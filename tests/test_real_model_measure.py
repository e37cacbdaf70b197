"""attnlab.studies.real_model.measure: experiment 13's inputs read and checked (each
refusal a ``cli.UsageError`` naming its flag) and measured, the encoder's tables with one
checkpoint's provenance and the causal ones with a list per checkpoint (``tables`` end to
end: test_real_model_experiment and test_real_model_causal)."""

from __future__ import annotations

import dataclasses

import pytest
from support import (
    TINY_WORDS,
    parse_real_model_flags,
    real_model_request,
    write_tiny_bert,
    write_tiny_gpt2,
)

from attnlab.harness import cli
from attnlab.studies.real_model import measure
from attnlab.studies.real_model.measure import read_inputs

TINY = ("--lengths", "16", "--tokens", "60", "--counterfactual-length", "16")


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(" ".join(TINY_WORDS[i * 7 % len(TINY_WORDS)] for i in range(200)))
    return path


def inputs(text, *checkpoints, argv=TINY, mechanisms=()):
    read = dataclasses.replace(
        real_model_request(*argv),
        text=text,
        checkpoint=checkpoints or None,
        mechanisms=tuple(mechanisms),
    )
    return read_inputs(read, parse_real_model_flags(*argv))


def test_several_encoders_are_refused(tmp_path, text):
    one = write_tiny_bert(tmp_path / "a")
    two = write_tiny_bert(tmp_path / "b", seed=1)
    with pytest.raises(cli.UsageError, match="^--checkpoint: several"):
        inputs(text, one, two)


def test_a_length_past_the_context_and_a_short_text_name_their_flags(tmp_path, text):
    """A row longer than the tiny GPT-2's 16 positions (the script's one line, exit 2,
    nothing written, on a BERT's: test_real_model_experiment's bad flags), a text too short,
    a text absent."""
    gpt2 = write_tiny_gpt2(tmp_path / "g")
    with pytest.raises(cli.UsageError, match="^--lengths: 4096 is longer"):
        inputs(text, gpt2, argv=("--lengths", "4096", "--counterfactual-length", "4096"))
    words = r"^--lengths: 32 is longer than .*'s max_seq_length 16$"
    with pytest.raises(cli.UsageError, match=words):
        inputs(
            text, gpt2, argv=("--lengths", "32", "--tokens", "96", "--counterfactual-length", "32")
        )
    with pytest.raises(cli.UsageError, match="^--tokens: the text has"):
        inputs(text, gpt2, argv=(*TINY[:2], *TINY[4:], "--tokens", "5000"))
    with pytest.raises(cli.UsageError, match="^--text: cannot read"):
        inputs(tmp_path / "absent.txt", gpt2)


def test_a_text_is_read_no_further_than_its_tokens_need(tmp_path, text):
    """Of a long ``--text``, only ``TEXT_BYTES_PER_TOKEN`` bytes a token of ``--tokens``
    (the source and the checksum are of what was read); a shorter one whole; where the bytes
    read hold too few tokens, ``--tokens`` is named with them."""
    long = tmp_path / "long.txt"
    long.write_text("the cat sat on the mat. " * 50_000)  # 1.2 MB
    source = measure.text_source(long, 10)
    limit = 10 * measure.TEXT_BYTES_PER_TOKEN
    assert len(source.text.encode()) == limit
    assert source.source == f"{long} (its first {limit} bytes)"
    assert measure.text_source(text, 100).source == str(text)  # 6400 bytes: all of it
    spaces = tmp_path / "spaces.txt"  # no token in the bytes 60 tokens may read
    spaces.write_text(" " * 10**6 + "the end")
    words = f"^--tokens: the text has 0 tokens in its first {60 * 64} bytes, fewer than 60$"
    with pytest.raises(cli.UsageError, match=words):
        inputs(spaces, write_tiny_bert(tmp_path / "b"))


def test_no_checkpoint_reads_the_packaged_encoder(text):
    found = inputs(text)
    assert found.packaged and not found.causal and len(found.checkpoints) == 1


def test_lengths_not_given_fit_the_checkpoints_context(tmp_path, text):
    """The tiny GPT-2's context: no --lengths or --counterfactual-length, and 13 reads it
    (at a quarter, a half and the whole of it) instead of refusing the defaults twice."""
    gpt2 = write_tiny_gpt2(tmp_path / "g")
    found = inputs(text, gpt2, argv=("--tokens", "60"))
    context = found.checkpoints[0].max_seq_length
    assert max(found.config.lengths) == context < max(parse_real_model_flags().lengths)
    assert found.config.counterfactual_length == context


def test_gpt2_checkpoints_are_causal(tmp_path, text):
    one, two = write_tiny_gpt2(tmp_path / "a"), write_tiny_gpt2(tmp_path / "b", seed=1)
    found = inputs(text, one, two)
    assert found.causal and not found.packaged and len(found.checkpoints) == 2


def test_mechanisms_are_for_gpt2_checkpoints_only(tmp_path, text):
    encoder = write_tiny_bert(tmp_path / "a")
    with pytest.raises(cli.UsageError, match="^--mechanisms: only a GPT-2 checkpoint"):
        inputs(text, encoder, mechanisms=["scaled"])


def test_each_supplied_mechanism_is_one_a_checkpoint_names(tmp_path, text):
    gpt2 = write_tiny_gpt2(tmp_path / "a")  # GPT-2's own attention: scaled
    assert inputs(text, gpt2, mechanisms=["scaled"]).causal  # a built-in's name: allowed
    with pytest.raises(cli.UsageError, match=r"^--mechanisms: no --checkpoint names 'qk_norm'"):
        inputs(text, gpt2, mechanisms=["qk_norm"])
    with pytest.raises(cli.UsageError, match="^--mechanisms: two are named 'scaled'"):
        inputs(text, gpt2, mechanisms=["scaled", "scaled"])


def test_a_checkpoint_given_twice_is_named_once(tmp_path, text):
    gpt2 = write_tiny_gpt2(tmp_path / "a")
    with pytest.raises(cli.UsageError, match="^--checkpoint: .* is given twice"):
        inputs(text, gpt2, tmp_path / "." / "a")


@pytest.mark.parametrize("flag", ["--text", "--lengths"])
def test_the_config_ledger_refuses_a_flag_that_reads_text(flag):
    argv = ["--config", "config.json", flag, "64"]
    with pytest.raises(cli.UsageError, match=f"^--config: .*; drop {flag}$"):
        measure.config_ledger(real_model_request(*argv))
