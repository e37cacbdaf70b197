"""attnlab.models.files, through the BERT family's loader (``attnlab.models.bert``): the
packaged checkpoint, a tiny one written here, broken ones (each one line naming the file:
non-finite or integer weights, sizes the weights file does not hold or the machine's memory
cannot (a process limit too), config keys of another type, a tokenizer's id past the
vocabulary, a loop of links, no permission, a bad max_seq_length), BERT's initialisation,
and a checkpoint's mechanism by name (a gated one refused, the sink the built-in)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from support import BROKEN_BERT as BROKEN
from support import TINY_BERT as TINY_CONFIG
from support import break_bert as _break
from support import change_config as _change_config
from support import write_tiny_bert as write_tiny_checkpoint

from attnlab.core.hooks import scaled_logits
from attnlab.core.machine import MEMORY_ENV
from attnlab.core.mechanism import Mechanism
from attnlab.core.references import ALL_BUILTINS
from attnlab.models.bert import (
    SENTENCE_CONFIG,
    bert_init,
    load_checkpoint,
    packaged_checkpoint,
    parse_config,
    tensor_shapes,
)
from attnlab.models.files import (
    CONFIG,
    WEIGHTS,
    WEIGHTS_INDEX,
    CheckpointError,
    UnknownMechanismError,
    mechanism_of,
)

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def test_packaged_checkpoint_is_minilm():
    checkpoint = load_checkpoint()
    assert checkpoint.directory == packaged_checkpoint()
    config = checkpoint.config
    assert (config.num_hidden_layers, config.num_attention_heads, config.head_dim) == (6, 12, 32)
    assert checkpoint.max_seq_length == 256  # sentence_bert_config.json, not the 512 positions
    assert len(checkpoint.weights_sha256) == 64
    # The shipped tokenizer.json truncates and pads to 128; the loader turns both off.
    ids = checkpoint.tokenizer.encode("word " * 300).ids
    assert len(ids) == 302


def test_tiny_checkpoint_loads_with_or_without_the_bert_prefix(tmp_path):
    for prefix in ("", "bert."):
        checkpoint = load_checkpoint(write_tiny_checkpoint(tmp_path / prefix, prefix=prefix))
        assert checkpoint.config.num_hidden_layers == 2
        assert checkpoint.max_seq_length == 64
        assert set(checkpoint.tensors) == set(tensor_shapes(checkpoint.config))


@pytest.mark.parametrize("how", BROKEN)
def test_broken_checkpoints_name_the_file(tmp_path, how):
    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    name = _break(directory, how)
    with pytest.raises(CheckpointError, match=re.escape(name)) as caught:
        load_checkpoint(directory)
    assert "\n" not in str(caught.value)


def test_sizes_are_checked_against_the_header_before_any_tensor_is_read(tmp_path, monkeypatch):
    """A billion layers or a width of 2^40 is refused from the weights file's header alone:
    neither the tensors nor the model's list of 16e9 tensor names are made."""
    import attnlab.models.files as files

    def no_reading(*args, **kwargs):
        raise AssertionError("a tensor was read")

    monkeypatch.setattr(files, "read_tensors", no_reading)
    for how in ("a billion layers", "a huge width", "integer weight"):
        directory = write_tiny_checkpoint(tmp_path / how)
        name = _break(directory, how)
        with pytest.raises(CheckpointError, match=re.escape(name)):
            load_checkpoint(directory)


def test_a_checkpoint_larger_than_the_memory_is_refused(tmp_path, monkeypatch):
    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    monkeypatch.setenv(MEMORY_ENV, "4096")
    with pytest.raises(
        CheckpointError,
        match=r"parameters takes [\d.]+ KiB, more than the 4 KiB of memory this process may use",
    ):
        load_checkpoint(directory)
    monkeypatch.setenv(MEMORY_ENV, str(2**30))
    assert load_checkpoint(directory).config.num_hidden_layers == 2


