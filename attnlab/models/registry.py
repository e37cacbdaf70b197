"""The checkpoint families, one table from ``config.json``'s ``model_type`` to the family
that reads and computes it (``FAMILIES``), and the one dispatch on it (``read_checkpoint``).

A family (``Family``) is its module's functions, named once here:

- ``parse(raw, where)``: the configuration from a parsed ``config.json`` (``CheckpointError``
  naming ``where`` and the key for anything it does not compute);
- ``shapes(config)``: every tensor it reads, by name, with its shape;
- ``load(directory, mechanisms)``: the ``files.Checkpoint`` of a directory, checked;
- ``forward(params, config, ids, *, qk_scale)``: the output (an encoder's last hidden
  states, a decoder's next-token logits) and every layer's ``layers.Trace``, ``qk_scale``
  the static drift ``q, k -> a q, a k`` (q and k as attention sees them); a causal
  family's also takes ``w_scale``, each layer's ``W_q, W_k -> w W_q, w W_k`` before any
  q/k norm, and ``layer_local``, each layer's input held constant for derivatives;
- ``windows(config)``: each layer's sliding window (None: a causal layer sees every earlier
  key; ``layers.causal_masks``);
- ``init(config, key)``: the family's own initialisation of the architecture;
- ``qk_weights(tensors, config, layer)``: the layer's query and key weights per head
  (float64, each ``[heads, width, d]``), so head ``h``'s logits before the divisor are
  ``(x W_q[h]) . (x W_k[h])`` (biases, norms and positions aside);
- ``causal``: whether a query sees only the keys up to itself.

Adding a family is adding its module and a row of ``FAMILIES``; the studies ask the family
of a checkpoint (``family_of``) for what they need and never test its type or read its
tensor names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.core.mechanism import Mechanism
from attnlab.models import (
    attnlab_llama,
    bert,
    decoder,
    gemma2,
    gemma3,
    gguf_checkpoint,
    gpt2,
    llama,
    olmo2,
    qwen3,
)
from attnlab.models.config_keys import model_type
from attnlab.models.files import CONFIG, Checkpoint, CheckpointError
from attnlab.models.layers import causal_masks


@dataclass(frozen=True)
class Family:
    """One checkpoint family's functions (the module docstring gives each contract)."""

    name: str
    causal: bool
    parse: Callable[[dict[str, Any], str], Any]
    shapes: Callable[[Any], dict[str, tuple[int, ...]]]
    load: Callable[[Path | str | None, Mapping[str, Mechanism]], Checkpoint]
    forward: Callable[..., tuple[Any, Any]]
    init: Callable[[Any, Any], dict[str, Any]]
    qk_weights: Callable[[dict[str, Any], Any, int], tuple[Any, Any]]
    windows: Callable[[Any], tuple[int | None, ...]] = lambda config: (None,) * config.n_layer

    def masks(self, config: Any, length: int) -> Any:
        """``[n_layer, length, length]``: each layer's causal mask, a sliding layer's within
        its window (``layers.causal_masks`` of ``windows``)."""
        return causal_masks(length, self.windows(config))


BERT = Family(
    "bert",
    causal=False,
    parse=bert.parse_config,
    shapes=bert.tensor_shapes,
    load=lambda directory, mechanisms: bert.load_checkpoint(directory),
    forward=bert.encode,
    init=bert.bert_init,
    qk_weights=bert.qk_weights,
)
GPT2 = Family(
    "gpt2",
    causal=True,
    parse=gpt2.parse_gpt2_config,
    shapes=gpt2.gpt2_shapes,
    load=gpt2.load_gpt2,
    forward=gpt2.gpt2_forward,
    init=gpt2.gpt2_init,
    qk_weights=gpt2.qk_weights,
)


def _decoder(name: str, parse: Callable, load: Callable) -> Family:
    """A family of the shared decoder (``decoder``): its own config parser and loader."""
    return Family(
        name, causal=True, parse=parse, shapes=decoder.decoder_shapes, load=load,
        forward=decoder.decoder_forward, init=decoder.decoder_init,
        qk_weights=decoder.decoder_qk_weights, windows=lambda config: config.windows,
    )  # fmt: skip


LLAMA = _decoder("llama", llama.parse_llama_config, llama.load_llama)
#: Experiment 14's model in Llama's layout (``attnlab.lm.export.write_llama``).
ATTNLAB_LLAMA = _decoder(
    attnlab_llama.MODEL_TYPE,
    attnlab_llama.parse_attnlab_llama_config,
    attnlab_llama.load_attnlab_llama,
)
QWEN3 = _decoder("qwen3", qwen3.parse_qwen3_config, qwen3.load_qwen3)
OLMO2 = _decoder("olmo2", olmo2.parse_olmo2_config, olmo2.load_olmo2)
GEMMA2 = _decoder("gemma2", gemma2.parse_gemma2_config, gemma2.load_gemma2)
GEMMA3 = _decoder("gemma3_text", gemma3.parse_gemma3_config, gemma3.load_gemma3)
#: ``model_type`` -> family.
FAMILIES: dict[str, Family] = {
    "bert": BERT, "gpt2": GPT2, gpt2.MODEL_TYPE: GPT2,
    **{kind: LLAMA for kind in llama.MODEL_TYPES}, attnlab_llama.MODEL_TYPE: ATTNLAB_LLAMA,
    qwen3.MODEL_TYPE: QWEN3,
    **{kind: OLMO2 for kind in olmo2.MODEL_TYPES}, gemma2.MODEL_TYPE: GEMMA2,
    gemma3.MODEL_TYPE: GEMMA3,
}  # fmt: skip


def family_of(checkpoint: Checkpoint) -> Family:
    """The family that loaded ``checkpoint``."""
    return FAMILIES[checkpoint.model_type]


def read_checkpoint(
    directory: Path | str | None, mechanisms: Mapping[str, Mechanism] | None = None
) -> Checkpoint:
    """The checkpoint in ``directory`` read by the family of its ``model_type`` (a
    ``config.json`` without one, or no directory: the packaged BERT encoder; a GGUF file,
    ``gguf_checkpoint.load_gguf``: the family of its architecture), with
    ``mechanisms`` supplied to a family whose config may name one; ``CheckpointError``
    naming ``config.json`` for a ``model_type`` no family reads."""
    if directory is None:
        return BERT.load(None, {})
    if gguf_checkpoint.is_gguf(directory):
        return gguf_checkpoint.load_gguf(directory)
    kind = model_type(directory)
    if kind is not None and kind not in FAMILIES:
        raise CheckpointError(
            f"{Path(directory) / CONFIG}: model_type {kind!r}, only "
            f"{', '.join(map(repr, FAMILIES))} are read"
        )
    return FAMILIES.get(kind, BERT).load(directory, mechanisms or {})
