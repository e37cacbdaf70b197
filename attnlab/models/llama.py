"""The Llama family (Touvron et al. 2023; Hugging Face ``LlamaForCausalLM`` layout), and
Mistral (Jiang et al. 2023; ``MistralForCausalLM``), which the same code computes: the
shared decoder (``attnlab.models.decoder``) at its defaults, pre-norm blocks, SwiGLU,
``s = head_dim^-1/2``, rotary positions with Llama 3's (or any ``layers.ROPE_TYPES``)
scaling, and Mistral's ``sliding_window`` on every layer. Tensor names: Hugging Face's
(``decoder.decoder_shapes``). ``attnlab_llama``, experiment 14's models in this layout, is
another ``model_type``, refused here (``attnlab.models.attnlab_llama`` reads it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.models.decoder import load_decoder
from attnlab.models.decoder_config import DecoderConfig, parse_decoder
from attnlab.models.files import CONFIG, Checkpoint, CheckpointError

#: ``model_type`` values this module's parser reads.
MODEL_TYPES = ("llama", "mistral")


def parse_llama_config(raw: dict[str, Any], where: str = CONFIG) -> DecoderConfig:
    """A Llama or Mistral ``config.json``: pre-norm, SwiGLU, ``head_dim^-1/2``; Mistral's
    ``sliding_window`` on every layer."""
    if raw.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(f"{where}: model_type {raw.get('model_type')!r} is not llama")
    return parse_decoder(raw, where)


def load_llama(directory: Path | str, mechanisms: Any = None) -> Checkpoint:
    """A Llama or Mistral checkpoint (``decoder.load_decoder`` with ``parse_llama_config``)."""
    return load_decoder(directory, parse_llama_config)


#: A tiny Llama: 2 layers, grouped-query attention (4 query heads, 2 key/value heads),
#: head_dim 6 where hidden_size / heads is 4, untied head, Llama 3's rope scaling.
TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
    "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
