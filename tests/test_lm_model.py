"""attnlab.lm.model: shapes, causality (exact, and shown to fail with a mask that
lets the future in), RoPE's closed form and relative-position property, the recorded
statistics recomputed from the sown q and k, GPT-2's initialisation for every built-in
mechanism, and the output gate (its W_gate, and a zero gate halving each layer's attention)."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.hooks import scaled_logits
from attnlab.core.mechanism import Mechanism
from attnlab.core.temperature import BUILTINS
from attnlab.lm import model as causal_lm
from attnlab.lm.model import VOCAB, CausalLM, LayerStats, causal_mask, program_lm, rotate

EPS = float(np.finfo(np.float32).eps)  # 2^-23
D_MODEL, N_LAYERS, N_HEADS, MAX_LENGTH = 32, 2, 4, 16
D_HEAD = D_MODEL // N_HEADS
B, T = 2, 12
#: Tokens after position CUT differ between the two halves of the batch.
CUT = 5
#: Every built-in, and ``scaled`` with rotary positions, initialised and run by one compiled
#: program (about 9 s of CPU: the models share their initialisation's random draws, which
#: would be compiled again in every program of a split).
ROTARY = "scaled+rotary"
NAMES = (*BUILTINS, ROTARY)


def model_of(name: str, n_layers: int = N_LAYERS) -> CausalLM:
    mechanism = BUILTINS[name.removesuffix("+rotary")]
    positions = "rotary" if name.endswith("+rotary") else "learned"
    return CausalLM(mechanism, D_MODEL, n_layers, N_HEADS, MAX_LENGTH, positions)


def tokens() -> np.ndarray:
    """``[2 B, T]``: B random sequences, then the same with every token after CUT changed."""
    base = np.random.default_rng(1).integers(0, VOCAB, (B, T), dtype=np.int32)
    future = np.arange(T) > CUT
    return np.concatenate([base, np.where(future, (base + 1) % VOCAB, base)])


@functools.cache
def forward_all():
    """name -> (params, intermediates, logits, stats) of every model of ``NAMES`` at its
    initialisation (key 0), as numpy, from one compiled program."""

    @jax.jit
    def run(x):
        out = {}
        for name in NAMES:
            (logits, stats), variables = model_of(name).init_with_output(
                jax.random.key(0), x, mutable=["params", "intermediates"]
            )
            out[name] = (variables["params"], variables["intermediates"], logits, stats)
        return out

    return jax.tree.map(np.asarray, run(tokens()))


def forward(name: str):
    return forward_all()[name]


def test_builtins_are_fourteen():
    assert len(BUILTINS) == 14 and len(NAMES) == 15


@pytest.mark.parametrize("name", NAMES)
def test_every_builtin_gives_finite_logits_and_per_layer_stats(name):
    """Logits ``[B, T, 256]``, finite; every ``LayerStats`` field ``[n_layers]``, finite."""
    _, _, logits, stats = forward(name)
    assert logits.shape == (2 * B, T, VOCAB)
    assert np.all(np.isfinite(logits))
    assert isinstance(stats, LayerStats)
    for field, value in stats._asdict().items():
        assert value.shape == (N_LAYERS,), field
        assert np.all(np.isfinite(value)), field


@pytest.mark.parametrize("name", NAMES)
def test_every_builtin_is_causal(name):
    """Changing the tokens after CUT leaves the logits at positions <= CUT unchanged, bit
    for bit: masked keys get weight exactly 0, ``0 * v`` adds exactly nothing, and every
    other operation acts on one position. The later logits do change."""
    logits = forward(name)[2]
    np.testing.assert_array_equal(logits[:B, : CUT + 1], logits[B:, : CUT + 1])
    assert np.all(np.abs(logits[:B, CUT + 1 :] - logits[B:, CUT + 1 :]).max(-1) > 0)


def test_a_mask_that_lets_the_future_in_is_caught(monkeypatch):
    """The causality check can fail: with an all-True mask the early logits change."""
    monkeypatch.setattr(causal_lm, "causal_mask", lambda n: jnp.ones((n, n), bool))
    model = model_of("scaled", n_layers=1)
    x = tokens()
    logits = np.asarray(jax.jit(lambda x: model.init_with_output(jax.random.key(0), x)[0][0])(x))
    early = np.abs(logits[:B, : CUT + 1] - logits[B:, : CUT + 1])
    assert early.max() > 0


def test_causal_mask_is_numpy_tril():
    for n in (1, 2, 7):
        np.testing.assert_array_equal(causal_mask(n), np.tril(np.ones((n, n), bool)))


def test_rotate_closed_form_in_two_dimensions():
    """With ``d = 2`` the one frequency is ``base^0 = 1``: position t rotates by t radians,
    so ``rotate(e1)[t] = (cos t, sin t)`` and ``rotate(e2)[t] = (-sin t, cos t)``. Bound:
    float32 cos and sin of an argument below 8 are within a few eps (4 eps)."""
    t = np.arange(8.0)
    e1, e2 = np.tile(np.eye(2, dtype=np.float32)[:, None], (1, 8, 1))  # [8, 2] each
    r1, r2 = np.asarray(jax.jit(rotate)(np.stack([e1, e2])))
    np.testing.assert_allclose(r1, np.stack([np.cos(t), np.sin(t)], -1), atol=4 * EPS)
    np.testing.assert_allclose(r2, np.stack([-np.sin(t), np.cos(t)], -1), atol=4 * EPS)


def _rope_bound(length: int, d: int, scale: float) -> float:
    """Float32 error of a rotated dot product or norm^2: angles ``t * freq`` (t < length)
    carry an absolute error up to ``length eps``, cos and sin another eps, each rotated
    component ``(length + 2) eps |x|``; a dot product of d terms adds ``d eps``. So
    ``(2 (length + 2) + d) eps |q| |k|``, doubled for room."""
    return 2 * (2 * (length + 2) + d) * EPS * scale


def test_rotate_preserves_norms():
    x = np.random.default_rng(2).standard_normal((3, T, D_HEAD), np.float32)
    norms2 = np.sum(np.asarray(x, np.float64) ** 2, -1)
    rotated2 = np.sum(np.asarray(jax.jit(rotate)(x), np.float64) ** 2, -1)
    np.testing.assert_allclose(rotated2, norms2, rtol=0, atol=_rope_bound(T, D_HEAD, norms2.max()))


def _relative_dots(rope) -> tuple[np.ndarray, float]:
    """``[T, T]`` dot products of the rotated query at position i with the rotated key at j,
    the same q and k at every position (rotated by one compiled call), and ``|q| |k|``."""
    q, k = np.random.default_rng(3).standard_normal((2, D_HEAD), np.float32)
    rq, rk = np.asarray(jax.jit(rope)(np.stack([np.tile(q, (T, 1)), np.tile(k, (T, 1))])))
    dots = rq.astype(np.float64) @ rk.astype(np.float64).T
    return dots, float(np.linalg.norm(q.astype(np.float64)) * np.linalg.norm(k.astype(np.float64)))


def test_rotated_dot_products_depend_on_the_position_difference_only():
    """Every diagonal ``i - j = c`` of the rotated q.k holds one value (RoPE's point), and
    the diagonals differ from each other; a rotation by ``t^2`` angles instead fails."""
    dots, scale = _relative_dots(rotate)
    bound = _rope_bound(T, D_HEAD, scale)

    def spread(dots: np.ndarray) -> float:
        return max(np.ptp(np.diagonal(dots, c)) for c in range(-T + 2, T - 1))

    assert spread(dots) <= bound
    assert np.ptp([np.diagonal(dots, c)[0] for c in range(T)]) > 1000 * bound

    def quadratic(x):  # a wrong RoPE: angle t^2 freq
        half = D_HEAD // 2
        freq = 10000.0 ** (-jnp.arange(half) * 2 / D_HEAD)
        angle = (jnp.arange(x.shape[-2]) ** 2)[:, None] * freq[None, :]
        x1, x2 = x[..., :half], x[..., half:]
        c, s = jnp.cos(angle), jnp.sin(angle)
        return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    assert spread(_relative_dots(quadratic)[0]) > 1000 * bound


def _rope_reference(x: np.ndarray, base: float = 10000.0) -> np.ndarray:
    """RoPE in float64, half-split: pair ``(x_i, x_{i + d/2})`` at position t rotated by
    ``t base^(-2 i / d)``."""
    length, d = x.shape[-2], x.shape[-1]
    angle = np.arange(length)[:, None] * base ** (-2 * np.arange(d // 2) / d)[None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    c, s = np.cos(angle), np.sin(angle)
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def test_rotary_model_rotates_q_and_has_no_position_table():
    """``positions="rotary"``: no ``wpe``; the first layer's sown q is, by hand in float64,
    ``LN(wte[t]) W_Q`` split into heads and rotated (and differs from it unrotated). Bound
    on each component: LN's mean and variance are sums of d terms (2 d eps relative), the
    product another d, the rotation 2 (T + 2) eps (``_rope_bound``): ``(3 d + 2 (T + 2) +
    8) eps |a| max_j |W_Q[:, j]|``."""
    params, sown, _, _ = forward(ROTARY)
    assert "wpe" not in params and "wpe" in forward("scaled")[0]
    x = np.asarray(params["wte"], np.float64)[np.asarray(tokens())]
    a = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    w_q = np.asarray(params["h_0"]["attn"]["W_Q"], np.float64)
    q = (a @ w_q).reshape(2 * B, T, N_HEADS, D_HEAD).swapaxes(1, 2)
    bound = (3 * D_MODEL + 2 * (T + 2) + 8) * EPS
    bound *= np.linalg.norm(a, axis=-1).max() * np.linalg.norm(w_q, axis=0).max()
    sown_q = sown["h_0"]["attn"]["q"][0]
    np.testing.assert_allclose(sown_q, _rope_reference(q), rtol=0, atol=bound)
    assert np.abs(sown_q - q).max() > 1000 * bound


def test_max_logit_closed_form_counts_allowed_entries_only():
    """One attention layer by hand: inputs ``a_t = (T - t) e_1 + (t + 1) e_2`` and W_Q, W_K
    sending e_1 and e_2 to head 0's first coordinate give ``z_ts = (T - t)(s + 1) /
    sqrt(d_h)``. Over the allowed ``s <= t`` the largest is ``max_t (T - t)(t + 1) = 42``
    (T = 12), over all pairs ``T^2 = 144`` (t = 0, s = T - 1, the future): the stat is
    42 / sqrt(d_h). Mean |q| = mean |k| = sum_t (T - t) / (T H) = (T + 1) / (2 H). Bound:
    integer products are exact; the scale and the norms round twice (2 eps relative)."""
    t = np.arange(T)
    a = np.zeros((T, D_MODEL), np.float32)
    a[:, 0], a[:, 1] = T - t, t + 1
    w_q = np.zeros((D_MODEL, D_MODEL), np.float32)
    w_k = np.zeros((D_MODEL, D_MODEL), np.float32)
    w_q[0, 0] = w_k[1, 0] = 1.0
    rest = np.random.default_rng(4).standard_normal((2, D_MODEL, D_MODEL), np.float32)
    params = {"W_Q": w_q, "W_K": w_k, "W_V": rest[0], "W_O": rest[1]}
    attention = causal_lm.CausalSelfAttention(BUILTINS["scaled"], N_HEADS, 1)
    apply = jax.jit(lambda p, a: attention.apply({"params": p}, a))
    _, (max_logit, _, q_norm, k_norm) = apply(params, a)
    assert ((T - t) * (t + 1)).max() == 42 and T * T == 144
    assert float(max_logit) == pytest.approx(42 / math.sqrt(D_HEAD), rel=2 * EPS, abs=0)
    for norm in (q_norm, k_norm):
        assert float(norm) == pytest.approx((T + 1) / (2 * N_HEADS), rel=2 * EPS, abs=0)


def _allowed_max(z: np.ndarray) -> float:
    mask = np.tril(np.ones((T, T), bool))
    return float(np.max(np.where(mask, np.abs(z), 0.0)))


def test_stats_recomputed_from_sown_q_and_k_scaled():
    """For ``scaled`` (z = q.k / sqrt(d_h)) the recorded stats by hand, in float64, from the
    sown q and k of each layer: max |z| over the allowed (causal) entries, mean entropy of
    the causal softmax rows (the first row, one key, has entropy 0), mean |q| and |k|.
    Bounds: a float32 dot of d_h terms is within d_h eps |q||k|, and the scale adds 2 eps:
    ``(d_h + 2) eps max|q||k| / sqrt(d_h)`` on z; the entropy of a row of T weights moves
    by at most ``ln T`` times z's error plus (T + 8) eps of its own rounding; a norm of d_h
    terms is within (d_h + 2) eps relative, and a mean of M of them M eps more."""
    _, sown, _, stats = forward("scaled")
    mask = np.tril(np.ones((T, T), bool))
    for layer in range(N_LAYERS):
        q = np.asarray(sown[f"h_{layer}"]["attn"]["q"][0], np.float64)
        k = np.asarray(sown[f"h_{layer}"]["attn"]["k"][0], np.float64)
        z = q @ np.swapaxes(k, -1, -2) / math.sqrt(D_HEAD)
        qk = np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k, axis=-1).max()
        z_bound = (D_HEAD + 2) * EPS * qk / math.sqrt(D_HEAD)
        assert abs(stats.max_logit[layer] - _allowed_max(z)) <= z_bound

        e = np.exp(np.where(mask, z - np.where(mask, z, -np.inf).max(-1, keepdims=True), -np.inf))
        p = e / e.sum(-1, keepdims=True)
        logp = np.log(np.where(p > 0, p, 1.0))
        entropy = -np.sum(np.where(p > 0, p * logp, 0.0), -1)
        h_bound = math.log(T) * 2 * z_bound + (T + 8) * EPS * max(1.0, entropy.max())
        assert abs(stats.entropy[layer] - entropy.mean()) <= h_bound

        m = q.size // D_HEAD
        for name, x in (("q_norm", q), ("k_norm", k)):
            mean_norm = np.linalg.norm(x, axis=-1).mean()
            recorded = getattr(stats, name)[layer]
            assert abs(recorded - mean_norm) <= (D_HEAD + 2 + m) * EPS * mean_norm, name


def test_stats_see_q_and_k_as_the_logits_do_qk_norm():
    """For ``qk_norm`` the logits see ``q / sqrt(|q|^2 + 1e-6)``: the recorded q norm is
    the mean of ``|q| / sqrt(|q|^2 + 1e-6)`` of the sown (raw) q, not of |q|; and max |z|
    is ``sqrt(d_h)`` times the largest allowed cosine. Bounds as for ``scaled``, with the
    normalisation's division and square root (4 eps more)."""
    params, sown, _, stats = forward("qk_norm")
    q = np.asarray(sown["h_0"]["attn"]["q"][0], np.float64)
    k = np.asarray(sown["h_0"]["attn"]["k"][0], np.float64)
    n = np.linalg.norm(q, axis=-1)
    seen = n / np.sqrt(n**2 + 1e-6)
    m = q.size // D_HEAD
    assert abs(stats.q_norm[0] - seen.mean()) <= (D_HEAD + 6 + m) * EPS
    assert abs(stats.q_norm[0] - n.mean()) > 0.1  # the raw norms are far from 1 at init
    qn = q / np.sqrt(np.sum(q * q, -1, keepdims=True) + 1e-6)
    kn = k / np.sqrt(np.sum(k * k, -1, keepdims=True) + 1e-6)
    gain = float(params["h_0"]["attn"]["scale"])
    z = gain * qn @ np.swapaxes(kn, -1, -2)
    assert abs(stats.max_logit[0] - _allowed_max(z)) <= (D_HEAD + 8) * EPS * gain


def _within_standard_errors(w: np.ndarray, std: float, n_se: float = 5.0) -> bool:
    """Sample mean within ``n_se`` SE (std / sqrt(n)) of 0, sample std within ``n_se`` SE
    (std / sqrt(2 n) for n iid normals) of ``std``."""
    n = w.size
    return abs(w.mean()) <= n_se * std / math.sqrt(n) and abs(
        w.std() - std
    ) <= n_se * std / math.sqrt(2 * n)


def test_gpt2_initialisation():
    """Every weight and embedding N(0, 0.02^2); W_O and W_2 N(0, (0.02 / sqrt(2 L))^2) (L =
    2: std 0.01, which 5 SE of these sample sizes, <= 0.0023, tell apart from 0.02); LN
    scales 1. Each check within 5 standard errors."""
    params = forward("scaled")[0]
    residual = 0.02 / math.sqrt(2 * N_LAYERS)
    for name in ("wte", "wpe", "lm_head"):
        assert _within_standard_errors(params[name], 0.02), name
    assert not _within_standard_errors(params["wte"], residual)  # the check can fail
    for layer in range(N_LAYERS):
        block = params[f"h_{layer}"]
        for name in ("W_Q", "W_K", "W_V"):
            assert _within_standard_errors(block["attn"][name], 0.02), (layer, name)
        assert _within_standard_errors(block["W_1"], 0.02), layer
        assert _within_standard_errors(block["attn"]["W_O"], residual), layer
        assert _within_standard_errors(block["W_2"], residual), layer
        assert not _within_standard_errors(block["attn"]["W_O"], 0.02)
        for ln in ("ln_1", "ln_2"):
            np.testing.assert_array_equal(block[ln]["scale"], np.ones(D_MODEL))
    np.testing.assert_array_equal(params["ln_f"]["scale"], np.ones(D_MODEL))


def test_folded_init_multiplies_w_q_and_w_k_by_d_head_to_minus_one_quarter():
    """Same key, same parameter paths: folded_init's W_Q and W_K are exactly ``d_h^-1/4``
    times scaled's (within 3 eps relative: the std and the product are each rounded once
    to float32, the fold once more), every other parameter bit for bit the same."""
    scaled, folded = forward("scaled")[0], forward("folded_init")[0]
    fold = D_HEAD**-0.25
    for layer in range(N_LAYERS):
        a, b = scaled[f"h_{layer}"]["attn"], folded[f"h_{layer}"]["attn"]
        for name in ("W_Q", "W_K"):
            np.testing.assert_allclose(b[name], fold * a[name].astype(np.float64), rtol=3 * EPS)
        np.testing.assert_array_equal(b["W_V"], a["W_V"])
        np.testing.assert_array_equal(b["W_O"], a["W_O"])
    np.testing.assert_array_equal(folded["wte"], scaled["wte"])


@pytest.mark.parametrize("name", list(BUILTINS))
def test_learned_scalars_one_per_layer_at_their_initial_values(name):
    """Each mechanism's learned scalars, and nothing else, beside each layer's W_*: one
    scalar per layer at its initial value at ``d_h`` (QK-norm: one ``scale`` = sqrt(d_h))."""
    params = forward(name)[0]
    expected = BUILTINS[name].param_values(D_HEAD)
    for layer in range(N_LAYERS):
        attn = params[f"h_{layer}"]["attn"]
        extra = {k: v for k, v in attn.items() if not k.startswith("W_")}
        assert set(extra) == set(expected)
        for key, value in expected.items():  # a per-head one (the sink): one value a head
            per_head = key in BUILTINS[name].per_head
            assert extra[key].shape == ((N_HEADS,) if per_head else ())
            assert np.all(extra[key] == np.float32(value))
    if name == "qk_norm":
        assert set(expected) == {"scale"}
        assert params["h_0"]["attn"]["scale"] == np.float32(math.sqrt(D_HEAD))


def test_program_lm_shares_one_program_and_computes_the_same_function():
    """Mechanisms that differ only in constants (scaled, unscaled, inv_d) have equal
    ``program_lm``; the program with the mechanism's constants passed in gives its logits.
    Bound: the scale may be a folded constant or a traced one, so z may round differently
    by 2 eps |z|; at initialisation softmax's Jacobian (norm <= 1/2) and the residual
    layers (gain about 1) carry that to the logits as a few eps of their size: 64 eps."""
    models = [model_of(n) for n in ("scaled", "unscaled", "inv_d")]
    assert program_lm(models[0]) == program_lm(models[1]) == program_lm(models[2])
    assert program_lm(models[0]) != program_lm(model_of("qk_norm"))
    params, _, logits, _ = forward("scaled")
    constants = {k: jnp.float32(v) for k, v in BUILTINS["scaled"].constant_values(D_HEAD).items()}
    program = program_lm(models[0])
    again, _ = jax.jit(lambda p, c: program.apply({"params": p}, tokens(), c))(params, constants)
    np.testing.assert_allclose(again, logits, rtol=0, atol=64 * EPS * np.abs(logits).max())


@pytest.mark.parametrize(
    ("d_model", "n_heads", "positions"),
    [(30, 4, "learned"), (12, 4, "learned"), (32, 4, "alibi")],
    ids=["not-divisible", "odd-head-width", "unknown-positions"],
)
def test_bad_shapes_raise_value_error(d_model, n_heads, positions):
    model = CausalLM(BUILTINS["scaled"], d_model, 1, n_heads, 8, positions)
    with pytest.raises(ValueError):
        model.init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))


