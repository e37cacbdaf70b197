"""attnlab/studies/card/precision.py: the float16 cells, read as headroom, on both sides.
Every mechanism's logits see float16 q and k cast to float32 (``Mechanism.scores``), so the
built-in scaled and a user's ``q . k`` by einsum never overflow; a user's function that
casts back to float16 on purpose overflows once ``sigma^2 sqrt(d_k)`` times a few standard
deviations passes 65,504; qk_norm's ``|q|^2``, normalised in the input's float16 before
the logits, overflows near ``sigma^2 d_k = 65,504``."""

from __future__ import annotations

import pandas as pd
import pytest

from attnlab.core.references import load_mechanism
from attnlab.studies.card.headroom import headroom
from attnlab.studies.card.precision import precision_frame

#: Three of the card's sigmas (the test's cost is one program per sigma and mechanism).
GRID = (1.0, 8.0, 64.0)

MECHANISMS = """
import jax.numpy as jnp

def logits(q, k):
    return jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5

def half(q, k):
    q, k = q.astype(jnp.float16), k.astype(jnp.float16)
    return (jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5).astype(jnp.float32)
"""


@pytest.fixture(scope="module")
def frame(tmp_path_factory) -> pd.DataFrame:
    path = tmp_path_factory.mktemp("f16") / "half_logits.py"
    path.write_text(MECHANISMS, encoding="utf-8")
    references = ["scaled", "qk_norm", f"{path}:logits", f"{path}:half"]
    return precision_frame([load_mechanism(r) for r in references], (1024,), 8, 2, 0, GRID)


def test_scaled_keeps_float16_to_the_grid_top(frame):
    rows = frame[frame.mechanism == "scaled"]
    assert list(rows.sigma) == list(GRID)
    assert (rows.max_error == 0).all()  # the same rounded inputs, float32 logits: exact
    assert headroom(rows) == (GRID[-1], True)


def test_a_users_einsum_keeps_float16_as_scaled_does(frame):
    """README's my_attention.py: its einsum sees float32 q and k, as scaled's dot product."""
    assert headroom(frame[frame.mechanism == "logits"]) == (GRID[-1], True)


def test_float16_logits_and_float16_norms_run_out(frame):
    """At sigma 64 and d_k 1024, q . k has std 64^2 sqrt(1024) = 131,072 > 65,504: a user's
    einsum cast back to float16 is not finite; |q|^2 ~ 64^2 1024 overflows qk_norm's
    normaliser from sigma 8 on (8^2 1024 = 65,536)."""
    user, _ = headroom(frame[frame.mechanism == "half"])
    assert user < GRID[-1]
    norm, censored = headroom(frame[frame.mechanism == "qk_norm"])
    assert norm <= 8 and not censored
