"""The card's language-model task (attnlab.studies.card.lm, ``--task lm``): the positions
each mechanism trains with, a tiny card end to end (tables, verdicts, files, a baseline read
back from a written card), and bad input refused with one line before any work."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from support import ALIBI_FILE

from attnlab.core.positional import POSITIONAL
from attnlab.core.references import load_mechanism, resolve
from attnlab.core.temperature import BUILTINS
from attnlab.core.text import read_text
from attnlab.harness import cli
from attnlab.lm.train import LMConfig
from attnlab.studies.card import lm, store
from attnlab.studies.card.lm_verdicts import LM_VERDICTS, LMCard
from attnlab.studies.card.wings import lm_wing

#: A card that compiles and runs in seconds: d_model 16 (2 heads of 8), 4 steps, two rates
#: ten apart, lengths 1x and 2x. ``lm`` is the LM tests' common tiny config (see
#: tests/test_lm_train.py's COMMON), the same literal values, so that the card's
#: compiled programs are those of test_lm_sweep and test_lm_train.
TINY = lm.LMCardConfig(
    lm=LMConfig(d_model=16, d_head=8, n_layers=1, seq_len=8, batch_size=4, steps=4, warmup=1,
                chunk_steps=2, eval_windows=400, positions="rotary"),
    widths=(16,), lrs=(1e-2, 1e-1), length_factors=(1, 2), quick=True,
)  # fmt: skip


def test_a_mechanism_with_a_position_bias_trains_without_positions(tmp_path):
    (tmp_path / "my_alibi.py").write_text(ALIBI_FILE, encoding="utf-8")
    users = load_mechanism(f"{tmp_path}/my_alibi.py:alibi")
    config = lm.LMCardConfig()
    assert config.positions_for(users) == "none" == config.positions_for(POSITIONAL["alibi"])
    for name in ("scaled", "qk_norm"):
        assert config.positions_for(BUILTINS[name]) == "rotary"
    # SSMax by position reads q_pos (its row length), not where a key sits: rotary.
    assert config.positions_for(POSITIONAL["ssmax_causal"]) == "rotary"
    assert config.width(64, users) == dataclasses.replace(config.lm, d_model=64, positions="none")


def test_the_settings_name_the_text():
    assert lm.lm_card_config().text_sha256 == read_text(None).sha256 != ""
    assert lm.lm_card_config(quick=True).settings()["quick"] is True


@pytest.fixture(scope="module")
def tiny_cards():
    """unscaled against scaled: the two share one compiled program (only a constant
    differs), which keeps the fixture within the fast tests' budget; the LM without
    positions (ALiBi's) is read in test_lm_sweep."""
    unscaled, scaled = resolve("unscaled"), resolve("scaled")
    plan = store.CardPlan((unscaled,), (scaled,), (unscaled, scaled), {})
    return lm.run_lm_cards(TINY, plan)


def test_a_tiny_card_has_every_table_and_verdict(tiny_cards):
    (result,) = tiny_cards
    card = result.card
    assert isinstance(card, LMCard) and result.name == "unscaled"
    assert list(dict.fromkeys(card.lm_sweep.mechanism)) == ["unscaled", "scaled"]
    assert set(card.lm_sweep.positions) == {"rotary"}
    assert card.lm_sweep.qk_clip_tau.isna().all()  # trained without QK-Clip
    assert len(card.lm_sweep) == 2 * len(TINY.lrs)
    assert set(card.lm_lengths.factor) == {1, 2}
    assert set(card.lm_ownership.weights) <= {"best", "drifted"}
    assert len(result.verdicts) == 2 * len(LM_VERDICTS)
    length = result.verdicts.set_index(["mechanism", "verdict"])
    # two rates: the best is at the grid's edge, so a verdict read from its model says so
    said = length.loc[("unscaled", "LM: generalises to longer sequences")]
    assert pd.isna(said.passed) and "at the grid's edge" in said.value


def test_a_written_card_is_read_back_as_a_baseline(tiny_cards, tmp_path):
    flags = {"card_settings": TINY.settings()}
    store.write_cards(tiny_cards, tmp_path, flags, 1.0, "cmd", True, True, lm_wing())
    folder = tmp_path / "cards" / "unscaled" / "lm"
    names = sorted(p.name for p in folder.iterdir() if p.suffix != ".json")
    assert names == ["card.md", "lm_lengths.csv", "lm_ownership.csv", "lm_sweep.csv",
                     "verdicts.csv"]  # fmt: skip
    assert not (tmp_path / "cards" / "unscaled" / "statics.csv").exists()
    text = (folder / "card.md").read_text(encoding="utf-8")
    assert text.startswith("# Quick language-model card: unscaled")
    for rule in tiny_cards[0].verdicts.rule.unique():
        assert rule in text
    read = store.read_card(folder, LMCard)
    pd.testing.assert_frame_equal(read.lm_sweep, tiny_cards[0].card.lm_sweep, check_dtype=False)
    scaled, unscaled = [resolve("scaled")], [resolve("unscaled")]
    plan = store.plan_cards(TINY, scaled, unscaled, tmp_path / "cards", lm_wing())
    assert plan.reused == {"unscaled": folder} and plan.computed == tuple(scaled)
    other = dataclasses.replace(TINY, lrs=(1e-2,))
    found = store.plan_cards(other, scaled, unscaled, tmp_path / "cards", lm_wing())
    assert found.reused == {}


@pytest.fixture
def script(load_script, monkeypatch, tmp_path):
    monkeypatch.setattr(lm, "LM_QUICK", TINY)
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "committed")  # no committed cards
    return load_script("11_mechanism_card")