def test_more_tokens_than_positions_name_max_length():
    model = CausalLM(BUILTINS["scaled"], 16, 1, 2, 4)
    with pytest.raises(ValueError, match="max_length 4"):
        model.init(jax.random.key(0), jnp.zeros((1, 5), jnp.int32))


# ------------------------------------------------------------------------- the gate

#: One gate per head: scaled's logits with its scale a constant, gated per head.
HEAD_GATED = Mechanism("head_gated", scaled_logits, constants={"scale": D_HEAD**-0.5}, gate="head")
GATED = {"element": BUILTINS["gated"], "head": HEAD_GATED}


def _param_shapes(mechanism: Mechanism) -> dict:
    """The model's parameter shapes (``jax.eval_shape``: nothing is computed or compiled)."""
    model = CausalLM(mechanism, D_MODEL, N_LAYERS, N_HEADS, MAX_LENGTH)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), tokens()))["params"]
    return jax.tree.map(lambda s: s.shape, shapes)


@pytest.mark.parametrize(("gate", "width"), [("element", D_MODEL), ("head", N_HEADS)])
def test_a_gated_mechanism_has_w_gate_in_every_layer(gate, width):
    """``W_gate`` ``[d_model, d_model]`` (the built-in ``gated``, one gate per element of
    every head's output) or ``[d_model, n_heads]`` (one per head) beside each layer's
    W_Q, W_K, W_V, W_O; a mechanism without a gate has none."""
    shapes = _param_shapes(GATED[gate])
    for layer in range(N_LAYERS):
        attn = shapes[f"h_{layer}"]["attn"]
        assert attn["W_gate"] == (D_MODEL, width)
        assert set(attn) == {"W_Q", "W_K", "W_V", "W_O", "W_gate"}
    ungated = _param_shapes(BUILTINS["scaled"])
    assert all("W_gate" not in ungated[f"h_{layer}"]["attn"] for layer in range(N_LAYERS))


