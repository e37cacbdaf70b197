"""attnlab.studies.real_model.causal and experiments/13_real_model.py on GPT-2 checkpoints:
the causal row statistics against their definitions, a tiny random 2-layer GPT-2 end to
end (the real_model study's causal columns), and broken checkpoints: one line naming the
file, exit 2, nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from support import DECODER_FAMILIES, LM_USER_FILE, break_gpt2, write_tiny_bert, write_tiny_gpt2

from attnlab.core.context import causal_context
from attnlab.core.elasticity import logit_scale
from attnlab.core.references import load_mechanism
from attnlab.models.files import sha256
from attnlab.models.layers import causal_masks
from attnlab.models.registry import family_of, read_checkpoint
from attnlab.studies.real_model import causal
from attnlab.studies.real_model.causal import (
    causal_counterfactuals_frame,
    causal_row_statistics,
    causal_rows,
    opening_tokens,
    weight_elasticity,
)
from attnlab.studies.real_model.study import CAUSAL_ARGUMENTS, STUDY

SCRIPT = "13_real_model"
EPS32 = float(np.finfo(np.float32).eps)
TINY_FLAGS = ["--lengths", "16", "--tokens", "96", "--counterfactual-length", "16"]


def researchers_checkpoint(directory: Path, seed: int = 1) -> tuple[Path, str]:
    """A tiny GPT-2 checkpoint of a researcher's mechanism (``support.LM_USER_FILE``: cosine
    logits times 4, whose temperature is its own), written beside it and recorded as
    experiment 14 records it; the checkpoint and the file's reference."""
    directory.mkdir()
    (directory / "my_attention.py").write_text(LM_USER_FILE, encoding="utf-8")
    reference = f"{directory / 'my_attention.py'}:cosine"
    ours = {"mechanism": "cosine", "made_by": {"mechanism": reference}}
    mine = {"cosine": load_mechanism(reference)}
    return write_tiny_gpt2(directory / "cosine_gpt2", seed, mine, attnlab=ours), reference


def test_causal_row_statistics_by_hand():
    z = np.asarray([[0.0, 9.0, 9.0], [1.0, 3.0, 9.0], [0.0, 1.0, 2.0]], np.float32)
    mask = np.tril(np.ones((3, 3), bool))
    p = np.where(mask, np.exp(z), 0.0)
    p = (p / p.sum(-1, keepdims=True)).astype(np.float32)
    # one compiled program, rather than one for each of its operations
    stats = jax.tree.map(np.asarray, jax.jit(causal_row_statistics)(z, p, mask))
    # row 1 has keys {1, 3}: std 1, weights e^1, e^3
    w = np.exp([1.0, 3.0]) / np.exp([1.0, 3.0]).sum()
    np.testing.assert_allclose(stats["logit_std"], [0.0, 1.0, np.std([0.0, 1.0, 2.0])], rtol=1e-6)
    np.testing.assert_allclose(stats["max_weight"][1], w.max(), rtol=1e-6)
    np.testing.assert_allclose(
        stats["entropy_ratio"][1], -(w * np.log(w)).sum() / math.log(2), rtol=1e-6
    )
    assert float(stats["saturated"][0]) == 1.0  # one key: weight 1
    # S and |z| over the allowed keys only (the 9s above the diagonal are masked), both signs
    np.testing.assert_array_equal(stats["max_logit"], [0.0, 3.0, 2.0])
    neg = jax.jit(causal_row_statistics)(-z, p, mask)
    np.testing.assert_array_equal(np.asarray(neg["max_logit"]), [-0.0, -1.0, 0.0])
    np.testing.assert_array_equal(np.asarray(neg["max_abs_logit"]), [0.0, 3.0, 2.0])
    # the sink's share: each row's weight on key 0, as given (row 0: its one key)
    np.testing.assert_array_equal(stats["first_key_weight"], p[:, 0])
    assert p[0, 0] == 1.0


