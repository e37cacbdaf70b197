"""Tests of the recall readings: the slot encodings, init conventions and biases of
``RecallModel``, the declared family of ``attnlab.recall.readings``, its stage-1
screen (``step0_fingerprints``, ``kept``) and the ``--slot/--init/--bias/--reading`` flags."""

import functools
import math
from dataclasses import replace

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from attnlab.core.attention import attention_weights, dot_product_attention
from attnlab.core.temperature import MECHANISMS
from attnlab.recall import readings as rd
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.model import GPT_STD, RecallModel, _rows
from attnlab.recall.step import loss_and_aux
from attnlab.recall.task import sample_batch, stream_batch
from attnlab.recall.trainer import Run, Trainer

SCALED = MECHANISMS["scaled"]
# d_model != d_k so that a transposed or mis-split projection cannot go unnoticed.
SMALL = RecallConfig(d_k=16, d_model=12)
EPS32 = float(np.finfo(np.float32).eps)


@functools.cache
def dummy():
    return jax.jit(sample_batch, static_argnums=(1, 2))(jax.random.key(0), 1, SMALL.task)


def shapes(config: RecallConfig, mechanism=SCALED) -> dict:
    model = make_model(config, mechanism)
    tree = jax.eval_shape(model.init, jax.random.key(0), dummy())["params"]
    return {name: leaf.shape for name, leaf in tree.items()}


# --------------------------------------------------------------------------- slot encodings


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(
    ("slot", "expected"),
    [
        ("concat", {"E_key": (32, 12), "E_val": (32, 12), "W_Q": (12, 16), "W_K": (24, 16)}),
        ("sum", {"E_key": (32, 12), "E_val": (32, 12), "W_Q": (12, 16), "W_K": (12, 16)}),
        ("separate", {"E_key": (32, 12), "E_val": (32, 12), "W_Q": (12, 16), "W_K": (12, 16)}),
        ("onehot", {"W_Q": (32, 16), "W_K": (64, 16)}),
    ],
)
def test_slot_parameter_shapes(slot, expected, bias):
    got = shapes(replace(SMALL, slot=slot, bias=bias))
    expected = {**expected, "W_V": expected["W_K"], "W_O": (16, 32)}
    if bias:
        expected.update({"b_Q": (16,), "b_K": (16,), "b_V": (16,), "b_O": (32,)})
    assert got == expected


def test_onehot_ignores_d_model():
    a = shapes(replace(SMALL, slot="onehot", d_model=7))
    assert a == shapes(replace(SMALL, slot="onehot", d_model=300))


def test_learned_temperature_comes_last():
    got = shapes(replace(SMALL, bias=True), MECHANISMS["learned_temperature"])
    assert list(got)[-1] == "scale"


SLOTS = ("concat", "sum", "separate", "onehot")


@functools.cache
def slot_outputs():
    """Params (pytorch init: nonzero biases) and unscaled logits of every slot, biased, on 4
    sequences, from one compiled program."""
    b = jax.jit(sample_batch, static_argnums=(1, 2))(jax.random.key(5), 4, SMALL.task)

    @jax.jit
    def run():
        out = {}
        for slot in SLOTS:
            config = replace(SMALL, slot=slot, bias=True, init="pytorch")
            model = make_model(config, MECHANISMS["unscaled"])
            params = model.init(jax.random.key(1), b)["params"]
            out[slot] = (params, model.apply({"params": params}, b)[0])
        return out

    return b, jax.tree.map(np.asarray, run())


@pytest.mark.parametrize("slot", SLOTS)
def test_slot_forward_equals_per_slot_definition(slot):
    """The table-gather implementation equals each slot's law computed slot by slot, in
    float64, biases included."""
    b, outputs = slot_outputs()
    params, logits = outputs[slot]
    P = {k: np.asarray(v, np.float64) for k, v in params.items()}
    n_key, n_val = SMALL.n_key_tokens, SMALL.n_value_tokens
    for s in range(4):
        keys, values, query = (np.asarray(x[s]) for x in (b.keys, b.values, b.query))
        if slot == "onehot":
            x_q = np.eye(n_key)[query]
            x = np.concatenate([np.eye(n_key)[keys], np.eye(n_val)[values]], axis=1)
            k, v = x @ P["W_K"], x @ P["W_V"]
        else:
            x_q = P["E_key"][query]
            ek, ev = P["E_key"][keys], P["E_val"][values]
            if slot == "separate":
                k, v = ek @ P["W_K"], ev @ P["W_V"]
            else:
                x = np.concatenate([ek, ev], 1) if slot == "concat" else ek + ev
                k, v = x @ P["W_K"], x @ P["W_V"]
        q = x_q @ P["W_Q"] + P["b_Q"]
        k, v = k + P["b_K"], v + P["b_V"]
        z = k @ q
        p = np.exp(z - z.max())
        p /= p.sum()
        expected = (p @ v) @ P["W_O"] + P["b_O"]
        scale = np.abs(expected).max()
        np.testing.assert_allclose(logits[s], expected, rtol=0, atol=1e-4 * scale)


