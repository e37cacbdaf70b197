"""attnlab/studies/card/store.py: which baselines a card run reads from committed cards
(equal settings only) and which it computes."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_card_compute import TINY, USER_FILE

from attnlab.studies.card import store
from attnlab.studies.card.verdicts import Card


def test_the_plan_reads_a_baseline_from_a_committed_card_with_equal_settings(tmp_path):
    folder = tmp_path / "unscaled"
    folder.mkdir()
    for field in Card._fields:
        (folder / f"{field}.csv").write_text("mechanism\nunscaled\n", encoding="utf-8")
        sidecar = {"flags": {"card_settings": TINY.settings()}}
        (folder / f"{field}.json").write_text(json.dumps(sidecar), encoding="utf-8")
    plan = store.plan_cards(TINY, ["scaled"], ["scaled", "unscaled"], tmp_path)
    assert plan.computed == ("scaled",) and plan.reused == {"unscaled": folder}
    other = dataclasses.replace(TINY, trials=TINY.trials + 1)
    plan = store.plan_cards(other, ["scaled"], ["unscaled"], tmp_path)
    assert plan.computed == ("scaled", "unscaled") and plan.reused == {}
    plan = store.plan_cards(TINY, ["unscaled"], ["unscaled"], tmp_path)
    assert plan.computed == ("unscaled",), "a target is always computed"
    impostor = tmp_path / "impostor.py"
    impostor.write_text(USER_FILE.replace("def logits", "def scaled"), encoding="utf-8")
    with pytest.raises(ValueError, match="share a name"):
        store.plan_cards(TINY, ["scaled", f"{impostor}:scaled"], ["unscaled"], tmp_path)
