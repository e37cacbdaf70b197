"""attnlab.models.gpt2: a tiny GPT-2-layout checkpoint (random weights and biases, 2 layers)
read and run against a float64 numpy GPT-2 written here; broken checkpoints (NaN or integer
weights and sizes the weights file does not hold among them) refused with one message
naming the file."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.mechanism import as_mechanism
from attnlab.core.positional import POSITIONAL
from attnlab.core.temperature import BUILTINS
from attnlab.lm.export import write_gpt2
from attnlab.models.files import CONFIG, TOKENIZER, WEIGHTS, CheckpointError, UnknownMechanismError
from attnlab.models.gpt2 import (
    PREFIX,
    gpt2_forward,
    gpt2_shapes,
    load_gpt2,
    parse_gpt2_config,
)
from attnlab.models.layers import next_token_loss
from attnlab.models.registry import read_checkpoint

TINY = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 256,
    "n_positions": 16,
    "n_embd": 16,
    "n_layer": 2,
    "n_head": 2,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
}
#: float32 forward against float64: each matmul of width n errs by at most n u relatively
#: (u = 2^-24, Higham 2002 sec. 3.1); the widest is 4 n_embd = 64, seven contractions a
#: layer plus the head: 15 * 64 u = 5.7e-5 of the logits' scale, times 10 for the
#: conditioning of LayerNorm and softmax at these random weights.
LOGIT_RTOL = 10 * 15 * 64 * 2.0**-24


def write_tiny_gpt2(directory: Path, seed: int = 0, mechanisms=None, **overrides) -> Path:
    """A tiny GPT-2 checkpoint (``TINY`` with ``overrides``, tied head) of random weights
    and biases N(0, 0.3^2) (LayerNorm scales 1 + that), in ``directory``; ``mechanisms``
    as ``parse_gpt2_config`` takes them (a researcher's that ``attnlab`` names)."""
    config = TINY | overrides
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in gpt2_shapes(parse_gpt2_config(config, mechanisms=mechanisms)).items():
        value = 0.3 * rng.standard_normal(shape)
        tensors[name] = (value + (1.0 if ".ln_" in name or "ln_f.w" in name else 0.0)).astype(
            np.float32
        )
    write_gpt2(directory, tensors, config)
    return directory


def numpy_gpt2(t: dict[str, np.ndarray], config: dict, ids: np.ndarray) -> np.ndarray:
    """GPT-2 as Hugging Face's ``GPT2LMHeadModel`` reads ``config`` (causal attention divided
    by ``sqrt(d_head)`` where ``scale_attn_weights``, default true; ``layer_norm_epsilon``,
    default 1e-5; tanh GELU for ``gelu_new``, erf for ``gelu``; the head ``lm_head.weight``
    if ``t`` has it, else tied) in float64 numpy, ``[B, T, V]``, from tensors by GPT-2's
    names. Independent of attnlab's code."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    D, H = config["n_embd"], config["n_head"]
    d, T = D // H, ids.shape[1]
    eps = config.get("layer_norm_epsilon", 1e-5)
    divisor = math.sqrt(d) if config.get("scale_attn_weights", True) else 1.0

    def ln(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * t[f"{name}.weight"] + t[f"{name}.bias"]

    def gelu(x):
        if config.get("activation_function", "gelu_new") == "gelu":
            return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    x = t["wte.weight"][ids] + t["wpe.weight"][:T]
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        q, k, v = (y.reshape(*ids.shape, H, d).transpose(0, 2, 1, 3) for y in np.split(qkv, 3, -1))
        z = q @ k.transpose(0, 1, 3, 2) / divisor
        z = np.where(np.tril(np.ones((T, T), bool)), z, -np.inf)
        w = np.exp(z - z.max(-1, keepdims=True))
        o = (w / w.sum(-1, keepdims=True)) @ v
        x = x + o.transpose(0, 2, 1, 3).reshape(x.shape) @ t[p + "attn.c_proj.weight"]
        x = x + t[p + "attn.c_proj.bias"]
        h = gelu(ln(x, p + "ln_2") @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
        x = x + h @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ t.get("lm_head.weight", t["wte.weight"]).T


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64 numpy (the references' next-token log
    probabilities)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_tiny_checkpoint_matches_numpy_gpt2(tmp_path):
    checkpoint = load_gpt2(write_tiny_gpt2(tmp_path / "ckpt"))
    ids = np.random.default_rng(1).integers(0, 256, (3, 16))
    params = {k: jnp.asarray(v) for k, v in checkpoint.tensors.items()}
    logits, trace = jax.jit(gpt2_forward, static_argnums=1)(params, checkpoint.config, ids)
    expected = numpy_gpt2(checkpoint.tensors, TINY, ids)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(np.asarray(logits), expected, rtol=0, atol=LOGIT_RTOL * scale)
    assert trace.q.shape == (2, 3, 2, 16, 8)
    assert checkpoint.config.mechanism == "scaled" and checkpoint.config.tied


def test_next_token_loss_is_the_mean_cross_entropy():
    logits = np.random.default_rng(0).standard_normal((2, 5, 7), np.float32)
    ids = np.asarray([[1, 2, 3, 4, 5], [6, 0, 1, 2, 3]])
    logp = log_softmax64(logits)
    expected = [-np.mean([logp[b, t, ids[b, t + 1]] for t in range(4)]) for b in range(2)]
    np.testing.assert_allclose(jax.jit(next_token_loss)(logits, ids), expected, rtol=1e-6)


def test_names_without_the_transformer_prefix_are_read(tmp_path):
    from safetensors.numpy import load_file, save_file

    directory = write_tiny_gpt2(tmp_path / "ckpt")
    stored = load_file(directory / WEIGHTS)
    save_file({k.removeprefix(PREFIX): v for k, v in stored.items()}, directory / WEIGHTS)
    a = load_gpt2(directory).tensors
    b = load_gpt2(write_tiny_gpt2(tmp_path / "other")).tensors
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _break(directory: Path, how: str) -> str:
    """Break a tiny checkpoint; return the file (and field) the error must name."""
    from safetensors.numpy import load_file, save_file

    config = json.loads((directory / CONFIG).read_text())
    if how in ("missing tensor", "wrong shape", "nan weight", "integer weight"):
        stored = load_file(directory / WEIGHTS)
        name = PREFIX + "h.1.mlp.c_fc.weight"
        if how == "missing tensor":
            del stored[name]
        elif how == "wrong shape":
            stored[name] = stored[name].T.copy()
        elif how == "nan weight":
            stored[name] = stored[name].copy()
            stored[name][3, 7] = np.nan
        else:
            stored[name] = stored[name].astype(np.int64)
        save_file(stored, directory / WEIGHTS)
        return {
            "nan weight": f"{WEIGHTS}: h.1.mlp.c_fc.weight holds NaN or infinite values",
            "integer weight": f"{WEIGHTS}: h.1.mlp.c_fc.weight is I64, not floating point",
        }.get(how, WEIGHTS)
    if how == "a billion layers":  # refused from the header: no list of 12e9 tensors is made
        (directory / CONFIG).write_text(json.dumps(config | {"n_layer": 10**9}))
        return f"{CONFIG}: n_layer is 1000000000, but"
    if how == "a huge vocabulary":
        (directory / CONFIG).write_text(json.dumps(config | {"vocab_size": 10**12}))
        return f"{WEIGHTS}: wte.weight has shape (256, 16), config.json implies (1000000000000, 16)"
    changes = {
        "unknown model_type": {"model_type": "mamba"},
        "inverse layer scaling": {"scale_attn_by_inverse_layer_idx": True},
        "unknown mechanism": {"attnlab": {"mechanism": "no_such_mechanism"}},
        "rotary": {"attnlab": {"positions": "rotary"}},
        "relu": {"activation_function": "relu"},
    }
    (directory / CONFIG).write_text(json.dumps(config | changes[how]))
    return CONFIG


BROKEN = ["missing tensor", "wrong shape", "unknown model_type", "inverse layer scaling",
          "unknown mechanism", "rotary", "relu", "nan weight", "integer weight",
          "a billion layers", "a huge vocabulary"]  # fmt: skip


@pytest.mark.parametrize("how", BROKEN)
def test_broken_checkpoints_name_the_file(tmp_path, how):
    directory = write_tiny_gpt2(tmp_path / "ckpt")
    name = _break(directory, how)
    with pytest.raises(CheckpointError, match=re.escape(name)) as caught:
        read_checkpoint(directory)
    assert len(str(caught.value).splitlines()) == 1


def test_missing_tokenizer_is_named(tmp_path):
    directory = write_tiny_gpt2(tmp_path / "ckpt")
    (directory / TOKENIZER).unlink()
    with pytest.raises(CheckpointError, match=TOKENIZER.replace(".", r"\.")):
        read_checkpoint(directory)


# --------------------------------------------------------------------------- whose mechanism


def _config(mechanism: str, made_from: str | None = None) -> dict:
    ours = {"mechanism": mechanism} | ({"made_by": {"mechanism": made_from}} if made_from else {})
    return TINY | {"attnlab": ours}


def test_a_builtin_of_either_task_is_read_by_its_name():
    assert parse_gpt2_config(TINY).attention is BUILTINS["scaled"]
    assert parse_gpt2_config(_config("qk_norm", "qk_norm")).attention is BUILTINS["qk_norm"]
    # the language model's positional built-ins too (14 saves ALiBi's model)
    assert parse_gpt2_config(_config("alibi", "alibi")).attention is POSITIONAL["alibi"]


def test_a_researchers_mechanism_is_read_only_when_supplied():
    mine = as_mechanism(lambda q, k: jnp.einsum("...qd,...kd->...qk", q, k), name="cosine")
    raw = _config("cosine", "my_attention.py:cosine")
    with pytest.raises(UnknownMechanismError, match="my_attention.py:cosine") as caught:
        parse_gpt2_config(raw)
    assert (caught.value.name, caught.value.made_from) == ("cosine", "my_attention.py:cosine")
    assert parse_gpt2_config(raw, mechanisms={"cosine": mine}).attention is mine


def test_a_namesake_of_a_builtin_is_not_read_as_the_builtin():
    # made from a file of the researcher's, named like the built-in: theirs, never ours
    theirs = as_mechanism(lambda q, k: jnp.einsum("...qd,...kd->...qk", q, k), name="alibi")
    raw = _config("alibi", "my_alibi.py:alibi")
    with pytest.raises(UnknownMechanismError, match="not the built-in of its name"):
        parse_gpt2_config(raw)
    read = parse_gpt2_config(raw, mechanisms={"alibi": theirs}).attention
    assert read is theirs and read is not POSITIONAL["alibi"]
    # supplied, a namesake is taken over the built-in even where the maker recorded none
    assert parse_gpt2_config(_config("alibi"), mechanisms={"alibi": theirs}).attention is theirs


@pytest.mark.parametrize("name", [None, 3, ""])
def test_a_mechanism_that_is_no_name_is_a_broken_config(name):
    with pytest.raises(CheckpointError, match="must be a name") as caught:
        parse_gpt2_config(TINY | {"attnlab": {"mechanism": name}})
    assert not isinstance(caught.value, UnknownMechanismError)


def test_a_learned_scalar_the_mechanism_read_lacks_is_refused(tmp_path):
    # a model of qk_norm read as plain scaled would drop its learned gains: refused
    from safetensors.numpy import load_file, save_file

    directory = write_tiny_gpt2(tmp_path / "ckpt")
    stored = load_file(directory / WEIGHTS)
    save_file({**stored, "attnlab.h.0.attn.g": np.ones((), np.float32)}, directory / WEIGHTS)
    with pytest.raises(CheckpointError, match=r"attnlab\.h\.0\.attn\.g"):
        load_gpt2(directory)
