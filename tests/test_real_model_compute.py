"""Experiment 13's computation: every statistic of one layer of all-MiniLM-L6-v2 against an
independent float64 numpy forward of the same weights; the text and its rows."""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.owner import ALPHAS
from attnlab.core.text import stdlib_prose
from attnlab.models.bert import load_checkpoint
from attnlab.studies.real_model import compute
from attnlab.studies.real_model.study import QUANTILES, SATURATED_AT

U32 = 2.0**-24  # float32's unit roundoff
#: The layer checked, and the rows of text it reads (4 rows of 32 tokens).
LAYER, ROWS, T = 1, 4, 32
#: A float32 dot product of width n errs by at most n u relative to sum |a_i b_i| (Higham
#: 2002, sec. 3.1). Layer 1's q and k come through the contractions of layer 0 (q, k, v:
#: 384; p v: 32 keys; attention output: 384; intermediate: 384; output: 1536) and their
#: own projection (384): the sum of widths times u bounds their relative error.
REL = (384 + 32 + 384 + 384 + 1536 + 384) * U32


@pytest.fixture(scope="module")
def minilm():
    return load_checkpoint()


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _ln(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


def reference_qk(checkpoint, ids: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """Layer ``layer``'s q and k, ``[B, heads, T, d]``, by Hugging Face's BertModel formulas
    in float64 numpy (post-LN, erf GELU, softmax(q k^T / sqrt(d)))."""
    w = {name: value.astype(np.float64) for name, value in checkpoint.tensors.items()}
    c = checkpoint.config
    h, d = c.num_attention_heads, c.head_dim
    B, n = ids.shape

    def lin(x, name):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def split(x):
        return x.reshape(B, n, h, d).transpose(0, 2, 1, 3)

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = _ln(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], c.layer_norm_eps)
    for i in range(layer + 1):
        p = f"encoder.layer.{i}."
        q, k = split(lin(x, p + "attention.self.query")), split(lin(x, p + "attention.self.key"))
        if i == layer:
            return q, k
        v = split(lin(x, p + "attention.self.value"))
        z = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        a = np.exp(z - z.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        out = (a @ v).transpose(0, 2, 1, 3).reshape(B, n, h * d)
        x = _ln(x + lin(out, p + "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"], c.layer_norm_eps)  # fmt: skip
        x = _ln(x + lin(_gelu(lin(x, p + "intermediate.dense")), p + "output.dense"),
                w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
                c.layer_norm_eps)  # fmt: skip
    raise AssertionError("unreachable")


def reference_rows(q: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
    """Per attention row in float64: the statistics of ``compute.row_statistics``, the
    Jacobian norm from the explicit matrix ``diag(p) - p p^T``."""
    d, n = q.shape[-1], k.shape[-2]
    z = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    jac = np.eye(n) * p[..., None, :] - p[..., :, None] * p[..., None, :]
    return {
        "logit_std": z.std(-1),
        "max_weight": p.max(-1),
        "entropy_ratio": -(p * np.log(p)).sum(-1) / math.log(n),
        "jacobian_norm": np.sqrt((jac**2).sum((-1, -2))),
        "saturated": (p.max(-1) >= SATURATED_AT).astype(float),
        "q_norm": np.linalg.norm(q, axis=-1),
        "k_norm": np.linalg.norm(k, axis=-1),
    }


def bounds(q: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
    """Per row, the float32 bound of each statistic (first order, plus the statistic's own
    float32 evaluation, ``2 n u``): with ``delta`` the bound on a logit's error
    (``2 REL`` from q and k, ``d u`` from the dot product, times ``|q| max |k| / sqrt(d)``),
    the std moves by at most ``delta``; softmax weights by ``dp_i <= 2 delta p_i``, so the
    max weight by ``2 delta``; entropy by ``|sum p_i (ln p_i + H) dz_i| <= 2 H delta``,
    its ratio to ln T by ``2 delta``; ``||dJ||_F <= 3 ||dp||_2 <= 6 delta``."""
    d, n = q.shape[-1], k.shape[-2]
    qn, kn = np.linalg.norm(q, axis=-1), np.linalg.norm(k, axis=-1)
    delta = (2 * REL + d * U32) * qn * kn.max(-1, keepdims=True) / math.sqrt(d)
    own = 2 * n * U32
    return {
        "logit_std": delta + own * qn * kn.max(-1, keepdims=True),
        "max_weight": 2 * delta + own,
        "entropy_ratio": 2 * delta + own,
        "jacobian_norm": 6 * delta + own,
        "q_norm": REL * qn + own,
        "k_norm": REL * kn + own,
    }


@pytest.fixture(scope="module")
def checked_layer(minilm):
    text = stdlib_prose()
    ids = compute.text_rows(minilm, text, ROWS * (T - 2), T)
    q, k = reference_qk(minilm, ids, LAYER)
    params = {name: jnp.asarray(value) for name, value in minilm.tensors.items()}
    summary = compute._summarise(params, minilm.config, jnp.asarray(ids))
    summary = {name: np.asarray(value[LAYER], np.float64) for name, value in summary.items()}
    return q, k, summary


def test_every_statistic_of_one_layer_against_float64(checked_layer):
    q, k, summary = checked_layer
    reference, bound = reference_rows(q, k), bounds(q, k)
    for name, tol in bound.items():
        rows = np.moveaxis(reference[name], 1, 0).reshape(q.shape[1], -1)
        tols = np.moveaxis(tol, 1, 0).reshape(q.shape[1], -1).max(-1)  # per head
        expected = np.quantile(rows, QUANTILES, axis=-1).T  # order statistics move <= tol
        assert (np.abs(summary[name] - expected) <= tols[:, None]).all(), name
    # Rows whose max weight lies within its bound of the threshold may flip.
    near = np.abs(reference["max_weight"] - SATURATED_AT) <= bound["max_weight"]
    shares = np.moveaxis(reference["saturated"], 1, 0).reshape(q.shape[1], -1).mean(-1)
    slack = np.moveaxis(near, 1, 0).reshape(q.shape[1], -1).mean(-1)
    assert (np.abs(summary["saturated"] - shares) <= slack).all()
    assert shares.max() > 0  # this layer has saturated rows: the check can fail


def test_elasticity_against_float64_central_differences(checked_layer):
    """``d ln s / d ln alpha`` by central differences of the float64 logits (step 1e-4:
    truncation ~1e-8); float32 autodiff agrees to ``T d u`` relative per logit, doubled."""
    q, k, summary = checked_layer
    d = q.shape[-1]

    def log_scale(alpha: float) -> np.ndarray:
        z = (alpha * q) @ np.swapaxes(alpha * k, -1, -2) / math.sqrt(d)
        return 0.5 * np.log(z.var(-1).mean(axis=(0, 2)))  # per head, rows pooled

    h = 1e-4
    assert compute.ELASTICITY_ROWS >= ROWS  # the summary read these same rows
    for column, alpha in enumerate(ALPHAS):
        fd = (log_scale(alpha * math.exp(h)) - log_scale(alpha * math.exp(-h))) / (2 * h)
        np.testing.assert_allclose(summary["elasticity"][:, column], fd, atol=2 * T * d * U32)


def test_sigma_against_the_eigenvalues_of_the_gram_product(minilm):
    """``sigma(W_Q,h^T W_K,h)^2`` is the largest eigenvalue of ``G_q G_k`` (``G = W_h W_h^T``,
    d x d: the nonzero eigenvalues of ``M^T M`` and of ``G_q G_k`` agree)."""
    from attnlab.models.bert import qk_weights

    config = minilm.config
    qk = functools.partial(qk_weights, minilm.tensors, config)
    sigma = compute.head_sigma(qk, config.num_hidden_layers, config.head_dim)
    d = config.head_dim
    wq = minilm.tensors[f"encoder.layer.{LAYER}.attention.self.query.weight"].astype(np.float64)
    wk = minilm.tensors[f"encoder.layer.{LAYER}.attention.self.key.weight"].astype(np.float64)
    for h in range(minilm.config.num_attention_heads):
        rows = slice(h * d, (h + 1) * d)
        gq, gk = wq[rows] @ wq[rows].T, wk[rows] @ wk[rows].T
        top = np.max(np.linalg.eigvals(gq @ gk).real)
        assert sigma[LAYER, h] == pytest.approx(math.sqrt(top) / math.sqrt(d), rel=1e-9)


def test_default_text_and_rows(minilm):
    text = stdlib_prose()
    assert text == stdlib_prose()
    assert compute.text_tokens(minilm, text) >= 5000
    rows = compute.text_rows(minilm, text, 300, 32)
    assert rows.shape == (10, 32)  # 300 // 30
    assert (rows[:, 0] == minilm.tokenizer.token_to_id("[CLS]")).all()
    assert (rows[:, -1] == minilm.tokenizer.token_to_id("[SEP]")).all()
    body = minilm.tokenizer.encode(text, add_special_tokens=False).ids[:300]
    assert rows[:, 1:-1].ravel().tolist() == body
