"""attnlab.models.ledger: the static temperature ledger of the published configs in
tests/fixtures/configs (their known values: Gemma 2 27B's divisor 144^-1/2 against its head
width's 128^-1/2 and its cap of 50, a YaRN model's attention_factor^2, Qwen3's per-head q/k
norm, Llama 3's divisor 128^-1/2), and the weights' part (q/k norm gains, spectral norms)
and the cap's share on tiny random checkpoints, against their definitions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from support import CONFIG_FIXTURES as FIXTURES

from attnlab.models import gemma2, llama, olmo2, qwen3
from attnlab.models.decoder import decoder_shapes, write_random_decoder
from attnlab.models.files import read_tensors
from attnlab.models.ledger import (
    CAP_MARGIN,
    STATIC_COLUMNS,
    head_gains,
    near_cap_share,
    spectral_norms,
    static_ledger,
)
from attnlab.models.registry import FAMILIES

#: A product of two or three float64 roundings (divisor * a^2, 144^-1/2 squared back):
#: within a few units of float64's eps 2.2e-16, relatively; 1e-14 leaves room.
RTOL64 = 1e-14


def published(name: str) -> list[dict]:
    """The static ledger of ``tests/fixtures/configs/<name>/config.json``."""
    path = FIXTURES / name / "config.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    return static_ledger(FAMILIES[raw["model_type"]].parse(raw, str(path)))


def test_every_fixture_is_named_in_the_readme_and_parses():
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    folders = sorted(p.parent.name for p in FIXTURES.glob("*/config.json"))
    assert folders == ["gemma-2-27b", "llama-3.1-8b", "olmo-3-7b", "qwen3-8b"]
    for name in folders:
        assert f"`{name}/`" in readme
        rows = published(name)
        assert rows and all(list(row) == list(STATIC_COLUMNS) for row in rows)


def test_gemma2_27b_divides_by_144_not_its_head_width_and_caps_at_50():
    rows = published("gemma-2-27b")
    assert len(rows) == 46 and {r["head_dim"] for r in rows} == {128}
    for row in rows:
        assert row["divisor"] == 144**-0.5 and row["divisor"] != 128**-0.5
        assert math.isclose(row["divisor_width"], 144, rel_tol=RTOL64)
        assert row["softcap"] == 50.0 and row["qk_norm"] == "none"
        assert row["logit_multiplier"] == 144**-0.5  # a^2 = 1: default rope
    assert [r["layer_type"] for r in rows[:2]] == ["sliding_attention", "full_attention"]


def test_llama_3_divides_by_128_and_its_llama3_rope_leaves_the_scale():
    rows = published("llama-3.1-8b")
    assert len(rows) == 32
    for row in rows:
        assert row["divisor"] == 128**-0.5 and row["rope_type"] == "llama3"
        assert row["rope_attention_factor_sq"] == 1.0 and row["softcap"] is None
        assert (row["heads"], row["kv_heads"], row["head_dim"]) == (32, 8, 128)


def test_qwen3_normalises_q_and_k_per_head_at_head_dim_128():
    rows = published("qwen3-8b")
    assert {(r["qk_norm"], r["head_dim"], r["divisor"]) for r in rows} == {
        ("per head", 128, 128**-0.5)
    }


def test_yarn_multiplies_the_full_layers_logits_by_attention_factor_squared():
    """OLMo 3 7B gives attention_factor 1.2079441541679836, which is transformers' rule
    0.1 ln(factor) + 1 at factor 8 (``_compute_yarn_parameters``); its sliding layers rotate
    without YaRN."""
    rows = published("olmo-3-7b")
    full = [r for r in rows if r["layer_type"] == "full_attention"]
    sliding = [r for r in rows if r["layer_type"] == "sliding_attention"]
    assert [r["layer"] for r in full] == list(range(3, 32, 4)) and len(sliding) == 24
    rule = 0.1 * math.log(8.0) + 1
    assert math.isclose(1.2079441541679836, rule, rel_tol=RTOL64)
    for row in full:
        assert row["rope_type"] == "yarn"
        assert math.isclose(row["rope_attention_factor_sq"], rule**2, rel_tol=RTOL64)
        assert math.isclose(row["logit_multiplier"], rule**2 / math.sqrt(128), rel_tol=RTOL64)
        assert row["qk_norm"] == "full width"
    assert {(r["rope_type"], r["rope_attention_factor_sq"]) for r in sliding} == {("default", 1.0)}


def test_yarn_without_attention_factor_takes_transformers_rule():
    """Qwen3's model card extends it with ``rope_scaling`` ``{"rope_type": "yarn", "factor":
    4.0, "original_max_position_embeddings": 32768}`` (no attention_factor): a^2 is
    ``(0.1 ln 4 + 1)^2``."""
    raw = json.loads((FIXTURES / "qwen3-8b" / "config.json").read_text(encoding="utf-8"))
    raw["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": 32768}  # fmt: skip
    (row, *_) = static_ledger(qwen3.parse_qwen3_config(raw))
    assert math.isclose(row["rope_attention_factor_sq"], (0.1 * math.log(4) + 1) ** 2,
                        rel_tol=RTOL64)  # fmt: skip


def _tiny(tmp_path: Path, module, parse, **change) -> tuple:
    raw = module.TINY | change
    directory = write_random_decoder(tmp_path / raw["model_type"], raw, parse, seed=3)
    config = parse(raw)
    return config, read_tensors(directory / "model.safetensors", decoder_shapes(config), "")


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)))


def test_gains_per_head_full_width_gemma_offset_and_none(tmp_path):
    """Qwen3: every head the RMS of the one [head_dim] weight; OLMo 2: head h's slice of the
    full width (keys: its group's); Gemma 3's stored w is read as 1 + w; Llama: 1."""
    config, tensors = _tiny(tmp_path, qwen3, qwen3.parse_qwen3_config)
    gains = head_gains(config, tensors)
    q = tensors["model.layers.1.self_attn.q_norm.weight"]
    k = tensors["model.layers.1.self_attn.k_norm.weight"]
    assert np.all(gains[1, :, 0] == _rms(q)) and np.all(gains[1, :, 1] == _rms(k))
    config, tensors = _tiny(tmp_path, olmo2, olmo2.parse_olmo2_config)
    d, gains = config.head_dim, head_gains(config, tensors)
    q = tensors["model.layers.0.self_attn.q_norm.weight"]
    assert gains[0, 1, 0] == _rms(q[d : 2 * d]) and gains[0, 0, 0] == _rms(q[:d])
    from attnlab.models import gemma3

    config, tensors = _tiny(tmp_path, gemma3, gemma3.parse_gemma3_config)
    k = tensors["model.layers.0.self_attn.k_norm.weight"]
    assert head_gains(config, tensors)[0, 3, 1] == _rms(1.0 + np.asarray(k, np.float64))
    config, tensors = _tiny(tmp_path, llama, llama.parse_llama_config)
    assert np.all(head_gains(config, tensors) == 1.0)


def test_spectral_norm_is_the_largest_singular_value_of_the_heads_bilinear_form(tmp_path):
    """Against numpy's SVD of the full ``W_q,h W_k,h^T`` (D x D), head 3 reading key group
    1 (GQA, 4 heads on 2): both in float64, so they agree to float64 rounding of a 16-wide
    product, well inside 1e-12 relatively."""
    config, tensors = _tiny(tmp_path, gemma2, gemma2.parse_gemma2_config)
    qk = FAMILIES["gemma2"].qk_weights
    sigma = spectral_norms(lambda layer: qk(tensors, config, layer), config.n_layer)
    d = config.head_dim
    wq = tensors["model.layers.1.self_attn.q_proj.weight"].astype(np.float64)[3 * d : 4 * d]
    wk = tensors["model.layers.1.self_attn.k_proj.weight"].astype(np.float64)[1 * d : 2 * d]
    full = np.linalg.svd(wq.T @ wk, compute_uv=False)[0]
    assert sigma.shape == (2, 4) and math.isclose(sigma[1, 3], full, rel_tol=1e-12)


def test_near_cap_share_counts_allowed_logits_within_ten_percent():
    cap = 50.0
    z = jnp.asarray([[[[46.0, 0.0], [-45.0, 44.9]]], [[[0.0, 0.0], [-50.0, 1.0]]]])  # [2,1,2,2]
    allowed = jnp.asarray([[True, False], [True, True]])
    assert (1 - CAP_MARGIN) * cap == 45.0
    # allowed entries: 46, -45, 44.9 | 0, -50, 1 -> near: 46, -45, -50
    assert float(near_cap_share(z, allowed, cap)[0]) == pytest.approx(3 / 6, abs=0)
