"""attnlab.models.decoder on each family of it (llama, qwen3, olmo2, gemma2, gemma3): each
tiny random checkpoint's forward against an independent float64 numpy forward
(tests/numpy_reference.py), each family's distinguishing feature shown to matter,
grouped-query attention, head_dim != hidden_size / heads, tied and untied heads, bfloat16
and float16 weights, and broken checkpoints in one line (a tokenizer's id past the
vocabulary too), from the reader and from experiment 13."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from numpy_reference import EPS32, decoder_float32_bound, decoder_reference, log_softmax64
from support import DECODER_FAMILIES as FAMILIES

from attnlab.models.decoder import decoder_shapes, write_random_decoder
from attnlab.models.files import CONFIG, TOKENIZER, WEIGHTS, CheckpointError
from attnlab.models.layers import next_token_loss
from attnlab.models.registry import family_of, read_checkpoint

#: Gemma 2's other distinguishing features, each shown to matter too.
GEMMA2_MORE = ("query_pre_attn_scalar", "softcap")
IDS = (np.arange(2 * 12).reshape(2, 12) * 37 + 5) % 256


def _write(tmp_path: Path, family: str, dtype: str = "F32", **change) -> Path:
    raw, parse, _ = FAMILIES[family]
    return write_random_decoder(tmp_path / family, raw | change, parse, dtype=dtype)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Each family's tiny checkpoint, read, and its forward's logits on ``IDS``."""
    root = tmp_path_factory.mktemp("decoders")
    out = {}
    for family in FAMILIES:
        checkpoint = read_checkpoint(_write(root, family))
        params = {k: jnp.asarray(v) for k, v in checkpoint.tensors.items()}
        logits, trace = family_of(checkpoint).forward(params, checkpoint.config, IDS)
        out[family] = (checkpoint, np.asarray(logits, np.float64), trace)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_agrees_with_numpy_float64(written, family):
    """Logits and next-token loss within ``decoder_float32_bound`` of the float64 reference
    written from Hugging Face's modeling code."""
    checkpoint, logits, _ = written[family]
    raw = FAMILIES[family][0]
    reference = decoder_reference(checkpoint.tensors, raw, IDS)
    bound = decoder_float32_bound(checkpoint.tensors, raw, IDS)
    assert np.abs(logits - reference).max() <= bound
    # the loss is a mean of log-softmax entries, each within 2 x the logits' error
    logp = log_softmax64(reference)[:, :-1]
    loss = -np.take_along_axis(logp, IDS[:, 1:, None], -1)[..., 0].mean(1)
    ours = np.asarray(next_token_loss(logits.astype(np.float32), IDS), np.float64)
    assert np.abs(ours - loss).max() <= 2 * bound + 16 * EPS32 * np.abs(loss).max()


@pytest.mark.parametrize(
    ("family", "drop"),
    [(f, d) for f, (_, _, d) in FAMILIES.items()]
    + [("gemma2", d) for d in GEMMA2_MORE]
    + [("gemma3_text", "sliding_window")],
)
def test_each_distinguishing_feature_matters(written, family, drop):
    """The reference with the family's feature removed (Llama 3's rope scaling, Qwen3's
    per-head q/k norm, OLMo 2's full-width q/k norm read per head, Gemma 2's (1 + w), its
    query_pre_attn_scalar and soft-caps, Gemma 3's local rope base and sliding window)
    disagrees with the forward by more than the float32 bound: each is computed, not
    ignored."""
    checkpoint, logits, _ = written[family]
    raw = FAMILIES[family][0]
    wrong = decoder_reference(checkpoint.tensors, raw, IDS, drop=drop)
    assert np.abs(logits - wrong).max() > 10 * decoder_float32_bound(checkpoint.tensors, raw, IDS)


def test_shapes_gqa_head_dim_and_tied_heads(written):
    """Llama's tiny: 4 query heads on 2 key/value heads, head_dim 6 (16 / 4 is 4), an untied
    head; Qwen3's: head_dim 8, tied (no lm_head.weight)."""
    config = written["llama"][0].config
    assert (config.n_head, config.n_kv_head, config.head_dim) == (4, 2, 6)
    shapes = decoder_shapes(config)
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (2 * 6, 16)
    assert "lm_head.weight" in shapes
    trace = written["llama"][2]
    assert trace.k.shape == (2, 2, 4, 12, 6)  # keys repeated to the query heads
    np.testing.assert_array_equal(trace.k[:, :, 0], trace.k[:, :, 1])
    assert "lm_head.weight" not in written["qwen3"][0].tensors


def test_gemma2_logits_are_capped_and_divided_by_its_scalar(written):
    checkpoint, logits, trace = written["gemma2"]
    mechanism = checkpoint.config.attention
    assert mechanism.constant_values(8) == {"scale": 12**-0.5, "cap": 50.0}
    assert np.abs(logits).max() < 30.0  # final_logit_softcapping
    z = mechanism.scores(trace.q[0], trace.k[0], {"scale": 12**-0.5, "cap": 50.0})
    assert float(jnp.abs(z).max()) < 50.0


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_half_precision_weights_are_read_as_float32(tmp_path, dtype):
    """bfloat16 (numpy has none: read from the file's bytes) and float16 weights are the
    float32 values rounded; the forward runs in float32."""
    f32 = read_checkpoint(_write(tmp_path / "f32", "qwen3"))
    half = read_checkpoint(_write(tmp_path / "half", "qwen3", dtype=dtype))
    for name, value in f32.tensors.items():
        stored = half.tensors[name]
        assert stored.dtype == np.float32
        # truncation to bfloat16's 8 bits, rounding to float16's 11: relative 2^-7, 2^-11
        rel = 2.0**-7 if dtype == "BF16" else 2.0**-10
        assert np.all(np.abs(stored - value) <= rel * np.abs(value) + 6.1e-5)


