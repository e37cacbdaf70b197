"""attnlab/studies/card/store.py: which baselines a card run reads from committed cards
(the built-in itself, equal settings only) and which it computes; where cards go (a
mechanism of yours never into a built-in's folder, at the defaults under git-ignored
results/cards/user/)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from support import CARD_USER_FILE as USER_FILE
from support import TINY_CARD as TINY

from attnlab.core.references import MechanismRef, resolve
from attnlab.core.temperature import BUILTINS
from attnlab.studies.card import store, wings
from attnlab.studies.card.verdicts import Card

RECALL = wings.recall_wing()


def _refs(*references) -> list[MechanismRef]:
    return [resolve(r) for r in references]


def _texts(references) -> tuple[str, ...]:
    return tuple(r.text for r in references)


def test_the_plan_reads_a_baseline_from_a_committed_card_with_equal_settings(tmp_path):
    folder = tmp_path / "unscaled"
    folder.mkdir()
    for field in Card._fields:
        (folder / f"{field}.csv").write_text("mechanism\nunscaled\n", encoding="utf-8")
        sidecar = {"flags": {"card_settings": TINY.settings()}}
        (folder / f"{field}.json").write_text(json.dumps(sidecar), encoding="utf-8")
    plan = store.plan_cards(TINY, _refs("scaled"), _refs("scaled", "unscaled"), tmp_path, RECALL)
    assert _texts(plan.computed) == ("scaled",) and plan.reused == {"unscaled": folder}
    other = dataclasses.replace(TINY, trials=TINY.trials + 1)
    plan = store.plan_cards(other, _refs("scaled"), _refs("unscaled"), tmp_path, RECALL)
    assert _texts(plan.computed) == ("scaled", "unscaled") and plan.reused == {}
    plan = store.plan_cards(TINY, _refs("unscaled"), _refs("unscaled"), tmp_path, RECALL)
    assert _texts(plan.computed) == ("unscaled",), "a target is always computed"
    impostor = tmp_path / "impostor.py"
    impostor.write_text(USER_FILE.replace("def logits", "def scaled"), encoding="utf-8")
    with pytest.raises(ValueError, match="both named .scaled.*rename one of them"):
        store.plan_cards(
            TINY, _refs("scaled", f"{impostor}:scaled"), _refs("unscaled"), tmp_path, RECALL
        )


# --- where cards go: a mechanism of yours never writes or is read as a built-in's card ----

REPO = Path(__file__).resolve().parents[1]


def _namesakes(path: Path, names) -> list[str]:
    """A user's file defining q.k/sqrt(d) under each of ``names``; its references."""
    body = "import jax.numpy as jnp\n" + "".join(
        f"def {n}(q, k):\n    return jnp.einsum('...qd,...kd->...qk', q, k) / 4.0\n" for n in names
    )
    path.write_text(body, encoding="utf-8")
    return [f"{path}:{n}" for n in names]


@pytest.mark.parametrize("committed", [True, False])
def test_a_namesake_of_every_builtin_is_carded_in_the_user_folder(tmp_path, monkeypatch, committed):
    references = _refs(*_namesakes(tmp_path / "mine_store.py", BUILTINS))
    for name, reference in zip(BUILTINS, references, strict=True):
        assert store.card_folder(reference, committed) == Path(f"cards/user/mine_store.{name}")
        expected = Path("cards") / name if committed else Path("cards/user") / name
        assert store.card_folder(resolve(name), committed) == expected
    monkeypatch.syspath_prepend(str(tmp_path))
    assert store.card_folder(resolve("mine_store:sigmoid"), committed) == Path(
        "cards/user/mine_store.sigmoid"
    )
    # a Mechanism object: the built-in itself is the built-in, a namesake is not
    ssmax = store.card_folder(resolve("ssmax"), committed)
    assert store.card_folder(resolve(BUILTINS["ssmax"]), committed) == ssmax
    namesake = dataclasses.replace(BUILTINS["ssmax"])
    assert store.card_folder(resolve(namesake), committed) == Path("cards/user/ssmax")
    assert store.comparison_folder(_refs("scaled", "unscaled"), committed) == (
        Path("cards") if committed else Path("cards/user")
    )
    assert store.comparison_folder([resolve("scaled"), references[0]], committed) == Path(
        "cards/user"
    )


