"""attnlab.core.owner: the rule that names who owns the temperature from an elasticity, on
both sides of each threshold (2 for bilinear logits, 0 for normalised q and k)."""

from __future__ import annotations

import pytest

from attnlab.core.owner import ALPHAS, MECHANISM_OWNS_AT, WEIGHTS_OWN_AT, owner


@pytest.mark.parametrize(
    ("elasticity", "expected"),
    [
        (2.0, "weights"),
        (WEIGHTS_OWN_AT, "weights"),
        (WEIGHTS_OWN_AT - 1e-9, "cap"),
        (1.0, "cap"),
        (MECHANISM_OWNS_AT + 1e-9, "cap"),
        (MECHANISM_OWNS_AT, "mechanism"),
        (0.0, "mechanism"),
    ],
)
def test_owner_thresholds(elasticity, expected):
    assert owner(elasticity) == expected


def test_alphas_start_at_one_and_grow():
    """The first multiplier is the weights as they are; the last is the drift read."""
    assert ALPHAS[0] == 1.0 and list(ALPHAS) == sorted(set(ALPHAS))
