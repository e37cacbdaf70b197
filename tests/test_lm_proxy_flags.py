"""attnlab.studies.lm_proxy.flags: experiment 14's flags read into a ``ProxyConfig`` (the
defaults, --quick's replacements, a flag given beside --quick wins) and each bad value a
``cli.UsageError`` naming its flag; ``text_tokens`` refuses a text too short to hold out."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from attnlab.core.references import load_mechanism
from attnlab.harness import cli
from attnlab.harness.outputs import made_with_defaults
from attnlab.studies.lm_proxy.flags import (
    DEFAULT,
    QUICK,
    add_proxy_flags,
    proxy_config,
    ran,
    text_tokens,
)
from attnlab.studies.lm_proxy.study import ONE_WIDTH, SINKS, SWEPT


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    add_proxy_flags(parser)
    return proxy_config(parser.parse_args(list(argv)))


def test_no_flags_give_the_default_configuration():
    assert parse() == DEFAULT


def test_quick_keeps_its_values_unless_a_flag_is_given():
    quick = parse("--quick")
    assert quick.widths == QUICK.widths and quick.lrs == QUICK.lrs
    assert quick.lm.steps == QUICK.lm.steps
    assert parse("--quick", "--lrs", "0.5").lrs == (0.5,)
    assert parse("--quick", "--steps", "30").lm == dataclasses.replace(QUICK.lm, steps=30, warmup=3)


def test_a_flag_given_beside_quick_wins_even_at_the_default_value():
    """The trap: a flag equal to its default was taken for not given, so --quick --steps 500
    trained 200 steps and --quick --lrs <the six defaults> three rates."""
    assert parse("--quick", "--steps", str(DEFAULT.lm.steps)).lm.steps == DEFAULT.lm.steps
    six = [str(r) for r in DEFAULT.lrs]
    assert parse("--quick", "--lrs", *six).lrs == DEFAULT.lrs
    widths = [str(w) for w in DEFAULT.widths]
    assert parse("--quick", "--widths", *widths).widths == DEFAULT.widths
    assert parse("--quick", "--one-width", "64").one_width_d_model == 64


def test_quick_trains_and_saves_every_mechanism_at_its_own_width():
    """--quick dropped unscaled and inv_d and saved no model (it trained d_model 32 and
    saved at --one-width 64); now every mechanism trains at 32, where models are saved."""
    quick = parse("--quick")
    assert quick.one_width == DEFAULT.one_width and quick.one_width_d_model == 32
    assert {cell.d_model for cell in quick.cells()} == {32}


def test_the_default_mechanisms_named_again_are_still_the_defaults():
    """The flags resolve each mechanism where it enters (a ``MechanismRef``), and so do the
    defaults: naming them again is still a run of the committed defaults."""
    parser = cli.new_parser("test")
    add_proxy_flags(parser)
    assert made_with_defaults(parser, parser.parse_args(["--mechanisms", *SWEPT]))
    assert not made_with_defaults(parser, parser.parse_args(["--mechanisms", "scaled"]))


def test_warmup_is_derived_from_steps():
    assert parse("--steps", "100").lm.warmup == 10


def test_the_sidecar_records_what_ran():
    references = {"mechanisms": list(SWEPT), "one_width_mechanisms": list(ONE_WIDTH),
                  "sink_mechanisms": list(SINKS)}  # fmt: skip
    assert ran(parse("--quick")) == {"widths": [32], "one_width": 32,
                                     "lrs": [1e-3, 1e-2, 1e-1], "steps": 200,
                                     "sink_seeds": 2, **references}  # fmt: skip
    assert ran(parse()) == {"widths": [32, 64, 128], "one_width": 64,
                            "lrs": list(DEFAULT.lrs), "steps": 500, "sink_seeds": 3,
                            **references}  # fmt: skip
    assert ran(parse("--sink-mechanisms", "--sink-seeds", "4"))["sink_seeds"] == 4
    assert parse("--sink-mechanisms").cells() == parse("--sink-mechanisms", "gated").cells()[:-1]
    chosen = ran(parse("--mechanisms", "qk_norm", "--one-width-mechanisms"))
    assert (chosen["mechanisms"], chosen["one_width_mechanisms"]) == (["qk_norm"], [])


def test_a_width_off_the_head_width_names_its_flag():
    with pytest.raises(cli.UsageError, match="^--widths: 40 is not a multiple of the head"):
        parse("--widths", "40")


def test_a_text_too_short_to_hold_out_is_refused(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("too short", encoding="utf-8")
    with pytest.raises(cli.UsageError, match="--text: 9 bytes are too few"):
        text_tokens(short, DEFAULT)
    source, tokens = text_tokens(None, DEFAULT)
    assert len(tokens) == len(source.text.encode("utf-8"))


def test_two_mechanisms_of_one_name_are_refused(tmp_path):
    with pytest.raises(cli.UsageError, match="^--mechanisms: 'scaled' is given twice"):
        parse("--mechanisms", "scaled", "scaled")
    with pytest.raises(cli.UsageError, match="^--one-width-mechanisms: 'qk_norm' is given"):
        parse("--mechanisms", "qk_norm", "--one-width-mechanisms", "qk_norm")
    mine = tmp_path / "mine.py"
    mine.write_text("def scaled(q, k):\n    return q @ k.swapaxes(-1, -2)\n", encoding="utf-8")
    with pytest.raises(cli.UsageError, match="both named 'scaled'.*: rename yours$"):
        parse("--mechanisms", "scaled", f"{mine}:scaled")
    with pytest.raises(cli.UsageError, match="^--one-width-mechanisms: .* both named 'scaled'"):
        parse("--mechanisms", f"{mine}:scaled", "--one-width-mechanisms", "scaled")
    alone = parse("--mechanisms", f"{mine}:scaled", "qk_norm")  # a namesake alone is its own
    assert [m.reference for m in alone.swept] == [f"{mine}:scaled", "qk_norm"]
    assert alone.swept[1].mechanism is load_mechanism("qk_norm")  # resolved once, on entry


def test_the_optimizer_and_the_clip_reach_the_language_model():
    assert (parse().lm.optimizer, parse().lm.qk_clip_tau) == ("adamw", None)
    chosen = parse("--optimizer", "muon", "--qk-clip", "100").lm
    assert (chosen.optimizer, chosen.qk_clip_tau) == ("muon", 100.0)


def test_the_layout_is_not_an_output_flag():
    """--layout llama saves the models in Llama's layout and is a run of its own (a run
    folder, never results/, whose GPT-2 checkpoints 13's committed tables read); the
    default, given or not, is the committed run."""
    assert (DEFAULT.layout, parse("--layout", "llama").layout) == ("gpt2", "llama")
    parser = cli.new_parser("test")
    add_proxy_flags(parser)
    assert made_with_defaults(parser, parser.parse_args(["--layout", "gpt2"]))
    assert not made_with_defaults(parser, parser.parse_args(["--layout", "llama"]))
