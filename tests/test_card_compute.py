"""attnlab/studies/card/compute.py: the card's statistics of every built-in against numpy
float64 (tests/numpy_reference.py), softmax's closed-form Jacobian against autodiff, the
statics of scaled and unscaled against experiments 02/03, a user's q.k/sqrt(d) against
the built-in scaled (identical numbers)."""

from __future__ import annotations

import dataclasses
import functools
import math
import textwrap
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest
from numpy_reference import float32_bound, row_reference
from support import CARD_USER_FILE as USER_FILE
from support import TINY_CARD as TINY

from attnlab.core.hooks import softmax_weights
from attnlab.core.mechanism import Mechanism
from attnlab.core.references import load_mechanism, resolve
from attnlab.core.softmax_sweeps import (
    SoftmaxSweepConfig,
    run_jacobian_sweep,
    run_saturation_sweep,
)
from attnlab.core.temperature import BUILTINS
from attnlab.studies.card import compute
from attnlab.studies.card.compute import row_statistics
from attnlab.studies.card.verdicts import verdicts_frame

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def user_reference(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("user") / "my_attention.py"
    path.write_text(USER_FILE, encoding="utf-8")
    return f"{path}:logits"


@pytest.mark.parametrize("name", list(BUILTINS))
def test_row_statistics_of_every_builtin_equal_numpy_float64(name):
    statistics = jax.jit(functools.partial(row_statistics, BUILTINS[name]))
    for d_k, n in [(4, 16), (64, 32)]:
        rng = np.random.default_rng(d_k * 1000 + n)
        q, k = rng.normal(size=d_k), rng.normal(size=(n, d_k))
        ours = np.asarray(statistics(q.astype(np.float32), k.astype(np.float32)))
        ref = row_reference(name, q, k)
        bound = float32_bound(name, q, k)  # first-order float32 bound (numpy_reference)
        for value, statistic in zip(ours, compute.STATISTICS, strict=True):
            assert abs(value - ref[statistic]) <= bound, (d_k, statistic, value, ref[statistic])


def test_softmax_closed_form_jacobian_equals_autodiff():
    """A mechanism whose weights are softmax behind another function takes the autodiff
    path; its ``jacobian_fro`` must equal the closed form ``|diag(p) - p p^T|_F``."""
    wrapped = Mechanism(
        "wrapped", BUILTINS["scaled"].logits, weights=lambda z, mask: softmax_weights(z, mask),
        constants=BUILTINS["scaled"].constants,
    )  # fmt: skip
    q, k = np.asarray(jax.random.normal(jax.random.key(3), (2, 1, 128, 32)))
    # Jitted, as the card evaluates it (inside one program): a compile each, not one per op.
    closed = float(jax.jit(functools.partial(row_statistics, BUILTINS["scaled"]))(q[0, 0], k[0])[3])
    autodiff = float(jax.jit(functools.partial(row_statistics, wrapped))(q[0, 0], k[0])[3])
    # both sum n^2 = 16384 float32 products of weights ~1/n: ~n eps relative to their size
    assert abs(closed - autodiff) <= 128 * np.finfo(np.float32).eps * closed


def test_jacobian_beyond_its_limit_is_left_empty():
    q, k = np.asarray(jax.random.normal(jax.random.key(4), (2, 1, compute.JACOBIAN_MAX_N + 1, 4)))
    stats = np.asarray(
        jax.jit(functools.partial(row_statistics, BUILTINS["sigmoid"]))(q[0, 0], k[0])
    )
    assert math.isnan(stats[3]) and np.isfinite(np.delete(stats, 3)).all()


def test_scaled_and_unscaled_statics_equal_02_and_03_at_the_same_settings():
    """Same draws (02/03's trial keys): every mean within one standard error of 02/03's.

    The widths, row length and trials of tests/test_statics_compute.py's sweeps (d_k 16
    and 256 of its 1, 16, 256; 16 keys; 512 trials), so 02/03's programs compile once for
    both files; the n sweep is the d_k sweep's (16, 16) cell (only the d_k rows are
    compared)."""
    config = dataclasses.replace(TINY, trials=512, statics_dks=(16, 256), statics_ns=(16,))
    card = compute.statics_frame(config, [resolve("scaled"), resolve("unscaled")])
    sweep = SoftmaxSweepConfig(dks=config.statics_dks, n_keys=config.n_keys, trials=512)
    keys = ["variant", "d_k", "n_keys", "trials", "sampler"]
    theirs = run_saturation_sweep(sweep).merge(run_jacobian_sweep(sweep), on=keys)
    ours = card[card.sweep == "d_k"].rename(columns={"mechanism": "variant"})
    both = ours.merge(theirs, on=["variant", "d_k"], suffixes=("", "_0203"))
    assert len(both) == 2 * len(config.statics_dks)
    for statistic in ("max_weight", "entropy", "jacobian_fro"):
        gap = (both[f"{statistic}_mean"] - both[f"{statistic}_mean_0203"]).abs()
        assert (gap <= both[f"{statistic}_sem"]).all(), statistic


def test_the_committed_cards_reproduce_02_and_03():
    """results/cards/{scaled,unscaled}/statics.csv against results/02 and 03 at the d_k
    both sweep (n = 256, 2000 trials, the same draws): within one combined standard error."""
    folder = REPO / "results" / "cards"
    if not (folder / "scaled" / "statics.csv").is_file():
        pytest.skip("no committed cards (make cards)")
    sat = pd.read_csv(REPO / "results" / "02_saturation_sweep.csv")
    jac = pd.read_csv(REPO / "results" / "03_jacobian_norm.csv")
    theirs = sat.merge(jac, on=["variant", "d_k", "n_keys", "trials", "sampler"])
    theirs = theirs[theirs.sampler == "direct"]  # the card draws as the direct sampler
    for name in ("scaled", "unscaled"):
        ours = pd.read_csv(folder / name / "statics.csv")
        ours = ours[(ours.sweep == "d_k") & (ours.mechanism == name)].assign(variant=name)
        both = ours.merge(theirs, on=["variant", "d_k", "n_keys", "trials"], suffixes=("", "_0"))
        assert len(both) == len(ours), name
        for statistic in ("max_weight", "entropy", "jacobian_fro"):
            se = np.hypot(both[f"{statistic}_sem"], both[f"{statistic}_sem_0"])
            gap = (both[f"{statistic}_mean"] - both[f"{statistic}_mean_0"]).abs()
            assert (gap <= se).all(), (name, statistic)


@pytest.fixture(scope="module")
def tiny_card(user_reference) -> compute.Card:
    return compute.card_tables(TINY, [resolve("scaled"), resolve(user_reference)])


@pytest.mark.slow  # trains the tiny card
def test_a_user_function_equal_to_scaled_gives_identical_card_numbers(tiny_card):
    """Every table, precision's max_error too: ``Mechanism.scores`` hands every mechanism's
    logits q and k in float32 (``compute_dtype``), a user's einsum as the built-in's
    ``attention_logits``, so float16 inputs give both the same logits (max_error 0)."""
    precision = tiny_card.precision.set_index(["mechanism", "d_k"])
    assert (precision.loc[["scaled", "logits"]].max_error == 0).all()
    for field in compute.Card._fields:
        table = getattr(tiny_card, field)
        scaled = table[table.mechanism == "scaled"].drop(columns="mechanism")
        user = table[table.mechanism == "logits"].drop(columns="mechanism")
        assert len(scaled) > 0, field
        pd.testing.assert_frame_equal(
            scaled.reset_index(drop=True), user.reset_index(drop=True), check_exact=True
        )


@pytest.mark.slow  # trains the tiny card
def test_every_section_has_rows_for_every_mechanism(tiny_card):
    for field in compute.Card._fields:
        names = set(getattr(tiny_card, field).mechanism)
        assert names == {"scaled", "logits"}, field
    statics = tiny_card.statics
    assert len(statics) == 2 * (len(TINY.statics_dks) + len(TINY.statics_ns))
    # softmax rows sum to 1 up to an n-term float32 sum: n eps, n <= 64
    scaled_mass = statics[statics.mechanism == "scaled"].mass_mean
    np.testing.assert_allclose(scaled_mass, 1.0, rtol=0, atol=64 * np.finfo(np.float32).eps)
    sigmoid = compute.statics_frame(TINY, [resolve("sigmoid")])
    assert not np.allclose(sigmoid.mass_mean, 1.0, atol=1e-3)  # reported, not assumed


@pytest.mark.slow  # trains the tiny card again, in two spawned workers
def test_the_tables_do_not_depend_on_the_workers(tiny_card, user_reference):
    """Every table byte for byte the same computed by two worker processes as here: each
    piece (section, training group, width) is the same program on the same inputs."""
    there = compute.card_tables(TINY, [resolve("scaled"), resolve(user_reference)], jobs=2)
    for field in compute.Card._fields:
        here_csv = getattr(tiny_card, field).to_csv(index=False)
        assert getattr(there, field).to_csv(index=False) == here_csv, field


def test_the_pieces_count_every_unit_of_progress_once():
    references = [resolve(r) for r in ("scaled", "unscaled", "qk_norm")]
    pieces = compute.card_pieces(TINY, references)
    sweep = sum(TINY.sweep.steps_at(d, len(references)) for d in TINY.sweep.dks)
    training = len(references) * TINY.training.steps
    assert compute.total_work(TINY, references) == sum(p.units for p in pieces)
    assert sum(p.units for p in pieces) == compute.statics_trials(TINY) + training + sweep
    # scaled and unscaled share one training program, qk_norm has its own
    groups = compute.program_groups(TINY.training, references)
    assert [[r.reference for r in g] for g in groups] == [["scaled", "unscaled"], ["qk_norm"]]
    assert len(pieces) == 3 + len(groups) * (1 + len(TINY.sweep.dks))


FILLED_FILE = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp

    import attnlab

    def fill_weights(z, mask):
        # the common hand-written mask: a large negative number, softmax in float16
        z = jnp.asarray(z, jnp.float16)
        if mask is not None:
            z = jnp.where(mask, z, jnp.float16(-1e4))
        return jax.nn.softmax(z, axis=-1).astype(jnp.float32)

    def logits(q, k):
        return jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5

    filled = attnlab.Mechanism("filled", logits, weights=fill_weights)
    """
)


def test_mask_safety_has_two_sides(tmp_path):
    """A row with every key masked: the built-in gives zeros; filling masked logits with
    -1e4 gives that row uniform weights 1/8 on masked keys and a non-zero output."""
    path = tmp_path / "filled.py"
    path.write_text(FILLED_FILE, encoding="utf-8")
    frame = compute.mask_frame([load_mechanism("scaled"), load_mechanism(f"{path}:filled")])
    empty = pd.DataFrame({"mechanism": pd.Series([], dtype=str)})
    table = verdicts_frame(compute.Card(empty, empty, frame, *[empty] * 5), ["scaled", "filled"])
    safe = table[table.verdict == "mask-safe"].set_index("mechanism")
    assert safe.passed["scaled"] is True and safe.passed["filled"] is False
    assert "masked weight 0" in safe.value["filled"] and "empty row 0" in safe.value["filled"]
    assert frame.set_index("mechanism").masked_weight_max["filled"] == 0.125  # 1/8, exact


def test_the_declaration_names_every_built_in():
    """``make cards`` cards exactly the built-ins; the declaration names them without
    importing the mechanisms (so a report or figure process loads no JAX through it:
    tests/test_csv_only.py)."""
    from attnlab.studies.card.study import BUILTIN_NAMES

    assert tuple(BUILTINS) == BUILTIN_NAMES
