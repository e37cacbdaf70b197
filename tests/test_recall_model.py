"""Tests of attnlab.recall.model: shapes, a naive per-position reference, the
initialisation of every mechanism (identical where it should be, folded where documented),
and the output gate (W_gate, a zero gate halving the value logits) and the learned sink."""

import functools
import math
from dataclasses import dataclass, replace

import jax
import numpy as np
import pytest

from attnlab.core.hooks import scaled_logits
from attnlab.core.mechanism import Mechanism
from attnlab.core.temperature import BUILTINS, MECHANISMS
from attnlab.recall import model as recall_model
from attnlab.recall.config import RecallConfig, make_model
from attnlab.recall.step import init_params
from attnlab.recall.task import Batch, example_batch, sample_batch

# d_model != d_k so that a transposed or mis-split projection cannot go unnoticed.
CONFIG = RecallConfig(d_k=16, d_model=12)
B = 8
SHARED = ("E_key", "E_val", "W_Q", "W_K", "W_V", "W_O")
LEARNED = {"qk_norm", "learned_temperature"}
HUGE = 100.0  # an embedding std that makes unscaled logits tens of thousands


def cap_of(mech):
    """The mechanism's soft-cap constant, None if it has none."""
    return mech.constant_values(CONFIG.d_k).get("cap")


#: The tests' forward passes: group -> (mechanisms, embed_init_std, d_k, seed).
GROUPS = {
    "default": (tuple(MECHANISMS), 1.0, CONFIG.d_k, 0),
    "dk32": (("scaled", "folded_init"), 1.0, 32, 0),
    "huge": (("unscaled", "softcap30", "softcap50"), HUGE, CONFIG.d_k, 0),
}


@functools.cache
def forward_groups():
    """The batch (``B`` sequences from key 123) and, for every group of ``GROUPS`` and every
    mechanism in it: params at init (``init_params``), value logits and attention weights,
    and the float32 query, keys and attention logits from which the model computed the
    weights it returns (the intermediates it records); as numpy, from one compiled program
    (eager init would compile every op separately; a program per group, or the sampler's
    own, would cost nearly as much as this one)."""

    @jax.jit
    def run(key):
        b = sample_batch(key, B, CONFIG.task)
        out = {}
        for group, (names, embed_init_std, d_k, seed) in GROUPS.items():
            config = replace(CONFIG, embed_init_std=embed_init_std, d_k=d_k)
            for name in names:
                mech = MECHANISMS[name]
                params = init_params(config, mech, seed)
                (logits, weights), state = make_model(config, mech).apply(
                    {"params": params}, b, mutable=["intermediates"]
                )
                sown = state["intermediates"]
                seen = {"q": sown["q_attn"][0][:, 0], "k": sown["k_attn"][0],
                        "z": sown["logits"][0]}  # fmt: skip
                out[group, name] = (params, logits, weights, seen)
        return b, out

    return jax.tree.map(np.asarray, run(jax.random.key(123)))


def batch():
    """The ``B`` sequences every test reads (numpy fields)."""
    return forward_groups()[0]


def forward_group(group: str) -> dict:
    """``forward_groups``' outputs of ``group``, by mechanism."""
    return {name: v for (g, name), v in forward_groups()[1].items() if g == group}


def forward(name: str, group: str = "default"):
    """``(params, logits, weights)`` of mechanism ``name`` in ``group``."""
    return forward_group(group)[name][:3]


def attention_inputs(name: str, group: str = "default"):
    """The float32 ``q [B, d_k]``, ``k [B, pairs, d_k]`` and logits ``z [B, pairs]`` of the
    weights ``forward`` returns."""
    seen = forward_group(group)[name][3]
    return seen["q"], seen["k"], seen["z"]


#: One float32 rounding, 2^-23: twice the unit roundoff, so n * EPS bounds n roundings
#: to second order as well.
EPS = float(np.finfo(np.float32).eps)
#: The smallest normal float32: weights below it may be flushed to zero.
TINY = float(np.finfo(np.float32).tiny)
#: XLA's float32 exp, tanh and rsqrt are polynomial approximations accurate to a few ulp;
#: we allow 4 eps relative for each.
ULPS = 4


