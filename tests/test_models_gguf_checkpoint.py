"""attnlab.models.gguf_checkpoint: a GGUF written here as llama.cpp's converter
(convert_hf_to_gguf.py) writes one (``write_gguf``: its metadata keys, tensor names, Gemma's
norms stored as ``1 + w``, Llama's Q and K rows permuted for interleaved rotary pairs, Q8_0,
Q5_0, F16 and BF16 storage by ``gguf.quants``) is read back against the same tensors read
from safetensors by the Llama family's own reader: the same ``DecoderConfig`` (but for
``rms_norm_eps``, which GGUF stores as float32), the same tensors (exactly, or within the
rounding of float32's ``(1 + w) - 1``), the same logits (exactly, or within a float32 bound
of the float64 reference, tests/numpy_reference.py); the converter's transforms shown to be
in the file; every refusal one line naming the file; experiment 13 end to end on a GGUF, its
rows opening with the GGUF's BOS where ``add_bos_token`` says so."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import gguf
import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType
from numpy_reference import EPS32, decoder_float32_bound, decoder_reference
from safetensors.numpy import save_file

from attnlab.models import files, gemma3, llama, qwen3
from attnlab.models.decoder import write_random_decoder
from attnlab.models.files import WEIGHTS, Checkpoint, CheckpointError, sha256
from attnlab.models.gguf_checkpoint import DEQUANTIZED, load_gguf, unpermute_rows
from attnlab.models.layers import next_token_loss
from attnlab.models.registry import family_of, read_checkpoint
from attnlab.studies.real_model.causal import causal_rows
from attnlab.studies.real_model.study import STUDY

#: A SentencePiece vocabulary as llama.cpp writes one: four specials, then the 256 byte
#: pieces every text falls back to (no word pieces: the byte fallback is all a test needs).
TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
PAD, EOS, BOS, UNK = range(4)
#: llama.cpp's token types: 3 control, 2 unknown, 6 byte.
TOKEN_TYPES = [3, 3, 3, 2] + [6] * 256

#: Llama's tiny (grouped-query attention, head_dim 6 != 16 / 4, untied head) with the
#: vocabulary above. Its Llama 3 rope scaling is dropped: llama.cpp's converter stores Llama
#: 3's scaling as a ``rope_freqs.weight`` tensor of per-frequency factors, which the reader
#: refuses (only linear scaling is read from the metadata).
LLAMA_RAW = {k: v for k, v in llama.TINY.items() if k != "rope_scaling"} | {"vocab_size": 260}
#: Qwen3's tiny (per-head q/k norm, tied head).
QWEN3_RAW = qwen3.TINY | {"vocab_size": 260}
#: A Gemma 3 the GGUF can say: llama.cpp assumes query_pre_attn_scalar = head_dim (8, as
#: gemma3.TINY has), the sliding layers' rope base 10000 and five sliding layers in six; six
#: layers so that layer 5 is global (its rope scaling, linear x8, applies), a window of 5 keys
#: (binding on rows of 12).
GEMMA3_RAW = gemma3.TINY | {"vocab_size": 260, "num_hidden_layers": 6,
                            "sliding_window_pattern": 6, "sliding_window": 5}  # fmt: skip
#: model_type -> (general.architecture, config, parser).
FAMILIES = {
    "llama": ("llama", LLAMA_RAW, llama.parse_llama_config),
    "qwen3": ("qwen3", QWEN3_RAW, qwen3.parse_qwen3_config),
    "gemma3_text": ("gemma3", GEMMA3_RAW, gemma3.parse_gemma3_config),
}
#: A Llama whose linear layers' input widths (hidden 32, intermediate 64, 4 heads x 8) are
#: multiples of 32, as Q8_0's blocks of 32 need.
WIDE_RAW = LLAMA_RAW | {"hidden_size": 32, "intermediate_size": 64, "head_dim": 8}
#: Two rows of 12 ids.
IDS = (np.arange(2 * 12).reshape(2, 12) * 37 + 5) % 260
#: float32's unit roundoff: |fl(x) - x| <= U |x| for a rounded x.
U = 2.0**-24

# --- llama.cpp's converter, for the tensors and config.json it is given -------------------

#: Hugging Face's name after ``model.layers.{i}.`` -> llama.cpp's after ``blk.{i}.``.
BLOCK_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "input_layernorm": "attn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}  # fmt: skip
#: The norms around the MLP: a pre-norm block's one, Gemma's three.
PRE_NORM_NAMES = {"post_attention_layernorm": "ffn_norm"}
GEMMA_NORM_NAMES = {"post_attention_layernorm": "post_attention_norm",
                    "pre_feedforward_layernorm": "ffn_norm",
                    "post_feedforward_layernorm": "post_ffw_norm"}  # fmt: skip
#: A scalar's GGUF type as the converter writes it (sizes and ids as uint32).
SCALAR_TYPES = {bool: GGUFValueType.BOOL, int: GGUFValueType.UINT32,
                float: GGUFValueType.FLOAT32, str: GGUFValueType.STRING}  # fmt: skip
MODEL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def gguf_name(name: str, arch: str) -> str:
    """llama.cpp's name of the Hugging Face tensor ``name``."""
    stem = name.removesuffix(".weight")
    if stem in MODEL_NAMES:
        return f"{MODEL_NAMES[stem]}.weight"
    _, _, layer, rest = stem.split(".", 3)  # model.layers.{i}.{rest}
    names = BLOCK_NAMES | (GEMMA_NORM_NAMES if arch == "gemma3" else PRE_NORM_NAMES)
    return f"blk.{layer}.{names[rest]}.weight"


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The converter's ``LlamaModel.permute``: each head's rows from Hugging Face's
    half-split rotary pairs (``j``, ``j + d / 2``) to interleaved ones (``2j``, ``2j + 1``)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def stored(name: str, value: np.ndarray, arch: str, raw: dict) -> np.ndarray:
    """The float32 tensor the converter stores for the Hugging Face tensor ``name``."""
    if arch == "gemma3" and value.ndim == 1:  # Gemma3Model: every norm shifted by 1
        return np.float32(1) + value
    if arch == "llama" and name.endswith("q_proj.weight"):
        return permute(value, raw["num_attention_heads"])
    if arch == "llama" and name.endswith("k_proj.weight"):
        return permute(value, raw["num_key_value_heads"])
    return value


