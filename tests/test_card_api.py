"""attnlab/studies/card/api.py: ``attnlab.card`` from Python takes a Mechanism or a plain
function, refuses a broken one before any work, returns pandas objects, and writes the
same CSVs as experiments/11_mechanism_card.py (byte for byte, one machine), whose card of a
user's file by path is checked on the way (at tiny sizes: ``--quick`` with QUICK set to
tests/support.py's TINY_CARD)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import jax.numpy as jnp
import pandas as pd
import pytest
from support import CARD_USER_FILE as USER_FILE
from support import TINY_CARD as TINY

import attnlab
from attnlab.core.mechanism import MechanismError
from attnlab.harness import cli
from attnlab.studies.card import api, wings
from attnlab.studies.card.markdown import QUICK_LINE
from attnlab.studies.card.verdicts import VERDICTS, Card

CARD_FILES = [f"{f}.csv" for f in (*Card._fields, "verdicts")] + ["card.md", "card.png"]


def logits(q, k):
    return jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5


def test_attnlab_card_is_the_api():
    assert attnlab.card is api.card and "card" in attnlab.__all__


def test_a_broken_mechanism_is_refused_before_any_work(monkeypatch):
    monkeypatch.setattr(wings, "run_cards", lambda *a: pytest.fail("computed"))
    with pytest.raises(MechanismError, match="'weights_like': its logits look like weights"):
        attnlab.card(lambda q, k: jax_softmax(logits(q, k)), name="weights_like")


def jax_softmax(z):
    return attnlab.softmax_weights(z)


def test_a_plain_function_is_carded_into_the_user_folder(monkeypatch, tmp_path):
    """The computation faked: what the API plans, returns and writes."""
    frame = pd.DataFrame({"mechanism": ["logits"]})
    seen = {}

    def run_cards(config, plan, on_progress=None, jobs=1):
        seen["config"], seen["plan"] = config, plan
        card = Card(*[frame] * len(Card._fields))
        verdicts = pd.DataFrame({"mechanism": ["logits"], "verdict": ["v"]})
        return [SimpleNamespace(name="logits", reference=plan.targets[0], card=card,
                                verdicts=verdicts, read_from={})]  # fmt: skip

    monkeypatch.setattr(wings, "run_cards", run_cards)
    monkeypatch.setattr(wings, "card_markdown", lambda *a: "card\n")
    monkeypatch.setattr(wings, "draw_recall_card", lambda card, name, folder: None)
    report = attnlab.card(logits, quick=True, seed=3, out_dir=tmp_path, progress=False,
                          committed=tmp_path / "none")  # fmt: skip
    assert seen["config"] == dataclasses.replace(wings.QUICK, seed=3)
    assert [r.reference for r in seen["plan"].against] == ["scaled", "unscaled"]
    assert isinstance(report.verdicts, pd.DataFrame) and report.tables.statics is frame
    assert report.folder == tmp_path / "cards" / "user" / "logits"
    assert (report.folder / "verdicts.csv").read_text() == "mechanism,verdict\nlogits,v\n"
    assert report.markdown == "card\n"


@pytest.mark.slow  # two tiny cards (script and API): every section compiled twice
def test_the_script_cards_a_users_file_and_the_api_writes_its_csvs_byte_for_byte(
    load_script, run_main, monkeypatch, tmp_path
):
    """The script on a user's file by path writes its card (every table, the verdicts of it
    and both baselines, a markdown stating every rule, the settings in the sidecars, no
    comparison for one mechanism); ``attnlab.card`` on the same function writes the same
    CSVs, byte for byte."""
    script = load_script("11_mechanism_card")
    monkeypatch.setattr(wings, "QUICK", TINY)
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "committed")  # no committed cards
    (tmp_path / "card_user.py").write_text(USER_FILE, encoding="utf-8")
    by_script, by_api = tmp_path / "script", tmp_path / "api"
    by_script.mkdir()
    argv = ["--mechanism", f"{tmp_path}/card_user.py:logits", "--quick", "--quiet"]
    assert run_main(script, [*argv, "--out-dir", str(by_script)]) == 0
    ours = by_script / "cards" / "user" / "card_user.logits"  # never cards/logits: not a built-in
    assert sorted(p.name for p in ours.iterdir() if p.suffix not in (".json", ".pdf")) == (
        sorted(CARD_FILES)
    )
    verdicts = pd.read_csv(ours / "verdicts.csv")
    assert set(verdicts.mechanism) == {"logits", "scaled", "unscaled"}
    assert len(verdicts) == 3 * len(VERDICTS)
    text = (ours / "card.md").read_text(encoding="utf-8")
    assert text.startswith("# Quick mechanism card: logits\n\n" + QUICK_LINE)
    for rule in verdicts.rule.unique():
        assert rule in text  # every rule is stated in the card
    sidecar = json.loads((ours / "statics.json").read_text(encoding="utf-8"))
    assert sidecar["flags"]["card_settings"] == json.loads(json.dumps(TINY.settings()))
    assert not any(by_script.glob("cards/**/comparison.csv"))
    report = attnlab.card(logits, quick=True, out_dir=by_api, progress=False,
                          committed=tmp_path / "committed" / "cards")  # fmt: skip
    csvs = sorted(p.name for p in ours.glob("*.csv"))
    assert csvs == sorted(p.name for p in report.folder.glob("*.csv")) and len(csvs) == 9
    for name in csvs:
        assert (ours / name).read_bytes() == (report.folder / name).read_bytes(), name
        frame = pd.read_csv(ours / name)
        field = Path(name).stem
        table = report.verdicts if field == "verdicts" else getattr(report.tables, field)
        assert len(frame) == len(table), name


def test_a_mechanism_that_needs_positions_is_refused_before_any_work():
    with pytest.raises(MechanismError, match="'alibi' needs q_pos"):
        attnlab.card("alibi", quick=True)


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"optimizer": "muon"}, "--optimizer"),
        ({"qk_clip": 100.0}, "--qk-clip"),
        ({"task": "lm", "optimizer": "sgd"}, "--optimizer"),
        ({"task": "lm", "qk_clip": -1.0}, "--qk-clip"),
    ],
)
def test_the_optimizer_and_the_clip_are_the_lm_cards_and_checked_before_any_work(kwargs, flag):
    with pytest.raises(api.CardInputError) as raised:
        attnlab.card("scaled", quick=True, progress=False, **kwargs)
    assert raised.value.flag == flag