@dataclass(frozen=True)
class Bounds:
    """First-order bounds on the absolute error of the model's float32 outputs, per entry.

    Every float32 matmul of n terms rounds by at most ``n EPS`` relative to the sum of the
    absolute products (the one-hot row gathers are exact), so the bounds are computed
    from the absolute values of the inputs; this is the condition number of each step.
    """

    z: np.ndarray  # attention logits [B, pairs]
    weights: np.ndarray  # attention weights [B, pairs]
    logits: np.ndarray  # value logits [B, n_value_tokens]


def naive_forward(params, b, mech, d_k, d_model, scale=None):
    """The model's definition computed slot by slot in float64 from the token embeddings;
    returns ``(logits, weights, z, bounds)``, ``bounds`` on the error of the float32
    model (``Bounds``)."""
    P = {k: np.asarray(v, np.float64) for k, v in params.items()}
    A = {k: np.abs(v) for k, v in P.items()}
    keys, values, query = (np.asarray(x) for x in (b.keys, b.values, b.query))
    if scale is None:
        scale = P["scale"] if mech.name in LEARNED else mech.constant_values(d_k)["scale"]
    n_batch, pairs = keys.shape
    logits = np.empty((n_batch, P["W_O"].shape[1]))
    weights = np.empty((n_batch, pairs))
    z_all = np.empty((n_batch, pairs))
    bz, bw, blog = np.empty_like(z_all), np.empty_like(weights), np.empty_like(logits)
    for s in range(n_batch):
        x_q = P["E_key"][query[s]]  # [d_model]
        q = x_q @ P["W_Q"]
        ks, vs, xs = [], [], []
        for i in range(pairs):
            x_i = np.concatenate([P["E_key"][keys[s, i]], P["E_val"][values[s, i]]])
            assert x_i.shape == (2 * d_model,)
            ks.append(x_i @ P["W_K"])
            vs.append(x_i @ P["W_V"])
            xs.append(x_i)
        k, v, x = np.stack(ks), np.stack(vs), np.abs(np.stack(xs))
        # |error| of the float32 projections: d_model terms for q, two d_model-term halves
        # and their sum for k and v.
        q_abs, k_abs, v_abs = np.abs(x_q) @ A["W_Q"], x @ A["W_K"], x @ A["W_V"]
        e_q, e_k = d_model * EPS * q_abs, (d_model + 1) * EPS * k_abs
        e_v = (d_model + 1) * EPS * v_abs
        if mech.normalize_qk:
            # x -> x / |x| moves by |dx| / |x|; plus the d_k-term sum of squares, its rsqrt
            # and the product, and the model's +1e-6 under the root.
            nq, nk = np.linalg.norm(q), np.linalg.norm(k, axis=-1)
            rounding = (d_k / 2 + ULPS + 1) * EPS
            e_qh = np.linalg.norm(e_q) / nq + rounding + 0.5e-6 / nq**2
            e_kh = np.linalg.norm(e_k, axis=-1) / nk + rounding + 0.5e-6 / nk**2
            q = q / nq
            k = k / nk[:, None]
            z = scale * (k @ q)
            # Unit vectors: |d(q.k)| <= |dq| + |dk| + d_k EPS; then the product with scale.
            e_z = abs(scale) * (e_qh + e_kh + d_k * EPS) + EPS * np.abs(z)
        else:
            z = scale * (k @ q)
            e_z = abs(scale) * (k_abs @ e_q + e_k @ q_abs + d_k * EPS * (k_abs @ q_abs))
            e_z += EPS * np.abs(z)
        if cap_of(mech) is not None:
            cap = cap_of(mech)
            # d(cap tanh(z / cap)) = sech^2 dz; plus z / cap (2 roundings, as z * (1 / cap)),
            # tanh and the product.
            a = np.exp(-2 * np.abs(z / cap))
            e_z = e_z * 4 * a / (1 + a) ** 2  # sech^2(z / cap), without overflow
            z = cap * np.tanh(z / cap)
            e_z += (ULPS + 3) * EPS * np.abs(z)
        p = np.exp(z - z.max())
        p /= p.sum()
        # Logit errors within +-e move p_i by at most p_i (1 - p_i) expm1(2 max e) (exactly,
        # not only to first order); the float32 softmax adds the rounding of z - max
        # (relative to |z - max|), exp, the pairs-term sum and the division (2 roundings, in
        # case XLA multiplies by a reciprocal); weights below TINY may be flushed to zero.
        rounding = (np.abs(z - z.max()) + ULPS + pairs + 2) * EPS
        e_p = p * (1 - p) * np.expm1(2 * e_z.max()) + p * rounding + TINY
        # o = p v (pairs terms), then o W_O (d_k terms).
        o_abs = p @ v_abs
        e_o = e_p @ v_abs + p @ e_v + pairs * EPS * o_abs
        weights[s], z_all[s] = p, z
        logits[s] = (p @ v) @ P["W_O"]
        bz[s], bw[s] = e_z, e_p
        blog[s] = e_o @ A["W_O"] + d_k * EPS * (o_abs @ A["W_O"])
    return logits, weights, z_all, Bounds(bz, bw, blog)


