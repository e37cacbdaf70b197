"""Tests of attnlab.studies.recall.model: shapes, a naive per-position reference, and the
initialisation of every mechanism (identical where it should be, folded where documented)."""

import functools
import math
from dataclasses import replace

import jax
import numpy as np
import pytest

from attnlab.core.temperature import MECHANISMS
from attnlab.studies.recall.task import sample_batch
from attnlab.studies.recall.train import RecallConfig, init_params, make_model

# d_model != d_k so that a transposed or mis-split projection cannot go unnoticed.
CONFIG = RecallConfig(d_k=16, d_model=12)
B = 8
SHARED = ("E_key", "E_val", "W_Q", "W_K", "W_V", "W_O")
LEARNED = {"qk_norm", "learned_temperature"}
HUGE = 100.0  # an embedding std that makes unscaled logits tens of thousands


@functools.cache
def batch():
    return jax.jit(sample_batch, static_argnums=(1, 2))(jax.random.key(123), B, CONFIG.task)


#: Programs compiled for the tests: name -> (mechanisms, embed_init_std, d_k, seed).
GROUPS = {
    "default": (tuple(MECHANISMS), 1.0, CONFIG.d_k, 0),
    "dk32": (("scaled", "folded_init"), 1.0, 32, 0),
    "huge": (("unscaled", "softcap30", "softcap50"), HUGE, CONFIG.d_k, 0),
}


@functools.cache
def forward_group(group: str):
    """Params at init (``init_params``), value logits and attention weights of every
    mechanism of ``group``, as numpy, from one compiled program (eager init would compile
    every op separately)."""
    names, embed_init_std, d_k, seed = GROUPS[group]
    config = replace(CONFIG, embed_init_std=embed_init_std, d_k=d_k)

    @jax.jit
    def run(b):
        out = {}
        for name in names:
            mech = MECHANISMS[name]
            params = init_params(config, mech, seed)
            logits, weights = make_model(config, mech).apply({"params": params}, b)
            out[name] = (params, logits, weights)
        return out

    return jax.tree.map(np.asarray, run(batch()))


def forward(name: str, group: str = "default"):
    """``(params, logits, weights)`` of mechanism ``name`` in ``group``."""
    return forward_group(group)[name]


def naive_forward(params, b, mech, d_k, d_model, scale=None):
    """The model's definition computed slot by slot in float64 from the token embeddings."""
    P = {k: np.asarray(v, np.float64) for k, v in params.items()}
    keys, values, query = (np.asarray(x) for x in (b.keys, b.values, b.query))
    if scale is None:
        scale = P["inv_temperature"] if mech.name in LEARNED else mech.fixed_scale(d_k)
    n_batch, pairs = keys.shape
    logits = np.empty((n_batch, P["W_O"].shape[1]))
    weights = np.empty((n_batch, pairs))
    z_all = np.empty((n_batch, pairs))
    for s in range(n_batch):
        x_q = P["E_key"][query[s]]  # [d_model]
        q = x_q @ P["W_Q"]
        ks, vs = [], []
        for i in range(pairs):
            x_i = np.concatenate([P["E_key"][keys[s, i]], P["E_val"][values[s, i]]])
            assert x_i.shape == (2 * d_model,)
            ks.append(x_i @ P["W_K"])
            vs.append(x_i @ P["W_V"])
        k, v = np.stack(ks), np.stack(vs)
        if mech.normalize_qk:
            q = q / np.linalg.norm(q)
            k = k / np.linalg.norm(k, axis=-1, keepdims=True)
        z = scale * (k @ q)
        if mech.logit_cap is not None:
            z = mech.logit_cap * np.tanh(z / mech.logit_cap)
        p = np.exp(z - z.max())
        p /= p.sum()
        weights[s], z_all[s] = p, z
        logits[s] = (p @ v) @ P["W_O"]
    return logits, weights, z_all


