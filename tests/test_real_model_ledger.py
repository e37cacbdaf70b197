"""attnlab/studies/real_model/ledger.py and experiments/13_real_model.py's ledger:
``--config`` on each published config (tests/fixtures/configs) prints its static ledger and
writes nothing; a config of a model_type or rope type it does not compute, or a key of
another type, is one line naming the key, exit 2; and the ledger table of a tiny random
Gemma 2 checkpoint, its cap's share against the logits computed from the trace."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from support import CONFIG_FIXTURES, DECODER_FAMILIES

from attnlab.models import gemma2
from attnlab.models.decoder import write_random_decoder
from attnlab.models.ledger import CAP_MARGIN, STATIC_COLUMNS
from attnlab.models.registry import family_of, read_checkpoint
from attnlab.studies.real_model.ledger import ledger_frame

SCRIPT = "13_real_model"
#: The CSVs write 8 significant digits (``io.FLOAT_FORMAT``): half a unit in the 8th.
RTOL_CSV = 5e-8


@pytest.mark.parametrize("name", ["gemma-2-27b", "llama-3.1-8b", "olmo-3-7b", "qwen3-8b"])
def test_config_prints_the_static_ledger_and_writes_nothing(
    load_script, run_main, tmp_path, capsys, name
):
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--config", CONFIG_FIXTURES / name / "config.json", "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 0
    text = capsys.readouterr().out
    assert not any(out.iterdir())
    expected = {
        "gemma-2-27b": ["divisor 144^-1/2 = 0.0833333 (head_dim 128^-1/2 would be 0.0883883)",
                        "soft-cap 50"],
        "llama-3.1-8b": ["layers 0-31 (full_attention): divisor 128^-1/2 = 0.0883883",
                         "rope llama3"],
        "olmo-3-7b": ["layers 3, 7, ..., 31 (full_attention)", "attention factor^2 1.45913",
                      "q/k norm full width"],
        "qwen3-8b": ["q/k norm per head", "width 128"],
    }[name]  # fmt: skip
    for words in expected:
        assert words in text


#: YaRN at rope_theta 1: its correction divides by ln rope_theta (in the forward pass).
YARN_AT_1 = {"rope_theta": 1, "rope_scaling": {"rope_type": "yarn", "factor": 8.0}}


@pytest.mark.parametrize(
    "change, key",
    [({"model_type": "mamba"}, "model_type"),
     ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling.rope_type"),
     ({"model_type": "gpt2"}, "model_type"),
     ({"model_type": ["llama"]}, "model_type"), ({"hidden_act": {"silu": 1}}, "hidden_act"),
     ({"layer_types": [{}] * 32}, "layer_types"), ({"rope_scaling": "linear"}, "rope_scaling"),
     ({"rope_parameters": ["x"]}, "rope_parameters"), (YARN_AT_1, "rope_theta")],
)  # fmt: skip
def test_config_refuses_what_it_does_not_compute_in_one_line(
    load_script, run_main, tmp_path, capsys, change, key
):
    raw = json.loads((CONFIG_FIXTURES / "llama-3.1-8b" / "config.json").read_text()) | change
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert run_main(load_script(SCRIPT), ["--config", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err and str(path) in err


def test_config_with_a_checkpoint_flag_is_a_usage_error(load_script, run_main, tmp_path, capsys):
    path = CONFIG_FIXTURES / "qwen3-8b" / "config.json"
    assert run_main(load_script(SCRIPT), ["--config", path, "--checkpoint", tmp_path]) == 2
    assert "--checkpoint" in capsys.readouterr().err


def test_ledger_table_of_a_tiny_gemma2(tmp_path):
    """Every head's row: its layer's static columns, gains 1 (no q/k norm), and the share
    of causal logits with |z| >= 0.9 cap, recomputed in float64 from the trace's q and k
    (z = c tanh(s q.k / c)). The float32 forward's logits may fall on the other side of the
    threshold only where they lie within its rounding of it: a float32 dot product of
    width d errs by at most d u |q| |k| (u = 2^-24; Higham 2002, sec. 3.1), times s, and
    tanh's slope is at most 1; twice that bounds the band, and the share lies between the
    counts outside it (as float32 ratios)."""
    cap = 2.0  # a cap the random logits reach
    raw = gemma2.TINY | {"attn_logit_softcapping": cap}
    directory = write_random_decoder(tmp_path / "g2", raw, gemma2.parse_gemma2_config)
    checkpoint = read_checkpoint(directory)
    config, family = checkpoint.config, family_of(checkpoint)
    ids = (np.arange(2 * 16).reshape(2, 16) * 37 + 5) % 256
    heads = pd.DataFrame([{"model": "trained", "row_length": 16, "layer": layer, "head": h,
                           "elasticity_1": 1.0, "owner": "cap"}
                          for layer in range(2) for h in range(4)])  # fmt: skip
    frame = ledger_frame(family, checkpoint.tensors, config, ids, heads, "g2")
    assert len(frame) == 2 * 4 and set(STATIC_COLUMNS) <= set(frame.columns)
    assert (frame.q_norm_gain == 1).all() and (frame.k_norm_gain == 1).all()
    assert (frame.softcap == cap).all() and set(frame.owner) == {"cap"}
    params = {k: jnp.asarray(v) for k, v in checkpoint.tensors.items()}
    _, trace = family.forward(params, config, ids)
    q, k = np.asarray(trace.q, np.float64), np.asarray(trace.k, np.float64)
    z = cap * np.tanh(config.divisor * np.einsum("lbhqd,lbhkd->lbhqk", q, k) / cap)
    norms = np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k, axis=-1).max()
    band = 2 * config.head_dim * 2.0**-24 * norms * config.divisor
    causal = np.tril(np.ones((16, 16), bool))
    threshold, rows = (1 - CAP_MARGIN) * cap, 2 * causal.sum()
    low = ((np.abs(z) >= threshold + band) & causal).sum(axis=(1, 3, 4)) / rows
    high = ((np.abs(z) >= threshold - band) & causal).sum(axis=(1, 3, 4)) / rows
    share = frame.near_cap_share.to_numpy().reshape(2, 4)  # [layers, heads]
    ulp = 2.0**-23  # the share is a float32 ratio of counts: one rounding, 2^-24 relatively
    assert low.max() > 0 and np.all(low * (1 - ulp) <= share) and np.all(share <= high * (1 + ulp))


@pytest.mark.slow  # 13 on five tiny checkpoints at once: about 30 s on 2 cores
def test_13_writes_the_ledger_for_each_llama_family(load_script, run_main, tmp_path):
    """One run of 13 on a tiny random checkpoint of each family: the ledger has a row per
    (checkpoint, layer, head), its static columns those of ``static_ledger``, an owner
    for every head, and the cap's share only where there is a cap (Gemma 2)."""
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 8)
    directories = [write_random_decoder(tmp_path / name, raw, parse)
                   for name, (raw, parse, _) in DECODER_FAMILIES.items()]  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", *directories, "--text", text, "--lengths", "16", "--tokens", "96",
            "--counterfactual-length", "16", "--out-dir", out]  # fmt: skip
    assert run_main(load_script(SCRIPT), argv) == 0
    ledger = pd.read_csv(out / "13_real_model_ledger.csv")
    assert (out / "13_real_model_ledger.json").is_file()
    for name, (raw, parse, _) in DECODER_FAMILIES.items():
        rows = ledger[ledger.checkpoint == name]
        config = parse(raw)
        assert len(rows) == config.n_layer * config.n_head
        assert rows.owner.notna().all() and rows.spectral_norm.gt(0).all()
        assert rows.near_cap_share.notna().all() == (config.cap is not None)
        assert np.allclose(rows.divisor, config.divisor, rtol=RTOL_CSV, atol=0)


@pytest.mark.parametrize("where", ["absent", "a file"])
def test_config_with_an_out_dir_that_is_no_folder_is_one_line(
    load_script, run_main, tmp_path, capsys, where
):
    """--config writes nothing, but an --out-dir given is checked as for any run: one that
    is absent or a file is one line naming --out-dir, exit 2, nothing printed or made."""
    out = tmp_path / "out"
    if where == "a file":
        out.write_text("not a folder\n", encoding="utf-8")
    argv = ["--config", CONFIG_FIXTURES / "qwen3-8b" / "config.json", "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "--out-dir" in captured.err
    assert captured.out == "" and "Traceback" not in captured.err
    assert out.is_file() if where == "a file" else not out.exists()