# --------------------------------------------------------------------------- init laws

#: Wide enough that every weight has >= 8192 entries (E: 32 x 256, W_O: 256 x 32).
WIDE = RecallConfig(d_k=256, d_model=256)


#: (init, slot, mechanism) of every parameter set the law tests read.
WIDE_SETS = (
    *[(init, "concat", "scaled") for init in ("natural", "pytorch", "glorot", "gpt")],
    *[(init, "onehot", "scaled") for init in ("pytorch", "glorot")],
    *[(init, "concat", "folded_init") for init in ("pytorch", "glorot", "gpt")],
)


@functools.cache
def all_wide_params() -> dict:
    """Step-0 params (seed 0, biases on) of every set of WIDE_SETS, from one program."""

    @jax.jit
    def run(key):
        out = {}
        for init, slot, mechanism in WIDE_SETS:
            config = replace(WIDE, init=init, slot=slot, bias=True)
            out[init, slot, mechanism] = make_model(config, MECHANISMS[mechanism]).init(
                key, dummy()
            )["params"]
        return out

    params = run(seed_keys(0).init)
    return {k: {n: np.asarray(v, np.float64) for n, v in p.items()} for k, p in params.items()}


def wide_params(init: str, slot: str = "concat", mechanism: str = "scaled") -> dict:
    return all_wide_params()[init, slot, mechanism]


def fans(name: str, shape: tuple[int, ...], slot: str) -> tuple[int, int]:
    """fan-in and fan-out of a parameter; a bias takes its weight's fan-in."""
    if len(shape) == 2:
        return shape
    weight_rows = {
        "b_Q": 32 if slot == "onehot" else 256,
        "b_K": 64 if slot == "onehot" else 512,
        "b_V": 64 if slot == "onehot" else 512,
        "b_O": 256,
    }
    return weight_rows[name], shape[0]


def assert_variance(x: np.ndarray, variance: float, kurtosis: float, label: str) -> None:
    """Mean 0 and variance ``variance`` within 5 standard errors: the sample variance of n
    iid entries has standard error ``variance * sqrt((kurtosis - 1) / n)`` (kurtosis 9/5 for
    a uniform law, 3 for a normal one and an upper bound for a truncated normal), the mean
    ``sqrt(variance / n)``. 5 standard errors: a false alarm about once in 10^6 checks."""
    n = x.size
    se_var = variance * math.sqrt((kurtosis - 1) / n)
    assert abs(x.var() - variance) < 5 * se_var, (label, x.var(), variance, se_var)
    assert abs(x.mean()) < 5 * math.sqrt(variance / n), (label, x.mean())


UNIFORM, NORMAL = 9 / 5, 3.0


@pytest.mark.parametrize("slot", ["concat", "onehot"])
def test_pytorch_law(slot):
    """nn.Embedding N(0, 1); nn.Linear weight and bias U(+-1/sqrt(fan_in)): variance
    1/(3 fan_in)."""
    for name, x in wide_params("pytorch", slot).items():
        if name.startswith("E_"):
            assert_variance(x, 1.0, NORMAL, name)
            continue
        fan_in, _ = fans(name, x.shape, slot)
        bound = 1 / math.sqrt(fan_in)
        assert np.abs(x).max() <= bound * (1 + EPS32), name
        assert np.abs(x).max() > 0.9 * bound, name  # the whole interval is used
        assert_variance(x, 1 / (3 * fan_in), UNIFORM, name)


