"""attnlab.lm.ledger: the temperature ledger against by-hand numpy on fixed q, k and
weights (max and std of the logits, entropy, the bilinear form's spectral norm, the clip
factor), for multi-head and grouped-query attention."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.lm.ledger import LEDGER_COLUMNS, bilinear_spectral_norms, temperature_ledger

B, T, D, d = 2, 5, 12, 3
#: float32 against float64 on logits of order 10: a few products of width d, a softmax and
#: a log, each O(d u) relative (u = 2^-24): 1e-5 relative with room.
RTOL = 1e-5


def by_hand(q, k, n_heads):
    """The ledger's logit columns in float64 numpy, causal rows."""
    group = n_heads // k.shape[1]
    rows = {c: [] for c in ("max_logit", "max_abs_logit", "logit_std", "entropy")}
    for h in range(n_heads):
        zs, stds, ents = [], [], []
        for b in range(B):
            z = q[b, h].astype(np.float64) @ k[b, h // group].T.astype(np.float64) / np.sqrt(d)
            for i in range(T):
                row = z[i, : i + 1]
                zs.extend(row)
                stds.append(row.std())
                p = np.exp(row - row.max())
                p /= p.sum()
                ents.append(-(p * np.log(p)).sum())
        rows["max_logit"].append(max(zs))
        rows["max_abs_logit"].append(max(abs(v) for v in zs))
        rows["logit_std"].append(np.mean(stds))
        rows["entropy"].append(np.mean(ents))
    return {c: np.array(v) for c, v in rows.items()}


@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_the_ledger_by_hand(n_kv):
    rng = np.random.default_rng(n_kv)
    q = (3 * rng.standard_normal((B, 4, T, d))).astype(np.float32)
    k = (3 * rng.standard_normal((B, n_kv, T, d))).astype(np.float32)
    w_q = rng.standard_normal((D, 4 * d)).astype(np.float32)
    w_k = rng.standard_normal((D, n_kv * d)).astype(np.float32)
    ledger = {c: np.asarray(v) for c, v in temperature_ledger(q, k, w_q, w_k, tau=2.0).items()}
    assert tuple(ledger) == LEDGER_COLUMNS and all(v.shape == (4,) for v in ledger.values())
    expected = by_hand(q, k, 4)
    for column, values in expected.items():
        np.testing.assert_allclose(ledger[column], values, rtol=RTOL, err_msg=column)
    group = 4 // n_kv
    for h in range(4):
        form = w_q[:, h * d:(h + 1) * d].astype(np.float64) @ w_k[
            :, (h // group) * d:(h // group + 1) * d].T.astype(np.float64)  # fmt: skip
        np.testing.assert_allclose(ledger["spectral_norm"][h], np.linalg.norm(form, 2),
                                   rtol=RTOL)  # fmt: skip
    gamma = np.where(expected["max_logit"] > 2.0, 2.0 / expected["max_logit"], 1.0)
    np.testing.assert_allclose(ledger["clip_factor"], gamma, rtol=RTOL)
    assert (ledger["clip_factor"] < 1).any()  # the case both ways: some heads clipped ...
    no_clip = temperature_ledger(q, k, w_q, w_k)["clip_factor"]
    assert (np.asarray(no_clip) == 1).all()  # ... none without tau


def test_a_spectral_norm_scales_with_the_weights():
    rng = np.random.default_rng(0)
    w_q, w_k = rng.standard_normal((D, 2 * d)), rng.standard_normal((D, 2 * d))
    one = np.asarray(bilinear_spectral_norms(w_q, w_k, 2))
    np.testing.assert_allclose(bilinear_spectral_norms(3 * w_q, 2 * w_k, 2), 6 * one, rtol=RTOL)
