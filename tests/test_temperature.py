"""Tests of attnlab.core.temperature: the built-in mechanisms of 04/05 and their scalars."""

import math
import sys

import pytest

from attnlab.core.hooks import capped_logits, scaled_logits, softmax_weights
from attnlab.core.literature import LITERATURE
from attnlab.core.mechanism import Mechanism
from attnlab.core.temperature import BUILTINS, MECHANISMS, qk_norm_initial_gain

D_KS = [1, 4, 16, 64, 256]


#: What each mechanism changes relative to unscaled attention, in the built-ins' order:
#: name: (logits, learned, fixed, qk_init_exponent, normalize_qk).
ATTRIBUTES = {
    "scaled": (scaled_logits, (), ("scale",), 0.0, False),
    "unscaled": (scaled_logits, (), ("scale",), 0.0, False),
    "folded_init": (scaled_logits, (), ("scale",), -0.25, False),
    "qk_norm": (scaled_logits, ("scale",), (), 0.0, True),
    "learned_temperature": (scaled_logits, ("scale",), (), 0.0, False),
    "inv_d": (scaled_logits, (), ("scale",), 0.0, False),
    "softcap30": (capped_logits, (), ("scale", "cap"), 0.0, False),
    "softcap50": (capped_logits, (), ("scale", "cap"), 0.0, False),
}


def test_mechanism_names_and_keys():
    assert list(MECHANISMS) == list(ATTRIBUTES)
    literature = ["ssmax", "sigmoid", "softpick", "cosine_tau", "gated", "sink"]
    assert list(BUILTINS) == list(MECHANISMS) + literature
    assert BUILTINS == {**MECHANISMS, **LITERATURE}
    for name, mech in BUILTINS.items():
        assert isinstance(mech, Mechanism)
        assert mech.name == name


def test_mechanism_attributes():
    """What each mechanism changes relative to unscaled attention, and nothing else."""
    got = {
        name: (
            m.logits,
            tuple(n for n, _ in m.params),
            tuple(n for n, _ in m.constants),
            m.qk_init_exponent,
            m.normalize_qk,
        )
        for name, m in MECHANISMS.items()
    }
    assert got == ATTRIBUTES
    for m in MECHANISMS.values():
        assert m.weights is softmax_weights and not m.row_length


@pytest.mark.parametrize("d_k", D_KS)
def test_initial_scalars(d_k):
    expected = {
        "scaled": {"scale": 1 / math.sqrt(d_k)},
        "unscaled": {"scale": 1.0},
        "folded_init": {"scale": 1.0},
        "qk_norm": {"scale": math.sqrt(d_k)},
        "learned_temperature": {"scale": 1 / math.sqrt(d_k)},
        "inv_d": {"scale": 1 / d_k},
        "softcap30": {"scale": 1.0, "cap": 30.0},
        "softcap50": {"scale": 1.0, "cap": 50.0},
    }
    for name, mech in MECHANISMS.items():
        assert mech.initial_theta(d_k) == expected[name], name  # exact: the same expressions


def test_initial_scales_differ_at_d_k_above_one():
    """Guards the table above: at d_k = 64 the rules give four distinct multipliers."""
    scales = {m.initial_theta(64)["scale"] for m in MECHANISMS.values()}
    assert sorted(scales) == [1 / 64, 1 / 8, 1.0, 8.0]  # exact: powers of two


def test_programs_shared_where_only_constants_differ():
    """scaled, unscaled, folded and 1/d are one program; both caps another; learned apart."""
    programs = {}
    for name, m in MECHANISMS.items():
        programs.setdefault(m.program(), []).append(name)
    assert sorted(programs.values()) == sorted(
        [
            ["scaled", "unscaled", "folded_init", "inv_d"],
            ["qk_norm"],
            ["learned_temperature"],
            ["softcap30", "softcap50"],
        ]
    )


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
    factor = (d_k**folded.qk_init_exponent) ** 2 * folded.initial_theta(d_k)["scale"]
    # float64: pow, the square and the products, each within an ulp.
    expected = scaled.initial_theta(d_k)["scale"]
    assert factor == pytest.approx(expected, rel=4 * sys.float_info.epsilon)


def test_mechanism_is_frozen():
    with pytest.raises(AttributeError):
        MECHANISMS["scaled"].normalize_qk = True  # type: ignore[misc]