PER_HEAD = (
    "import attnlab, jax.numpy as jnp\n"
    "tau = attnlab.Mechanism('tau', lambda q, k, t: t * jnp.einsum('...qd,...kd->...qk', q, k),"
    " params={'t': lambda d: [0.25, 0.25, 0.25]}, per_head=('t',))\n"
    "def extra(q, k, temperature):\n"
    "    return temperature * jnp.einsum('...qd,...kd->...qk', q, k)\n"
)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--task", "lm", "--mechanism", "{dir}/mine.py:tau"], "--mechanism: mechanism 'tau'"),
        (["--task", "lm", "--mechanism", "{dir}/mine.py:extra"], "temperature"),
        (["--mechanism", "alibi"], "needs q_pos, k_pos, head, n_heads"),
        (["--mechanism", "scaled", "--against", "alibi"], "--against: mechanism 'alibi'"),
        (["--task", "text", "--mechanism", "scaled"], "--task"),
    ],
    ids=["per-head-length", "unknown-argument", "positions-on-recall", "baseline", "task"],
)
def test_bad_input_is_one_line_and_writes_nothing(script, run_main, tmp_path, capsys, argv, says):
    (tmp_path / "mine.py").write_text(PER_HEAD, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(dir=tmp_path) for a in argv] + ["--quick", "--quiet", "--out-dir", str(out)]
    assert run_main(script, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert not any(out.iterdir())


@pytest.mark.slow  # a tiny card of two mechanisms through the script
def test_a_users_alibi_gets_a_language_model_card(script, run_main, tmp_path):
    (tmp_path / "my_alibi.py").write_text(ALIBI_FILE, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--task", "lm", "--mechanism", f"{tmp_path}/my_alibi.py:alibi", "--quick",
            "--quiet", "--out-dir", str(out)]  # fmt: skip
    assert run_main(script, argv) == 0
    folder = out / "cards" / "user" / "my_alibi.alibi" / "lm"
    verdicts = pd.read_csv(folder / "verdicts.csv")
    assert set(verdicts.mechanism) == {"alibi", "scaled"}  # --against defaults to scaled
    mine = verdicts[verdicts.mechanism == "alibi"].set_index("verdict")
    lengths = pd.read_csv(folder / "lm_lengths.csv")
    assert set(lengths[lengths.mechanism == "alibi"].positions) == {"none"}  # ALiBi: no others
    assert "at the grid's edge" in mine.value["LM: generalises to longer sequences"]  # 2 rates
    sidecar = json.loads((folder / "lm_sweep.json").read_text(encoding="utf-8"))
    assert sidecar["flags"]["task"] == "lm"
    settings = lm.lm_card_config(quick=True).settings()  # TINY's, with this text's checksum
    assert sidecar["flags"]["card_settings"] == json.loads(json.dumps(settings))


@pytest.mark.slow  # a tiny LM cell under Muon with the clip (compiles its own programs)
def test_under_muon_with_a_clip_that_fires_to_the_end_the_clip_owns_the_temperature():
    """--optimizer muon --qk-clip TAU: every mechanism of the card trains so; with a tau so
    low that the clip fires at every step, every layer is the clip's (the owner verdict's
    reading, shown on hand-made tables in test_card_lm_verdicts)."""
    from attnlab.studies.card.lm_verdicts import clip_layers_late

    config = dataclasses.replace(TINY, lm=dataclasses.replace(TINY.lm, optimizer="muon",
                                                              qk_clip_tau=1e-3))  # fmt: skip
    card = lm.lm_cell(config, resolve("scaled"), 16)
    assert card.lm_sweep.clip_fraction_last_quarter_layer0.gt(0).all()
    assert (card.lm_sweep.qk_clip_tau == 1e-3).all()  # the logits verdict's bound reads it
    assert clip_layers_late(card, "scaled") == {0}