@pytest.mark.parametrize("slot", ["concat", "onehot"])
def test_glorot_law(slot):
    """Every weight and embedding U(+-sqrt(6/(fan_in + fan_out))): variance 2/(fan_in +
    fan_out); biases 0."""
    for name, x in wide_params("glorot", slot).items():
        if name.startswith("b_"):
            assert not x.any(), name
            continue
        fan_in, fan_out = x.shape
        limit = math.sqrt(6 / (fan_in + fan_out))
        assert np.abs(x).max() <= limit * (1 + EPS32), name
        assert_variance(x, 2 / (fan_in + fan_out), UNIFORM, name)


def test_gpt_law():
    """Every weight and embedding N(0, 0.02^2); biases 0."""
    for name, x in wide_params("gpt").items():
        if name.startswith("b_"):
            assert not x.any(), name
        else:
            assert_variance(x, GPT_STD**2, NORMAL, name)


def test_natural_law():
    """Embeddings N(0, embed_init_std^2), projections (truncated) variance 1/fan_in; biases 0."""
    for name, x in wide_params("natural").items():
        if name.startswith("b_"):
            assert not x.any(), name
        elif name.startswith("E_"):
            assert_variance(x, 1.0, NORMAL, name)
        else:
            assert np.abs(x).max() <= 2 / 0.87962566103423978 / math.sqrt(x.shape[0]) * 1.0001
            assert_variance(x, 1 / x.shape[0], NORMAL, name)


@pytest.mark.parametrize("init", ["pytorch", "glorot", "gpt"])
def test_folding_factor_multiplies_q_and_k(init):
    """folded_init multiplies W_Q, W_K (and b_Q, b_K) by d_k^(-1/4) = 1/4 (exact: a power of
    two) and leaves everything else as scaled draws it."""
    scaled, folded = wide_params(init), wide_params(init, mechanism="folded_init")
    for name in scaled:
        factor = 0.25 if name in ("W_Q", "W_K", "b_Q", "b_K") else 1.0
        np.testing.assert_array_equal(folded[name], scaled[name] * factor, err_msg=name)


# --------------------------------------------------------------------------- natural = today


class TodayModel(nn.Module):
    """A plain re-statement of RecallModel as it was before slots and inits existed."""

    task: object
    mechanism: object
    d_k: int = 256
    d_model: int = 256
    embed_init_std: float = 1.0

    @nn.compact
    def __call__(self, batch):
        mech = self.mechanism
        embed = nn.initializers.normal(self.embed_init_std)
        qk_init = nn.initializers.variance_scaling(
            self.d_k ** (2 * mech.qk_init_exponent), "fan_in", "truncated_normal"
        )
        E_key = self.param("E_key", embed, (self.task.n_key_tokens, self.d_model))
        E_val = self.param("E_val", embed, (self.task.n_value_tokens, self.d_model))
        W_Q = self.param("W_Q", qk_init, (self.d_model, self.d_k))
        W_K = self.param("W_K", qk_init, (2 * self.d_model, self.d_k))
        W_V = self.param("W_V", nn.initializers.lecun_normal(), (2 * self.d_model, self.d_k))
        W_O = self.param(
            "W_O", nn.initializers.lecun_normal(), (self.d_k, self.task.n_value_tokens)
        )
        d = self.d_model
        q = _rows(E_key @ W_Q, batch.query)[:, None, :]
        k = _rows(E_key @ W_K[:d], batch.keys) + _rows(E_val @ W_K[d:], batch.values)
        v = _rows(E_key @ W_V[:d], batch.keys) + _rows(E_val @ W_V[d:], batch.values)
        theta = mech.constant_values(self.d_k)
        for name, value in mech.param_values(self.d_k).items():
            theta[name] = self.param(name, nn.initializers.constant(value), ())
        scale, cap = theta["scale"], theta.get("cap")
        o = dot_product_attention(q, k, v, scale=scale, logit_cap=cap)[:, 0]
        p = attention_weights(q, k, scale=scale, logit_cap=cap)[:, 0]
        return o @ W_O, p


