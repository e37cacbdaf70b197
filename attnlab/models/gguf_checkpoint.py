"""A GGUF file (llama.cpp's format, version 3) read as a checkpoint of a Llama-family
decoder: its metadata turned into the family's ``config.json`` keys, its tensors
dequantized to float32 (``gguf.quants.dequantize``) and renamed to Hugging Face's, the
converter's transforms undone, and its tokenizer built from its own metadata
(``attnlab.models.gguf_tokenizer``). The family then parses, checks and computes it as it
does a safetensors checkpoint: one forward, one set of tables.

What llama.cpp's converter (``convert_hf_to_gguf.py``) did, and is undone here:

- every ``*norm.weight`` of a Gemma model is stored with 1 added (the effective gain of
  Gemma's ``(1 + w)`` RMSNorm): read back as ``stored - 1`` (exact where the stored value
  lies in [0.5, 2], Sterbenz's lemma; within one float32 ulp of ``stored`` otherwise);
- the ``llama`` architecture's Q and K rows are permuted for interleaved rotary pairs
  (``permute(w, n_head)``: rows reshaped ``(n_head, 2, d / 2)``, the middle axes
  swapped): permuted back to Hugging Face's half-split order (``unpermute_rows``).

What the file does not store, and what is assumed (each as llama.cpp assumes it):

- Gemma 3's attention scale: ``key_length^-1/2`` (``query_pre_attn_scalar = key_length``)
  for every size but 27B (62 blocks), where llama.cpp takes ``(embedding_length /
  head_count)^-1/2``; the sliding layers' rope base 10,000 and the pattern of five sliding
  layers in six;
- a tied output head where the file has no ``output.weight``.

What is refused, in one line naming the file and the key or tensor (``CheckpointError``):
not a GGUF, a version other than 3, a truncated file or data past its end, an
architecture not in ``ARCHITECTURES`` (``qwen2``: attention biases, not computed), a
tensor of a type not in ``DEQUANTIZED``, a tensor the family does not read or one it lacks,
a NaN, a ``rope_freqs`` tensor (per-frequency rope factors), a rope scaling type other than
linear, more memory than this process may use (checked from the header, before any tensor
is dequantized). Nothing in a GGUF is executed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.models.decoder import decoder_shapes
from attnlab.models.decoder_config import DecoderConfig
from attnlab.models.files import (
    FLOAT32_BYTES,
    Checkpoint,
    CheckpointError,
    check_memory,
    check_token_ids,
    is_file,
    one_reason,
    sha256,
)
from attnlab.models.gemma3 import parse_gemma3_config
from attnlab.models.gguf_tokenizer import gguf_tokenizer
from attnlab.models.llama import parse_llama_config
from attnlab.models.qwen3 import parse_qwen3_config

#: A GGUF file's suffix: ``--checkpoint`` takes a file of it where it takes a folder.
SUFFIX = ".gguf"
#: The tensor types dequantized to float32 (``gguf.quants.dequantize``), by name.
DEQUANTIZED = ("F32", "F16", "BF16", "Q8_0", "Q5_0", "Q4_K", "Q6_K")
#: ``general.architecture`` -> the ``model_type`` of the family that computes it, and its
#: parser.
ARCHITECTURES: dict[str, tuple[str, Callable[[dict, str], DecoderConfig]]] = {
    "gemma3": ("gemma3_text", parse_gemma3_config),
    "llama": ("llama", parse_llama_config),
    "qwen3": ("qwen3", parse_qwen3_config),
}
#: Architectures named with why they are not read.
REFUSED_ARCHITECTURES = {"qwen2": "its attention has biases, which are not computed here"}
#: GGUF metadata ``{arch}.<key>`` -> ``config.json`` key (where stored).
CONFIG_KEYS = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "context_length": "max_position_embeddings",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "attention.sliding_window": "sliding_window",
    "final_logit_softcapping": "final_logit_softcapping",
    "attn_logit_softcapping": "attn_logit_softcapping",
}
#: A block's GGUF tensor -> its Hugging Face name after ``model.layers.{i}.``; the norm
#: after the attention and the one before the MLP by the family's block
#: (``DecoderConfig.block``): pre-norm blocks have one (``ffn_norm``), Gemma's four.
BLOCK_TENSORS = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "attn_norm": "input_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}  # fmt: skip
BLOCK_NORMS = {
    "pre": {"ffn_norm": "post_attention_layernorm"},
    "sandwich": {"post_attention_norm": "post_attention_layernorm",
                 "ffn_norm": "pre_feedforward_layernorm",
                 "post_ffw_norm": "post_feedforward_layernorm"},
}  # fmt: skip
#: Tensors outside the blocks.
MODEL_TENSORS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
                 "output": "lm_head"}  # fmt: skip
#: Gemma 3 27B's depth: llama.cpp scales its logits by ``(embedding_length / head_count)^-1/2``.
GEMMA3_27B_BLOCKS = 62


def is_gguf(path: Path | str) -> bool:
    """Whether ``--checkpoint``'s ``path`` names a GGUF file (by its suffix)."""
    return Path(path).suffix.lower() == SUFFIX


