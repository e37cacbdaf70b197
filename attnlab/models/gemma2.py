"""The Gemma 2 family (Gemma team 2024; Hugging Face ``Gemma2ForCausalLM``): Llama's decoder
(``attnlab.models.decoder``) with the logits ``s q.k`` at ``s = query_pre_attn_scalar^-1/2``
(27B: 144, against its head_dim 128), soft-capped ``c tanh(z / c)`` at
``attn_logit_softcapping`` (50), RMSNorm times ``(1 + w)``, sandwich norms
(``input_layernorm``, ``post_attention_layernorm``, ``pre_feedforward_layernorm``,
``post_feedforward_layernorm``), embeddings times ``sqrt(hidden_size)``, tanh-GELU
(``hidden_activation``), tied head, output logits capped at ``final_logit_softcapping``
(30). Every other layer (the even ones, or ``layer_types``) has a sliding window: rows are
never longer than it (``decoder`` module docstring)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.models.config_keys import positive_number
from attnlab.models.decoder import load_decoder
from attnlab.models.decoder_config import DecoderConfig, parse_decoder
from attnlab.models.files import CONFIG, Checkpoint, CheckpointError

MODEL_TYPE = "gemma2"


def gemma_choices(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """What Gemma 2 and 3 share: ``(1 + w)`` norms, sandwich blocks, scaled embeddings,
    tanh GELU, tied head, ``s = query_pre_attn_scalar^-1/2`` and the optional caps."""
    caps = {}
    for key, name in (("attn_logit_softcapping", "cap"), ("final_logit_softcapping", "final_cap")):
        if raw.get(key) is not None:
            caps[name] = positive_number(raw, key, where)
    return {
        "norm_offset": 1.0, "block": "sandwich", "embed_scale": True, "tied": True,
        "activation_key": "hidden_activation", "default_activation": "gelu_pytorch_tanh",
        "divisor": positive_number(raw, "query_pre_attn_scalar", where, 256) ** -0.5, **caps,
    }  # fmt: skip


def parse_gemma2_config(raw: dict[str, Any], where: str = CONFIG) -> DecoderConfig:
    """A Gemma 2 ``config.json`` (``gemma_choices``; sliding window on even layers where
    ``layer_types`` is absent)."""
    if raw.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{where}: model_type {raw.get('model_type')!r} is not gemma2")
    choices = gemma_choices(raw, where)
    return parse_decoder(raw, where, sliding=lambda i: i % 2 == 0, **choices)


def load_gemma2(directory: Path | str, mechanisms: Any = None) -> Checkpoint:
    """A Gemma 2 checkpoint (``decoder.load_decoder``)."""
    return load_decoder(directory, parse_gemma2_config)


#: A tiny Gemma 2: grouped-query attention, head_dim 8 != 16 / 4, query_pre_attn_scalar 12
#: (not head_dim), caps 50 and 30, sliding window 32 on even layers.
TINY = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 256,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "query_pre_attn_scalar": 12, "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "sliding_window": 32,
    "hidden_activation": "gelu_pytorch_tanh",
}  # fmt: skip
