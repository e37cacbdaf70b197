"""attnlab.core.mechanism_check: a broken mechanism stopped before it trains, with one line
naming it and the cause in words (wrong shape or dtype, non-finite, weights given as
logits, Python control flow or numpy under jit, an argument that is no declared scalar),
and what it must accept (logits in [0, 1] with weights of the user's own); one broken only
at other widths, lengths or numbers of heads than the main check's is stopped too."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.hooks import softmax_weights
from attnlab.core.mechanism import Mechanism, MechanismError
from attnlab.core.mechanism_check import OTHER_SHAPES, check_mechanism


def _einsum(q, k):
    return jnp.einsum("...qd,...kd->...qk", q, k)


@pytest.mark.parametrize(
    ("logits", "match"),
    [
        (lambda q, k: jnp.einsum("...qd,...kd->...qk", q, k)[..., :1], "must be float32"),
        (lambda q, k: jnp.einsum("...qd,...kd->...qk", q, k).astype(jnp.float16), "float16"),
        (lambda q, k: jnp.full(q.shape[:-1] + k.shape[-2:-1], jnp.nan), "non-finite"),
        (lambda q, k: q.undefined, "fails on random inputs"),
    ],
)
def test_a_broken_mechanism_is_stopped_with_its_name(logits, match):
    with pytest.raises(MechanismError, match="'broken'") as caught:
        check_mechanism(Mechanism("broken", logits))
    assert caught.match(match)


def test_weights_that_are_not_the_logits_shape_are_stopped():
    mechanism = Mechanism(
        "squashed",
        lambda q, k: jnp.einsum("...qd,...kd->...qk", q, k),
        weights=lambda z, mask: jnp.sum(z, axis=-1),
    )
    with pytest.raises(MechanismError, match="logits' shape"):
        check_mechanism(mechanism)


def _traced_if(q, k):
    z = _einsum(q, k)
    if z.max() > 100:  # a Python if on a traced value: fine eagerly, not under jit
        return z / 10
    return z


def _numpy_inside(q, k):
    return np.einsum("...qd,...kd->...qk", np.asarray(q), np.asarray(k))


@pytest.mark.parametrize(
    ("mechanism", "match"),
    [
        (lambda: Mechanism("traced_if", _traced_if), "jax.jit .*Python control flow .*jnp.where"),
        (lambda: Mechanism("numpy_inside", _numpy_inside), "jax.jit .*numpy on a traced value"),
        (
            lambda: Mechanism("weights_like", lambda q, k: softmax_weights(_einsum(q, k))),
            "look like weights",
        ),
        (
            lambda: Mechanism("vector", lambda q, k, g: _einsum(q * g, k), params={"g": jnp.ones}),
            r"params\['g'\] at d_k 16 must be one number.*shape \(16,\)",
        ),
        (
            lambda: Mechanism("extra_argument", lambda q, k, W_Q: W_Q * _einsum(q, k)),
            "required positional argument: 'W_Q'.*Mechanism.params",
        ),
    ],
)
def test_what_jit_or_grad_would_raise_is_one_worded_line_naming_the_mechanism(mechanism, match):
    with pytest.raises(MechanismError) as caught:
        check_mechanism(mechanism())
    message = str(caught.value)
    assert message.startswith("mechanism '") and "\n" not in message
    assert caught.match(match)
    assert "Error(" not in message and "Tracer" not in message  # no raw reprs


def test_logits_that_are_weights_only_with_other_weights_are_accepted():
    """The weights-like check is softmax's (it would be applied twice); with weights of
    the user's own, logits in [0, 1] summing to one are theirs to give."""
    identity = Mechanism("own", lambda q, k: softmax_weights(_einsum(q, k)), weights=lambda z, m: z)
    check_mechanism(identity)
    # q.k / d: non-negative rows are rare but possible; it is their sum that gives weights away
    check_mechanism(Mechanism("shifted", lambda q, k: jnp.abs(_einsum(q, k))))


def test_an_argument_that_does_not_exist_is_one_worded_line():
    with pytest.raises(MechanismError, match="position.*scalar declared") as info:
        check_mechanism(Mechanism("typo", lambda q, k, position: _einsum(q, k)))
    assert "\n" not in str(info.value)


# --- a mechanism broken only at other shapes than the main check's -------------------------


def _only_16(q, k):
    if q.shape[-1] != 16:
        raise ValueError("written for d_k 16")
    return _einsum(q, k)


def _by_heads(q, k, n_heads):  # a head axis of 2 hard-coded where the model says n_heads
    return _einsum(q, k).reshape(2, -1, k.shape[-2]) * n_heads


@pytest.mark.parametrize(
    ("mechanism", "match"),
    [
        (Mechanism("only_16", _only_16), r"fails on random inputs at d_k 8 .*written for d_k 16"),
        (  # right at 8 keys only
            Mechanism("eight_keys", lambda q, k: _einsum(q, k)[..., :8]),
            r"must be float32 \[4, 12, 12\], got float32 \[4, 12, 8\]",
        ),
        (Mechanism("by_heads", _by_heads), r"at d_k 8 \(q \[1, 1, 8\], k \[1, 5, 8\]\)"),
        (
            Mechanism(
                "narrow", lambda q, k, g: g * _einsum(q, k), params={"g": lambda d: 1 / (d - 8)}
            ),
            "initial values fail at d_k 8: ZeroDivisionError",
        ),
        (  # the card's widest head (statics, float16 cells): the audit's width-only failure
            Mechanism("up_to_256", lambda q, k: _einsum(q, k) if q.shape[-1] <= 256 else None),
            r"at d_k 1024 \(q \[1, 1, 1024\], k \[1, 4096, 1024\]\)",
        ),
        (
            Mechanism("squeezed", _einsum, weights=lambda z, mask: softmax_weights(z)[..., :3, :]),
            r"weights must have the logits' shape at d_k 64 .*got \[4, 3, 12\]",
        ),
    ],
)
def test_a_mechanism_broken_only_at_other_shapes_is_stopped(mechanism, match):
    """The main check (d_k 16, 3 queries, 8 keys, 2 heads) passes each of these; the shapes
    of ``OTHER_SHAPES`` (d_k 8, 64 and 1024, other query and key counts, 1 and 4 heads) do
    not."""
    with pytest.raises(MechanismError) as caught:
        check_mechanism(mechanism)
    message = str(caught.value)
    assert message.startswith(f"mechanism {mechanism.name!r}") and "\n" not in message
    assert caught.match(match)


def test_other_shapes_are_traced_not_run_and_may_diverge():
    """A mechanism NaN only at d_k 64 passes (a run records a divergence, on purpose); the
    other shapes are traced for shapes only, never computed."""
    seen = []

    def nan_at_64(q, k):
        seen.append(type(q).__name__)
        z = _einsum(q, k)
        return jnp.log(-1.0 - jnp.abs(z)) if q.shape[-1] == 64 else z

    check_mechanism(Mechanism("nan_at_64", nan_at_64))
    assert len(seen) >= 2 + len(OTHER_SHAPES)  # eager, jit, grad, then the other shapes
    assert all(name != "ArrayImpl" for name in seen[-len(OTHER_SHAPES) :])