def test_the_first_keys_share_is_over_the_rows_that_see_it():
    """A sliding window of 2 keys: row 2 sees keys 1 and 2, not key 0, so its first-key
    weight is NaN (left out of the head's mean), not 0; rows 0 and 1 give theirs."""
    z = np.zeros((3, 3), np.float32)
    mask = causal_masks(3, (2,))[0]
    p = np.where(mask, 1.0, 0.0) / np.asarray(mask).sum(-1, keepdims=True)
    stats = jax.jit(causal_row_statistics)(z, p.astype(np.float32), mask)
    np.testing.assert_array_equal(np.asarray(stats["first_key_weight"]), [1.0, 0.5, np.nan])


def test_weight_elasticity_in_one_pass_is_each_layers_own(tmp_path):
    """``weight_elasticity``'s one forward-mode pass (each layer's input held constant)
    against one pass per layer without that: the layer's own ``d ln s / d ln w`` (layers
    below unchanged), 2 for GPT-2's bilinear logits; float32 rounding of the two programs
    apart, each a log-derivative of order 1 (16 eps32 allowed)."""
    checkpoint = read_checkpoint(write_tiny_gpt2(tmp_path / "ckpt"))
    family, config = family_of(checkpoint), checkpoint.config
    params = {k: jnp.asarray(v) for k, v in checkpoint.tensors.items()}
    ids = jnp.asarray((np.arange(2 * 8).reshape(2, 8) * 7) % 256)
    one_pass = np.asarray(weight_elasticity(family, params, config, ids))
    T, mask = ids.shape[1], family.masks(config, ids.shape[1])

    def log_scale(log_w, layer):
        w = jnp.ones(config.n_layer).at[layer].set(jnp.exp(log_w))
        _, trace = family.forward(params, config, ids, w_scale=w)
        theta = {n: v[layer] for n, v in trace.theta.items()}
        z, _, allowed = config.attention.attend(
            trace.q[layer], trace.k[layer], theta, mask[layer], causal_context(T, config.n_head)
        )
        allowed = jnp.broadcast_to(allowed, z.shape)
        return jax.vmap(lambda zh, mh: jnp.log(logit_scale(zh, mh)), in_axes=(1, 1))(z, allowed)

    for layer in range(config.n_layer):
        per_layer = jax.jvp(lambda x, layer=layer: log_scale(x, layer), (0.0,), (1.0,))[1]
        np.testing.assert_allclose(one_pass[layer], np.asarray(per_layer), atol=16 * EPS32)
    np.testing.assert_allclose(one_pass, 2.0, atol=16 * EPS32)


def test_counterfactuals_read_in_batches_agree_with_one_forward(tmp_path, monkeypatch):
    """The drift's loss and predictions with the rows read a few at a time (``LOGITS_BYTES``
    made small: 3 rows of 5, batches of 2, one left over) equal one forward over all of them:
    the same per-row computation, row for row."""
    checkpoint = read_checkpoint(write_tiny_gpt2(tmp_path / "ckpt"))
    family, config = family_of(checkpoint), checkpoint.config
    ids = (np.arange(5 * 8).reshape(5, 8) * 11) % 256
    whole = causal_counterfactuals_frame(family, checkpoint.tensors, config, ids, "tiny")
    row_bytes = 4 * 8 * config.vocab_size
    monkeypatch.setattr(causal, "LOGITS_BYTES", 2 * row_bytes)
    assert causal.rows_at_once(5, 8, config.vocab_size) == 2
    causal._counterfactual.clear_cache()
    batched = causal_counterfactuals_frame(family, checkpoint.tensors, config, ids, "tiny")
    causal._counterfactual.clear_cache()
    np.testing.assert_allclose(batched.next_token_loss, whole.next_token_loss, rtol=1e-6)
    np.testing.assert_array_equal(batched.top1_agreement, whole.top1_agreement)


