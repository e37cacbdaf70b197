"""The OLMo 2 family (OLMo team 2024; Hugging Face ``Olmo2ForCausalLM``): Llama's decoder
(``attnlab.models.decoder``) with q and k RMS-normalised over the whole projection width
(``q_norm`` ``[heads * head_dim]``, ``k_norm`` ``[kv_heads * head_dim]``) before the split
into heads, and post-norm blocks: no input norm, ``post_attention_layernorm`` on
attention's output and ``post_feedforward_layernorm`` on the MLP's, each before its
residual add. YaRN rope scaling (OLMo 3's) is read with the rest of ``layers.read_rope``;
OLMo 3's sliding-window layers rotate at ``rope_theta`` without it (``rope_scaling`` is the
full-attention layers' alone, as transformers' ``Olmo3`` computes it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.models.decoder import load_decoder
from attnlab.models.decoder_config import DecoderConfig, parse_decoder
from attnlab.models.files import CONFIG, Checkpoint, CheckpointError

MODEL_TYPES = ("olmo2", "olmo3")


def parse_olmo2_config(raw: dict[str, Any], where: str = CONFIG) -> DecoderConfig:
    """An OLMo 2 (or OLMo 3: the same layout, with sliding-window layers and YaRN)
    ``config.json``: post-norm, full-width q/k norm, SwiGLU, ``head_dim^-1/2``."""
    if raw.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(f"{where}: model_type {raw.get('model_type')!r} is not olmo2")
    # OLMo 3's sliding layers rotate at rope_theta unscaled: YaRN is the full layers' only
    # (transformers' Olmo3 rotary_embs, v4.57; vLLM's olmo2.py)
    local = raw.get("rope_theta", 10000.0) if raw["model_type"] == "olmo3" else None
    return parse_decoder(raw, where, qk_norm="full", block="post", local_theta=local)


def load_olmo2(directory: Path | str, mechanisms: Any = None) -> Checkpoint:
    """An OLMo 2 checkpoint (``decoder.load_decoder``)."""
    return load_decoder(directory, parse_olmo2_config)


#: A tiny OLMo 2: multi-head, untied, YaRN positions (attention_factor given).
TINY = {
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 256,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "attention_factor": 1.2079,
                     "original_max_position_embeddings": 8, "beta_fast": 32, "beta_slow": 1},
    "hidden_act": "silu",
}  # fmt: skip