def assert_within(actual, desired, bound, what=""):
    """|actual - desired| <= bound entrywise (float64 arithmetic)."""
    err = np.abs(np.asarray(actual, np.float64) - np.asarray(desired, np.float64))
    excess = err - bound
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert (excess <= 0).all(), (
        f"{what}: |error| {err[worst]:.3g} > bound {np.broadcast_to(bound, err.shape)[worst]:.3g}"
        f" at {worst}"
    )


def assert_matches_reference(logits, weights, ref_logits, ref_weights, bounds):
    """The float32 model against the float64 reference, within the derived bounds."""
    assert_within(weights, ref_weights, bounds.weights, "weights")
    assert_within(logits, ref_logits, bounds.logits, "logits")


# --------------------------------------------------------------------------- forward pass


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_output_shapes_and_weights(name):
    params, logits, weights = forward(name)
    assert logits.shape == (B, CONFIG.n_value_tokens)
    assert weights.shape == (B, CONFIG.pairs)
    assert logits.dtype == weights.dtype == np.float32
    assert np.isfinite(logits).all()
    assert (weights >= 0).all()
    # The float32 normaliser (pairs + 1 roundings) and numpy's float32 sum (pairs).
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=(2 * CONFIG.pairs + 1) * EPS)
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
        expected["scale"] = ()
    assert {k: v.shape for k, v in params.items()} == expected


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_table_projection_equals_per_position_computation(name):
    """Projecting the embedding tables and gathering rows is exactly the per-slot model."""
    params, logits, weights = forward(name)
    mech = MECHANISMS[name]
    ref = naive_forward(params, batch(), mech, CONFIG.d_k, CONFIG.d_model)
    assert_matches_reference(logits, weights, *ref[:2], ref[3])


def test_mechanisms_give_different_outputs():
    """Guards the reference test: the scales really differ between mechanisms."""
    outs = {name: forward(name)[2] for name in ("scaled", "unscaled", "inv_d", "qk_norm")}
    names = list(outs)
    for i, a in enumerate(names):
        for b_ in names[i + 1 :]:
            # Far above the rounding bounds of the weights (~1e-4 at most, Bounds).
            assert np.abs(outs[a] - outs[b_]).max() > 1e-3, (a, b_)


@functools.cache
def apply_learned_times_three():
    """Both learned mechanisms applied with their inverse temperature tripled."""
    changed = {}
    for name in LEARNED:
        params = forward(name)[0]
        changed[name] = dict(params, scale=np.float32(3 * params["scale"]))

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
    ref = naive_forward(changed[name], batch(), mech, CONFIG.d_k, CONFIG.d_model)
    assert_matches_reference(logits, weights, *ref[:2], ref[3])
    # Guard: far above the rounding bound (~1e-6), the tripled scale changes the weights.
    assert np.abs(weights - forward(name)[2]).max() > 1e-3


# --------------------------------------------------------------------------- initialisation