def test_rows_open_with_the_tokenizers_own_opening_token():
    """GPT-2's byte-level tokenizer adds nothing before a text (14's rows unchanged); one
    whose post-processor puts BOS first (Llama's, Gemma's, a GGUF's) opens every row so."""
    from tokenizers import processors

    from attnlab.models.decoder import byte_level_tokenizer

    plain = byte_level_tokenizer()

    def ids(text: str) -> list[int]:
        return plain.encode(text, add_special_tokens=False).ids

    assert opening_tokens(plain) == []
    np.testing.assert_array_equal(causal_rows(plain, "abcdefgh", 8, 4), [ids("abcd"), ids("efgh")])
    with_bos = byte_level_tokenizer()
    with_bos.add_special_tokens(["<bos>"])
    bos = with_bos.token_to_id("<bos>")
    with_bos.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", bos)]
    )
    assert opening_tokens(with_bos) == [bos]
    rows = causal_rows(with_bos, "abcdefgh", 8, 5)  # BOS, then 4 bytes a row
    np.testing.assert_array_equal(rows, [[bos, *ids("abcd")], [bos, *ids("efgh")]])


@pytest.fixture
def tiny(tmp_path):
    """A tiny GPT-2 checkpoint and a text of 300 bytes."""
    checkpoint = write_tiny_gpt2(tmp_path / "ckpt")
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 8)
    return checkpoint, text


@pytest.mark.slow  # 13 end to end on a tiny GPT-2 (18 s of CPU cold); test_real_model_experiment
# runs the script on a tiny checkpoint in the fast suite
def test_tiny_gpt2_end_to_end(load_script, run_main, tiny, tmp_path, capsys):
    """GPT-2's scaled attention beside a researcher's mechanism, named with --mechanisms:
    the owner comes out both ways in one run."""
    checkpoint, text = tiny
    other, reference = researchers_checkpoint(tmp_path / "other")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, other, "--mechanisms", reference, "--text", text,
            *TINY_FLAGS, "--out-dir", out]  # fmt: skip
    assert run_main(load_script(SCRIPT), argv) == 0
    assert "wrote" in capsys.readouterr().out
    for name, output in STUDY.outputs.items():
        if output.arguments != CAUSAL_ARGUMENTS:
            continue  # the encoder's tables
        frame = pd.read_csv(out / name)
        assert list(frame.columns) == output.column_names, name
        assert list(frame.checkpoint.unique()) == ["ckpt", "cosine_gpt2"]
        meta = json.loads((out / name).with_suffix(".json").read_text())
        assert meta["flags"]["weights_sha256"][0] == sha256(checkpoint / "model.safetensors")
    heads = pd.read_csv(out / "13_real_model_causal_heads.csv")
    assert len(heads) == 2 * 2 * 2 * 2  # checkpoints x models x layers x heads
    gpt2, mine = heads[heads.checkpoint == "ckpt"], heads[heads.checkpoint == "cosine_gpt2"]
    assert (gpt2.owner == "weights").all()  # GPT-2's bilinear logits: elasticity 2
    assert set(mine.mechanism) == {"cosine"} and (mine.owner == "mechanism").all()  # 0
    assert set(heads.rows) == {6 * 15}  # 96 bytes in rows of 16; rows with n_i >= 2
    drift = pd.read_csv(out / "13_real_model_causal_counterfactuals.csv")
    first = drift.iloc[0]
    assert first.next_token_loss_change == 0.0 and first.top1_agreement == 1.0


def test_a_researchers_checkpoint_without_its_file_is_one_line(
    load_script, run_main, tiny, tmp_path, capsys
):
    _, text = tiny
    checkpoint, reference = researchers_checkpoint(tmp_path / "mine")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--mechanisms path/to/your_file.py:" in err
    assert f"--mechanisms {reference}" not in err  # never offered as a command to run
    assert not any(out.iterdir())


def test_two_checkpoints_of_one_folder_name_are_refused(
    load_script, run_main, tiny, tmp_path, capsys
):
    checkpoint, text = tiny  # the tables name a checkpoint by its folder: rows would mix
    namesake = write_tiny_gpt2(tmp_path / "elsewhere" / "ckpt", seed=1)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, namesake, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err and "'ckpt'" in err
    assert not any(out.iterdir())


def test_bert_among_several_checkpoints_is_refused(load_script, run_main, tiny, tmp_path, capsys):
    checkpoint, text = tiny
    bert = write_tiny_bert(tmp_path / "bert")
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, bert, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err
    assert not any(out.iterdir())