def test_natural_reading_reproduces_today_exactly():
    """Same parameter names, order and values, and the same outputs, bit for bit, for a
    plain mechanism, a folded one (qk_init_exponent) and a learned temperature."""
    config = rd.reading_config(rd.get_reading("natural"), replace(SMALL, batch_size=8))
    assert (config.slot, config.init, config.bias) == ("concat", "natural", False)
    b = jax.jit(stream_batch, static_argnums=(2, 3))(seed_keys(2).data, 0, 8, config.task)
    names = ("scaled", "folded_init", "learned_temperature")
    # The names in creation order, as init made them while tracing: a jitted function's
    # dicts come back with their keys sorted, which would hide a change of order.
    created = {}

    @jax.jit
    def run(key):
        out = {}
        for name in names:
            mech = MECHANISMS[name]
            ours = make_model(config, mech)
            today = TodayModel(config.task, mech, config.d_k, config.d_model, 1.0)
            p, t = ours.init(key, b)["params"], today.init(key, b)["params"]
            created[name] = (list(p), list(t))
            out[name] = (p, t, ours.apply({"params": p}, b), today.apply({"params": t}, b))
        return out

    for name, (p, t, out, out_today) in run(seed_keys(2).init).items():
        assert created[name][0] == created[name][1], name
        assert sorted(created[name][0]) == list(p) == list(t), name
        for key in t:
            np.testing.assert_array_equal(p[key], t[key], err_msg=f"{name} {key}")
        for a, c in zip(out, out_today, strict=True):
            np.testing.assert_array_equal(a, c, err_msg=name)


# --------------------------------------------------------------------------- the family


def test_family_size_and_names():
    n_embedded = 3 * 4 * 2 * 5 * 5  # concat, sum, separate x init x bias x d_model x batch
    n_onehot = 4 * 2 * 5  # onehot x init x bias x batch (no d_model)
    assert len(rd.FAMILY) == n_embedded + n_onehot == 640
    names = [r.name for r in rd.FAMILY]
    assert len(set(names)) == len(names)
    assert len({(r.slot, r.init, r.bias, r.d_model, r.batch_size) for r in rd.FAMILY}) == 640
    assert all((r.d_model is None) == (r.slot == "onehot") for r in rd.FAMILY)
    assert rd.get_reading("onehot-gpt-bias-b128").d_model is None
    assert rd.RUN_LENGTHS == (1000, 1500, 2000, 3000)


def test_natural_member_is_todays_default():
    natural = rd.get_reading("natural")
    assert natural is rd.NATURAL is rd.get_reading("concat-natural-nobias-d256-b64")
    default = RecallConfig()
    assert rd.reading_config(natural) == default
    assert (natural.d_model, natural.batch_size) == (default.d_model, default.batch_size)


def test_reading_config_sets_the_five_choices():
    base = replace(RecallConfig(), steps=7, d_model=99)
    c = rd.reading_config(rd.get_reading("separate-glorot-bias-d32-b128"), base)
    assert (c.slot, c.init, c.bias, c.d_model, c.batch_size, c.steps) == (
        "separate",
        "glorot",
        True,
        32,
        128,
        7,
    )
    onehot = rd.reading_config(rd.get_reading("onehot-pytorch-nobias-b16"), base)
    assert onehot.d_model == 99  # kept, unused


def test_get_reading_typo_lists_close_names():
    with pytest.raises(ValueError, match="concat-natural-nobias-d256-b64"):
        rd.get_reading("concat-natral-nobias-d256-b64")
    with pytest.raises(ValueError, match="unknown reading 'xyz'"):
        rd.get_reading("xyz")


def test_reading_rejects_inconsistent_fields():
    with pytest.raises(ValueError, match="Reading.name"):
        rd.Reading("wrong", "sum", "gpt", False, 16, 16)
    with pytest.raises(ValueError, match="Reading.d_model"):
        rd.Reading("onehot-gpt-nobias-d16-b16", "onehot", "gpt", False, 16, 16)


# --------------------------------------------------------------------------- the screen

#: Small d_k keeps the direct reference cheap; the screen's laws do not depend on it.
SCREEN_BASE = RecallConfig(d_k=32)
SCREEN_SEEDS = 3
#: Per slot: the reading checked against a direct gradient (narrow, no bias: it runs zero-
#: padded and with zero biases inside the screen's program) and a wider, biased companion
#: that sets the program's width.
CHECKED = {
    "concat": ("concat-pytorch-nobias-d16-b16", "concat-gpt-bias-d32-b16"),
    "sum": ("sum-natural-nobias-d16-b16", "sum-pytorch-bias-d32-b16"),
    "separate": ("separate-glorot-nobias-d16-b16", "separate-natural-bias-d32-b16"),
    "onehot": ("onehot-pytorch-nobias-b16", "onehot-natural-bias-b16"),
}
#: Fingerprint vs direct gradient: the same function evaluated with float32 sums in
#: another order (zero padding, zero biases, traced scale, vmapped seeds). Each rounding
#: is relative EPS32; we allow a condition number (sum of |terms| / |sum| along the chain
#: of matmuls, softmax and norm) of 1000, so rtol = 1000 * EPS32 ~ 1.2e-4.
RTOL_FINGERPRINT = 1000 * EPS32