def test_two_files_that_both_define_logits_keep_their_own_cards(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first = resolve(_namesakes(tmp_path / "a" / "one.py", ["logits"])[0])
    second = resolve(_namesakes(tmp_path / "b" / "two.py", ["logits"])[0])
    assert store.card_folder(first, False) != store.card_folder(second, False)


def test_a_namesake_is_never_read_as_the_builtins_baseline(tmp_path):
    committed = tmp_path / "committed"
    for name in BUILTINS:
        _fake_card(committed / name, TINY)
    references = _refs(*_namesakes(tmp_path / "mine.py", BUILTINS))
    for name, reference in zip(BUILTINS, references, strict=True):
        target = _refs("sigmoid" if name != "sigmoid" else "softpick")
        plan = store.plan_cards(TINY, target, [reference], committed, RECALL)
        assert plan.reused == {} and reference in plan.computed
        plan = store.plan_cards(TINY, target, _refs(name), committed, RECALL)
        assert plan.reused == {name: committed / name}


def _fake_card(folder: Path, config) -> None:
    folder.mkdir(parents=True)
    for field in Card._fields:
        (folder / f"{field}.csv").write_text(f"mechanism\n{folder.name}\n", encoding="utf-8")
        sidecar = {"flags": {"card_settings": config.settings()}}
        (folder / f"{field}.json").write_text(json.dumps(sidecar), encoding="utf-8")


def _git_status(paths: list[str]) -> str:
    done = subprocess.run(
        ["git", "status", "--porcelain", "--", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the repository's git")
def test_carding_a_namesake_of_every_builtin_at_the_defaults_changes_nothing_under_results(
    load_script, run_main, tmp_path, monkeypatch, capsys
):
    """The card script at its defaults, in this repository, on a user's file defining a
    function named like every built-in (the computation faked, the writing real): git
    sees no change under results/, the committed cards are byte-identical, and a later
    plan still reads the built-ins' committed cards."""
    script = load_script("11_mechanism_card")
    stem = f"namesakes_{uuid.uuid4().hex[:8]}"
    references = _namesakes(tmp_path / f"{stem}.py", BUILTINS)
    _fake_computation(script, monkeypatch)
    monkeypatch.chdir(REPO)
    cards = REPO / "results" / "cards"
    before, status = _tree(cards), _git_status(["results"])
    user = cards / store.USER
    existed = user.exists()
    try:
        # scaled and unscaled are the default baselines: their namesakes cannot share a card
        for name, reference in zip(BUILTINS, references, strict=True):
            if name in ("scaled", "unscaled"):
                assert run_main(script, ["--mechanism", reference, "--quiet"]) == 2
                err = capsys.readouterr().err
                assert err.count("\n") == 1 and f"both named '{name}'" in err
        others = [r for n, r in zip(BUILTINS, references, strict=True)
                  if n not in ("scaled", "unscaled")]  # fmt: skip
        assert run_main(script, ["--mechanism", *others, "--quiet"]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and "results/cards/user/" in out  # --quiet keeps it
        written = sorted(p.name for p in user.iterdir() if p.name.startswith(stem))
        assert written == sorted(f"{stem}.{n}" for n in BUILTINS if n not in ("scaled", "unscaled"))
        assert _git_status(["results"]) == status
        after = {k: v for k, v in _tree(cards).items() if not k.startswith(store.USER)}
        assert after == {k: v for k, v in before.items() if not k.startswith(store.USER)}
        config = store_config()
        plan = store.plan_cards(
            config, _refs("sigmoid"), _refs("scaled", "unscaled"), cards, RECALL
        )
        assert plan.reused == {n: cards / n for n in ("scaled", "unscaled")}
    finally:
        for folder in user.glob(f"{stem}.*"):
            shutil.rmtree(folder)
        (user / "comparison.csv").unlink(missing_ok=True)
        (user / "comparison.json").unlink(missing_ok=True)
        (user / "comparison.md").unlink(missing_ok=True)
        if not existed and user.exists():
            user.rmdir()


def store_config():
    """The card script's default settings (what the committed cards were made with)."""
    from attnlab.studies.card.compute import CardConfig

    return CardConfig()


def _fake_computation(script, monkeypatch) -> None:
    """The card script with its computation faked: a one-row table per section."""
    frame = pd.DataFrame({"mechanism": ["x"]})

    def run_cards(config, plan, on_progress=None, jobs=1):
        return [
            SimpleNamespace(
                name=r.name,
                reference=r,
                card=Card(*[frame] * len(Card._fields)),
                verdicts=pd.DataFrame({"mechanism": [r.name]}),
                read_from={},
            )
            for r in plan.targets
        ]

    monkeypatch.setattr(wings, "run_cards", run_cards)  # the script's, through wings.wing_of
    monkeypatch.setattr(wings, "total_work", lambda *a: 1)
    monkeypatch.setattr(wings, "draw_recall_card", lambda card, name, folder: None)
    monkeypatch.setattr(wings, "card_markdown", lambda *a: "card\n")
    monkeypatch.setattr(store, "comparison_markdown", lambda *a: "comparison\n")
