"""attnlab.lm.trajectory: the ledger along a run reads what the model's own forward pass
sees (QK-Clip's S per head), who owns the temperature and how far W_Q and W_K moved; it
keeps the parameters at the steps asked for."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from attnlab.core.references import load_mechanism
from attnlab.lm.train import LMConfig, init_program, seed_keys
from attnlab.lm.trajectory import Trajectory

CONFIG = LMConfig(d_model=16, d_head=8, n_layers=1, seq_len=8, steps=2, warmup=0)


@pytest.mark.parametrize(("name", "owner"), [("scaled", "weights"), ("qk_norm", "mechanism")])
def test_the_ledger_matches_the_forward_pass_and_names_the_owner(name, owner):
    mechanism = load_mechanism(name)
    model = CONFIG.model(mechanism)
    init, data = seed_keys(0)
    state = init_program(model, CONFIG)(init[None], data[None])
    params = jax.tree.map(
        lambda x: 40 * np.asarray(x) if x.ndim == 3 else np.asarray(x), state.params
    )  # larger W_Q, W_K: logits well away from 0
    windows = np.random.default_rng(0).integers(0, 256, (3, CONFIG.seq_len), np.int32)
    constants = mechanism.constant_values(CONFIG.d_head)
    trajectory = Trajectory(model, 1, windows, constants, tau=1.0, keep=(5,))
    trajectory(0, params)
    moved = jax.tree.map(lambda x: x * 1.5, params)
    trajectory(5, moved)
    rows = trajectory.rows()
    assert len(rows) == 2 * CONFIG.n_heads and set(rows.step) == {0, 5}
    one = jax.tree.map(lambda x: x[0], params)
    _, sown = model.apply({"params": one}, windows, constants, mutable=["intermediates"])
    s = np.asarray(sown["intermediates"]["h_0"]["attn"]["head_max_logit"][0])
    start = rows[rows.step == 0]
    np.testing.assert_allclose(start.max_logit, s, rtol=1e-5)
    np.testing.assert_allclose(start.clip_factor, np.where(s > 1.0, 1.0 / s, 1.0), rtol=1e-5)
    assert set(rows.owner) == {owner}
    assert (start.q_moved == 0).all() and (start.k_moved == 0).all()
    later = rows[rows.step == 5]  # every weight times 1.5: each head's columns moved by 0.5
    np.testing.assert_allclose(later.q_moved, 0.5, rtol=1e-5)
    np.testing.assert_allclose(later.k_moved, 0.5, rtol=1e-5)
    assert list(trajectory.kept) == [5] and len(trajectory.kept[5]) == 1  # one lane, at 5
    jax.tree.map(np.testing.assert_array_equal, trajectory.kept[5][0],
                 jax.tree.map(lambda x: x[0], moved))  # fmt: skip