@functools.cache
def screen() -> pd.DataFrame:
    readings = [rd.get_reading(n) for pair in CHECKED.values() for n in pair]
    return rd.step0_fingerprints(readings, seeds=SCREEN_SEEDS, seed=1, base=SCREEN_BASE)


@functools.cache
def direct_step0_norms() -> dict[str, np.ndarray]:
    """``||grad W_Q||`` of ``train_step`` at step 0 for the first reading of every slot of
    CHECKED, ``[mechanisms, seeds]``: ``init_params`` of the seed, batch 0 of its data
    stream, the gradient of ``loss_and_aux`` with the mechanism's own model (fixed scale);
    one program, seeds vmapped."""
    seeds = jnp.arange(1, 1 + SCREEN_SEEDS)

    @jax.jit
    def run():
        out = {}
        for first, _ in CHECKED.values():
            config = rd.reading_config(rd.get_reading(first), SCREEN_BASE)
            rows = []
            for name in rd.SCREENED:
                mech = MECHANISMS[name]
                model = make_model(config, mech)

                def norm(s, config=config, mech=mech, model=model):
                    keys = seed_keys(s)
                    dummy_batch = sample_batch(jax.random.key(0), 1, config.task)
                    params = model.init(keys.init, dummy_batch)["params"]  # = init_params
                    b = stream_batch(keys.data, 0, config.batch_size, config.task)
                    grads = jax.grad(lambda p: loss_and_aux(model, p, b)[0])(params)
                    return jnp.linalg.norm(grads["W_Q"])

                rows.append(jax.vmap(norm)(seeds))
            out[first] = jnp.stack(rows)
        return out

    return {k: np.asarray(v) for k, v in run().items()}


@pytest.mark.slow  # every checked reading's direct gradient: over 20 s of CPU
@pytest.mark.parametrize("slot", list(CHECKED))
def test_fingerprint_equals_direct_gradient(slot):
    frame = screen().set_index("name")
    reading = rd.get_reading(CHECKED[slot][0])
    direct = np.median(direct_step0_norms()[reading.name], axis=1)
    got = frame.loc[reading.name, ["grad_norm_wq_scaled", "grad_norm_wq_unscaled"]]
    np.testing.assert_allclose(got.to_numpy(float), direct, rtol=RTOL_FINGERPRINT)


#: Two readings, one with a d_model and one without: the layout at a fraction of the cost.
LAYOUT_SCREENED = ("concat-pytorch-nobias-d16-b16", "onehot-natural-bias-b16")


def test_fingerprint_frame_layout():
    readings = [rd.get_reading(n) for n in LAYOUT_SCREENED]
    frame = rd.step0_fingerprints(readings, seeds=2, seed=1, base=SCREEN_BASE)
    assert list(frame.name) == list(LAYOUT_SCREENED)
    for column in ("slot", "init", "bias", "d_model", "batch_size", "ratio"):
        assert column in frame
    assert frame.loc[frame.slot == "onehot", "d_model"].isna().all()
    assert (frame.grad_norm_wq_scaled > 0).all()
    np.testing.assert_allclose(frame.ratio, frame.grad_norm_wq_unscaled / frame.grad_norm_wq_scaled)


def test_kept_on_a_synthetic_frame():
    t = 0.1085
    values = [t, t / 1.5, t * 1.5, t / 1.5 * 0.999, t * 1.5 * 1.001, 0.0, np.nan, 1.0]
    frame = pd.DataFrame({"grad_norm_wq_scaled": values})
    assert rd.kept(frame).tolist() == [True, True, True, False, False, False, False, False]
    assert rd.kept(frame, target=1.0, factor=2.0).tolist()[-1]


# --------------------------------------------------------------------------- config and flags


def test_model_init_rule_field():
    assert RecallModel(SMALL.task, SCALED).init_rule == "natural"


# --------------------------------------------------------------------------- second family


