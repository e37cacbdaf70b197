"""Tests of attnlab.core.temperature: the mechanisms compared in 04/05 and their logit scales."""

import math
import sys

import pytest

from attnlab.core.temperature import MECHANISMS, Mechanism, qk_norm_initial_gain

D_KS = [1, 4, 16, 64, 256]


def test_mechanism_names_and_keys():
    assert list(MECHANISMS) == [
        "scaled",
        "unscaled",
        "folded_init",
        "qk_norm",
        "learned_temperature",
        "inv_d",
        "softcap30",
        "softcap50",
    ]
    for name, mech in MECHANISMS.items():
        assert isinstance(mech, Mechanism)
        assert mech.name == name


def test_mechanism_attributes():
    """What each mechanism changes relative to unscaled attention, and nothing else."""
    expected = {
        #  name: (scale_rule, qk_init_exponent, normalize_qk, logit_cap)
        "scaled": ("inv_sqrt_d", 0.0, False, None),
        "unscaled": ("one", 0.0, False, None),
        "folded_init": ("one", -0.25, False, None),
        "qk_norm": ("learned", 0.0, True, None),
        "learned_temperature": ("learned", 0.0, False, None),
        "inv_d": ("inv_d", 0.0, False, None),
        "softcap30": ("one", 0.0, False, 30.0),
        "softcap50": ("one", 0.0, False, 50.0),
    }
    got = {
        name: (m.scale_rule, m.qk_init_exponent, m.normalize_qk, m.logit_cap)
        for name, m in MECHANISMS.items()
    }
    assert got == expected


@pytest.mark.parametrize("d_k", D_KS)
def test_fixed_scale_values(d_k):
    expected = {
        "scaled": 1 / math.sqrt(d_k),
        "unscaled": 1.0,
        "folded_init": 1.0,
        "qk_norm": math.sqrt(d_k),
        "learned_temperature": 1 / math.sqrt(d_k),
        "inv_d": 1 / d_k,
        "softcap30": 1.0,
        "softcap50": 1.0,
    }
    for name, mech in MECHANISMS.items():
        assert mech.fixed_scale(d_k) == expected[name], name  # exact: the same expressions


def test_fixed_scales_differ_at_d_k_above_one():
    """Guards the table above: at d_k = 64 the rules give four distinct multipliers."""
    scales = {m.fixed_scale(64) for m in MECHANISMS.values()}
    assert sorted(scales) == [1 / 64, 1 / 8, 1.0, 8.0]  # exact: powers of two


@pytest.mark.parametrize("d_k", D_KS)
def test_qk_norm_gain_matches_scaled_logit_spread(d_k):
    """Cosine logits have std 1/sqrt(d); times the gain sqrt(d) they have std 1, as the
    scaled logits do at initialisation."""
    # Exact: the same float64 expression, and x / x = 1.
    assert qk_norm_initial_gain(d_k) == math.sqrt(d_k)
    assert qk_norm_initial_gain(d_k) / math.sqrt(d_k) == 1.0


def test_folded_init_matches_scaled_logits_at_init():
    """W_Q and W_K each d^(-1/4) smaller: q.k is d^(-1/2) smaller, as the scaled factor."""
    d_k = 256
    folded, scaled = MECHANISMS["folded_init"], MECHANISMS["scaled"]
    factor = (d_k**folded.qk_init_exponent) ** 2 * folded.fixed_scale(d_k)
    # float64: pow, the square and the products, each within an ulp.
    assert factor == pytest.approx(scaled.fixed_scale(d_k), rel=4 * sys.float_info.epsilon)


def test_mechanism_is_frozen():
    with pytest.raises(AttributeError):
        MECHANISMS["scaled"].scale_rule = "one"  # type: ignore[misc]
