"""The recall demo's configuration: ``RecallConfig`` (the article's settings and our
reading of what it leaves open, each field checked), a seed's three key streams, and the
model a configuration builds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import numpy as np

from attnlab.core.mechanism import Mechanism
from attnlab.core.references import MechanismRef, resolve
from attnlab.recall.model import INITS, SLOTS, RecallModel
from attnlab.recall.task import RecallTask


@dataclass(frozen=True)
class RecallConfig:
    """The recall demo. Defaults: the article's settings, and our reading of what it leaves
    open (batch size, steps, widths, initialisation, smoothing); see
    attnlab/studies/recall/README.md.

    ``slot``, ``init`` and ``bias`` choose the model's laws (``attnlab.recall.model``):
    ``slot`` how a pair becomes a slot (concat ``[E_key[k]; E_val[v]]``, sum ``E_key[k] +
    E_val[v]``, separate keys from key tokens and values from value tokens, onehot tokens
    fed to linear layers without embeddings, ``d_model`` unused); ``init`` the initialisation
    convention (natural: N(0, embed_init_std^2) embeddings and LeCun-normal projections;
    pytorch: N(0, 1) embeddings, U(+-1/sqrt(fan_in)) weights and biases; glorot: U(+-sqrt(6 /
    (fan_in + fan_out))), biases 0; gpt: N(0, 0.02^2), biases 0); ``bias`` biases on Q, K, V
    and W_O. The defaults (concat, natural, no bias) are the model 04 has always trained.
    ``embed_init_std`` is a natural-init setting: any other init requires it to be 1.

    ``mechanisms``: references (a built-in name, ``MODULE:NAME``, ``path/to/file.py:NAME``),
    ``Mechanism`` objects or ``MechanismRef``s, each resolved once, here, where it enters
    (``attnlab.core.references.resolve``), into a ``MechanismRef``: what trains it uses
    ``.mechanism``, and what it writes the reference (``.text``). Two configurations are
    equal where their references are.
    """

    d_k: int = 256
    d_model: int = 256
    pairs: int = 16
    n_key_tokens: int = 32
    n_value_tokens: int = 32
    steps: int = 2000
    batch_size: int = 64
    lr: float = 3e-4
    seeds: int = 5
    seed: int = 0
    eval_size: int = 2000
    smoothing: int = 25
    embed_init_std: float = 1.0
    chunk_steps: int = 100
    mechanisms: tuple[MechanismRef, ...] = tuple(map(resolve, ("scaled", "unscaled")))
    slot: str = "concat"
    init: str = "natural"
    bias: bool = False

    def __post_init__(self) -> None:
        positive = (
            "d_k",
            "d_model",
            "pairs",
            "n_key_tokens",
            "n_value_tokens",
            "steps",
            "batch_size",
            "seeds",
            "eval_size",
            "smoothing",
            "chunk_steps",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RecallConfig.{name} must be an integer >= 1, got {value!r}")
        if self.seed < 0:
            raise ValueError(f"RecallConfig.seed must be >= 0, got {self.seed!r}")
        for name in ("lr", "embed_init_std"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"RecallConfig.{name} must be a finite number > 0, got {value!r}")
        if not self.mechanisms:
            raise ValueError("RecallConfig.mechanisms must name at least one mechanism")
        resolved = []
        for reference in self.mechanisms:
            try:
                resolved.append(resolve(reference))
            except ValueError as err:
                raise ValueError(f"RecallConfig.mechanisms: {err}") from None
        object.__setattr__(self, "mechanisms", tuple(resolved))
        if self.slot not in SLOTS:
            raise ValueError(f"RecallConfig.slot must be one of {SLOTS}, got {self.slot!r}")
        if self.init not in INITS:
            raise ValueError(f"RecallConfig.init must be one of {INITS}, got {self.init!r}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"RecallConfig.bias must be True or False, got {self.bias!r}")
        if self.init != "natural" and self.embed_init_std != 1.0:
            raise ValueError(
                f"RecallConfig.embed_init_std applies to init='natural' only; init={self.init!r}"
                f" fixes the embedding law, got embed_init_std={self.embed_init_std!r}"
            )

    @property
    def task(self) -> RecallTask:
        return RecallTask(self.pairs, self.n_key_tokens, self.n_value_tokens)

    @property
    def seed_values(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


class SeedKeys(NamedTuple):
    """The three independent streams of one seed."""

    init: jax.Array
    data: jax.Array
    eval: jax.Array


def seed_keys(seed: int) -> SeedKeys:
    """Initialisation, training-data and held-out keys of a seed (disjoint by fold_in)."""
    root = jax.random.key(seed)
    return SeedKeys(*(jax.random.fold_in(root, i) for i in range(3)))


def make_model(config: RecallConfig, mechanism: Mechanism) -> RecallModel:
    return RecallModel(
        config.task,
        mechanism,
        config.d_k,
        config.d_model,
        config.embed_init_std,
        slot=config.slot,
        init_rule=config.init,
        bias=config.bias,
    )