def hf_name(gguf_name: str, block: str) -> str | None:
    """The Hugging Face name of the GGUF tensor ``gguf_name`` (``blk.3.attn_q.weight`` ->
    ``model.layers.3.self_attn.q_proj.weight``) in a family of ``block`` norms; None for a
    tensor no family here reads."""
    stem, _, suffix = gguf_name.rpartition(".")
    if suffix != "weight":
        return None
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and re.fullmatch(r"0|[1-9][0-9]*", parts[1]):
        name = {**BLOCK_TENSORS, **BLOCK_NORMS[block]}.get(parts[2])
        return None if name is None else f"model.layers.{int(parts[1])}.{name}.weight"
    name = MODEL_TENSORS.get(stem)
    return None if name is None else f"{name}.weight"


def unpermute_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``permute(w, n_head)`` of a Q or K weight ``[n_head d, in]``: its
    rows were reshaped ``(n_head, 2, d / 2, in)`` and the middle axes swapped (pairs
    interleaved for rotary on adjacent entries); Hugging Face's rotary pairs entry ``j``
    with ``j + d / 2``."""
    rows = weight.shape[0]
    half = rows // n_head // 2
    return weight.reshape(n_head, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def read_metadata(path: Path) -> tuple[Any, dict[str, Any]]:
    """The ``gguf.GGUFReader`` of ``path`` (its header parsed, tensors mapped, none read)
    and its metadata, key -> value; ``CheckpointError`` naming the file if it is not a
    GGUF of version 3, is truncated or its tensors' data reach past its end."""
    import gguf

    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({one_reason(err)})") from None
    if magic != b"GGUF":
        raise CheckpointError(f"{path}: is not a GGUF file (it does not open with GGUF's magic)")
    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        raise CheckpointError(
            f"{path}: cannot be read as GGUF ({one_reason(err)}; truncated, or its tensors' data "
            f"reach past its end at {path.stat().st_size:,} bytes)"
        ) from None
    metadata = {}
    for key, field in reader.fields.items():
        try:
            metadata[key] = field.contents()
        except (ValueError, IndexError, TypeError) as err:
            raise CheckpointError(
                f"{path}: its metadata {key} cannot be read ({one_reason(err)})"
            ) from None
    if metadata.get("GGUF.version") != 3:
        raise CheckpointError(f"{path}: GGUF version {metadata.get('GGUF.version')!r}, only 3")
    return reader, metadata


def gguf_config(metadata: dict[str, Any], tensor_names: set[str], where: str) -> dict:
    """The ``config.json`` the family reads, from the GGUF's metadata (``CONFIG_KEYS``, the
    vocabulary's size from its tokens, a tied head where no ``output.weight`` is stored,
    and the module docstring's assumptions); ``CheckpointError`` naming ``where`` and the
    key for an architecture not read or a rope scaling not computed."""
    arch = metadata.get("general.architecture")
    if arch in REFUSED_ARCHITECTURES:
        raise CheckpointError(
            f"{where}: general.architecture {arch!r}: {REFUSED_ARCHITECTURES[arch]}"
        )
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            f"{where}: general.architecture {arch!r} is not read here (only "
            f"{', '.join(ARCHITECTURES)})"
        )
    model_type, _ = ARCHITECTURES[arch]
    raw: dict[str, Any] = {"model_type": model_type}
    for key, name in CONFIG_KEYS.items():
        if f"{arch}.{key}" in metadata:
            raw[name] = metadata[f"{arch}.{key}"]
    tokens = metadata.get("tokenizer.ggml.tokens")
    raw["vocab_size"] = metadata.get(f"{arch}.vocab_size", len(tokens) if tokens else None)
    raw["tie_word_embeddings"] = "output.weight" not in tensor_names
    if "rope_freqs.weight" in tensor_names:
        raise CheckpointError(f"{where}: holds rope_freqs.weight (per-frequency rope "
                              "factors), which is not computed here")  # fmt: skip
    scaling = metadata.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise CheckpointError(f"{where}: {arch}.rope.scaling.type {scaling!r} is not "
                                  "computed here (only linear)")  # fmt: skip
        raw["rope_scaling"] = {"rope_type": "linear",
                               "factor": metadata.get(f"{arch}.rope.scaling.factor")}  # fmt: skip
    if arch == "llama" and "head_dim" not in raw:
        raw["head_dim"] = metadata.get("llama.rope.dimension_count")
    if arch == "gemma3":
        heads, width = raw.get("num_attention_heads"), raw.get("hidden_size")
        deep = raw.get("num_hidden_layers") == GEMMA3_27B_BLOCKS and heads and width
        raw["query_pre_attn_scalar"] = width // heads if deep else raw.get("head_dim")
        raw["rope_local_base_freq"] = 10000.0
        raw["sliding_window_pattern"] = 6
        raw["hidden_activation"] = "gelu_pytorch_tanh"
    return {k: v for k, v in raw.items() if v is not None}