@pytest.mark.parametrize(
    ("name", "expected"),
    [("learned_temperature", 1 / math.sqrt(CONFIG.d_k)), ("qk_norm", math.sqrt(CONFIG.d_k))],
)
def test_learned_scale_initial_value(name, expected):
    params = forward(name)[0]
    assert params["scale"].shape == ()
    assert params["scale"].dtype == np.float32
    # One rounding of the float64 value to float32 (exact here: 1/4 and 4).
    assert float(params["scale"]) == pytest.approx(expected, rel=EPS / 2)


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
        # Each side rounds the variance to float32, its sqrt, the division by the
        # truncation constant and the product with the shared sample (4 roundings of
        # EPS / 2); the right side also float32(factor) and the product: 10 EPS / 2.
        np.testing.assert_allclose(folded[key], scaled[key] * np.float32(factor), rtol=5 * EPS)
        if d_k == 16:  # factor 1/2: every correctly rounded step commutes with a power of 4
            np.testing.assert_array_equal(folded[key], scaled[key] * np.float32(0.5))
    for key in ("E_key", "E_val", "W_V", "W_O"):
        np.testing.assert_array_equal(folded[key], scaled[key], err_msg=key)


def test_folded_init_equals_scaled_at_init():
    """z = (d^-1/4 q).(d^-1/4 k) = q.k / sqrt(d): the same logits, weights and outputs."""
    scaled_params, scaled_logits, scaled_w = forward("scaled")
    _, folded_logits, folded_w = forward("folded_init")
    # At d_k = 16 the folded W_Q, W_K are exactly half the scaled ones (tested above), so
    # both compute the same exact function: each is within its rounding bound of it.
    mech = MECHANISMS["scaled"]
    bounds = naive_forward(scaled_params, batch(), mech, CONFIG.d_k, CONFIG.d_model)[3]
    assert_within(folded_w, scaled_w, 2 * bounds.weights, "weights")
    assert_within(folded_logits, scaled_logits, 2 * bounds.logits, "logits")
    # ... while unscaled attention from the same init does not.
    assert np.abs(forward("unscaled")[2] - scaled_w).max() > 1e-2  # far above rounding


def test_unscaled_logit_spread_at_init():
    """Unit-variance q and k entries: unscaled logits have std about sqrt(d_k), scaled ~1."""
    params = forward("unscaled")[0]
    mech = MECHANISMS["unscaled"]
    z = naive_forward(params, batch(), mech, CONFIG.d_k, CONFIG.d_model)[2]
    z_scaled = naive_forward(params, batch(), MECHANISMS["scaled"], CONFIG.d_k, 12)[2]
    # float64 with the scales 1/4 and 4, powers of two: exact.
    np.testing.assert_array_equal(z_scaled * math.sqrt(CONFIG.d_k), z)
    # An order-of-magnitude band, not an estimate (one draw of the parameters): [2, 8]
    # excludes the scaled spread 1 and the unscaled d_k = 16 alike.
    assert 0.5 * math.sqrt(CONFIG.d_k) < z.std() < 2 * math.sqrt(CONFIG.d_k)


# --------------------------------------------------------------------------- soft-cap