@pytest.mark.parametrize(
    "how",
    ["missing tensor", "wrong shape", "unknown model_type", "nan weight", "a billion layers"],
)
def test_broken_gpt2_one_line_exit_2_nothing_written(
    load_script, run_main, tiny, tmp_path, capsys, how
):
    checkpoint, text = tiny
    name = break_gpt2(checkpoint, how)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", checkpoint, "--text", text, *TINY_FLAGS, "--out-dir", out]
    assert run_main(load_script(SCRIPT), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err and name in err
    assert not any(out.iterdir())


#: ``weight_elasticity`` under a q/k RMSNorm: ``d ln s / d ln w = 2 eps / (mean q^2 + eps)``
#: exactly (eps 1e-6, the stand-in's mean q^2 about 4: 5e-7), plus float32's cancellation of
#: the two O(1) terms of the norm's tangent (a few u = 2^-24 each, summed over a width-8 head
#: and the rows' mean): below this.
NORMED_E_W = 1e-4
#: A bilinear head's elasticity is 2 up to the same float32 rounding of its tangent.
BILINEAR_E_TOL = 1e-4


def _stand_in(tmp_path: Path, name: str):
    from attnlab.models.decoder import write_random_decoder
    from attnlab.models.registry import family_of, read_checkpoint

    raw, parse, _ = DECODER_FAMILIES[name]
    checkpoint = read_checkpoint(write_random_decoder(tmp_path / name, raw, parse))
    params = {k: jax.numpy.asarray(v) for k, v in checkpoint.tensors.items()}
    return family_of(checkpoint), params, checkpoint.config


def _layer_logits(family, params, config, ids, layer):
    from attnlab.core.context import causal_context

    _, trace = family.forward(params, config, ids)
    theta = {n: v[layer] for n, v in trace.theta.items()}
    T = ids.shape[-1]
    causal = np.tril(np.ones((T, T), bool))
    z, _, _ = config.attention.attend(trace.q[layer], trace.k[layer], theta, causal,
                                      causal_context(T, config.n_head))  # fmt: skip
    return np.where(causal, np.asarray(z, np.float64), 0.0)


@pytest.mark.parametrize(
    ("name", "owner"),
    [("qwen3", "norm gains"),  # the other two compile a family each: slow
     pytest.param("olmo2", "norm gains", marks=pytest.mark.slow),
     pytest.param("llama", "weights", marks=pytest.mark.slow)],
)  # fmt: skip
def test_the_owner_under_qk_norm_is_the_norms_gains_not_the_weights(tmp_path, name, owner):
    """Issue 69's known answers on random stand-ins: under Qwen3's per-head and OLMo 2's
    full-width q/k RMSNorm the logits do not answer W_q, W_k (``weight_elasticity`` ~0)
    but answer q, k after the norm (the gains' handle, 2): the owner is the norm's gains.
    Without a norm (Llama) both are 2: the weights. The owner the causal table names
    (``owner_before_norm``) follows."""
    from attnlab.core.owner import owner_before_norm
    from attnlab.studies.real_model.causal import _summarise, weight_elasticity

    family, params, config = _stand_in(tmp_path, name)
    ids = jax.numpy.asarray((np.arange(2 * 12).reshape(2, 12) * 37 + 5) % 256)
    e_w = np.asarray(weight_elasticity(family, params, config, ids))
    e_after = np.asarray(_summarise(family, params, config, ids)["elasticity"])[..., 0]
    assert e_w.shape == (config.n_layer, config.n_head)
    np.testing.assert_allclose(e_after, 2.0, atol=BILINEAR_E_TOL)
    if owner == "weights":
        np.testing.assert_allclose(e_w, 2.0, atol=BILINEAR_E_TOL)
    else:
        assert np.all(np.abs(e_w) <= NORMED_E_W), e_w
    pairs = zip(e_w.ravel(), e_after.ravel(), strict=True)
    assert {owner_before_norm(float(w), float(a)) for w, a in pairs} == {owner}


def test_qwen3_keeps_its_logits_under_w_q_times_8_and_doubles_them_under_its_gain_times_2(
    tmp_path,
):
    """A Qwen3 stand-in with layer 1's W_q multiplied by 8: its per-head RMSNorm cancels the
    scale, so layer 1's logits are unchanged (to float32 rounding of the norm, a few u of
    the largest |logit|); with layer 1's q_norm gain doubled they double (a gain multiplies
    q after the norm: exactly, to the same rounding)."""
    family, params, config = _stand_in(tmp_path, "qwen3")
    ids = jax.numpy.asarray((np.arange(2 * 12).reshape(2, 12) * 37 + 5) % 256)
    base = _layer_logits(family, params, config, ids, 1)
    bound = 64 * 2.0**-24 * np.abs(base).max()  # rounding of the norm and the dot products
    name = "model.layers.1.self_attn."
    louder = params | {f"{name}q_proj.weight": 8 * params[f"{name}q_proj.weight"]}
    np.testing.assert_allclose(_layer_logits(family, louder, config, ids, 1), base, rtol=0,
                               atol=bound)  # fmt: skip
    gained = params | {f"{name}q_norm.weight": 2 * params[f"{name}q_norm.weight"]}
    np.testing.assert_allclose(_layer_logits(family, gained, config, ids, 1), 2 * base, rtol=0,
                               atol=2 * bound)  # fmt: skip


# --- Gemma 3 270M against an outside float64 forward (slow: the model package installed) ---

#: The per-head columns of a float32 forward against the reference's float64 one: a logit
#: is a dot product of width 256 of q and k that 18 layers of float32 arithmetic made; the
#: losses of the two forwards differ by 2e-5 to 3.5e-5 nats (test_models_gguf_checkpoint),
#: relative 1e-5. The issue's tolerance, 1e-3 relative, is a hundred times that.
GEMMA3_RTOL = 1e-3


@pytest.mark.slow  # dequantizes 268 M parameters and runs the study's heads table thrice
def test_gemma3_270m_heads_agree_with_a_float64_forward(gemma3_gguf, gemma3_reference):
    """On each reference sequence (one row, BOS first), the heads table's S
    (``max_signed_logit``), median row std of the logits (``logit_std_p50``) and the first
    key's share (``sink_share``) per layer and head against the reference's float64 forward:
    the study's own code path, sliding layers masked to 512 keys."""
    from attnlab.models.gguf_checkpoint import load_gguf
    from attnlab.models.registry import family_of
    from attnlab.studies.real_model.causal import causal_heads_frame

    checkpoint = load_gguf(gemma3_gguf)
    family = family_of(checkpoint)
    for sequence in gemma3_reference["sequences"]:
        ids = np.asarray([sequence["ids"]], np.int32)
        frame = causal_heads_frame(family, checkpoint.tensors, checkpoint.config,
                                   {ids.shape[1]: ids}, "trained", "gemma3")  # fmt: skip
        ours = frame.set_index(["layer", "head"])
        for head in sequence["heads"]:
            row = ours.loc[(head["layer"], head["head"])]
            for column, theirs in (("max_signed_logit", "max_signed_logit"),
                                   ("logit_std_p50", "logit_std_p50"),
                                   ("sink_share", "first_token_weight_mean")):  # fmt: skip
                assert row[column] == pytest.approx(head[theirs], rel=GEMMA3_RTOL), (
                    column, head["layer"], head["head"])  # fmt: skip


@pytest.mark.slow  # builds the 262,144-token tokenizer from the GGUF
def test_gemma3_270m_rows_are_the_references_bos_first_rows(gemma3_gguf, gemma3_reference):
    """``causal_rows`` cuts the reference's text as its sequences were cut: BOS (the
    tokenizer's opening token), then 63 consecutive tokens of the text, row after row."""
    from attnlab.models.gguf_checkpoint import load_gguf
    from attnlab.studies.real_model.causal import causal_rows

    checkpoint = load_gguf(gemma3_gguf)
    whole = [s["ids"] for s in gemma3_reference["sequences"] if len(s["ids"]) == 64]
    rows = causal_rows(checkpoint.tokenizer, gemma3_reference["text"], 63 * len(whole), 64)
    np.testing.assert_array_equal(rows, np.asarray(whole))