def test_second_family_is_pinned():
    """Experiment 09's second family, declared before its results: 9 batch sizes x 9
    d_models (onehot: no d_model) x the first family's slots, inits and biases, x 7
    smoothings; the first family is its subset with the trailing mean over 25 steps."""
    from attnlab.recall import readings

    assert readings.BATCH_SIZES_2 == readings.D_MODELS_2 == (16, 24, 32, 48, 64, 96, 128, 192, 256)
    assert [s.name for s in readings.SMOOTHINGS] == [
        "mean10",
        "mean25",
        "mean50",
        "mean100",
        "ema0.9",
        "ema0.95",
        "ema0.99",
    ]
    n_readings = 3 * 4 * 2 * 9 * 9 + 4 * 2 * 9  # concat, sum, separate; onehot
    assert len(readings.FAMILY_2_READINGS) == n_readings == 2016
    assert len(readings.FAMILY_2) == 7 * n_readings
    assert len({(r.name, s.name) for r, s in readings.FAMILY_2}) == len(readings.FAMILY_2)
    first = {(r, readings.FIRST_SMOOTHING) for r in readings.FAMILY}
    assert first <= set(readings.FAMILY_2) and readings.FIRST_SMOOTHING.window == 25
    assert readings.get_reading("sum-gpt-bias-d96-b192").batch_size == 192


@pytest.mark.parametrize(
    "names",
    [
        # Each pair trains two readings padded into one program (18 s of CPU cold): over the
        # fast suite's time, checked in test-all.
        pytest.param(
            ("concat-natural-nobias-d16-b16", "concat-pytorch-nobias-d24-b16"),
            marks=pytest.mark.slow,
        ),
        pytest.param(("sum-glorot-bias-d16-b16", "sum-gpt-bias-d32-b16"), marks=pytest.mark.slow),
        pytest.param(
            ("separate-pytorch-bias-d24-b16", "separate-natural-bias-d16-b16"),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_padded_groups_train_as_their_readings(names):
    # Readings zero-padded into one model and trained as lanes of one program give each
    # reading's own training: the padded entries get exactly zero gradient, so the two
    # differ only in float32 summation order. Bound: a few ulps per step of rounding
    # (EPS32), grown at most ~10x per step by the ill-conditioned early Adam updates over
    # STEPS steps -> 1e-4 relative, far below a real difference (any wrong entry moves
    # the first step's loss by ~1e-2).
    steps = 5
    base = RecallConfig(seeds=2, seed=3, steps=1, mechanisms=("scaled",), chunk_steps=steps)
    readings = [rd.get_reading(n) for n in names]
    ((config, members, states),) = rd.padded_groups(readings, base)
    assert members == readings and config.d_model == max(r.d_model for r in readings)
    runs = [
        Run(config, SCALED, state=s, label=r.name) for r, s in zip(readings, states, strict=True)
    ]
    together = Trainer(runs, metrics=("loss", "grad_norm_wq"))
    together.run(steps)
    for i, reading in enumerate(readings):
        alone = Trainer([Run(rd.reading_config(reading, base), SCALED)],
                        metrics=("loss", "grad_norm_wq"))  # fmt: skip
        alone.run(steps)
        for name in ("loss", "grad_norm_wq"):
            np.testing.assert_allclose(
                together.metrics[name][together.lane_slice(i)], alone.metrics[name], rtol=1e-4
            )


def test_padded_groups_split_by_slot_bias_and_batch():
    names = ["sum-natural-bias-d16-b16", "sum-natural-bias-d32-b24", "sum-gpt-bias-d24-b16",
             "sum-gpt-nobias-d16-b16", "onehot-natural-bias-b16"]  # fmt: skip
    groups = rd.padded_groups([rd.get_reading(n) for n in names], RecallConfig(seeds=1))
    assert [[r.name for r in members] for _, members, _ in groups] == [
        [names[0], names[2]], [names[1]], [names[3]], [names[4]]
    ]  # fmt: skip
    assert [c.d_model for c, _, _ in groups[:3]] == [24, 32, 16]


def test_pair_name_joins_reading_and_smoothing():
    assert rd.pair_name(rd.NATURAL, rd.SMOOTHINGS[-1]) == "concat-natural-nobias-d256-b64/ema0.99"
    assert rd.FIRST_SMOOTHING.window == RecallConfig().smoothing
