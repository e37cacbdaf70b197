"""attnlab.training.optimizers: the registry by name and its refusals; ``adam`` without a
recipe is ``optax.adam``; ``adamw`` under a recipe is 14's AdamW; Muon updates the hidden
matrices only (the embeddings, head, gains and a mechanism's scalars take 14's AdamW) with
orthogonal, RMS-matched steps; Lion's steps are the sign of its interpolated moment."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest
from support import matrix_and_vector, optimizer_updates

from attnlab.core.references import load_mechanism
from attnlab.lm.train import LMConfig
from attnlab.training.optimizers import (
    CONSISTENT_RMS,
    OPTIMIZERS,
    Recipe,
    hyperparameters,
    make_optimizer,
    muon_labels,
    register_optimizer,
)
from attnlab.training.schedules import descent, schedule_factor

CONFIG = LMConfig(d_model=32, n_layers=1, seq_len=8)


def params_and_grads():
    """The model's parameters (their names and shapes traced, not compiled; values drawn in
    numpy, as 14's export test does) and full-rank gradients (N(0, 0.01^2) entries: a
    rank-one gradient would orthogonalise to one singular direction)."""
    model = CONFIG.model(load_mechanism("learned_temperature"))
    shapes = jax.eval_shape(model.init, jax.random.key(0), np.zeros((1, 8), np.int32))
    leaves, tree = jax.tree.flatten(shapes["params"])
    rng = np.random.default_rng(0)
    params = [0.02 * rng.standard_normal(p.shape).astype(np.float32) for p in leaves]
    grads = [0.01 * rng.standard_normal(p.shape).astype(np.float32) for p in leaves]
    return jax.tree.unflatten(tree, params), jax.tree.unflatten(tree, grads)


def first_update(optimizer, params, grads):
    """The optimizer's first update, compiled (one program, not one per operation)."""
    return jax.jit(lambda p, g: optimizer.update(g, optimizer.init(p), p)[0])(params, grads)


def test_the_routing_by_name():
    params, _ = params_and_grads()
    labels = muon_labels(params)
    block = labels["h_0"]
    assert {block["attn"][n] for n in ("W_Q", "W_K", "W_V", "W_O")} == {"muon"}
    assert block["W_1"] == block["W_2"] == "muon"
    assert labels["wte"] == labels["wpe"] == labels["lm_head"] == "adamw"
    assert block["ln_1"]["scale"] == "adamw" and block["attn"]["scale"] == "adamw"


def test_adamw_through_the_registry_is_14s():
    """``make_optimizer("adamw", lr, Recipe)`` is the chain the module docstring writes bit
    for bit (the same program's operations): clipping at 1, then Adam at 14's betas on the
    cosine with independent decay 1e-4, the model's first update; with ``schedule="cosine",
    decay="independent"`` named explicitly, the recipe's defaults, three steps on a matrix
    and a vector."""
    params, grads = params_and_grads()
    a = first_update(make_optimizer("adamw", 1e-2, Recipe(100, 10)), params, grads)
    fourteens = optax.chain(
        optax.clip_by_global_norm(1.0),
        descent(optax.scale_by_adam(0.9, 0.95, 1e-8), 1e-2, schedule_factor("cosine", 100, 10),
                1e-4, "independent"),
    )  # fmt: skip
    b = first_update(fourteens, params, grads)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    lr, total, warmup, wd = 0.1, 12, 2, 0.05
    params = matrix_and_vector()
    rng = np.random.default_rng(13)
    steps = [{k: (size * rng.standard_normal(v.shape)).astype(np.float32)
              for k, v in params.items()} for size in (3.0, 0.05, 0.2)]  # fmt: skip
    named = make_optimizer("adamw", lr, Recipe(total, warmup, wd, schedule="cosine",
                                               decay="independent"))  # fmt: skip
    a = optimizer_updates(named, params, steps)
    b = optimizer_updates(make_optimizer("adamw", lr, Recipe(total, warmup, wd)), params, steps)
    for ua, ub in zip(a, b, strict=True):
        for k in params:
            np.testing.assert_array_equal(ua[k], ub[k])


def test_adam_without_a_recipe_is_optax_adam():
    """04's recall step: ``adam`` at a constant rate, no clipping, no decay, is
    ``optax.adam(lr)`` bit for bit over three steps (the same operations)."""
    params, grads = params_and_grads()

    def three(optimizer):
        def run(p, g):
            state = optimizer.init(p)
            for _ in range(3):
                u, state = optimizer.update(g, state, p)
                p = optax.apply_updates(p, u)
            return p

        return jax.jit(run)(params, grads)

    ours, theirs = three(make_optimizer("adam", 1e-3)), three(optax.adam(1e-3))
    for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(x, y)


def test_lion_steps_by_the_sign():
    """Lion's first step from zero momentum is ``-lr s(0) sign((1 - b1) g)`` (Chen et al.
    2023, Algorithm 2) where the decay is 0: ``+-lr / warmup`` on every entry with a nonzero
    gradient, within the float32 roundings of ``s(0) = 1 / warmup`` and of ``lr s(0)``
    (2 eps relative; the sign itself is exact)."""
    params, grads = params_and_grads()
    lr, warmup = 1e-3, 10
    u = first_update(make_optimizer("lion", lr, Recipe(100, warmup, weight_decay=0.0)),
                     params, grads)  # fmt: skip
    for step, g in zip(jax.tree.leaves(u), jax.tree.leaves(grads), strict=True):
        expected = -(lr / warmup) * np.sign(np.asarray(g, np.float64))
        np.testing.assert_allclose(step, expected, rtol=2 * np.finfo(np.float32).eps, atol=0)