def _numpy_params(model: CausalLM, seed: int) -> dict:
    """Parameters of ``model``'s shapes drawn by numpy (no random-bit program to compile):
    every weight N(0, 0.02^2) as GPT-2's, LayerNorm scales 1."""
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), tokens()))["params"]
    rng = np.random.default_rng(seed)

    def draw(path, shape):
        if path[-1].key == "scale":
            return np.ones(shape.shape, np.float32)
        return (0.02 * rng.standard_normal(shape.shape)).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes)


@functools.cache
def _gated_against_halved(gate: str):
    """Logits of the ``gate`` model with ``W_gate`` as drawn and with ``W_gate = 0`` (every
    gate sigmoid(0) = 1/2), and of the same mechanism without the gate, on the same
    weights, with W_O as drawn and halved; as numpy, one program."""
    gated = GATED[gate]
    model = CausalLM(gated, D_MODEL, N_LAYERS, N_HEADS, MAX_LENGTH)
    plain = CausalLM(dataclasses.replace(gated, name="ungated", gate=None),
                     D_MODEL, N_LAYERS, N_HEADS, MAX_LENGTH)  # fmt: skip
    params = _numpy_params(model, seed=5)

    def with_attn(change):  # every layer's attention parameters changed by ``change``
        layers = {k: {**v, "attn": change(dict(v["attn"]))} for k, v in params.items()
                  if k.startswith("h_")}  # fmt: skip
        return {**params, **layers}

    def without_gate(attn, w_o_factor):
        attn.pop("W_gate")
        return {**attn, "W_O": attn["W_O"] * np.float32(w_o_factor)}  # exact: a power of 2

    zero = with_attn(lambda a: {**a, "W_gate": np.zeros_like(a["W_gate"])})
    halved = with_attn(lambda a: without_gate(a, 0.5))
    ungated = with_attn(lambda a: without_gate(a, 1.0))

    @jax.jit
    def run(x, params, zero, halved, ungated):
        return (
            model.apply({"params": params}, x)[0],
            model.apply({"params": zero}, x)[0],
            plain.apply({"params": halved}, x)[0],
            plain.apply({"params": ungated}, x)[0],
        )

    return tuple(np.asarray(a) for a in run(tokens(), params, zero, halved, ungated))