@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="no /proc (not Linux)")
def test_a_checkpoint_larger_than_the_process_limit_is_refused(tmp_path, monkeypatch):
    """Under ``ulimit -v`` (``RLIMIT_AS``) the header check counted the physical memory and
    the reader died of a MemoryError: the room the limit leaves is the memory it checks."""
    import resource

    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    monkeypatch.setenv(MEMORY_ENV, str(2**40))
    mapped = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    real = resource.getrlimit

    def limited(which):  # about 1 KiB left: the tiny checkpoint needs some 100 KiB
        return (
            (mapped + 1024, resource.RLIM_INFINITY) if which == resource.RLIMIT_AS else real(which)
        )

    monkeypatch.setattr(resource, "getrlimit", limited)
    with pytest.raises(
        CheckpointError,
        match=r"parameters takes [\d.]+ KiB, more than the [\d.]+ KiB of memory this process may",
    ):
        load_checkpoint(directory)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"num_hidden_layers": 2.5}, "num_hidden_layers must be a positive integer, got 2.5"),
        ({"num_hidden_layers": float("nan")}, "num_hidden_layers must be a positive number"),
        ({"layer_norm_eps": float("inf")}, "layer_norm_eps must be a positive number, got inf"),
    ],
)
def test_config_numbers_must_be_finite_and_integers_integral(change, words):
    with pytest.raises(CheckpointError, match=re.escape(words)):
        parse_config(TINY_CONFIG | {"vocab_size": 30} | change)
    assert parse_config(TINY_CONFIG | {"vocab_size": 30.0}).vocab_size == 30  # 30.0 is 30


def test_max_seq_length_null_is_the_position_table(tmp_path):
    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    _change_config(directory, SENTENCE_CONFIG, {"max_seq_length": None})
    assert load_checkpoint(directory).max_seq_length == 64
    _change_config(directory, SENTENCE_CONFIG, {"max_seq_length": 32})
    assert load_checkpoint(directory).max_seq_length == 32


def test_a_folder_that_is_a_loop_of_links_is_one_line(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(CheckpointError, match="loop: cannot be read .*symbolic links"):
        load_checkpoint(loop)


def test_a_folder_without_permission_is_one_line(tmp_path, monkeypatch):
    """What a folder of mode 000 gives a user who is not root (root reads it regardless):
    every look inside it is refused."""
    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    real_stat = os.stat

    def refused(path, *args, **kwargs):
        if Path(path).parent == directory:
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "stat", refused)
        with pytest.raises(CheckpointError, match=r"config\.json: cannot be read \(Permission"):
            load_checkpoint(directory)


@pytest.mark.skipif(IS_ROOT, reason="root reads a folder of mode 000")
def test_a_folder_of_mode_000_is_one_line(tmp_path):
    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    directory.chmod(0)
    try:
        with pytest.raises(CheckpointError, match="cannot be read"):
            load_checkpoint(directory)
    finally:
        directory.chmod(0o755)


def test_not_a_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        load_checkpoint(tmp_path / "nothing")


@pytest.mark.parametrize(
    "change",
    [{"hidden_act": "relu"}, {"position_embedding_type": "relative_key"}, {"hidden_size": 15}],
)
def test_parse_config_refuses_what_the_encoder_does_not_compute(change):
    with pytest.raises(CheckpointError):
        parse_config(TINY_CONFIG | {"vocab_size": 30} | change)


@pytest.mark.parametrize(
    "key, value",
    [("hidden_act", ["gelu"]), ("hidden_act", {"gelu": 1}), ("architectures", [5]),
     ("architectures", "BertModel"), ("model_type", {"bert": 1}),
     ("position_embedding_type", ["absolute"])],
)  # fmt: skip
def test_config_keys_of_another_type_are_one_line_naming_the_key(key, value):
    """A list or an object where a name belongs (a TypeError or AttributeError before)."""
    with pytest.raises(CheckpointError, match=f"^{CONFIG}: {key} ") as caught:
        parse_config(TINY_CONFIG | {"vocab_size": 30, key: value})
    assert "\n" not in str(caught.value)


def test_bert_init():
    """Weights N(0, 0.02^2): the sample std of the word embeddings within 5 standard errors
    (the SE of a sample std of n normals is sigma / sqrt(2 n)); biases 0; LayerNorm 1, 0;
    the same key draws the same tensors."""
    config = parse_config(TINY_CONFIG | {"vocab_size": 4000})
    tensors = bert_init(config, jax.random.key(0))
    word = tensors["embeddings.word_embeddings.weight"]
    se = 0.02 / math.sqrt(2 * word.size)
    assert abs(word.std() - 0.02) < 5 * se
    assert not tensors["encoder.layer.0.attention.self.query.bias"].any()
    assert (tensors["encoder.layer.1.output.LayerNorm.weight"] == 1).all()
    again = bert_init(config, jax.random.key(0))
    assert all(np.array_equal(tensors[n], again[n]) for n in tensors)
    other = bert_init(config, jax.random.key(1))
    assert not np.array_equal(word, other["embeddings.word_embeddings.weight"])