def gguf_metadata(arch: str, raw: dict, add_bos: bool = True) -> dict[str, Any]:
    """The converter's metadata for ``config.json`` ``raw`` and the vocabulary ``TOKENS``
    (``{arch}.vocab_size`` for Llama only, as its converter writes it: Qwen3's and Gemma 3's
    vocabulary size is read from the tokens' count)."""
    meta: dict[str, Any] = {
        "block_count": raw["num_hidden_layers"],
        "context_length": raw["max_position_embeddings"],
        "embedding_length": raw["hidden_size"],
        "feed_forward_length": raw["intermediate_size"],
        "attention.head_count": raw["num_attention_heads"],
        "attention.head_count_kv": raw["num_key_value_heads"],
        "attention.key_length": raw["head_dim"],
        "attention.value_length": raw["head_dim"],
        "attention.layer_norm_rms_epsilon": float(raw["rms_norm_eps"]),
        "rope.freq_base": float(raw["rope_theta"]),
    }
    if arch == "llama":
        meta |= {"rope.dimension_count": raw["head_dim"], "vocab_size": len(TOKENS)}
    if arch == "gemma3":
        meta["attention.sliding_window"] = raw["sliding_window"]
    if raw.get("rope_scaling"):
        meta["rope.scaling.type"] = raw["rope_scaling"]["rope_type"]
        meta["rope.scaling.factor"] = float(raw["rope_scaling"]["factor"])
    meta = {f"{arch}.{k}": v for k, v in meta.items()}
    return meta | {
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.scores": [0.0] * len(TOKENS), "tokenizer.ggml.token_type": TOKEN_TYPES,
        "tokenizer.ggml.bos_token_id": BOS, "tokenizer.ggml.eos_token_id": EOS,
        "tokenizer.ggml.unknown_token_id": UNK, "tokenizer.ggml.padding_token_id": PAD,
        "tokenizer.ggml.add_bos_token": add_bos, "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": True,
    }  # fmt: skip