@pytest.mark.parametrize("name", ["softcap30", "softcap50"])
def test_softcap_bounds_logits(name):
    mech = MECHANISMS[name]
    params, logits, weights = forward(name, "huge")
    assert np.isfinite(logits).all() and np.isfinite(weights).all()
    z = naive_forward(params, batch(), mech, CONFIG.d_k, CONFIG.d_model)[2]
    z_raw = naive_forward(params, batch(), MECHANISMS["unscaled"], CONFIG.d_k, 12)[2]
    assert np.abs(z_raw).max() > 100 * cap_of(mech)  # the cap is doing something
    assert np.abs(z).max() <= cap_of(mech)
    # Weights against a float64 reference from the parameters are ill-conditioned here:
    # raw logits of ~1e4 carry float32 errors ~1e-3, which the cap's slope sech^2 shrinks
    # least where keys tie just below the cap. So the two steps are checked separately.
    cap = cap_of(mech)
    q, k, z32 = (x.astype(np.float64) for x in attention_inputs(name, "huge"))
    # 1. The model's float32 logits: cap(q.k) of its own float32 q and k, within the
    # rounding of the d_k-term dot product (times the slope sech^2) and of z / cap (as
    # z * (1 / cap): 2 roundings), tanh and the product with cap.
    raw = np.einsum("bd,bid->bi", q, k)
    a = np.exp(-2 * np.abs(raw / cap))
    sech2 = 4 * a / (1 + a) ** 2
    z_ref = cap * np.tanh(raw / cap)
    dot_abs = np.einsum("bd,bid->bi", np.abs(q), np.abs(k))
    e_z = sech2 * CONFIG.d_k * EPS * dot_abs + (ULPS + 3) * EPS * np.abs(z_ref)
    assert_within(z32, z_ref, e_z, "z")
    assert np.abs(z32).max() <= cap  # float32 tanh never exceeds 1
    # 2. The weights: the float64 softmax of those same float32 logits, within the float32
    # softmax's rounding of z - max, exp, the pairs-term sum and the division (2 roundings,
    # relative), and the flush of weights below TINY to zero.
    p_ref = np.exp(z32 - z32.max(-1, keepdims=True))
    p_ref /= p_ref.sum(-1, keepdims=True)
    rel = (np.abs(z32 - z32.max(-1, keepdims=True)) + ULPS + CONFIG.pairs + 2) * EPS
    assert_within(weights, p_ref, rel * p_ref + TINY, "weights")
    # Logit differences are at most 2 cap, so the weight ratios are at most exp(2 cap),
    # up to the relative error of the largest and the smallest weight of the row.
    if cap == 30.0:  # exp(-60) is a normal float32; exp(-100) is not
        assert (weights > 0).all()
        w64 = weights.astype(np.float64)
        log_ratio = np.log(w64.max(-1)) - np.log(w64.min(-1))
        assert (log_ratio <= 2 * cap + 2 * rel.max(-1)).all()


def test_uncapped_saturates_where_capped_does_not():
    """Guards the soft-cap test: with the same huge embeddings unscaled attention is
    one-hot, while capped logits (all the large positive ones near the cap) spread out."""
    _, logits, unscaled_w = forward("unscaled", "huge")
    assert np.isfinite(logits).all()
    # One-hot up to the float32 normaliser: pairs + 1 roundings.
    np.testing.assert_allclose(unscaled_w.max(-1), 1.0, rtol=(CONFIG.pairs + 1) * EPS)
    assert (unscaled_w == 0).any()
    capped_w = forward("softcap30", "huge")[2]
    assert capped_w.max(-1).mean() < 0.99


@pytest.mark.parametrize("shape", [(7,), (5, 16)])
def test_rows_gathers_and_its_gradient_is_the_one_hot_product(shape):
    """``_rows`` is ``table[tokens]`` exactly; its custom gradient is the transpose of the
    one-hot product, ``sum_i [tokens_i = v] g_i``. Against a float64 sum: each entry adds at
    most ``n`` float32 terms, so the error is at most ``n * eps * sum |g_i|`` (n = count
    of tokens)."""
    n_tokens, width = 9, 6
    # Inputs from numpy (eager jax.random would compile a sampler per shape); one program.
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, n_tokens, shape).astype(np.int32)
    table = rng.standard_normal((n_tokens, width)).astype(np.float32)
    g = rng.standard_normal((*shape, width)).astype(np.float32)

    @jax.jit
    def rows_and_grad(table, tokens, g):
        rows, vjp = jax.vjp(lambda t: recall_model._rows(t, tokens), table)
        return rows, vjp(g)[0]

    rows, grad = rows_and_grad(table, tokens, g)
    np.testing.assert_array_equal(rows, table[tokens])
    one_hot = np.eye(n_tokens)[tokens].reshape(-1, n_tokens)
    g64 = np.asarray(g, np.float64).reshape(-1, width)
    exact = one_hot.T @ g64
    bound = one_hot.shape[0] * EPS * (one_hot.T @ np.abs(g64))
    assert np.all(np.abs(np.asarray(grad, np.float64) - exact) <= bound)


# ------------------------------------------------------------------- the gate and the sink

#: One gate per head (the recall model's one head: one gate), scaled's logits.
HEAD_GATED = Mechanism("head_gated", scaled_logits, constants={"scale": CONFIG.d_k**-0.5},
                       gate="head")  # fmt: skip
GATED = {"element": BUILTINS["gated"], "head": HEAD_GATED}