@pytest.mark.parametrize("gate", ["element", "head"])
def test_a_zero_gate_halves_each_heads_output(gate):
    """With ``W_gate = 0`` every gate is sigmoid(0) = 1/2, so each layer adds half its
    attention output: the model is the ungated one with every W_O halved (``(o / 2) W_O = o
    (W_O / 2)``, halving exact in binary). Bound: the two programs may order the d-term sum
    of ``o W_O`` differently (2 d eps of the attention output, itself at most the residual
    stream's size with weights of GPT-2's scale), which LN and the next layers (gain about
    1 at that scale) carry to the logits: 2 d eps = 64 eps of the logits' size. The check
    can fail: the gate as drawn, and the ungated model with W_O not halved, are both
    farther than 100 times that."""
    drawn, zero, halved, ungated = _gated_against_halved(gate)
    assert zero.shape == (2 * B, T, VOCAB) and np.isfinite(zero).all()
    bound = 2 * D_MODEL * EPS * np.abs(halved).max()
    np.testing.assert_allclose(zero, halved, rtol=0, atol=bound)
    assert np.abs(zero - ungated).max() > 100 * bound
    assert np.abs(drawn - halved).max() > 100 * bound


def _gated_attention_reference(params: dict, a: np.ndarray, roll: int = 0):
    """One gated attention layer in float64, written out: q, k, v = a W split into heads,
    causal softmax of q.k / sqrt(d_h), ``o = p v``, ``o * sigmoid(a W_gate)`` with the gate
    split the same way (``[T, H d_h] -> [H, T, d_h]`` elementwise, ``[T, H] -> [H, T, 1]``
    per head, as W_gate's width says; ``roll`` hands each head its neighbour's gate, a
    wrong split), heads joined, ``W_O``. Returns the output and a bound on a float32
    evaluation's error per entry: each d-term product within d EPS of its absolute terms;
    logit errors ``e_z`` move a weight by at most ``p expm1(2 max e_z)`` and the softmax
    rounds (|z - m| + ULPS + T + 2) EPS relative; the gate moves by at most a quarter of
    its logit's error (sigmoid' <= 1/4) plus ULPS + 1 EPS relative; ``p v`` adds T EPS."""
    P = {k: np.asarray(v, np.float64) for k, v in params.items()}
    A = {k: np.abs(v) for k, v in P.items()}
    a = np.asarray(a, np.float64)
    length, d = a.shape
    h = N_HEADS

    def heads(x):  # [T, H w] -> [H, T, w]
        return x.reshape(length, h, -1).swapaxes(0, 1)

    q, k, v = (heads(a @ P[n]) for n in ("W_Q", "W_K", "W_V"))
    q_abs, k_abs, v_abs, g_abs = (heads(np.abs(a) @ A[n]) for n in ("W_Q", "W_K", "W_V", "W_gate"))
    e_q, e_k, e_v, e_g = d * EPS * q_abs, d * EPS * k_abs, d * EPS * v_abs, d * EPS * g_abs
    scale = D_HEAD**-0.5
    z = scale * q @ k.swapaxes(-1, -2)
    qk_abs = q_abs @ k_abs.swapaxes(-1, -2)
    e_z = scale * (e_q @ k_abs.swapaxes(-1, -2) + q_abs @ e_k.swapaxes(-1, -2))
    e_z += scale * (D_HEAD + 2) * EPS * qk_abs
    mask = np.tril(np.ones((length, length), bool))
    zm = np.where(mask, z - np.where(mask, z, -np.inf).max(-1, keepdims=True), -np.inf)
    p = np.exp(zm) / np.exp(zm).sum(-1, keepdims=True)
    rounding = (np.where(mask, np.abs(zm), 0.0) + 4 + length + 2) * EPS
    e_p = p * np.expm1(2 * np.where(mask, e_z, 0.0).max(-1, keepdims=True)) + p * rounding
    o, o_abs = p @ v, p @ v_abs
    e_o = e_p @ v_abs + p @ e_v + length * EPS * o_abs
    g = np.roll(heads(a @ P["W_gate"]), roll, axis=0)
    sig = 1.0 / (1.0 + np.exp(-g))
    gated = o * sig
    e_gated = e_o * sig + o_abs * (np.roll(e_g, roll, axis=0) / 4 + (4 + 1) * EPS * sig)

    def join(x):  # [H, T, w] -> [T, H w]
        return x.swapaxes(0, 1).reshape(length, d)

    out = join(gated) @ P["W_O"]
    bound = join(e_gated) @ A["W_O"] + d * EPS * (join(np.abs(gated)) @ A["W_O"])
    return out, bound