# --------------------------------------------------------------------------- forward pass


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_output_shapes_and_weights(name):
    params, logits, weights = forward(name)
    assert logits.shape == (B, CONFIG.n_value_tokens)
    assert weights.shape == (B, CONFIG.pairs)
    assert logits.dtype == weights.dtype == np.float32
    assert np.isfinite(logits).all()
    assert (weights >= 0).all()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-5)
    # Parameter shapes: projections without biases, width d_k.
    d, dk = CONFIG.d_model, CONFIG.d_k
    expected = {
        "E_key": (CONFIG.n_key_tokens, d),
        "E_val": (CONFIG.n_value_tokens, d),
        "W_Q": (d, dk),
        "W_K": (2 * d, dk),
        "W_V": (2 * d, dk),
        "W_O": (dk, CONFIG.n_value_tokens),
    }
    if name in LEARNED:
        expected["inv_temperature"] = ()
    assert {k: v.shape for k, v in params.items()} == expected


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_table_projection_equals_per_position_computation(name):
    """Projecting the embedding tables and gathering rows is exactly the per-slot model."""
    params, logits, weights = forward(name)
    mech = MECHANISMS[name]
    ref_logits, ref_weights, _ = naive_forward(params, batch(), mech, CONFIG.d_k, CONFIG.d_model)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5 * np.abs(ref_logits).max())


def test_mechanisms_give_different_outputs():
    """Guards the reference test: the scales really differ between mechanisms."""
    outs = {name: forward(name)[2] for name in ("scaled", "unscaled", "inv_d", "qk_norm")}
    names = list(outs)
    for i, a in enumerate(names):
        for b_ in names[i + 1 :]:
            assert np.abs(outs[a] - outs[b_]).max() > 1e-3, (a, b_)


@functools.cache
def apply_learned_times_three():
    """Both learned mechanisms applied with their inverse temperature tripled."""
    changed = {}
    for name in LEARNED:
        params = forward(name)[0]
        changed[name] = dict(params, inv_temperature=np.float32(3 * params["inv_temperature"]))

    @jax.jit
    def run(changed, b):
        return {
            name: make_model(CONFIG, MECHANISMS[name]).apply({"params": p}, b)
            for name, p in changed.items()
        }

    return changed, jax.tree.map(np.asarray, run(changed, batch()))


@pytest.mark.parametrize("name", sorted(LEARNED))
def test_learned_scale_is_used(name):
    """The learned inverse temperature, not the fixed initial value, sets the logits."""
    changed, outputs = apply_learned_times_three()
    logits, weights = outputs[name]
    mech = MECHANISMS[name]
    ref_logits, ref_weights, _ = naive_forward(
        changed[name], batch(), mech, CONFIG.d_k, CONFIG.d_model
    )
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5 * np.abs(ref_logits).max())
    assert np.abs(weights - forward(name)[2]).max() > 1e-3


# --------------------------------------------------------------------------- initialisation


@pytest.mark.parametrize(
    ("name", "expected"),
    [("learned_temperature", 1 / math.sqrt(CONFIG.d_k)), ("qk_norm", math.sqrt(CONFIG.d_k))],
)
def test_inv_temperature_initial_value(name, expected):
    params = forward(name)[0]
    assert params["inv_temperature"].shape == ()
    assert params["inv_temperature"].dtype == np.float32
    assert float(params["inv_temperature"]) == pytest.approx(expected, rel=1e-7)


def test_fixed_mechanisms_have_no_temperature_param():
    for name in set(MECHANISMS) - LEARNED:
        assert set(forward(name)[0]) == set(SHARED), name


def test_scaled_and_unscaled_init_identical():
    scaled, unscaled = forward("scaled")[0], forward("unscaled")[0]
    assert set(scaled) == set(unscaled) == set(SHARED)
    for key in SHARED:
        np.testing.assert_array_equal(scaled[key], unscaled[key], err_msg=key)


@pytest.mark.parametrize("name", [n for n in MECHANISMS if n not in ("scaled", "folded_init")])
def test_every_mechanism_shares_the_scaled_init(name):
    """Only folded_init changes the initial projections; everything else is identical."""
    scaled, other = forward("scaled")[0], forward(name)[0]
    for key in SHARED:
        np.testing.assert_array_equal(scaled[key], other[key], err_msg=key)