def _break(directory: Path, how: str) -> str:
    raw = json.loads((directory / CONFIG).read_text())
    if how == "unknown rope type":
        raw["rope_scaling"] = {"rope_type": "longrope", "factor": 2.0}
        (directory / CONFIG).write_text(json.dumps(raw))
        return "rope_scaling.rope_type 'longrope'"
    if how == "unknown model_type":
        raw["model_type"] = "mamba"
        (directory / CONFIG).write_text(json.dumps(raw))
        return "model_type 'mamba'"
    if how == "mixture of experts":
        raw["num_experts"] = 8
        (directory / CONFIG).write_text(json.dumps(raw))
        return "num_experts"
    if how == "model_type an object":  # was a TypeError (unhashable) in the registry
        raw["model_type"] = {"llama": True}
        (directory / CONFIG).write_text(json.dumps(raw))
        return "model_type must be a name, got {'llama': True}"
    if how == "a token id past vocab_size":  # 257 ids, the largest 300: vocab_size is 256
        tokenizer = json.loads((directory / TOKENIZER).read_text())
        tokenizer["model"]["vocab"]["zebra"] = 300
        (directory / TOKENIZER).write_text(json.dumps(tokenizer))
        return f"{TOKENIZER}: token 'zebra' has id 300, past config.json's vocab_size 256"
    if how == "wrong shape":
        raw["intermediate_size"] = 20
        (directory / CONFIG).write_text(json.dumps(raw))
        return f"{WEIGHTS}: model.layers.0.mlp.gate_proj.weight has shape (24, 16)"
    raw["num_key_value_heads"] = 4  # the file's k_proj is for 2
    (directory / CONFIG).write_text(json.dumps(raw))
    return f"{WEIGHTS}: model.layers.0.self_attn.k_proj.weight has shape (12, 16)"


BROKEN = ["unknown rope type", "unknown model_type", "mixture of experts", "wrong shape",
          "key/value heads", "model_type an object", "a token id past vocab_size"]  # fmt: skip


@pytest.mark.parametrize("how", BROKEN)
def test_broken_checkpoints_are_one_line_naming_file_and_key(tmp_path, how):
    directory = _write(tmp_path, "llama")
    words = _break(directory, how)
    with pytest.raises(CheckpointError, match=re.escape(words)) as caught:
        read_checkpoint(directory)
    assert "\n" not in str(caught.value) and str(directory) in str(caught.value)


@pytest.mark.slow  # 13 on a tiny checkpoint: about 20 s on 2 cores
def test_13_on_a_tiny_gemma2_writes_the_causal_tables(load_script, run_main, tmp_path, capsys):
    """The heads table has logit_std_p50, the counterfactual table the next-token loss at
    no drift (the reference's, within its bound), and no layer's largest logit the softmax
    sees exceeds Gemma 2's cap."""
    import pandas as pd

    directory = _write(tmp_path, "gemma2")
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 8)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", directory, "--text", text, "--lengths", "16", "--tokens", "96",
            "--counterfactual-length", "16", "--out-dir", out]  # fmt: skip
    assert run_main(load_script("13_real_model"), argv) == 0
    heads = pd.read_csv(out / "13_real_model_causal_heads.csv")
    assert heads.logit_std_p50.notna().all() and set(heads.mechanism) == {"gemma2_capped"}
    layers = pd.read_csv(out / "13_real_model_causal_layers.csv")
    assert (layers.max_abs_logit <= 50.0).all()
    drift = pd.read_csv(out / "13_real_model_causal_counterfactuals.csv")
    checkpoint = read_checkpoint(directory)
    encoded = checkpoint.tokenizer.encode(text.read_text(), add_special_tokens=False).ids
    ids = np.asarray(encoded[:96]).reshape(6, 16)
    reference = decoder_reference(checkpoint.tensors, FAMILIES["gemma2"][0], ids)
    logp = log_softmax64(reference)[:, :-1]
    loss = -np.take_along_axis(logp, ids[:, 1:, None], -1)[..., 0].mean()
    bound = decoder_float32_bound(checkpoint.tensors, FAMILIES["gemma2"][0], ids)
    assert abs(drift.next_token_loss.iloc[0] - loss) <= 2 * bound + 16 * EPS32 * loss


@pytest.mark.parametrize("how", ["unknown rope type", "wrong shape"])
def test_13_refuses_a_broken_decoder_in_one_line_exit_2(
    load_script, run_main, tmp_path, capsys, how
):
    directory = _write(tmp_path, "llama")
    words = _break(directory, how)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", directory, "--lengths", "16", "--tokens", "96",
            "--counterfactual-length", "16", "--out-dir", out]  # fmt: skip
    assert run_main(load_script("13_real_model"), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "config.json" in err + words
    assert not any(out.iterdir())
