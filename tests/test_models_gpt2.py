"""attnlab.models.gpt2: a tiny GPT-2-layout checkpoint (random weights and biases, 2 layers)
read and run against a float64 numpy GPT-2 written here; broken checkpoints (NaN or integer
weights and sizes the weights file does not hold among them) refused with one message
naming the file."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_reference import log_softmax64, numpy_gpt2
from support import BROKEN_GPT2 as BROKEN
from support import TINY_GPT2 as TINY
from support import break_gpt2 as _break
from support import write_tiny_gpt2

from attnlab.core.mechanism import as_mechanism
from attnlab.core.positional import POSITIONAL
from attnlab.core.temperature import BUILTINS
from attnlab.models.files import TOKENIZER, WEIGHTS, CheckpointError, UnknownMechanismError
from attnlab.models.gpt2 import (
    PREFIX,
    gpt2_forward,
    load_gpt2,
    parse_gpt2_config,
)
from attnlab.models.layers import next_token_loss
from attnlab.models.registry import read_checkpoint

#: float32 forward against float64: each matmul of width n errs by at most n u relatively
#: (u = 2^-24, Higham 2002 sec. 3.1); the widest is 4 n_embd = 64, seven contractions a
#: layer plus the head: 15 * 64 u = 5.7e-5 of the logits' scale, times 10 for the
#: conditioning of LayerNorm and softmax at these random weights.
LOGIT_RTOL = 10 * 15 * 64 * 2.0**-24


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