# --- sharded checkpoints (toward issue 69: how every model above ~1B ships) ----------------


def _shard(directory: Path, parts: int = 2) -> dict:
    """``directory``'s model.safetensors split into ``parts`` shards and an index (as
    Hugging Face writes them), the single file removed; the index's weight_map."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(directory / WEIGHTS))
    names = sorted(tensors)
    weight_map = {}
    for i in range(parts):
        shard = f"model-{i + 1:05d}-of-{parts:05d}.safetensors"
        chunk = names[i::parts]
        save_file({n: tensors[n] for n in chunk}, str(directory / shard))
        weight_map |= dict.fromkeys(chunk, shard)
    (directory / WEIGHTS).unlink()
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (directory / WEIGHTS_INDEX).write_text(json.dumps(index), encoding="utf-8")
    return weight_map


def test_a_sharded_checkpoint_loads_as_the_single_file_does(tmp_path):
    """The index's weight_map read, every shard's header checked: the same tensors, bit for
    bit; the checksum covers the index and every shard (another than the single file's)."""
    single = load_checkpoint(write_tiny_checkpoint(tmp_path / "single"))
    _shard(write_tiny_checkpoint(tmp_path / "sharded"))
    sharded = load_checkpoint(tmp_path / "sharded")
    assert sharded.tensors.keys() == single.tensors.keys()
    assert all(np.array_equal(sharded.tensors[n], single.tensors[n]) for n in single.tensors)
    assert len(sharded.weights_sha256) == 64 and sharded.weights_sha256 != single.weights_sha256


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda m: m | {next(iter(m)): "../elsewhere.safetensors"}, "not a file beside it"),
        (lambda m: m | {next(iter(m)): "model-00009-of-00009.safetensors"}, "shard .* missing"),
        (lambda m: {**m, "not.a.tensor": next(iter(m.values()))}, "a tensor set other than"),
        (lambda m: [], "weight_map must be an object"),
    ],
)
def test_a_bad_index_is_one_line_naming_it(tmp_path, damage, message):
    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    weight_map = _shard(directory)
    index = {"weight_map": damage(weight_map)}
    (directory / WEIGHTS_INDEX).write_text(json.dumps(index), encoding="utf-8")
    with pytest.raises(CheckpointError, match=message) as raised:
        load_checkpoint(directory)
    assert "\n" not in str(raised.value) and WEIGHTS_INDEX in str(raised.value)


# ------------------------------------------------- a checkpoint's mechanism, by name


def test_a_gated_mechanism_is_refused_for_a_checkpoint_in_one_line():
    """No checkpoint family reads a gate: the built-in ``gated``, or a gated mechanism
    supplied under any name, is an ``UnknownMechanismError`` naming the place, the
    mechanism and that it gates, carrying the name and the maker's reference."""
    with pytest.raises(UnknownMechanismError, match="gates its heads' output") as caught:
        mechanism_of("gated", {}, {}, "somewhere")
    message = str(caught.value)
    assert message.startswith("somewhere: ") and "'gated'" in message and "\n" not in message
    assert caught.value.name == "gated" and caught.value.made_from is None
    mine = Mechanism("mine", scaled_logits, constants={"scale": 0.25}, gate="head")
    with pytest.raises(UnknownMechanismError, match="'mine' gates") as caught:
        mechanism_of("mine", {"mechanism": "my_file.py:mine"}, {"mine": mine}, "here")
    assert caught.value.made_from == "my_file.py:mine"


def test_the_sink_resolves_to_the_built_in():
    """``sink`` (a softmax with a learned sink, no gate) is the built-in object itself, made
    from its own name or with no reference recorded; made from another reference and not
    supplied it is refused as any namesake is."""
    assert mechanism_of("sink", {}, {}, "somewhere") is ALL_BUILTINS["sink"]
    assert mechanism_of("sink", {"mechanism": "sink"}, {}, "somewhere") is ALL_BUILTINS["sink"]
    assert ALL_BUILTINS["sink"].sink is not None and ALL_BUILTINS["sink"].gate is None
    with pytest.raises(UnknownMechanismError, match="not the built-in of its name"):
        mechanism_of("sink", {"mechanism": "their.py:sink"}, {}, "somewhere")
