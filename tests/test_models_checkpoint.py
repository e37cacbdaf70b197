"""attnlab.models.checkpoint: the packaged checkpoint, a tiny one written here, broken ones,
and BERT's initialisation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import numpy as np
import pytest

from attnlab.models.checkpoint import (
    CONFIG,
    TOKENIZER,
    WEIGHTS,
    CheckpointError,
    bert_init,
    load_checkpoint,
    packaged_checkpoint,
    parse_config,
    tensor_shapes,
)

#: A 2-layer BERT of width 16 (2 heads of 8).
TINY_CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_act": "gelu",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "initializer_range": 0.02,
}
TINY_WORDS = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
]


def write_tiny_checkpoint(directory: Path, seed: int = 0, prefix: str = "") -> Path:
    """A BERT-layout checkpoint with random weights (``N(0, 0.5^2)``, so attention is not
    uniform) and a word-level tokenizer over ``TINY_WORDS``, built with ``tokenizers``."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    directory.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *TINY_WORDS])}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(directory / TOKENIZER))
    config = TINY_CONFIG | {"vocab_size": len(vocab)}
    (directory / CONFIG).write_text(json.dumps(config), encoding="utf-8")
    rng = np.random.default_rng(seed)
    shapes = tensor_shapes(parse_config(config))
    tensors = {prefix + n: rng.normal(0, 0.5, s).astype(np.float32) for n, s in shapes.items()}
    save_file(tensors, str(directory / WEIGHTS))
    return directory


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


def _break(directory: Path, how: str) -> str:
    """Break a tiny checkpoint; return the file the error must name."""
    if how == "missing file":
        (directory / TOKENIZER).unlink()
        return TOKENIZER
    if how == "other architecture":
        config = json.loads((directory / CONFIG).read_text()) | {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
        }
        (directory / CONFIG).write_text(json.dumps(config))
        return CONFIG
    config = json.loads((directory / CONFIG).read_text()) | {"intermediate_size": 48}
    (directory / CONFIG).write_text(json.dumps(config))  # the tensors say 32
    return WEIGHTS


@pytest.mark.parametrize("how", ["missing file", "other architecture", "mismatched shape"])
def test_broken_checkpoints_name_the_file(tmp_path, how):
    directory = write_tiny_checkpoint(tmp_path / "ckpt")
    name = _break(directory, how)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        load_checkpoint(directory)


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
