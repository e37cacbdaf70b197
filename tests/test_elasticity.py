"""attnlab.core.elasticity: the logits' elasticity to the scale of q and k, against closed
forms (2 for bilinear logits, 0 for normalised q and k, a cap's tanh law)."""

import functools

import jax
import numpy as np
import pytest

from attnlab.core.elasticity import logit_elasticity, logit_scale
from attnlab.core.mechanism import L2_EPS
from attnlab.core.owner import owner
from attnlab.core.temperature import BUILTINS

D_K, N = 32, 16
EPS32 = float(np.finfo(np.float32).eps)


@functools.cache
def _normals() -> tuple[np.ndarray, np.ndarray]:
    """Standard normal q [4, 8, D_K] and k [4, N, D_K], drawn once for every test."""
    kq, kk = jax.random.split(jax.random.key(3))
    return np.asarray(jax.random.normal(kq, (4, 8, D_K))), np.asarray(
        jax.random.normal(kk, (4, N, D_K))
    )


def _qk(scale: float = 1.0):
    q, k = _normals()
    return np.float32(scale) * q, np.float32(scale) * k


@pytest.mark.parametrize("name", ["scaled", "unscaled", "inv_d", "learned_temperature", "ssmax"])
def test_bilinear_logits_have_elasticity_two(name):
    # z = c q.k: s(alpha) = alpha^2 s(1) exactly; the jvp's rounding is a few eps of the
    # sums of N terms (bound 64 N eps).
    e = np.asarray(logit_elasticity(BUILTINS[name], *_qk()))
    np.testing.assert_allclose(e, 2.0, atol=64 * N * EPS32)
    assert owner(float(e[0])) == "weights"


@pytest.mark.parametrize("name", ["qk_norm", "cosine_tau"])
def test_normalised_qk_has_elasticity_near_zero(name):
    # q/sqrt(|q|^2 + eps): d ln / d ln alpha = eps / (alpha^2 |q|^2 + eps) ~ 1e-6 / D_K.
    e = np.asarray(logit_elasticity(BUILTINS[name], *_qk()))
    assert np.all(np.abs(e) < 1e-3)
    assert owner(float(e[0])) == "mechanism"


@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0])
def test_qk_norm_elasticity_is_within_the_bound_make_verify_allows(scale):
    """``attnlab.studies.lm_proxy.study.ELASTICITY_ATOL``'s bound: ``l2_normalize``'s eps
    leaves ``d ln z_ij / d ln alpha = a_i + b_j``, ``0 <= a, b <= eps / min |x|^2``, so
    ``|e| <= (eps / min |x|^2) (1 + max |z| / s)``; float32 rounds the normalised tangent
    to ``(d + 3) eps_32`` of itself per side; and ``max |z| <= g``, ``K = g / s``. At scale
    1e-2 the eps term is the larger (``|x|^2 ~ 3e-3``), at 30 the rounding."""
    mechanism = BUILTINS["qk_norm"]
    q, k = _qk(scale)
    theta = mechanism.initial_theta(D_K)
    z = mechanism.scores(*mechanism.prepare(q, k), theta, mechanism.mask_for(None, None), None)
    gain_over_scale = float(theta["scale"]) / float(logit_scale(z))
    least_square = min(float((q**2).sum(-1).min()), float((k**2).sum(-1).min()))
    bound = (L2_EPS / least_square + 2 * (D_K + 3) * EPS32) * (1 + gain_over_scale)
    e = np.asarray(logit_elasticity(mechanism, q, k))
    assert np.all(np.abs(e) <= bound), (e, bound)


def test_softcap_elasticity_falls_as_the_cap_takes_over():
    q, k = _qk(scale=3.0)  # unscaled logits of std ~ 9 D_K^0.5 ~ 51: into the cap of 30
    e = np.asarray(logit_elasticity(BUILTINS["softcap30"], q, k))
    assert e[0] < 2.0 and np.all(np.diff(e) < 0) and e[-1] < 1.0
    # Against finite differences of ln s in ln alpha (central, step h: error O(h^2)).
    mech = BUILTINS["softcap30"]
    theta = mech.initial_theta(D_K)

    def log_s(a):
        a = np.float32(a)  # float32 products, as on float32 arrays
        return float(np.log(logit_scale(mech.scores(a * q, a * k, theta))))

    h = 1e-2
    fd = (log_s(np.exp(h)) - log_s(np.exp(-h))) / (2 * h)
    np.testing.assert_allclose(e[0], fd, atol=1e-3)


def test_logit_scale_ignores_row_shifts_and_masked_keys():
    z = np.array([[1.0, 3.0, 100.0], [5.0, 7.0, -50.0]], np.float32)
    mask = np.array([[True, True, False], [True, True, False]])
    assert float(logit_scale(z, mask)) == pytest.approx(1.0)
    assert float(logit_scale(z + 10.0, mask)) == pytest.approx(1.0)
