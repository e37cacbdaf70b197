"""attnlab.core.prng: the unrolled threefry lowering gives JAX's bits, in a smaller program."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.core.prng import legacy_cpu_emitters, rolled_threefry, unroll_threefry_on_cpu

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="the lowering only differs on CPU"
)
#: The unrolled lowering is not used under XLA's older CPU emitters (see attnlab.core.prng).
needs_unrolled = pytest.mark.skipif(
    legacy_cpu_emitters(), reason="XLA_FLAGS selects the older CPU emitters: JAX's lowering stays"
)


def _draws(seed: jax.Array) -> dict[str, jax.Array]:
    """Every way the experiments draw: fold_in, split, uniform, normal, randint, choice."""
    key = jax.random.fold_in(jax.random.key(seed), 7)
    a, b, c, d = jax.random.split(key, 4)
    return {
        "uniform": jax.random.uniform(a, (33,)),
        "normal": jax.random.normal(b, (5, 7)),
        "randint": jax.random.randint(c, (64, 3), 0, 32),
        "choice": jax.random.choice(d, 32, (16,), replace=False),
        "split": jax.random.key_data(jax.random.split(d, 3)),
    }


def _compiled(rolled: bool):
    """A freshly traced and compiled ``_draws`` (a new function each time: no cached
    lowering), under JAX's rolled CPU lowering or the unrolled one."""

    def draws(seed):
        return _draws(seed)

    if rolled:
        with rolled_threefry() as swapped:
            return jax.jit(draws).lower(jnp.uint32(0)).compile(), swapped
    return jax.jit(draws).lower(jnp.uint32(0)).compile(), True


@needs_unrolled
def test_unrolled_bits_are_jaxs_bits():
    # Threefry is uint32 additions, rotations and xors: no rounding, so both lowerings of
    # the same cipher must agree bit for bit (an exact comparison, not a tolerance).
    assert unroll_threefry_on_cpu()
    unrolled, _ = _compiled(rolled=False)
    rolled, swapped = _compiled(rolled=True)
    assert swapped
    for seed in (0, 1, 12345):
        ours, jaxs = unrolled(jnp.uint32(seed)), rolled(jnp.uint32(seed))
        for name in ours:
            np.testing.assert_array_equal(np.asarray(ours[name]), np.asarray(jaxs[name]), name)


@needs_unrolled
def test_the_lowering_actually_changes_and_is_restored():
    # Rolled: a while loop per threefry call; unrolled: none. After the block, unrolled again.
    assert unroll_threefry_on_cpu()
    rolled, _ = _compiled(rolled=True)
    after, _ = _compiled(rolled=False)
    assert " while(" in rolled.as_text()
    assert " while(" not in after.as_text()


@pytest.mark.parametrize(
    ("flags", "legacy"),
    [
        ("", False),
        ("--xla_cpu_use_fusion_emitters=false", True),
        ("--xla_force_host_platform_device_count=2 --xla_cpu_use_fusion_emitters=0", True),
        ("--xla_cpu_use_fusion_emitters=false --xla_cpu_use_fusion_emitters=true", False),
        ("--xla_cpu_use_fusion_emitters=true", False),
        ("--xla_cpu_max_isa=AVX", False),
    ],
)
def test_legacy_cpu_emitters_reads_the_last_flag(flags, legacy):
    assert legacy_cpu_emitters(flags) is legacy


def test_no_unrolling_under_the_older_emitters(monkeypatch):
    # There LLVM takes minutes over an unrolled threefry fused into a concatenate.
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=false")
    assert not unroll_threefry_on_cpu()


def test_rolled_threefry_restores_the_rolled_lowering_it_found():
    # Under the older emitters the session keeps JAX's rolled lowering; a rolled block
    # (the bench) must not leave the unrolled one behind.
    with rolled_threefry():
        with rolled_threefry() as swapped:
            assert swapped
        after, _ = _compiled(rolled=False)
    assert " while(" in after.as_text()