def numpy_batch(seed: int = 0) -> Batch:
    """``B`` recall sequences drawn by numpy (no sampler to compile): distinct keys, uniform
    values, one pair asked for."""
    rng = np.random.default_rng(seed)
    task = CONFIG.task
    keys = np.stack([rng.permutation(task.n_key_tokens)[: task.pairs] for _ in range(B)])
    values = rng.integers(0, task.n_value_tokens, (B, task.pairs))
    asked = rng.integers(0, task.pairs, B)
    rows = np.arange(B)
    keys, values = keys.astype(np.int32), values.astype(np.int32)
    return Batch(keys, values, keys[rows, asked], values[rows, asked])


def numpy_params(model, seed: int = 0) -> dict:
    """Parameters of ``model``'s shapes drawn by numpy: every entry N(0, 1 / rows) (an
    embedding table's rows are its tokens; weights LeCun's scale), scalars at 0 (the sink's
    initial value)."""
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), example_batch(CONFIG.task)))
    rng = np.random.default_rng(seed)

    def draw(shape):
        if shape.shape == ():
            return np.float32(0.0)
        return (rng.standard_normal(shape.shape) / math.sqrt(shape.shape[0])).astype(np.float32)

    return jax.tree.map(draw, shapes["params"])


@pytest.mark.parametrize(
    ("gate", "slot", "rows", "cols"),
    [
        ("element", "concat", CONFIG.d_model, CONFIG.d_k),
        ("head", "concat", CONFIG.d_model, 1),
        ("element", "onehot", CONFIG.n_key_tokens, CONFIG.d_k),
    ],
)
def test_a_gated_mechanism_has_w_gate_of_the_query_inputs_width(gate, slot, rows, cols):
    """``W_gate`` maps the query's input row (an embedding of d_model, or a one-hot key
    token) to d_k gates (elementwise, the built-in ``gated``) or to one (per head); an
    ungated mechanism has none."""
    config = replace(CONFIG, slot=slot)
    example = example_batch(CONFIG.task)
    shapes = jax.eval_shape(
        lambda: make_model(config, GATED[gate]).init(jax.random.key(0), example)
    )["params"]
    assert shapes["W_gate"].shape == (rows, cols)
    plain = jax.eval_shape(
        lambda: make_model(config, MECHANISMS["scaled"]).init(jax.random.key(0), example)
    )["params"]
    assert "W_gate" not in plain and set(shapes) == set(plain) | {"W_gate"}


@functools.cache
def gated_against_ungated(gate: str, slot: str):
    """On ``numpy_batch``: ``(value logits, weights)`` of the ``gate`` model with ``W_gate``
    as drawn and with ``W_gate = 0``, and of the same mechanism without the gate on the
    same other weights; then the value logits of the gated and the ungated model with
    ``W_O = [I | 0]`` (the logits' first d_k entries are ``o`` itself, exactly: one product
    by 1 and zeros); and the parameters; as numpy, one program."""
    config = replace(CONFIG, slot=slot)
    gated = make_model(config, GATED[gate])
    plain = make_model(config, replace(GATED[gate], name="ungated", gate=None))
    params = numpy_params(gated)
    zero = {**params, "W_gate": np.zeros_like(params["W_gate"])}
    eye = {**params, "W_O": np.eye(*params["W_O"].shape, dtype=np.float32)}

    def ungated(params):
        return {k: v for k, v in params.items() if k != "W_gate"}

    @jax.jit
    def run(b, params, zero, eye):
        return (
            gated.apply({"params": params}, b),
            gated.apply({"params": zero}, b),
            plain.apply({"params": ungated(params)}, b),
            gated.apply({"params": eye}, b)[0],
            plain.apply({"params": ungated(eye)}, b)[0],
        )

    return (*jax.tree.map(np.asarray, run(numpy_batch(), params, zero, eye)), params)


GATE_CASES = [("element", "concat"), ("head", "concat"), ("element", "onehot")]