def _dequantized(tensor: Any, where: Path) -> np.ndarray:
    """One GGUF tensor as float32, in numpy's order (``[out, in]`` for a linear weight)."""
    import gguf

    kind = tensor.tensor_type.name
    if kind not in DEQUANTIZED:
        raise CheckpointError(f"{where}: tensor {tensor.name} is {kind}, which is not "
                              f"dequantized here (only {', '.join(DEQUANTIZED)})")  # fmt: skip
    value = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(n) for n in reversed(tensor.shape))
    return np.array(value, np.float32).reshape(shape)  # a copy: F32 data is the file's map


def load_gguf(path: Path | str, mechanisms: Any = None) -> Checkpoint:
    """The checkpoint in the GGUF file ``path``: the family of its architecture
    (``ARCHITECTURES``) reading the config ``gguf_config`` gives, every tensor it reads
    (``decoder.decoder_shapes``) dequantized from the file and renamed (``hf_name``), Gemma's
    norms and Llama's Q/K permutation undone, the tokenizer from the metadata; the memory
    the float32 tensors take checked from the header first. ``CheckpointError`` (one line
    naming the file) for anything the module docstring lists."""
    path = Path(path)
    if not is_file(path):
        raise CheckpointError(f"{path}: is missing" if not path.exists() else
                              f"{path}: is not a file")  # fmt: skip
    reader, metadata = read_metadata(path)
    where = str(path)
    names = {tensor.name for tensor in reader.tensors}
    raw = gguf_config(metadata, names, where)
    arch = metadata["general.architecture"]
    config = ARCHITECTURES[arch][1](raw, where)
    shapes = decoder_shapes(config)
    by_name = {}
    for tensor in reader.tensors:
        name = hf_name(tensor.name, config.block)
        if name is None or name not in shapes:
            raise CheckpointError(f"{path}: holds tensor {tensor.name}, which the "
                                  f"{config.model_type} family does not read")  # fmt: skip
        if name in by_name:
            raise CheckpointError(f"{path}: holds {by_name[name].name} and {tensor.name}, "
                                  f"both read as {name}")  # fmt: skip
        by_name[name] = tensor
    need = FLOAT32_BYTES * sum(math.prod(shape) for shape in shapes.values())
    check_memory(path, need, "its float32 tensors take")
    tensors = {}
    for name, shape in shapes.items():
        if name not in by_name:
            raise CheckpointError(f"{path}: lacks the tensor that {name} is read from")
        value = _dequantized(by_name[name], path)
        if value.shape != shape:
            raise CheckpointError(f"{path}: {by_name[name].name} has shape {value.shape}, its "
                                  f"metadata implies {shape}")  # fmt: skip
        if not np.isfinite(value).all():
            raise CheckpointError(f"{path}: {by_name[name].name} holds NaN or infinite values")
        if config.norm_offset and len(shape) == 1:  # Gemma: stored 1 + w
            value = value - np.float32(config.norm_offset)
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config.n_head if name.endswith("q_proj.weight") else config.n_kv_head
            value = unpermute_rows(value, heads)
        tensors[name] = value
    tokenizer = gguf_tokenizer(metadata, where)
    check_token_ids(tokenizer, config.vocab_size, path)
    return Checkpoint(
        config.model_type, config, tensors, tokenizer, path, sha256(path), config.context,
    )  # fmt: skip
