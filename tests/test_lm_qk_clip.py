"""attnlab.lm.qk_clip: QK-Clip against a by-hand computation, for multi-head and
grouped-query attention: on fixed q, k the clipped weights give max logit tau for the
clipped heads (for a group, its most extreme head; the others at most tau) and the same
logits, bit for bit, for the rest."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlab.lm.qk_clip import (
    clip_factors,
    clip_handle,
    qk_clip,
    qk_clip_biases,
    qk_clip_transform,
)

D_MODEL, D_HEAD, T = 16, 4, 6
#: float32 logits recomputed from rescaled weights: each factor and each product of width
#: D_MODEL or D_HEAD rounds once (u = 2^-24), so tau is reached to within (2 D_MODEL + 8) u.
RTOL = (2 * D_MODEL + 8) * 2.0**-24


def max_logits(w_q, w_k, x, n_heads, n_kv):
    """Each query head's largest causal logit q . k / sqrt(d), by hand in float64 numpy."""
    q = (x @ w_q.astype(np.float64)).reshape(T, n_heads, D_HEAD)
    k = (x @ w_k.astype(np.float64)).reshape(T, n_kv, D_HEAD)
    group = n_heads // n_kv
    out = []
    for h in range(n_heads):
        z = q[:, h] @ k[:, h // group].T / np.sqrt(D_HEAD)
        out.append(z[np.tril(np.ones((T, T), bool))].max())
    return np.array(out)


def weights(n_heads, n_kv, seed=0, spread=(1.0,)):
    rng = np.random.default_rng(seed)
    w_q = rng.standard_normal((D_MODEL, n_heads * D_HEAD)).astype(np.float32)
    w_k = rng.standard_normal((D_MODEL, n_kv * D_HEAD)).astype(np.float32)
    w_q *= np.repeat(np.resize(np.asarray(spread, np.float32), n_heads), D_HEAD)
    x = rng.standard_normal((T, D_MODEL))
    return w_q, w_k, x


def test_clip_factors_by_hand():
    s = np.array([50.0, 100.0, 250.0, -300.0, np.inf, np.nan], np.float32)
    expected = np.array([1, 1, 100 / 250, 1, 1, 1], np.float32)  # float32 division, as ours
    np.testing.assert_array_equal(clip_factors(s, 100.0), expected)


@pytest.mark.parametrize("alpha", [0.5, 0.0, 1.0, 0.3])
def test_multi_head_clipped_heads_reach_tau_and_the_rest_are_untouched(alpha):
    w_q, w_k, x = weights(4, 4, spread=(0.5, 6.0, 1.0, 8.0))
    before = max_logits(w_q, w_k, x, 4, 4)
    tau = float(np.sort(before)[1]) * 1.01  # two heads above tau, two at or below
    new_q, new_k = (np.asarray(w) for w in qk_clip(w_q, w_k, before, tau=tau, n_heads=4,
                                                   alpha=alpha))  # fmt: skip
    after = max_logits(new_q, new_k, x, 4, 4)
    clipped = before > tau
    assert clipped.sum() == 2
    np.testing.assert_allclose(after[clipped], tau, rtol=RTOL)
    np.testing.assert_array_equal(after[~clipped], before[~clipped])
    for h in np.flatnonzero(~clipped):  # untouched columns: the same bits
        cols = slice(h * D_HEAD, (h + 1) * D_HEAD)
        np.testing.assert_array_equal(new_q[:, cols], w_q[:, cols])
        np.testing.assert_array_equal(new_k[:, cols], w_k[:, cols])
    # the split by hand: head h's query columns times gamma^alpha, its keys gamma^(1-alpha)
    h = int(np.flatnonzero(clipped)[0])
    gamma, cols = tau / before[h], slice(h * D_HEAD, (h + 1) * D_HEAD)
    np.testing.assert_allclose(new_q[:, cols], w_q[:, cols] * gamma**alpha, rtol=4 * 2.0**-24)
    np.testing.assert_allclose(new_k[:, cols], w_k[:, cols] * gamma ** (1 - alpha),
                               rtol=4 * 2.0**-24)  # fmt: skip


def test_grouped_query_attention_follows_megatrons_rule():
    """Four query heads in two key groups (heads 0, 1 read group 0; 2, 3 group 1): group 0
    holds the most extreme head (reaches tau, its partner scaled by the same factor, below
    tau); group 1 is below tau and untouched."""
    w_q, w_k, x = weights(4, 2, seed=3, spread=(2.0, 10.0, 0.3, 0.4))
    before = max_logits(w_q, w_k, x, 4, 2)
    tau = float(before[1]) / 3
    assert before[1] > tau and before[0] < before[1] and (before[2:] < tau).all()
    new_q, new_k = (np.asarray(w) for w in qk_clip(w_q, w_k, before, tau=tau, n_heads=4,
                                                   n_kv_heads=2))  # fmt: skip
    after = max_logits(new_q, new_k, x, 4, 2)
    gamma = tau / before[1]
    np.testing.assert_allclose(after[1], tau, rtol=RTOL)
    # head 0 shares its group's factor: its logits scale by gamma too (a ratio of logits
    # keeps the sign, so the scaled maximum is gamma times the old one)
    np.testing.assert_allclose(after[0], gamma * before[0], rtol=RTOL)
    assert after[0] <= tau * (1 + RTOL)
    np.testing.assert_array_equal(after[2:], before[2:])
    np.testing.assert_array_equal(new_k[:, D_HEAD:], w_k[:, D_HEAD:])
    np.testing.assert_array_equal(new_q[:, 2 * D_HEAD :], w_q[:, 2 * D_HEAD :])


def test_a_head_without_a_clip_is_the_same_array_bits():
    w_q, w_k, x = weights(2, 2)
    before = max_logits(w_q, w_k, x, 2, 2)
    new_q, new_k = qk_clip(w_q, w_k, before, tau=float(before.max()) + 1, n_heads=2)
    np.testing.assert_array_equal(np.asarray(new_q), w_q)
    np.testing.assert_array_equal(np.asarray(new_k), w_k)


def test_shapes_that_do_not_hold_the_heads_are_refused():
    w_q, w_k, _ = weights(4, 2)
    with pytest.raises(ValueError, match="not a multiple"):
        qk_clip(w_q, w_k, np.zeros(4), tau=1.0, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="do not hold"):
        qk_clip(w_q, w_k, np.zeros(4), tau=1.0, n_heads=4)


#: Arguments the rule cannot take, each with the argument its ValueError names: tau 0
#: zeroes the clipped heads, -1 or NaN (tau or alpha) makes them NaN, 1e-300 is 0 in
#: float32, alpha 2 inflates W_k, int32 weights round the factors away, no heads divide by
#: zero.
REFUSED = {
    "tau 0": ({"tau": 0.0}, "tau"),
    "tau -1": ({"tau": -1.0}, "tau"),
    "tau nan": ({"tau": float("nan")}, "tau"),
    "tau 1e-300": ({"tau": 1e-300}, "tau"),
    "tau text": ({"tau": "1"}, "tau"),
    "alpha nan": ({"alpha": float("nan")}, "alpha"),
    "alpha 2": ({"alpha": 2.0}, "alpha"),
    "alpha -0.5": ({"alpha": -0.5}, "alpha"),
    "int32 weights": ({"dtype": np.int32}, "w_q"),
    "n_heads 0": ({"n_heads": 0}, "n_heads"),
    "n_kv_heads 0": ({"n_kv_heads": 0}, "n_kv_heads"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_arguments_the_rule_cannot_take_are_refused_naming_them(case):
    """Each of ``REFUSED``: a ValueError naming the argument, never weights zeroed, NaN,
    inflated or rounded."""
    given, named = REFUSED[case]
    w_q, w_k, x = weights(4, 4, spread=(0.5, 6.0, 1.0, 8.0))
    dtype = given.pop("dtype", np.float32)
    kwargs = {"tau": 1.0, "n_heads": 4, **given}
    with pytest.raises(ValueError, match=rf"\b{named} must"):
        qk_clip(w_q.astype(dtype), w_k.astype(dtype), max_logits(w_q, w_k, x, 4, 4), **kwargs)
    if "tau" in given:
        with pytest.raises(ValueError, match=r"\btau must"):
            clip_factors(np.ones(4), given["tau"])


def test_the_smallest_normal_float32_tau_is_taken_and_inf_clips_nothing():
    """The bound is float32's: its smallest normal number clips to factors > 0; ``inf``
    (the docs' loop without the clip) leaves every head as it is."""
    factors = np.asarray(clip_factors(np.array([1.0, 1e-39]), float(np.finfo(np.float32).tiny)))
    assert factors[0] > 0 and factors[1] == 1.0
    w_q, w_k, x = weights(4, 4)
    new_q, _ = qk_clip(w_q, w_k, max_logits(w_q, w_k, x, 4, 4), tau=float("inf"), n_heads=4)
    np.testing.assert_array_equal(np.asarray(new_q), w_q)


# --- the public API's other forms (issue 68, item 7) ---------------------------------------


@pytest.mark.parametrize(("n_heads", "n_kv"), [(4, 4), (4, 2)])
def test_head_shaped_weights_clip_as_the_flat_ones(n_heads, n_kv):
    """``[d_model, heads, d_head]`` weights give the flat form's result, bit for bit, in
    their own shape."""
    w_q, w_k, x = weights(n_heads, n_kv, spread=(1.0, 3.0))
    heads = max_logits(w_q, w_k, x, n_heads, n_kv)
    tau = float(np.median(heads))
    flat = qk_clip(w_q, w_k, heads, tau=tau, n_heads=n_heads, n_kv_heads=n_kv)
    shaped = qk_clip(w_q.reshape(D_MODEL, n_heads, D_HEAD), w_k.reshape(D_MODEL, n_kv, D_HEAD),
                     heads, tau=tau, n_heads=n_heads, n_kv_heads=n_kv)  # fmt: skip
    assert shaped[0].shape == (D_MODEL, n_heads, D_HEAD)
    assert shaped[1].shape == (D_MODEL, n_kv, D_HEAD)
    for a, b in zip(flat, shaped, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b).reshape(a.shape))


def test_head_shaped_weights_of_another_head_count_are_refused():
    w_q, w_k, _ = weights(4, 4)
    with pytest.raises(ValueError, match="do not hold 2 query"):
        qk_clip(w_q.reshape(D_MODEL, 4, D_HEAD), w_k, np.zeros(2), tau=1.0, n_heads=2)
    with pytest.raises(ValueError, match=r"w_q must be \[d_model"):
        qk_clip(w_q[None, None], w_k, np.zeros(4), tau=1.0, n_heads=4)


def _two_layers(seed: int = 0) -> dict:
    """A parameter tree of two attention layers (one of them head-shaped) and a head."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "a": {"w_q": normal(D_MODEL, 4 * D_HEAD), "w_k": normal(D_MODEL, 2 * D_HEAD)},
        "b": {"w_q": normal(D_MODEL, 4, D_HEAD), "w_k": normal(D_MODEL, 2, D_HEAD)},
        "head": normal(D_MODEL, 3),
    }


LAYERS = [(("a", "w_q"), ("a", "w_k")), (("b", "w_q"), ("b", "w_k"))]


def test_the_optax_form_in_a_chain_equals_the_function_on_the_updated_weights():
    """``optax.chain(adam, qk_clip_transform(...))``, then ``apply_updates``: each layer's
    W_q, W_k are ``qk_clip`` of adam's updated weights within the two float32 roundings of
    ``p + (c - p)`` (``|error| <= eps32 (|c| + |c - p|)``); every other leaf is adam's own
    update, bit for bit."""
    params = _two_layers()
    grads = jax.tree.map(lambda p: jnp.ones_like(p) * 0.1, params)
    heads = jnp.asarray([[1.0, 9.0, 2.0, 30.0], [12.0, 0.5, 7.0, -3.0]])
    tau = 5.0
    adam = optax.adam(1e-2)
    chain = optax.chain(adam, qk_clip_transform(tau, 4, LAYERS, n_kv_heads=2))
    updates, _ = chain.update(grads, chain.init(params), params, max_logits=heads)
    clipped = optax.apply_updates(params, updates)
    plain, _ = adam.update(grads, adam.init(params), params)
    stepped = optax.apply_updates(params, plain)
    assert np.array_equal(clipped["head"], stepped["head"])
    eps = float(np.finfo(np.float32).eps)
    for i, name in enumerate(("a", "b")):
        layer = stepped[name]
        expected = qk_clip(layer["w_q"], layer["w_k"], heads[i], tau=tau, n_heads=4,
                           n_kv_heads=2)  # fmt: skip
        got_both = (clipped[name]["w_q"], clipped[name]["w_k"])
        before_both = (params[name]["w_q"], params[name]["w_k"])
        for got, want, before in zip(got_both, expected, before_both, strict=True):
            bound = eps * (np.abs(want) + np.abs(want - before))
            assert (np.abs(np.asarray(got) - np.asarray(want)) <= bound).all(), name
    assert not np.allclose(clipped["a"]["w_q"], stepped["a"]["w_q"])  # the clip fired


def test_the_optax_form_refuses_what_it_cannot_read():
    params = _two_layers()
    transform = qk_clip_transform(5.0, 4, LAYERS, n_kv_heads=2)
    with pytest.raises(ValueError, match=r"max_logits must be \[2, 4\]"):
        transform.update(params, transform.init(params), params, max_logits=jnp.zeros(4))
    with pytest.raises(ValueError, match="update needs params"):
        transform.update(params, transform.init(params), max_logits=jnp.zeros((2, 4)))
    lost = qk_clip_transform(5.0, 4, [(("a", "w_q"), ("c", "w_k"))], n_kv_heads=2)
    with pytest.raises(ValueError, match="no parameter at c/w_k"):
        lost.update(params, lost.init(params), params, max_logits=jnp.zeros((1, 4)))
    with pytest.raises(ValueError, match="tau"):
        qk_clip_transform(0.0, 4, LAYERS)


@pytest.mark.parametrize(("name", "handle"), [("scaled", 2.0), ("unscaled", 2.0),
                                              ("qk_norm", 0.0), ("cosine_tau", 0.0)])  # fmt: skip
def test_the_clip_has_a_handle_on_bilinear_logits_and_none_on_normalised_ones(name, handle):
    """``clip_handle``: 2 where scaling W_q, W_k scales the logits, 0 where the mechanism
    normalises q and k (float32 forward-mode: within 1e-4 of exact, the bound the ledger's
    elasticity columns use)."""
    from attnlab.core.references import resolve

    assert clip_handle(resolve(name).mechanism, D_HEAD, 4) == pytest.approx(handle, abs=1e-4)


@pytest.mark.parametrize(("n_heads", "n_kv"), [(4, 4), (4, 2)])
def test_biases_clip_with_their_columns_so_the_logits_scale_as_without(n_heads, n_kv):
    """With ``q = x W_q + b_q`` (and k likewise), clipping the weights (``qk_clip``) and the
    biases (``qk_clip_biases``) by the same rule brings each clipped head's largest logit to
    tau and leaves the rest bit for bit, as for bias-free projections (``RTOL``)."""
    w_q, w_k, x = weights(n_heads, n_kv, seed=3, spread=(0.5, 6.0, 1.0, 8.0))
    rng = np.random.default_rng(4)
    b_q = rng.standard_normal(n_heads * D_HEAD).astype(np.float32)
    b_k = rng.standard_normal(n_kv * D_HEAD).astype(np.float32)
    ones = np.ones((T, 1))
    aug = np.concatenate([x, ones], axis=1)  # [x, 1] [W; b]: the bias as one more row
    before = max_logits(np.vstack([w_q, b_q]), np.vstack([w_k, b_k]), aug, n_heads, n_kv)
    tau = float(np.sort(before)[-2]) * 0.99  # the two largest heads above tau
    new_q, new_k = qk_clip(w_q, w_k, before, tau=tau, n_heads=n_heads, n_kv_heads=n_kv)
    nb_q, nb_k = qk_clip_biases(b_q, b_k, before, tau=tau, n_heads=n_heads, n_kv_heads=n_kv)
    stacked_q = np.vstack([np.asarray(new_q), np.asarray(nb_q)])
    stacked_k = np.vstack([np.asarray(new_k), np.asarray(nb_k)])
    after = max_logits(stacked_q, stacked_k, aug, n_heads, n_kv)
    if n_kv == n_heads:
        clipped = before > tau
        np.testing.assert_allclose(after[clipped], tau, rtol=RTOL)
        np.testing.assert_array_equal(after[~clipped], before[~clipped])
    assert np.all(after <= tau * (1 + RTOL))
    # head-shaped biases clip as the flat ones
    shaped = qk_clip_biases(b_q.reshape(n_heads, D_HEAD), b_k.reshape(n_kv, D_HEAD), before,
                            tau=tau, n_heads=n_heads, n_kv_heads=n_kv)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(shaped[0]).ravel(), np.asarray(nb_q))
    np.testing.assert_array_equal(np.asarray(shaped[1]).ravel(), np.asarray(nb_k))
