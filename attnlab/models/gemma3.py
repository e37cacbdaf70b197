"""The Gemma 3 text family (Gemma team 2025; Hugging Face ``Gemma3ForCausalLM``,
``model_type`` ``gemma3_text``): Gemma 2's decoder (``attnlab.models.gemma2``) with q and k
RMS-normalised per head (``q_norm``, ``k_norm``, ``(1 + w)``) before rotary positions, no
attention soft-cap unless the config sets one, sliding-window layers (five in six:
``sliding_window_pattern``, or ``layer_types``) at their own rope base
``rope_local_base_freq`` and the global ones at ``rope_theta`` with ``rope_scaling``
(transformers v5: ``rope_parameters`` by layer type). The multimodal ``gemma3`` (a vision
tower) is another ``model_type`` and refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.models.config_keys import positive_int
from attnlab.models.decoder import load_decoder
from attnlab.models.decoder_config import DecoderConfig, parse_decoder
from attnlab.models.files import CONFIG, Checkpoint, CheckpointError
from attnlab.models.gemma2 import gemma_choices

MODEL_TYPE = "gemma3_text"


def parse_gemma3_config(raw: dict[str, Any], where: str = CONFIG) -> DecoderConfig:
    """A Gemma 3 text ``config.json`` (``gemma2.gemma_choices`` and per-head q/k norm)."""
    if raw.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{where}: model_type {raw.get('model_type')!r} is not gemma3_text")
    given = raw.get("sliding_window_pattern")  # absent or null: 6 (Gemma 3's five in six)
    key = "sliding_window_pattern"
    pattern = positive_int({key: 6 if given is None else given}, key, where)
    return parse_decoder(
        raw, where, qk_norm="head", sliding=lambda i: (i + 1) % pattern != 0,
        local_theta=raw.get("rope_local_base_freq", 10000.0), **gemma_choices(raw, where),
    )  # fmt: skip


def load_gemma3(directory: Path | str, mechanisms: Any = None) -> Checkpoint:
    """A Gemma 3 text checkpoint (``decoder.load_decoder``)."""
    return load_decoder(directory, parse_gemma3_config)


#: A tiny Gemma 3: grouped-query attention, head_dim 8, layer 0 sliding (local rope base,
#: a window of 5 keys), layer 1 global with linear rope scaling, query_pre_attn_scalar 8.
TINY = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 256,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "query_pre_attn_scalar": 8, "sliding_window": 5, "sliding_window_pattern": 2,
    "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
}  # fmt: skip
