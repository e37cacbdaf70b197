"""The suite's causal LM (``attnlab.lm.model``) written as a GPT-2 checkpoint that
``attnlab.models.gpt2`` and Hugging Face's ``GPT2LMHeadModel`` read, or in Llama's layout
(``write_llama``, below), which ``attnlab.models.attnlab_llama`` reads. A run's
models (experiments 14 and 15) are ``Saved`` (``saved_model``: one lane's parameters in a
layout of ``LAYOUTS``, a folder name and the run's record) and written by ``write_saved``
into ``<out_dir>/checkpoints/<name>/``, where experiment 13 reads them.

Tensor layout (``transformer.`` prefix, float32, ``safetensors.numpy``), ours -> GPT-2:

    wte [256, D]                          -> transformer.wte.weight
    wpe [T, D]                            -> transformer.wpe.weight
    h_i.ln_1.scale, h_i.ln_2.scale        -> transformer.h.i.ln_{1,2}.weight  (bias: zeros)
    h_i.attn.W_Q | W_K | W_V  [D, D] each -> transformer.h.i.attn.c_attn.weight [D, 3D]
                                             (q | k | v on the output axis; bias: zeros)
    h_i.attn.W_O [D, D]                   -> transformer.h.i.attn.c_proj.weight (bias: zeros)
    h_i.W_1 [D, 4D], h_i.W_2 [4D, D]      -> transformer.h.i.mlp.c_fc / c_proj.weight
                                             (biases: zeros)
    ln_f.scale                            -> transformer.ln_f.weight (bias: zeros)
    lm_head [D, 256]                      -> lm_head.weight [256, D] (transposed: nn.Linear),
                                             tie_word_embeddings false
    h_i.attn.<scalar> (the mechanism's)   -> attnlab.h.i.attn.<scalar>  (ours; [] or [H])

Our Conv1D-shaped weights are GPT-2's as they are (``x W``, ``W`` ``[in, out]``). What GPT-2
cannot express is said in ``config.json``'s own ``attnlab`` object (``differs_from_gpt2``,
the mechanism, positions), and the tokenizer is byte-level with no merges: token id = byte.

``model_type``: a model GPT-2 computes exactly is ``gpt2`` (``GPT2_MECHANISMS``: scaled,
``scale_attn_weights`` true, and unscaled, false), so any GPT-2 reader (Hugging Face's
rules) computes the trained model; any other mechanism is ``MODEL_TYPE`` (``attnlab_gpt2``),
which a GPT-2 reader refuses instead of computing another model, and which
``attnlab.models.gpt2`` reads as it reads ``gpt2``.

Llama's layout (``causal_lm_llama_tensors``, ``model.`` prefix, linear weights ``[out,
in]``, so ours transposed):

    wte C                        -> model.embed_tokens.weight
    wpe C (learned positions)    -> model.embed_positions.weight      (attnlab's, not Llama's)
    h_i.ln_1.scale, ln_2.scale   -> model.layers.i.input_layernorm / post_attention_layernorm
    h_i.attn.W_Q | W_K | W_V     -> model.layers.i.self_attn.{q,k,v}_proj.weight (W^T)
    h_i.attn.W_O C               -> model.layers.i.self_attn.o_proj.weight
    h_i.W_1, h_i.W_2 C           -> model.layers.i.mlp.up_proj / down_proj.weight (no gate)
    ln_f.scale                   -> model.norm.weight
    lm_head                      -> lm_head.weight (untied)
    h_i.attn.<scalar>            -> model.layers.i.self_attn.attnlab.<scalar>  ([] or [H])

``C = I - 1 1^T / D`` centres the output axis of every tensor that writes the residual
stream. LayerNorm without a bias, ``LN(x) = g (x - mean x) / sqrt(var x + eps)``, depends
on ``x`` only through ``x C``; the stream is the sum of those writes, so with them centred
it is ``x C`` at every layer, whose mean is 0, and there ``LN(x C) = RMSNorm(x C) = g x C /
sqrt(mean((x C)^2) + eps)``, Llama's norm with the same ``g`` and ``eps``. The rewrite is
exact in real arithmetic (float32 rounding aside), so Llama's RMSNorm computes our
LayerNorm. Our rotary positions are Llama's (half-split, ``rope_theta`` 10000). What
Llama cannot express: GPT-2's ungated GELU MLP (SwiGLU has no ``down(act(up x))`` without
a bias to make ``gate`` or ``up`` constant), learned positions, and every mechanism but
``scaled``. So no model is written ``model_type: llama``: every one is
``attnlab_llama`` (``attnlab.models.attnlab_llama.MODEL_TYPE``), which a Llama reader
refuses, with ``attnlab.mlp: plain``, ``attnlab.positions`` and ``attnlab.mechanism`` for
the shared decoder (``attnlab.models.decoder``).
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from attnlab.core.mechanism import Mechanism
from attnlab.core.references import is_builtin
from attnlab.lm.model import INIT_STD, LN_EPS, ROPE_BASE, VOCAB, CausalLM
from attnlab.models import attnlab_llama, decoder
from attnlab.models.decoder_config import MLPS
from attnlab.models.files import CONFIG, TOKENIZER, WEIGHTS
from attnlab.models.gpt2 import MODEL_TYPE, PREFIX, learned_name

#: The built-ins GPT-2 computes exactly, with the ``scale_attn_weights`` that does it.
GPT2_MECHANISMS = {"scaled": True, "unscaled": False}
#: Where a run's trained models go inside its output folder, a folder each (experiments 14
#: and 15 write them, 13 reads them).
CHECKPOINTS_DIR = "checkpoints"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte's printable unicode character (printable
    Latin-1 bytes map to themselves, the other 68 to ``chr(256 + n)`` in byte order)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def byte_tokenizer():
    """A ``tokenizers.Tokenizer`` (GPT-2's ByteLevel, a BPE with no merges) whose token id of
    each byte is the byte's value: ``encode(text).ids == list(text.encode("utf-8"))``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: b for b, char in bytes_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def causal_lm_tensors(params: dict, model: CausalLM) -> dict[str, np.ndarray]:
    """``model``'s ``params`` (one lane's Flax tree) as GPT-2 tensors by ``gpt2_shapes``
    name (the module docstring's table; zeros where GPT-2 has a bias and ours none)."""
    if model.positions != "learned":
        raise ValueError("causal_lm_tensors: GPT-2 has learned positions, not rotary")
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    out = {"wte.weight": f32(params["wte"]), "wpe.weight": f32(params["wpe"])}
    for i in range(model.n_layers):
        block, p = params[f"h_{i}"], f"h.{i}."
        attn = block["attn"]
        qkv = np.concatenate([attn["W_Q"], attn["W_K"], attn["W_V"]], axis=1)
        weights = {
            "ln_1": block["ln_1"]["scale"], "attn.c_attn": qkv, "attn.c_proj": attn["W_O"],
            "ln_2": block["ln_2"]["scale"], "mlp.c_fc": block["W_1"], "mlp.c_proj": block["W_2"],
        }  # fmt: skip
        for name, weight in weights.items():
            out[f"{p}{name}.weight"] = f32(weight)
            out[f"{p}{name}.bias"] = np.zeros(np.shape(weight)[-1], np.float32)
        for name, _ in model.mechanism.params:
            out[learned_name(i, name)] = f32(attn[name])
    out |= {"ln_f.weight": f32(params["ln_f"]["scale"]),
            "ln_f.bias": np.zeros(model.d_model, np.float32)}  # fmt: skip
    out["lm_head.weight"] = f32(params["lm_head"]).T.copy()
    return out


def gpt2_scale(mechanism: Mechanism) -> bool | None:
    """GPT-2's ``scale_attn_weights`` that computes ``mechanism`` exactly, or None where no
    GPT-2 does (a built-in of ``GPT2_MECHANISMS`` only: not a namesake)."""
    return GPT2_MECHANISMS.get(mechanism.name) if is_builtin(mechanism) else None


def _mechanism_note(mechanism: Mechanism) -> str:
    if gpt2_scale(mechanism) is True:
        return "attention is GPT-2's q.k / sqrt(d_head)"
    if gpt2_scale(mechanism) is False:
        return "attention is GPT-2's q.k unscaled (scale_attn_weights false)"
    learned = ", ".join(learned_name(0, n).replace(".0.", ".<i>.") for n, _ in mechanism.params)
    where = "a built-in, attnlab.core.references" if is_builtin(mechanism) else "a researcher's"
    return (
        f"attention is attnlab's {mechanism.name!r} mechanism ({where}), not GPT-2's: "
        f"model_type {MODEL_TYPE!r}, which a GPT-2 reader refuses"
        + (f"; its learned scalars: {learned}" if learned else "")
    )


def _attnlab_object(model: CausalLM, key: str, differs: list[str], record: dict) -> dict:
    """``config.json``'s ``attnlab`` object: the mechanism, positions, what differs from the
    layout's family (under ``key``) and ``record``."""
    return {
        "mechanism": model.mechanism.name,
        "positions": model.positions,
        key: differs,
        **record,
    }


def causal_lm_config(model: CausalLM, record: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` of ``model``: GPT-2's fields where GPT-2 expresses ours, and the
    ``attnlab`` object (the mechanism, positions, what differs from GPT-2, and ``record``:
    the held-out loss, the text's SHA-256, how it was made)."""
    differs = [
        "no biases: every bias is written as zeros",
        "untied head: lm_head.weight, tie_word_embeddings false",
        _mechanism_note(model.mechanism),
    ]
    scale = gpt2_scale(model.mechanism)
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2" if scale is not None else MODEL_TYPE,
        "vocab_size": VOCAB,
        "n_positions": model.max_length,
        "n_ctx": model.max_length,
        "n_embd": model.d_model,
        "n_layer": model.n_layers,
        "n_head": model.n_heads,
        "n_inner": 4 * model.d_model,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": LN_EPS,
        "initializer_range": INIT_STD,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": scale is not False,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "attnlab": _attnlab_object(model, "differs_from_gpt2", differs, record),
    }


def _centred(w: Any) -> np.ndarray:
    """``w C``: ``w`` less its mean over the last (output) axis, computed in float64 and
    rounded to float32 once (the module docstring's ``C``)."""
    w = np.asarray(w, np.float64)
    return (w - w.mean(axis=-1, keepdims=True)).astype(np.float32)


def causal_lm_llama_tensors(params: dict, model: CausalLM) -> dict[str, np.ndarray]:
    """``model``'s ``params`` (one lane's Flax tree) as tensors by
    ``decoder.decoder_shapes`` name (the module docstring's Llama table): the writers of the
    residual stream centred, linear weights transposed to ``[out, in]``."""
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    out = {"model.embed_tokens.weight": _centred(params["wte"])}
    if model.positions == "learned":
        out[decoder.POSITION_TABLE] = _centred(params["wpe"])
    for i in range(model.n_layers):
        block, p = params[f"h_{i}"], f"model.layers.{i}."
        attn = block["attn"]
        out |= {
            f"{p}input_layernorm.weight": f32(block["ln_1"]["scale"]),
            f"{p}self_attn.q_proj.weight": f32(attn["W_Q"]).T.copy(),
            f"{p}self_attn.k_proj.weight": f32(attn["W_K"]).T.copy(),
            f"{p}self_attn.v_proj.weight": f32(attn["W_V"]).T.copy(),
            f"{p}self_attn.o_proj.weight": _centred(attn["W_O"]).T.copy(),
            f"{p}post_attention_layernorm.weight": f32(block["ln_2"]["scale"]),
            f"{p}mlp.up_proj.weight": f32(block["W_1"]).T.copy(),
            f"{p}mlp.down_proj.weight": _centred(block["W_2"]).T.copy(),
        }
        for name, _ in model.mechanism.params:
            out[decoder.learned_name(i, name)] = f32(attn[name])
    out["model.norm.weight"] = f32(params["ln_f"]["scale"])
    out["lm_head.weight"] = f32(params["lm_head"]).T.copy()
    return out


def causal_lm_llama_config(model: CausalLM, record: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` of ``model`` in Llama's layout: Llama's keys where Llama expresses
    ours, ``model_type`` ``attnlab_llama`` (the module docstring says why never ``llama``),
    and the ``attnlab`` object: ``mlp`` ``plain``, the mechanism, positions, what differs
    from Llama, and ``record``."""
    differs = [
        "LayerNorm (scale, no bias) written as RMSNorm with every residual writer centred "
        "(embeddings, o_proj, down_proj): the same function",
        "MLP is GPT-2's down(gelu_tanh(up(x))), no gate_proj (attnlab.mlp plain)",
    ]
    if model.positions == "learned":
        differs.append(f"learned positions {decoder.POSITION_TABLE}, no rotary")
    elif model.positions == "none":
        differs.append("no positions: no rotary, no table")
    if model.mechanism.name != "scaled" or not is_builtin(model.mechanism):
        learned = ", ".join(
            decoder.learned_name(0, n).replace(".0.", ".<i>.") for n, _ in model.mechanism.params
        )
        differs.append(
            f"attention is attnlab's {model.mechanism.name!r} mechanism, not Llama's"
            + (f"; its learned scalars: {learned}" if learned else "")
        )
    ours = _attnlab_object(model, "differs_from_llama", differs, record)
    return {
        "model_type": attnlab_llama.MODEL_TYPE,
        "vocab_size": VOCAB,
        "hidden_size": model.d_model,
        "intermediate_size": 4 * model.d_model,
        "num_hidden_layers": model.n_layers,
        "num_attention_heads": model.n_heads,
        "num_key_value_heads": model.n_heads,
        "head_dim": model.d_head,
        "max_position_embeddings": model.max_length,
        "rms_norm_eps": LN_EPS,
        "rope_theta": ROPE_BASE,
        "hidden_act": "gelu_pytorch_tanh",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": INIT_STD,
        "torch_dtype": "float32",
        "attnlab": {"mlp": MLPS[1], **ours},
    }


def write_gpt2(directory: Path, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> None:
    """Write ``config.json``, ``model.safetensors`` (``transformer.``-prefixed names, but
    ``lm_head.weight`` and ours under ``attnlab.``) and the byte-level ``tokenizer.json``
    into ``directory`` (made if missing)."""
    stored = {
        name if name.startswith(("lm_head.", "attnlab.")) else PREFIX + name: value
        for name, value in tensors.items()
    }
    _write_checkpoint(directory, stored, config)


def write_llama(directory: Path, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> None:
    """Write ``causal_lm_llama_tensors`` and ``causal_lm_llama_config`` as ``write_gpt2``
    writes its own (names as they are)."""
    _write_checkpoint(directory, tensors, config)


class Layout(NamedTuple):
    """One layout a causal LM is written in: its tensors by name, its ``config.json`` (the
    model and the ``attnlab`` record) and the writer of the two and the tokenizer."""

    tensors: Callable[[dict, CausalLM], dict[str, np.ndarray]]
    config: Callable[[CausalLM, dict[str, Any]], dict[str, Any]]
    write: Callable[[Path, dict[str, np.ndarray], dict[str, Any]], None]


#: The layouts by name (experiment 14's ``--layout``): GPT-2's (``gpt2`` or ``attnlab_gpt2``)
#: and Llama's (always ``attnlab_llama``).
LAYOUTS = {
    "gpt2": Layout(causal_lm_tensors, causal_lm_config, write_gpt2),
    "llama": Layout(causal_lm_llama_tensors, causal_lm_llama_config, write_llama),
}


class Saved(NamedTuple):
    """One model to write: its folder's name, its layout (a key of ``LAYOUTS``), its
    tensors and ``config.json`` in that layout."""

    name: str
    layout: str
    tensors: dict[str, np.ndarray]
    config: dict[str, Any]


def saved_model(
    name: str, params: dict, model: CausalLM, record: dict[str, Any], layout: str = "gpt2"
) -> Saved:
    """``model``'s ``params`` (one lane's Flax tree) as the checkpoint ``name`` in
    ``layout`` (a key of ``LAYOUTS``), with ``record`` in its ``attnlab`` object."""
    form = LAYOUTS[layout]
    return Saved(name, layout, form.tensors(params, model), form.config(model, record))


def checkpoint_files(names: Iterable[str]) -> list[Path]:
    """The files ``write_saved`` writes for the checkpoints ``names``, relative to the
    output folder: ``CHECKPOINTS_DIR/<name>/`` config.json, model.safetensors and
    tokenizer.json (checked before a run computes: ``cli.check_outputs``)."""
    return [Path(CHECKPOINTS_DIR, name, f) for name in names for f in (CONFIG, WEIGHTS, TOKENIZER)]


def write_saved(
    out_dir: Path, saved: Iterable[Saved], record: dict[str, Any] | None = None
) -> None:
    """Each of ``saved`` into ``out_dir/CHECKPOINTS_DIR/<name>`` by its layout's writer,
    with ``record`` (a run's, such as its text's source and SHA-256) added to its
    ``attnlab`` object."""
    for model in saved:
        ours = model.config["attnlab"] | (record or {})
        LAYOUTS[model.layout].write(out_dir / CHECKPOINTS_DIR / model.name, model.tensors,
                                    model.config | {"attnlab": ours})  # fmt: skip


def save_tensors(stored: dict[str, np.ndarray], path: Path) -> None:
    """``stored`` written to ``path`` by ``safetensors.numpy.save_file``. Its failure to
    write (a ``SafetensorError``, which is no OSError: a full disk, a folder gone) is
    raised as the OSError it reports (``os error N``; else EIO, with safetensors' words)
    naming ``path``, which a script ends with in one line, exit status 1."""
    from safetensors import SafetensorError
    from safetensors.numpy import save_file

    try:
        save_file(stored, str(path), metadata={"format": "pt"})
    except SafetensorError as err:
        found = re.search(r"os error (\d+)", str(err))
        if found:
            code = int(found.group(1))
            raise OSError(code, os.strerror(code), str(path)) from None
        words = " ".join(str(err).split())
        raise OSError(errno.EIO, f"safetensors could not write it ({words})", str(path)) from None


def _write_checkpoint(directory: Path, stored: dict[str, np.ndarray], config: dict) -> None:
    """``stored`` (tensors by file name) as ``model.safetensors`` (mode 0644), ``config``
    as ``config.json`` and the byte-level ``tokenizer.json``, into ``directory`` (made if
    missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_tensors(stored, directory / WEIGHTS)
    os.chmod(directory / WEIGHTS, 0o644)  # safetensors writes 0600; its siblings are 0644
    text = json.dumps(config, indent=2, sort_keys=False) + "\n"
    (directory / CONFIG).write_text(text, encoding="utf-8")
    (directory / TOKENIZER).write_text(byte_tokenizer().to_str(pretty=True) + "\n", "utf-8")