def write_gguf(
    path: Path, arch: str, raw: dict, tensors: dict[str, np.ndarray],
    quant: dict[str, Q] | None = None, metadata: dict[str, Any] | None = None,
    extra: dict[str, np.ndarray] | None = None, add_bos: bool = True,
) -> Path:  # fmt: skip
    """A GGUF at ``path`` as llama.cpp's converter writes the Hugging Face ``config.json``
    ``raw`` and float32 ``tensors`` for ``general.architecture`` ``arch``: its metadata
    (``gguf_metadata``, updated by ``metadata``; a value None removes a key), each tensor
    renamed (``gguf_name``), transformed (``stored``) and stored as ``quant[name]`` (default
    F32; ``gguf.quants.quantize`` then ``add_tensor(..., raw_dtype=...)`` as the converter
    does), and the GGUF-named ``extra`` tensors as they are."""
    meta = gguf_metadata(arch, raw, add_bos) | (metadata or {})
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        if value is None:
            continue
        if isinstance(value, list):
            writer.add_array(key, value)  # ints as INT32, floats as FLOAT32, strings
        else:
            writer.add_key_value(key, value, SCALAR_TYPES[type(value)])
    for name, value in tensors.items():
        data = stored(name, np.asarray(value, np.float32), arch, raw)
        kind = (quant or {}).get(name, Q.F32)
        if kind == Q.F32:
            writer.add_tensor(gguf_name(name, arch), np.ascontiguousarray(data))
        else:
            writer.add_tensor(gguf_name(name, arch), gguf.quants.quantize(data, kind),
                              raw_dtype=kind)  # fmt: skip
    for name, value in (extra or {}).items():
        writer.add_tensor(name, np.ascontiguousarray(value, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def stored_tensors(path: Path) -> dict[str, np.ndarray]:
    """The GGUF's tensors (all F32) as the file holds them, by llama.cpp's names, in numpy's
    order, untransformed (``gguf.GGUFReader``, not the reader under test)."""
    out = {}
    for tensor in gguf.GGUFReader(str(path)).tensors:
        assert tensor.tensor_type == Q.F32
        shape = tuple(int(n) for n in reversed(tensor.shape))
        out[tensor.name] = np.array(tensor.data).reshape(shape)
    return out


# --- the forward and its float32 bound ---------------------------------------------------


def logits_of(checkpoint: Checkpoint, tensors: dict | None = None, ids=IDS) -> np.ndarray:
    """The family's float32 logits of ``ids`` from ``checkpoint`` (or other ``tensors``)."""
    params = {k: jnp.asarray(v) for k, v in (tensors or checkpoint.tensors).items()}
    logits, _ = family_of(checkpoint).forward(params, checkpoint.config, ids)
    return np.asarray(logits, np.float64)


class Pair(NamedTuple):
    """One family's random checkpoint read from safetensors and from the GGUF of it."""

    safetensors: Checkpoint
    gguf: Checkpoint
    path: Path
    safetensors_logits: np.ndarray
    gguf_logits: np.ndarray


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, Pair]:
    """Each family's random checkpoint (F32) as safetensors and as its GGUF, both read
    through ``read_checkpoint``, and their logits on ``IDS``."""
    root = tmp_path_factory.mktemp("gguf")
    out = {}
    for family, (arch, raw, parse) in FAMILIES.items():
        ours = read_checkpoint(write_random_decoder(root / family, raw, parse))
        path = write_gguf(root / f"{family}.gguf", arch, raw, ours.tensors)
        theirs = read_checkpoint(path)
        out[family] = Pair(ours, theirs, path, logits_of(ours), logits_of(theirs))
    return out


# --- the same checkpoint, read from safetensors and from GGUF ----------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_config_is_the_safetensors_config_but_for_eps_stored_as_float32(pairs, family):
    """Every ``DecoderConfig`` field equal (dimensions, heads, head_dim, tied head, rope per
    layer, Gemma's divisor and windows, the mechanism), but ``eps``: GGUF's
    ``layer_norm_rms_epsilon`` is a float32 (1e-5 reads back as 9.99999975e-06)."""
    ours, theirs = pairs[family].safetensors, pairs[family].gguf
    eps32 = float(np.float32(FAMILIES[family][1]["rms_norm_eps"]))
    assert theirs.config.eps == eps32 != ours.config.eps
    assert theirs.config == dataclasses.replace(ours.config, eps=eps32)
    assert (theirs.model_type, theirs.max_seq_length) == (ours.model_type, ours.max_seq_length)
    assert theirs.directory == pairs[family].path
    assert theirs.weights_sha256 == sha256(pairs[family].path)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_tensors_and_logits_are_exactly_the_safetensors_ones(pairs, family):
    """F32 storage and a permutation undone are exact: every tensor equal, so the logits
    equal (the forward adds ``eps`` to float32 values: 1e-5 and float32(1e-5) are the same
    float32 there)."""
    pair = pairs[family]
    assert pair.gguf.tensors.keys() == pair.safetensors.tensors.keys()
    for name, value in pair.safetensors.tensors.items():
        assert pair.gguf.tensors[name].dtype == np.float32
        np.testing.assert_array_equal(pair.gguf.tensors[name], value, err_msg=name)
    np.testing.assert_array_equal(pair.gguf_logits, pair.safetensors_logits)


def test_gemma3_norms_within_the_rounding_of_one_plus_w_and_logits_within_float32(pairs):
    """Gemma's norms are stored as float32 ``1 + w``, rounded once: |err| <= U |1 + w|
    (the ``- 1`` back is exact, Sterbenz, where the stored value is in [0.5, 2]); the rest
    exactly. The logits then differ by at most each float32 forward's distance to its float64
    reference (``decoder_float32_bound``) plus the float64 forward's own response to the norms'
    difference. (They are in fact equal: the gains the float32 forward uses, float32
    ``1 + w``, are identical, as checked here; the bound does not lean on how the forward
    rounds.)"""
    pair = pairs["gemma3_text"]
    assert pair.gguf.tensors.keys() == pair.safetensors.tensors.keys()
    for name, w in pair.safetensors.tensors.items():
        read = pair.gguf.tensors[name]
        if w.ndim == 1:
            assert np.all(np.abs(read - w) <= U * np.abs(1.0 + w.astype(np.float64))), name
            np.testing.assert_array_equal(np.float32(1) + read, np.float32(1) + w)
        else:
            np.testing.assert_array_equal(read, w, err_msg=name)
    raw = GEMMA3_RAW | {"rms_norm_eps": pair.gguf.config.eps}
    response = np.abs(
        decoder_reference(pair.gguf.tensors, raw, IDS)
        - decoder_reference(pair.safetensors.tensors, raw, IDS)
    ).max()
    bound = (
        decoder_float32_bound(pair.gguf.tensors, raw, IDS)
        + decoder_float32_bound(pair.safetensors.tensors, raw, IDS)
        + response
    )
    assert np.abs(pair.gguf_logits - pair.safetensors_logits).max() <= bound


# --- the converter's transforms are in the file, and undoing them matters ----------------


@pytest.mark.parametrize(("n_head", "head_dim", "width"), [(4, 6, 16), (2, 8, 3), (1, 4, 5)])
def test_unpermute_rows_inverts_the_converters_permute(n_head, head_dim, width):
    w = np.arange(n_head * head_dim * width, dtype=np.float32).reshape(-1, width)
    assert not np.array_equal(permute(w, n_head), w)  # not the identity at these shapes
    np.testing.assert_array_equal(unpermute_rows(permute(w, n_head), n_head), w)


def test_llama_q_and_k_are_stored_permuted_and_reading_them_so_is_wrong(pairs):
    """The file holds ``permute(W_q, n_head)`` and ``permute(W_k, n_kv_head)``, not Hugging
    Face's rows; a reader that did not undo it would rotate the wrong pairs: its logits
    differ from the model's by more than 10 float32 bounds."""
    pair = pairs["llama"]
    ours = pair.safetensors.tensors
    wrong, in_files = dict(ours), stored_tensors(pair.path)
    for i in range(LLAMA_RAW["num_hidden_layers"]):
        for proj, gguf_proj, heads in (("q_proj", "attn_q", 4), ("k_proj", "attn_k", 2)):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            in_file = in_files[f"blk.{i}.{gguf_proj}.weight"]
            assert not np.array_equal(in_file, ours[name])
            np.testing.assert_array_equal(in_file, permute(ours[name], heads))
            wrong[name] = in_file
    bound = decoder_float32_bound(ours, LLAMA_RAW, IDS)
    assert np.abs(logits_of(pair.safetensors, wrong) - pair.safetensors_logits).max() > 10 * bound


def test_gemma3_norms_are_stored_as_one_plus_w(pairs):
    """Each 1-d tensor in the file is float32 ``1 + w`` (so within [0.5, 2], where ``- 1``
    is exact), and the reader gives it back less 1; Gemma 3's Q and K are not permuted."""
    pair = pairs["gemma3_text"]
    in_files = stored_tensors(pair.path)
    assert len(in_files) == len(pair.safetensors.tensors)
    for name, w in pair.safetensors.tensors.items():
        in_file = in_files[gguf_name(name, "gemma3")]
        if w.ndim == 1:
            np.testing.assert_array_equal(in_file, np.float32(1) + w)
            assert np.all((in_file >= 0.5) & (in_file <= 2.0))
            np.testing.assert_array_equal(pair.gguf.tensors[name], in_file - np.float32(1))
        else:
            np.testing.assert_array_equal(in_file, w)


def test_tensors_read_do_not_change_when_the_file_does(tmp_path, pairs):
    """A checkpoint's tensors are its own once read (as safetensors' are): rewriting the
    file afterwards (a re-download, a re-conversion) leaves them as they were, and cutting it
    short does not kill the process with SIGBUS the next time a tensor is touched."""
    path = tmp_path / "copy.gguf"
    path.write_bytes(pairs["llama"].path.read_bytes())
    checkpoint = load_gguf(path)
    before = {name: value.copy() for name, value in checkpoint.tensors.items()}
    reader = gguf.GGUFReader(str(path))
    offsets = [tensor.data_offset for tensor in reader.tensors]
    del reader
    with path.open("r+b") as file:
        for offset in offsets:
            file.seek(offset)
            file.write(np.float32(7.0).tobytes())  # each tensor's first entry: 7
    for name, value in before.items():
        np.testing.assert_array_equal(checkpoint.tensors[name], value, err_msg=name)


# --- quantized storage ---------------------------------------------------------------------


def storage(name: str, value: np.ndarray) -> Q:
    """The quantized test's storage: norms F32, the embedding F16, the head BF16, layer 0's
    V Q5_0, every other linear weight Q8_0."""
    if value.ndim == 1:
        return Q.F32
    special = {"model.embed_tokens.weight": Q.F16, "lm_head.weight": Q.BF16,
               "model.layers.0.self_attn.v_proj.weight": Q.Q5_0}  # fmt: skip
    return special.get(name, Q.Q8_0)


def test_quantized_gguf_is_dequantized_exactly_and_computes_as_its_float32(tmp_path):
    """Each tensor read is exactly ``dequantize(quantize(w))`` (for Q and K too: their
    permutation moves whole rows and Q8_0's blocks lie within a row), and the logits equal
    those of the safetensors checkpoint of those float32 tensors (the same program on the
    same values)."""
    directory = write_random_decoder(tmp_path / "wide", WIDE_RAW, llama.parse_llama_config)
    ours = read_checkpoint(directory)
    quant = {name: storage(name, value) for name, value in ours.tensors.items()}
    path = write_gguf(tmp_path / "wide.gguf", "llama", WIDE_RAW, ours.tensors, quant)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(path)).tensors}
    assert {types[gguf_name(name, "llama")] for name in quant} == {
        Q.F32,
        Q.F16,
        Q.BF16,
        Q.Q5_0,
        Q.Q8_0,
    }
    expected = {}
    for name, w in ours.tensors.items():
        kind = quant[name]
        expected[name] = gguf.quants.dequantize(gguf.quants.quantize(w, kind), kind)
        if kind != Q.F32:
            assert not np.array_equal(expected[name], w), name  # lossy: the test can tell
    theirs = load_gguf(path)
    assert theirs.tensors.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(theirs.tensors[name], value, err_msg=name)
    save_file(expected, str(directory / WEIGHTS))
    dequantized = read_checkpoint(directory)
    assert theirs.config == dataclasses.replace(dequantized.config, eps=theirs.config.eps)
    np.testing.assert_array_equal(logits_of(theirs), logits_of(dequantized))


