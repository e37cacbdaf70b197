"""attnlab/core/references.py: a Mechanism is its own reference, and a built-in is told
from a namesake by identity, not by name."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from attnlab.core.mechanism import Mechanism, MechanismError
from attnlab.core.references import is_builtin, load_mechanism
from attnlab.core.temperature import BUILTINS


def _logits(q, k):
    return jnp.einsum("...qd,...kd->...qk", q, k)


def test_a_mechanism_object_is_checked_and_returned_as_it_is():
    mechanism = Mechanism("mine", _logits)
    assert load_mechanism(mechanism) is mechanism
    with pytest.raises(MechanismError, match="'bad'"):
        load_mechanism(Mechanism("bad", lambda q, k: q))


@pytest.mark.parametrize("name", list(BUILTINS))
def test_only_the_builtin_itself_is_a_builtin(name):
    assert is_builtin(load_mechanism(name))
    assert not is_builtin(Mechanism(name, _logits))
