"""The temperature over a run: at points along a causal LM's training, per lane, layer and
head, the temperature ledger (``attnlab.lm.ledger``), who owns the temperature there and
how far the head's W_Q and W_K have moved from step 0.

``Trajectory`` is ``train_lanes``' ``on_params`` hook (``attnlab.lm.train``): at step 0 and
after every chunk it reads each lane's parameters on the first ``windows`` held-out
windows and keeps one row per lane, layer and head:

    the ledger          max_logit (signed: QK-Clip's S_h), max_abs_logit, logit_std,
                        entropy, spectral_norm (sigma_max(W_q,h W_k,h^T)), clip_factor (the
                        gamma_h QK-Clip at ``tau`` would apply on these windows; 1 without)
    elasticity, owner   the ownership elasticity ``d ln s / d ln alpha`` of the logits'
                        within-row spread under q, k -> alpha q, alpha k at alpha = 1
                        (``attnlab.lm.sweep.ownership_program``: 2 the weights own it, 0 the
                        mechanism) and the owner it names (``attnlab.core.owner``)
    q_moved, k_moved    |W_h(t) - W_h(0)|_F / |W_h(0)|_F of the head's columns of W_Q, W_K
    gain_rms            the RMS of the layer's ``ln_1`` gain (the LayerNorm before q and k:
                        the logits scale with its square)

At the steps of ``keep`` it also keeps each lane's parameters (``kept``: numpy, by step,
a tree per lane), for a caller to save as checkpoints.

The logits the ledger reads are the mechanism's own (``Mechanism.attend`` with the causal
mask), so the ledger holds for any mechanism, not only scaled dot products.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from attnlab.core.context import causal_context
from attnlab.core.owner import owner
from attnlab.lm.ledger import LEDGER_COLUMNS, temperature_ledger
from attnlab.lm.model import CausalLM, causal_mask
from attnlab.lm.sweep import ownership_program


@cache
def ledger_program(model: CausalLM, tau: float | None):
    """``(params, windows, constants) -> {column: [n_layers, H]}``: the ledger of every
    layer of one lane's ``params`` on ``windows`` ``[W, T]`` (module docstring)."""
    mechanism = model.mechanism
    mask = causal_mask(model.max_length)
    context = causal_context(model.max_length, model.n_heads)

    def run(params, windows, constants):
        _, state = model.apply({"params": params}, windows, constants,
                               mutable=["intermediates"])  # fmt: skip
        layers = []
        for layer in range(model.n_layers):
            found = state["intermediates"][f"h_{layer}"]["attn"]
            q, k = found["q"][0], found["k"][0]  # [W, H, T, d_h]
            learned = params[f"h_{layer}"]["attn"]
            theta = dict(constants)
            for name, _ in mechanism.params:
                value = learned[name]
                theta[name] = value[:, None, None] if name in mechanism.per_head else value
            z, _, _ = mechanism.attend(q, k, theta, mask, context)
            layers.append(temperature_ledger(q, k, learned["W_Q"], learned["W_K"], tau=tau,
                                             logits=z))  # fmt: skip
        return {c: jnp.stack([ledger[c] for ledger in layers]) for c in LEDGER_COLUMNS}

    return jax.jit(run)


def _head_norms(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The Frobenius norm of each head's columns of ``w`` ``[D, H d_h]`` -> ``[H]``."""
    return np.linalg.norm(w.reshape(w.shape[0], n_heads, -1), axis=(0, 2))


class Trajectory:
    """``train_lanes``' ``on_params`` hook for the first ``lanes`` lanes of ``model``
    (module docstring); ``rows()`` the table, a row per point, lane, layer and head;
    ``kept[step][lane]`` the parameters at each step of ``keep`` the run reached."""

    def __init__(
        self,
        model: CausalLM,
        lanes: int,
        windows: np.ndarray,
        constants: dict[str, float],
        tau: float | None = None,
        keep: Collection[int] = (),
    ) -> None:
        self.model, self.lanes, self.constants, self.keep = model, lanes, constants, keep
        self.windows = jnp.asarray(windows)
        self.ledger = ledger_program(model, tau)
        self.ownership = ownership_program(model)
        self.start: list[dict] = []
        self.kept: dict[int, list[dict]] = {}
        self._rows: list[dict] = []

    def __call__(self, step: int, params: dict) -> None:
        for lane in range(self.lanes):
            own = jax.tree.map(lambda x, i=lane: np.asarray(x[i]), params)
            if step == 0:
                self.start.append(own)
            if step in self.keep:
                self.kept.setdefault(step, []).append(own)
            ledger = {c: np.asarray(v, float) for c, v in
                      self.ledger(own, self.windows, self.constants).items()}  # fmt: skip
            e = np.asarray(self.ownership(own, self.windows, self.constants)[1], float)
            for layer in range(self.model.n_layers):
                now, then = own[f"h_{layer}"]["attn"], self.start[lane][f"h_{layer}"]["attn"]
                moved = {
                    f"{w[-1].lower()}_moved": _head_norms(now[w] - then[w], self.model.n_heads)
                    / _head_norms(then[w], self.model.n_heads)
                    for w in ("W_Q", "W_K")
                }
                gain_rms = float(np.sqrt(np.mean(np.square(own[f"h_{layer}"]["ln_1"]["scale"]))))
                for head in range(self.model.n_heads):
                    self._rows.append({
                        "lane": lane, "step": step, "layer": layer, "head": head,
                        **{c: ledger[c][layer, head] for c in LEDGER_COLUMNS},
                        "elasticity": e[layer, head, 0], "owner": owner(e[layer, head, 0]),
                        **{name: value[head] for name, value in moved.items()},
                        "gain_rms": gain_rms,
                    })  # fmt: skip

    def rows(self) -> pd.DataFrame:
        return pd.DataFrame(self._rows)
