"""experiments/11_mechanism_card.py end to end at tiny sizes (``--quick`` with QUICK set to
tests/support.py's TINY_CARD): mechanisms defined outside the package, by MODULE:NAME and by
file path, share one comparison, a baseline is read from a committed card whose settings
match, and the optimizer and the clip are the language model's flags. (One mechanism's card
by file path, and the API's byte-identical CSVs: tests/test_card_api.py.)"""

from __future__ import annotations

import pandas as pd
import pytest
from support import CARD_USER_FILE as USER_FILE
from support import TINY_CARD as TINY

from attnlab.harness import cli
from attnlab.studies.card import wings


@pytest.fixture
def script(load_script, monkeypatch, tmp_path):
    module = load_script("11_mechanism_card")
    monkeypatch.setattr(wings, "QUICK", TINY)
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "committed")  # no committed cards
    (tmp_path / "card_user.py").write_text(USER_FILE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return module


@pytest.mark.slow  # two card runs (one card's run: tests/test_card_api.py)
def test_several_mechanisms_share_one_comparison_and_reuse_a_committed_baseline(
    script, run_main, tmp_path, capsys
):
    committed, out = tmp_path / "committed", tmp_path / "out"
    committed.mkdir(), out.mkdir()
    argv = ["--mechanism", "unscaled", "--against", "scaled", "--quick", "--quiet"]
    assert run_main(script, [*argv, "--out-dir", str(committed)]) == 0
    argv = ["--mechanism", "card_user:logits", f"{tmp_path}/card_user.py:logits"]
    assert run_main(script, [*argv, "--quick", "--quiet", "--out-dir", str(out)]) == 2
    assert "both named 'logits'" in capsys.readouterr().err and not any(out.glob("cards/*"))

    argv = ["--mechanism", "card_user:logits", "sigmoid", "--against", "unscaled"]
    assert run_main(script, [*argv, "--quick", "--quiet", "--out-dir", str(out)]) == 0
    comparison = pd.read_csv(out / "cards" / "user" / "comparison.csv")
    assert list(dict.fromkeys(comparison.mechanism)) == ["logits", "sigmoid"]
    text = (out / "cards" / "user" / "card_user.logits" / "card.md").read_text(encoding="utf-8")
    assert f"read from `{committed / 'cards' / 'unscaled'}`" in text
    ours = pd.read_csv(out / "cards" / "user" / "card_user.logits" / "statics.csv")
    theirs = pd.read_csv(committed / "cards" / "unscaled" / "statics.csv")
    pd.testing.assert_frame_equal(
        ours[ours.mechanism == "unscaled"].reset_index(drop=True),
        theirs[theirs.mechanism == "unscaled"].reset_index(drop=True),
    )


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--optimizer", "muon"], "--optimizer"),
        (["--qk-clip", "100"], "--qk-clip"),
        (["--task", "lm", "--qk-clip", "0"], "--qk-clip"),
        (["--task", "lm", "--optimizer", "sgd"], "--optimizer"),
    ],
)
def test_the_optimizer_and_the_clip_are_the_lm_cards_else_one_line_exit_2(
    script, run_main, tmp_path, capsys, flags, named
):
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--mechanism", "scaled", *flags, "--quick", "--quiet", "--out-dir", str(out)]
    assert run_main(script, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and not any(out.iterdir())