# --- refusals --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wide_tensors(tmp_path_factory) -> dict[str, np.ndarray]:
    """``WIDE_RAW``'s random tensors (Q4_1's blocks of 32 fit its widths)."""
    root = tmp_path_factory.mktemp("wide")
    directory = write_random_decoder(root / "wide", WIDE_RAW, llama.parse_llama_config)
    return read_checkpoint(directory).tensors


def _broken(path: Path, tensors: dict[str, np.ndarray], how: str) -> str:
    """Write the GGUF ``path`` broken as ``how`` says; the words its refusal must hold."""
    if how == "not a GGUF":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
        return "is not a GGUF file (it does not open with GGUF's magic)"
    if how == "an empty file":
        path.write_bytes(b"")
        return "is not a GGUF file"
    if how == "unknown architecture":
        write_gguf(path, "bert", WIDE_RAW, tensors)
        return "general.architecture 'bert' is not read here (only gemma3, llama, qwen3)"
    if how == "qwen2":
        write_gguf(path, "qwen2", WIDE_RAW, tensors)
        return "general.architecture 'qwen2': its attention has biases"
    if how == "Q4_1":
        assert "Q4_1" not in DEQUANTIZED
        write_gguf(path, "llama", WIDE_RAW, tensors, {"model.layers.0.mlp.up_proj.weight": Q.Q4_1})
        return "tensor blk.0.ffn_up.weight is Q4_1, which is not dequantized here (only F32, "
    if how == "a tensor missing":
        tensors = {k: v for k, v in tensors.items() if k != "model.layers.1.mlp.down_proj.weight"}
        write_gguf(path, "llama", WIDE_RAW, tensors)
        return "lacks the tensor that model.layers.1.mlp.down_proj.weight is read from"
    if how == "an extra tensor":
        write_gguf(path, "llama", WIDE_RAW, tensors, extra={"blk.0.attn_q.bias": np.zeros(32)})
        return "holds tensor blk.0.attn_q.bias, which the llama family does not read"
    if how == "a layer past block_count":
        write_gguf(path, "llama", WIDE_RAW, tensors, extra={"blk.2.attn_norm.weight": np.ones(32)})
        return "holds tensor blk.2.attn_norm.weight, which the llama family does not read"
    if how == "a layer index with a leading zero":  # would alias blk.1: refused, not read
        write_gguf(path, "llama", WIDE_RAW, tensors, extra={"blk.01.attn_norm.weight": np.ones(32)})
        return "holds tensor blk.01.attn_norm.weight, which the llama family does not read"
    if how == "a NaN":
        tensors = dict(tensors)
        tensors["model.layers.1.mlp.up_proj.weight"] = tensors[
            "model.layers.1.mlp.up_proj.weight"
        ].copy()
        tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = np.nan
        write_gguf(path, "llama", WIDE_RAW, tensors)
        return "blk.1.ffn_up.weight holds NaN or infinite values"
    if how == "rope_freqs":
        write_gguf(path, "llama", WIDE_RAW, tensors, extra={"rope_freqs.weight": np.ones(4)})
        return "holds rope_freqs.weight (per-frequency rope factors), which is not computed here"
    if how == "yarn":
        write_gguf(path, "llama", WIDE_RAW, tensors, metadata={
            "llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0})  # fmt: skip
        return "llama.rope.scaling.type 'yarn' is not computed here (only linear)"
    if how == "a shape the metadata does not imply":
        write_gguf(path, "llama", WIDE_RAW, tensors, metadata={"llama.feed_forward_length": 48})
        return "has shape (64, 32), its metadata implies (48, 32)"
    write_gguf(path, "llama", WIDE_RAW, tensors)
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:-100])
        return "cannot be read as GGUF ("
    assert how == "version 2" and data[4:8] == (3).to_bytes(4, "little")
    path.write_bytes(data[:4] + (2).to_bytes(4, "little") + data[8:])
    return "GGUF version 2, only 3"