def test_the_registry_names_hyperparameters_and_refuses_others():
    """Each registered optimizer's fields are its hyperparameters with defaults; one it has
    not is a one-line ValueError naming it; a registered optimizer is found by name."""
    assert {"adam", "adamw", "muon", "lion"} <= set(OPTIMIZERS)
    assert hyperparameters("adamw") == {"b1": 0.9, "b2": 0.95, "eps": 1e-8}
    assert hyperparameters("lion") == {"b1": 0.9, "b2": 0.99}
    with pytest.raises(ValueError, match="lion has no hyperparameter 'side_lr'"):
        make_optimizer("lion", 1e-3, Recipe(100, 10), side_lr=1e-3)

    @register_optimizer("test_sign_sgd")
    @dataclasses.dataclass(frozen=True)
    class SignSGD:
        def build(self, lr, recipe):
            return optax.chain(optax.scale_by_sign(), optax.scale(-lr))

    try:
        with pytest.raises(ValueError, match="'test_sign_sgd' is registered already"):
            register_optimizer("test_sign_sgd")(SignSGD)
        params, grads = params_and_grads()
        u = first_update(make_optimizer("test_sign_sgd", 0.5), params, grads)
        leaf = jax.tree.leaves(u)[0]
        np.testing.assert_array_equal(leaf, -0.5 * np.sign(jax.tree.leaves(grads)[0]))
    finally:
        del OPTIMIZERS["test_sign_sgd"]


def test_muon_steps_the_matrices_orthogonally_and_the_rest_as_adamw():
    """At step 0 (schedule 1/warmup) a Muon matrix update is lr s(0) * 0.2 sqrt(max(A, B))
    times an orthogonalised matrix: its RMS lr s(0) 0.2 within Newton-Schulz's inexactness
    (five steps leave singular values in about [0.7, 1.2]); the other leaves move exactly
    as under 14's AdamW."""
    params, grads = params_and_grads()
    lr, warmup = 1e-2, 10
    recipe = Recipe(100, warmup, weight_decay=0.0)
    m = first_update(make_optimizer("muon", lr, recipe), params, grads)
    a = first_update(make_optimizer("adamw", lr, recipe), params, grads)
    labels = muon_labels(params)
    step = lr / warmup  # s(0) = 1 / warmup
    flat = zip(jax.tree.leaves(labels), jax.tree.leaves(m), jax.tree.leaves(a), strict=True)
    for label, u_m, u_a in flat:
        if label == "muon":
            rms = float(np.sqrt(np.mean(np.square(np.asarray(u_m)))))
            assert rms == pytest.approx(step * CONSISTENT_RMS, rel=0.35)
            assert not np.allclose(u_m, u_a)
        else:
            np.testing.assert_array_equal(u_m, u_a)


def test_an_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer("sgd", 1e-2, Recipe(100, 10))


# --- Muon's AdamW side at a rate of its own (side_lr) ---


@pytest.mark.parametrize(
    "decay", ["independent", pytest.param("coupled", marks=pytest.mark.slow)]
)  # the coupled case compiles Muon's chain again: about 5 s of CPU cold
def test_side_lr_sets_the_adamw_sides_rate_and_leaves_muons(decay):
    """Muon at ``lr = b`` with ``side_lr = a``: the AdamW side (embeddings, head, gains:
    ``muon_labels``) moves exactly as ``make_optimizer("adamw", a)`` (the same global-norm
    clipping of the same gradients, the same Adam, the rate ``a s(0)``, and under coupled
    decay the decay at ``a``), and the Muon side exactly as Muon with ``side_lr`` None at
    ``b``: bit for bit, the same operations. ``side_lr`` None is the AdamW side at ``b``,
    which ``a = b / 100`` is far from (Adam's first step is ``sign(g)``, so the two rates'
    steps differ by ``(b - a) s(0)`` somewhere, less the decay ``wd |theta| < 0.1`` of it):
    the check can fail."""
    params, grads = params_and_grads()
    a, b, total, warmup = 1e-3, 1e-1, 100, 10

    def make(name, lr, **side):
        return make_optimizer(name, lr, Recipe(total, warmup, 0.1, decay=decay), **side)

    split = first_update(make("muon", b, side_lr=a), params, grads)
    shared = first_update(make("muon", b), params, grads)
    adamw = first_update(make("adamw", a), params, grads)
    labels = jax.tree.leaves(muon_labels(params))
    flat = zip(labels, *(jax.tree.leaves(t) for t in (split, shared, adamw)), strict=True)
    for label, u, u_shared, u_adamw in flat:
        if label == "muon":
            np.testing.assert_array_equal(u, u_shared)
        else:
            np.testing.assert_array_equal(u, u_adamw)
            gap = np.max(np.abs(np.asarray(u) - np.asarray(u_shared)))
            assert gap > 0.5 * (b - a) / warmup  # Adam's first |u| is 1: (b - a) s(0)
    # The named leaves, by name: the embeddings, the head and a LayerNorm gain.
    assert labels.count("adamw") >= 3
    for path in (("wte",), ("lm_head",), ("h_0", "ln_1", "scale")):
        leaf, ref = split, adamw
        for key in path:
            leaf, ref = leaf[key], ref[key]
        np.testing.assert_array_equal(leaf, ref, err_msg=str(path))


@pytest.mark.parametrize("side_lr", [1e-3, 0.0])
def test_side_lr_is_refused_by_adamw(side_lr):
    """AdamW has one rate: any ``side_lr`` (even 0) is a ValueError."""
    with pytest.raises(ValueError, match="side_lr"):
        make_optimizer("adamw", 1e-2, Recipe(100, 10), side_lr=side_lr)
