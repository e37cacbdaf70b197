"""The Qwen3 family (Qwen team 2025; Hugging Face ``Qwen3ForCausalLM``): Llama's decoder
(``attnlab.models.decoder``) with q and k RMS-normalised per head (``q_norm``, ``k_norm``,
weights ``[head_dim]``) before rotary positions. Tensor names: Llama's, and
``model.layers.{i}.self_attn.q_norm.weight``, ``k_norm.weight``. A sliding window
(``use_sliding_window``) is refused; mixture-of-experts is another ``model_type``
(``qwen3_moe``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.models.config_keys import boolean
from attnlab.models.decoder import load_decoder
from attnlab.models.decoder_config import DecoderConfig, parse_decoder
from attnlab.models.files import CONFIG, Checkpoint, CheckpointError

MODEL_TYPE = "qwen3"


def parse_qwen3_config(raw: dict[str, Any], where: str = CONFIG) -> DecoderConfig:
    """A Qwen3 ``config.json``: pre-norm, SwiGLU, per-head q/k norm, ``head_dim^-1/2``
    (``head_dim`` read, 128 in every published size)."""
    if raw.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{where}: model_type {raw.get('model_type')!r} is not qwen3")
    if boolean(raw, "use_sliding_window", where, False):
        raise CheckpointError(f"{where}: use_sliding_window is true, which is not computed here")
    raw = {k: v for k, v in raw.items() if k != "sliding_window"}  # unused unless enabled
    return parse_decoder(raw, where, qk_norm="head", default_head_dim=128)


def load_qwen3(directory: Path | str, mechanisms: Any = None) -> Checkpoint:
    """A Qwen3 checkpoint (``decoder.load_decoder``)."""
    return load_decoder(directory, parse_qwen3_config)


#: A tiny Qwen3: grouped-query attention, head_dim 8 != 16 / 4, tied head.
TINY = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 256,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False,
    "sliding_window": None,
}  # fmt: skip