BROKEN = ["not a GGUF", "an empty file", "truncated", "version 2", "unknown architecture",
          "qwen2", "Q4_1", "a tensor missing", "an extra tensor", "a layer past block_count",
          "a layer index with a leading zero", "a NaN", "rope_freqs", "yarn",
          "a shape the metadata does not imply"]  # fmt: skip


@pytest.mark.parametrize("how", BROKEN)
def test_broken_gguf_is_one_line_naming_the_file(tmp_path, wide_tensors, how):
    path = tmp_path / "broken.gguf"
    words = _broken(path, wide_tensors, how)
    with pytest.raises(CheckpointError, match=re.escape(words)) as caught:
        read_checkpoint(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: ")


def test_memory_is_checked_from_the_header_before_any_tensor_is_dequantized(
    tmp_path, wide_tensors, monkeypatch
):
    path = write_gguf(tmp_path / "wide.gguf", "llama", WIDE_RAW, wide_tensors)
    need = 4 * sum(v.size for v in wide_tensors.values())

    def refuse(*args):
        raise AssertionError("a tensor was dequantized before the memory was checked")

    monkeypatch.setattr(files, "machine_memory_bytes", lambda: 1000)
    monkeypatch.setattr(gguf.quants, "dequantize", refuse)
    with pytest.raises(
        CheckpointError, match="its float32 tensors take .* more than the "
    ) as caught:
        load_gguf(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert need > 1000
    monkeypatch.undo()  # the same file, memory enough: read
    assert load_gguf(path).tensors.keys() == wide_tensors.keys()


# --- the tokenizer's BOS, and experiment 13 end to end ---------------------------------

#: Some English for the rows: the byte fallback spells it a byte a token.
TEXT = (
    "The river ran under the old stone bridge, and the children counted the boats as they "
    "passed. Nobody knew where the last one was going, but everyone waved at it anyway. "
) * 2


@pytest.mark.parametrize("add_bos", [True, False])
def test_rows_open_with_bos_where_add_bos_token(tmp_path, pairs, add_bos):
    """``causal_rows`` puts the GGUF's BOS first in every row where ``add_bos_token`` is
    true, and nothing where it is false; the rest are the text's ids in turn."""
    path = write_gguf(tmp_path / "tiny.gguf", "llama", LLAMA_RAW,
                      pairs["llama"].safetensors.tensors, add_bos=add_bos)  # fmt: skip
    tokenizer = load_gguf(path).tokenizer
    body = tokenizer.encode(TEXT, add_special_tokens=False).ids
    assert BOS not in body
    rows = causal_rows(tokenizer, TEXT, 40, 12)
    width = 12 - add_bos
    assert rows.shape == (40 // width, 12)
    if add_bos:
        assert (rows[:, 0] == BOS).all()
    np.testing.assert_array_equal(rows[:, int(add_bos) :].ravel(), body[: rows.shape[0] * width])


ARGV = ["--tables", "tiny", "--lengths", "8", "12", "--tokens", "40",
        "--counterfactual-length", "12", "--quiet"]  # fmt: skip


@pytest.mark.slow  # about 10 s of CPU: the causal tables of two models at two lengths
def test_13_on_a_gguf_writes_the_named_causal_tables(load_script, run_main, tmp_path, pairs):
    """The four tables and their sidecars (the GGUF's path and SHA-256), the heads of both
    models at both lengths, and the model's next-token loss that of the float64 reference on
    the rows ``causal_rows`` cuts (BOS first), within its float32 bound."""
    import pandas as pd

    path = tmp_path / "tiny.gguf"
    path.write_bytes(pairs["llama"].path.read_bytes())
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", path, "--text", text, *ARGV, "--out-dir", out]
    assert run_main(load_script("13_real_model"), argv) == 0
    for table in ("heads", "counterfactuals", "layers", "ledger"):
        frame = pd.read_csv(out / f"13_real_model_tiny_{table}.csv")
        assert (frame.checkpoint == "tiny.gguf").all()
        causal = STUDY.outputs.get(f"13_real_model_causal_{table}.csv")
        if causal is not None:
            assert list(frame.columns) == causal.column_names, table
        flags = json.loads((out / f"13_real_model_tiny_{table}.json").read_text())["flags"]
        assert flags["checkpoint"] == [str(path)] and flags["tables"] == "tiny"
        assert flags["weights_sha256"] == [sha256(path)]
    heads = pd.read_csv(out / "13_real_model_tiny_heads.csv")
    assert len(heads) == 2 * 2 * 2 * 4  # models x lengths x layers x heads
    ledger = pd.read_csv(out / "13_real_model_tiny_ledger.csv")
    assert set(ledger.model_type) == {"llama"} and set(ledger.head_dim) == {6}
    drift = pd.read_csv(out / "13_real_model_tiny_counterfactuals.csv")
    checkpoint = load_gguf(path)
    rows = causal_rows(checkpoint.tokenizer, TEXT, 40, 12)
    assert (rows[:, 0] == BOS).all()
    raw = LLAMA_RAW | {"rms_norm_eps": checkpoint.config.eps}
    reference = decoder_reference(checkpoint.tensors, raw, rows)
    shifted = reference[:, :-1] - reference[:, :-1].max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    loss = -np.take_along_axis(logp, rows[:, 1:, None], -1)[..., 0].mean()
    bound = decoder_float32_bound(checkpoint.tensors, raw, rows)
    # the loss is a mean of log-softmax entries, each within 2 x the logits' error
    assert abs(drift.next_token_loss.iloc[0] - loss) <= 2 * bound + 16 * EPS32 * loss
    ours = float(np.mean(next_token_loss(logits_of(checkpoint, ids=rows).astype(np.float32), rows)))
    assert abs(ours - loss) <= 2 * bound + 16 * EPS32 * loss


def test_13_refuses_a_broken_gguf_in_one_line_exit_2(
    load_script, run_main, tmp_path, pairs, capsys
):
    path = tmp_path / "tiny.gguf"
    path.write_bytes(pairs["llama"].path.read_bytes()[:-100])
    out = tmp_path / "out"
    out.mkdir()
    argv = ["--checkpoint", path, *ARGV, "--out-dir", out]
    assert run_main(load_script("13_real_model"), argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--checkpoint" in err and f"{path}: cannot be read as GGUF" in err
    assert not any(out.iterdir())


# --- Gemma 3 270M against transformers (slow: the model package installed) -----------------

#: Transformers' float32 forward and an independent float64 one of this GGUF agree within
#: 4e-5 nats on the reference's sequences (its ``made_with``): that is what rounding in a
#: float32 forward of this model moves the loss by. Ours is a third float32 forward; the
#: issue's tolerance, 1e-3 nats, is 25 times that spread.
GEMMA3_LOSS_ATOL = 1e-3


@pytest.mark.slow  # dequantizes 268 M parameters and runs the model on three rows
def test_gemma3_270m_losses_agree_with_transformers(gemma3_gguf, gemma3_reference):
    """The mean next-token loss of each reference sequence (BOS first, as given) from our
    forward of the GGUF against transformers 5.25's ``Gemma3ForCausalLM`` of the same file:
    the tensor map, Gemma's norms read back and the attention scale llama.cpp assumes
    (``256^-1/2``) together."""
    checkpoint = load_gguf(gemma3_gguf)
    assert checkpoint.weights_sha256 == gemma3_reference["sha256"]
    config = checkpoint.config
    assert (config.n_layer, config.n_head, config.n_kv_head, config.head_dim) == (18, 4, 1, 256)
    assert [i for i, w in enumerate(config.windows) if w is None] == [5, 11, 17]
    assert set(config.windows) == {512, None} and config.divisor == 256**-0.5
    for sequence in gemma3_reference["sequences"]:
        ids = np.asarray([sequence["ids"]])
        ours = float(next_token_loss(logits_of(checkpoint, ids=ids), ids)[0])
        assert abs(ours - sequence["mean_next_token_loss_transformers"]) <= GEMMA3_LOSS_ATOL