@pytest.mark.parametrize("gate", ["element", "head"])
def test_the_gate_multiplies_each_heads_output_by_the_sigmoid_of_its_own_columns(gate):
    """One attention layer (``CausalSelfAttention``) against the float64 reference
    (``_gated_attention_reference``), within its bound: the gate is ``sigmoid(a W_gate)``
    of the layer's input, split into heads as the values are, applied before W_O. Handing
    each head its neighbour's gate (a wrong split) is outside the bound by far."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((T, D_MODEL)).astype(np.float32)
    width = D_MODEL if gate == "element" else N_HEADS
    # (columns, std times sqrt(d)): logits of std about 1/4, whose worst-case error bound
    # (absolute terms) stays small; gate logits of std about 2, far from a constant gate
    shapes = {"W_Q": (D_MODEL, 0.5), "W_K": (D_MODEL, 0.5), "W_V": (D_MODEL, 1.0),
              "W_gate": (width, 2.0), "W_O": (D_MODEL, 1.0)}  # fmt: skip
    params = {
        name: (std / math.sqrt(D_MODEL) * rng.standard_normal((D_MODEL, cols))).astype(np.float32)
        for name, (cols, std) in shapes.items()
    }
    attention = causal_lm.CausalSelfAttention(GATED[gate], N_HEADS, 1)
    out = np.asarray(jax.jit(lambda p, a: attention.apply({"params": p}, a)[0])(params, a))
    ref, bound = _gated_attention_reference(params, a)
    assert np.all(np.abs(out - ref) <= bound)
    wrong, _ = _gated_attention_reference(params, a, roll=1)
    assert np.abs(out - wrong).max() > 100 * bound.max()