@pytest.mark.parametrize("group", ["default", "dk32"])
def test_folded_init_projections_are_scaled_by_d_k_to_minus_quarter(group):
    d_k = GROUPS[group][2]
    scaled, folded = forward("scaled", group)[0], forward("folded_init", group)[0]
    factor = d_k**-0.25
    for key in ("W_Q", "W_K"):
        np.testing.assert_allclose(folded[key], scaled[key] * np.float32(factor), rtol=3e-7)
        if d_k == 16:  # factor 1/2: the scaled initialiser's stddev halves exactly
            np.testing.assert_array_equal(folded[key], scaled[key] * np.float32(0.5))
    for key in ("E_key", "E_val", "W_V", "W_O"):
        np.testing.assert_array_equal(folded[key], scaled[key], err_msg=key)


def test_folded_init_equals_scaled_at_init():
    """z = (d^-1/4 q).(d^-1/4 k) = q.k / sqrt(d): the same logits, weights and outputs."""
    _, scaled_logits, scaled_w = forward("scaled")
    _, folded_logits, folded_w = forward("folded_init")
    np.testing.assert_allclose(folded_w, scaled_w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(folded_logits, scaled_logits, rtol=1e-5, atol=1e-6)
    # ... while unscaled attention from the same init does not.
    assert np.abs(forward("unscaled")[2] - scaled_w).max() > 1e-2


def test_unscaled_logit_spread_at_init():
    """Unit-variance q and k entries: unscaled logits have std about sqrt(d_k), scaled ~1."""
    params = forward("unscaled")[0]
    mech = MECHANISMS["unscaled"]
    _, _, z = naive_forward(params, batch(), mech, CONFIG.d_k, CONFIG.d_model)
    _, _, z_scaled = naive_forward(params, batch(), MECHANISMS["scaled"], CONFIG.d_k, 12)
    np.testing.assert_allclose(z_scaled * math.sqrt(CONFIG.d_k), z, rtol=1e-12)
    assert 0.5 * math.sqrt(CONFIG.d_k) < z.std() < 2 * math.sqrt(CONFIG.d_k)


# --------------------------------------------------------------------------- soft-cap


@pytest.mark.parametrize("name", ["softcap30", "softcap50"])
def test_softcap_bounds_logits(name):
    mech = MECHANISMS[name]
    params, logits, weights = forward(name, "huge")
    assert np.isfinite(logits).all() and np.isfinite(weights).all()
    _, ref_weights, z = naive_forward(params, batch(), mech, CONFIG.d_k, CONFIG.d_model)
    _, _, z_raw = naive_forward(params, batch(), MECHANISMS["unscaled"], CONFIG.d_k, 12)
    assert np.abs(z_raw).max() > 100 * mech.logit_cap  # the cap is doing something
    assert np.abs(z).max() <= mech.logit_cap
    np.testing.assert_allclose(weights, ref_weights, atol=1e-5)
    # Logit differences are at most 2 cap, so the weight ratios are at most exp(2 cap).
    if mech.logit_cap == 30.0:  # exp(-60) is a normal float32; exp(-100) is not
        assert (weights > 0).all()
        assert (np.log(weights.max(-1)) - np.log(weights.min(-1)) <= 60 + 1e-3).all()


def test_uncapped_saturates_where_capped_does_not():
    """Guards the soft-cap test: with the same huge embeddings unscaled attention is
    one-hot, while capped logits (all the large positive ones near the cap) spread out."""
    _, logits, unscaled_w = forward("unscaled", "huge")
    assert np.isfinite(logits).all()
    np.testing.assert_allclose(unscaled_w.max(-1), 1.0)
    assert (unscaled_w == 0).any()
    capped_w = forward("softcap30", "huge")[2]
    assert capped_w.max(-1).mean() < 0.99