@pytest.mark.parametrize(("gate", "slot"), GATE_CASES)
def test_a_zero_gate_halves_the_value_logits_exactly(gate, slot):
    """With ``W_gate = 0`` the gate is sigmoid(0) = 1/2 exactly; the readout is linear (``o
    W_O``, no bias by default) and halving is exact in binary, so the value logits are
    exactly half the ungated model's with the same weights, bit for bit, and the attention
    weights are the same. The gate as drawn gives other logits."""
    (drawn, drawn_p), (zero, zero_p), (ungated, ungated_p), *_ = gated_against_ungated(gate, slot)
    assert zero.shape == (B, CONFIG.n_value_tokens) and np.isfinite(zero).all()
    np.testing.assert_array_equal(zero, ungated / 2)
    np.testing.assert_array_equal(zero_p, ungated_p)
    np.testing.assert_array_equal(drawn_p, ungated_p)
    assert np.abs(drawn - zero).max() > 0.01 * np.abs(zero).max()


@pytest.mark.parametrize(("gate", "slot"), GATE_CASES)
def test_the_gate_is_the_sigmoid_of_the_query_rows_projection(gate, slot):
    """With ``W_O = [I | 0]`` the first d_k value logits are the attention output ``o``
    itself: the gated model's are the ungated one's times ``sigmoid(x_q W_gate)``, ``x_q``
    the query's input row (``E_key[query]``, or the one-hot query token: ``W_gate``'s row),
    by hand in float64. Bound, relative to ``|o|``: the gate logit's d_model-term product
    (d_model EPS of its absolute terms) moves the sigmoid by at most a quarter of that;
    sigmoid (ULPS) and the product (1) round once each. A gate from the value's embedding
    row instead is far outside it."""
    *_, gated, ungated, params = gated_against_ungated(gate, slot)
    b, d_k = numpy_batch(), CONFIG.d_k
    w_gate = np.asarray(params["W_gate"], np.float64)
    if slot == "onehot":
        x, x_other = np.eye(CONFIG.n_key_tokens)[b.query], np.eye(CONFIG.n_key_tokens)[b.target]
    else:
        x = np.asarray(params["E_key"], np.float64)[b.query]
        x_other = np.asarray(params["E_val"], np.float64)[b.target]
    g, g_abs = x @ w_gate, np.abs(x) @ np.abs(w_gate)  # [B, d_k or 1]
    o = np.asarray(ungated, np.float64)[:, :d_k]
    expected = o / (1.0 + np.exp(-g))
    inputs = CONFIG.n_key_tokens if slot == "onehot" else CONFIG.d_model
    bound = np.abs(o) * (inputs * EPS * g_abs / 4 + (ULPS + 1) * EPS)
    assert np.all(np.abs(gated[:, :d_k] - expected) <= bound)
    np.testing.assert_array_equal(gated[:, d_k:], 0.0)
    wrong = o / (1.0 + np.exp(-(x_other @ w_gate)))
    assert np.abs(gated[:, :d_k] - wrong).max() > 100 * bound.max()


def test_the_sinks_weights_sum_below_one_per_row():
    """The built-in ``sink`` in the recall model: a scalar param ``sink`` (one head) at its
    initial value 0, and weights that sum per row to ``1 - 1 / (1 + sum_l e^{z_l})`` of
    the logits the model recorded (float64; bound: each of the ``pairs`` weights within
    (|z - m| + ULPS + pairs + 3) EPS of itself, summed in float64, and TINY each for weights
    flushed to 0), which is below 1 by more than that bound."""
    sink = BUILTINS["sink"]
    model = make_model(CONFIG, sink)
    params = numpy_params(model)
    assert params["sink"].shape == () and float(params["sink"]) == sink.sink == 0.0
    (_, p), state = jax.jit(lambda p, b: model.apply({"params": p}, b, mutable=["intermediates"]))(
        params, numpy_batch()
    )
    p = np.asarray(p, np.float64)
    z = np.asarray(state["intermediates"]["logits"][0], np.float64)
    pairs = CONFIG.pairs
    spread = np.abs(z - np.maximum(z.max(-1, keepdims=True), 0.0)).max()
    rounding = (spread + ULPS + pairs + 3) * EPS
    sums = p.sum(-1)
    expected = 1.0 - 1.0 / (1.0 + np.exp(z).sum(-1))
    assert np.all(np.abs(sums - expected) <= rounding * expected + pairs * TINY)
    assert np.all(sums < 1.0 - (rounding + pairs * TINY))
