"""Tests of attnlab.core.curves: trailing mean, milestones, plateaus and the d_k crossing."""

import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.core.curves import (
    crossing_dk,
    debiased_ema,
    find_plateau,
    first_nonfinite_steps,
    first_step_below,
    summarize_losses,
    trailing_mean,
)

FAST = settings(max_examples=60, deadline=None)
EPS64 = float(np.finfo(np.float64).eps)
#: float64 interpolation in log2 d_k from small integer differences, then 2^x: < 1e-14.
INTERP_RTOL = 1e-14


# --------------------------------------------------------------------------- trailing_mean


def naive_trailing_mean(x, window):
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    for t in range(x.shape[-1]):
        out[..., t] = x[..., max(0, t - window + 1) : t + 1].mean(axis=-1)
    return out


def assert_trailing_mean_matches(x, window):
    """trailing_mean (differences of float64 cumulative sums) against the naive loop.

    Bound: each cumulative sum to t rounds by <= (t + 1) eps64 / 2 times the sum of |x| up
    to t, so the difference of two by twice that, divided by the count w; the naive mean
    of w terms by <= w eps64 / 2 of the same sum over w; plus the subtraction, division and
    final roundings, 2 eps64 of the result."""
    got, ref = trailing_mean(x, window), naive_trailing_mean(x, window)
    a = np.abs(np.asarray(x, np.float64))
    t = np.arange(a.shape[-1])
    count = t + 1 - np.maximum(0, t - window + 1)
    prefix = np.cumsum(a, axis=-1)
    bound = 1.5 * (t + 1) * EPS64 * prefix / count + 2 * EPS64 * np.abs(ref)
    assert (np.abs(got - ref) <= bound).all()
    return got


@pytest.mark.parametrize("window", [1, 2, 5, 25, 100])
def test_trailing_mean_matches_naive_loop(window):
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32) * 3 + 1
    got = assert_trailing_mean_matches(x, window)
    assert got.shape == x.shape
    assert got.dtype == np.float64


@FAST
@given(
    x=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=12),
        elements=st.floats(-1e3, 1e3),
    ),
    window=st.integers(1, 15),
)
def test_trailing_mean_property(x, window):
    assert_trailing_mean_matches(x, window)


def test_trailing_mean_is_trailing_not_centred():
    """A step at t only affects the smoothed curve from t on."""
    x = np.zeros(20)
    x[10] = 5.0
    s = trailing_mean(x, 4)
    # Exact: sums of 0 and 5 and the division by 4 do not round.
    np.testing.assert_array_equal(s[:10], 0.0)
    np.testing.assert_array_equal(s[10:14], 5.0 / 4)
    np.testing.assert_array_equal(s[14:], 0.0)


def test_trailing_mean_window_one_is_identity():
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    np.testing.assert_array_equal(trailing_mean(x, 1), x)


# --------------------------------------------------------------------------- first_step_below


def test_first_step_below_index():
    curve = np.array([3.0, 2.0, 1.5, 0.9, 1.2, 0.5])
    assert first_step_below(curve, 1.0) == 3
    assert first_step_below(curve, 0.5) == 5  # <= counts
    assert first_step_below(curve, 3.0) == 0
    assert isinstance(first_step_below(curve, 1.0), int)


def test_first_step_below_never_is_none():
    curve = np.array([3.0, 2.0, 1.5])
    assert first_step_below(curve, 1.0) is None
    assert first_step_below(curve, 1.0, np.array([10, 20, 30])) is None
    assert first_step_below(np.array([]), 1.0) is None


def test_first_step_below_custom_steps():
    curve = np.array([3.0, 2.0, 0.8, 0.1])
    steps = np.arange(4) + 500
    assert first_step_below(curve, 1.0, steps) == 502
    assert first_step_below(curve, 0.1, steps) == 503
    assert first_step_below(curve, 1.0, np.array([0, 7, 11, 19])) == 11


# --------------------------------------------------------------------------- find_plateau


def staged_curve(seed=0, noise=0.01):
    """3 -> 0.6 slowly (steps 0-490), -> 0.3 quickly (490-500), flat at 0.3 with small noise
    (500-800), -> 0.01 quickly (800-820), then a slow tail to 0.001 (820-1500)."""
    t = np.arange(1500, dtype=np.float64)
    curve = np.empty_like(t)
    a = t < 490
    curve[a] = 3.0 * 0.2 ** (t[a] / 490)
    b = (t >= 490) & (t < 500)
    curve[b] = 0.6 * 0.5 ** ((t[b] - 490) / 10)
    c = (t >= 500) & (t <= 800)
    rng = np.random.default_rng(seed)
    curve[c] = 0.3 * (1 + noise * rng.uniform(-1, 1, c.sum()))
    d = (t > 800) & (t < 820)
    curve[d] = 0.3 * (1 / 30) ** ((t[d] - 800) / 20)
    e = t >= 820
    curve[e] = 0.01 * 0.1 ** ((t[e] - 820) / 680)
    return curve


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_find_plateau_staged_curve(seed):
    curve = staged_curve(seed)
    start = first_step_below(curve, 1.0)
    assert start is not None and 300 < start < 490
    plateau = find_plateau(curve, start)
    assert plateau is not None
    first, last, level = plateau
    assert 490 <= first <= 505
    assert 798 <= last <= 805
    # Over half of the window lies in 0.3 (1 +- noise), so its median does.
    assert level == pytest.approx(0.3, rel=0.01)
    assert isinstance(first, int) and isinstance(last, int) and isinstance(level, float)


def test_find_plateau_ignores_steps_before_start():
    """A flat stretch at the start (before ``start``) is not a mid-training plateau."""
    curve = np.concatenate([np.full(300, 3.0), 3.0 * 0.01 ** (np.arange(700) / 700)])
    assert find_plateau(curve, 0) is not None
    assert find_plateau(curve, 0)[0] == 0
    assert find_plateau(curve, 300) is None


@pytest.mark.parametrize("tau", [50, 150])
def test_find_plateau_exponential_decay_is_none(tau):
    """Band 1.5 spans tau ln 1.5 < 100 steps of an exponential: no plateau."""
    t = np.arange(3000)
    curve = 3.0 * np.exp(-t / tau)
    assert find_plateau(curve, 0) is None
    assert find_plateau(curve, first_step_below(curve, 1.0)) is None


def test_find_plateau_slow_exponential_is_a_plateau():
    """Guards the test above: tau ln 1.5 > 100 steps does count as a stall."""
    t = np.arange(3000)
    curve = 3.0 * np.exp(-t / 400)
    plateau = find_plateau(curve, 0)
    assert plateau is not None
    assert plateau[1] - plateau[0] + 1 >= 100


def test_find_plateau_floor_excludes_slow_tail():
    """A converged run's slow tail below the floor (0.05) is not a stall."""
    t = np.arange(2000)
    fast = 3.0 * np.exp(-t[:200] / 30)  # 3 -> ~0.004 is too fast to be a plateau
    tail = np.linspace(0.04, 0.03, 1800)  # flat, but below the floor
    curve = np.concatenate([np.maximum(fast, 0.04), tail])
    assert find_plateau(curve, 0) is None
    # The same tail is a plateau once the floor is lowered.
    plateau = find_plateau(curve, 0, floor=0.01)
    assert plateau is not None
    assert plateau[1] == len(curve) - 1
    # The tail's median is 0.035; at most 200 earlier points (all 0.04) join the window and
    # shift it by <= 100 of the 1800 tail steps, 100 / 1800 * 0.01 = 5.6e-4 (rel 0.016).
    assert plateau[2] == pytest.approx(0.035, rel=0.016)


def test_find_plateau_stops_at_floor_crossing():
    """Nothing after the first step at or below the floor is considered."""
    curve = np.concatenate([np.full(10, 3.0), np.full(5, 0.01), np.full(200, 0.5)])
    assert find_plateau(curve, 10) is None
    assert find_plateau(curve, 15) == (15, 214, 0.5)


@pytest.mark.parametrize(("length", "min_steps", "found"), [(80, 100, False), (80, 80, True)])
def test_find_plateau_min_steps(length, min_steps, found):
    # 0.8 -> 0.5 and 0.5 -> 0.3 both leave the band 1.5: the plateau is exactly the flat part.
    curve = np.concatenate(
        [np.geomspace(3.0, 0.8, 30), np.full(length, 0.5), np.geomspace(0.3, 0.001, 30)]
    )
    plateau = find_plateau(curve, 0, min_steps=min_steps)
    if found:
        assert plateau == (30, 30 + length - 1, 0.5)
    else:
        assert plateau is None


def test_find_plateau_band_ratio():
    """A stretch drifting by a factor 1.4 is a plateau at band 1.5, not at band 1.1."""
    curve = np.concatenate([np.full(1, 3.0), np.geomspace(1.0, 1 / 1.4, 200), np.full(1, 0.01)])
    # Exact: the median of the same values.
    assert find_plateau(curve, 1) == (1, 200, float(np.median(curve[1:201])))
    assert find_plateau(curve, 1, band_ratio=1.1) is None


def test_find_plateau_returns_longest():
    short = np.full(120, 1.0)
    long = np.full(300, 0.3)
    curve = np.concatenate([[5.0], short, [0.6], long, [0.001]])
    first, last, level = find_plateau(curve, 0)
    assert (first, last) == (122, 421)
    assert level == 0.3  # exact: the median of copies of 0.3


def naive_plateau(curve, start, band_ratio, min_steps, floor):
    """Brute force over windows [a, b]: inside the band, above the floor, a >= start and
    before the first point at or below the floor; longest wins, earliest on ties."""
    n = len(curve)
    lo = max(0, start)
    stop = next((i for i in range(lo, n) if curve[i] <= floor), n)
    best = None
    for a in range(lo, stop):
        b = a
        while b + 1 < n:
            window = curve[a : b + 2]
            if window.max() / window.min() < band_ratio and window.min() > floor:
                b += 1
            else:
                break
        length = b - a + 1
        if length >= min_steps and (best is None or length > best[1] - best[0] + 1):
            best = (a, b)
    if best is None:
        return None
    return best[0], best[1], float(np.median(curve[best[0] : best[1] + 1]))


@FAST
@given(
    curve=hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(0.01, 5.0)),
    start=st.integers(-3, 45),
    band_ratio=st.sampled_from([1.1, 1.5, 3.0]),
    min_steps=st.integers(1, 8),
    floor=st.sampled_from([0.05, 0.5, 2.0]),
)
def test_find_plateau_matches_brute_force(curve, start, band_ratio, min_steps, floor):
    assert find_plateau(curve, start, band_ratio, min_steps, floor) == naive_plateau(
        curve, start, band_ratio, min_steps, floor
    )


# --------------------------------------------------------------------------- crossing_dk

D_K = np.array([16, 32, 64, 128, 256])


def test_crossing_dk_interpolates_in_log2():
    diff = np.array([1.0, 3.0, 2.0, -1.0, -2.0])
    d_lo, d_hi, cross = crossing_dk(D_K, diff)
    assert (d_lo, d_hi) == (64, 128)
    assert cross == pytest.approx(2 ** (6 + 2 / 3), rel=INTERP_RTOL)
    assert isinstance(d_lo, int) and isinstance(cross, float)


def test_crossing_dk_exact_zero_lands_on_grid_point():
    diff = np.array([0.5, 1.0, 0.0, -1.0, -2.0])
    assert crossing_dk(D_K, diff) == (32, 64, pytest.approx(64.0, rel=INTERP_RTOL))


def test_crossing_dk_symmetric_bracket_is_geometric_mean():
    diff = np.array([2.0, 1.0, -1.0, -3.0, -4.0])
    assert crossing_dk(D_K, diff) == (32, 64, pytest.approx(math.sqrt(32 * 64), rel=INTERP_RTOL))


def test_crossing_dk_ignores_crossings_before_the_maximum():
    diff = np.array([1.0, -1.0, 2.0, 1.0, -3.0])
    d_lo, d_hi, cross = crossing_dk(D_K, diff)
    assert (d_lo, d_hi) == (128, 256)
    assert cross == pytest.approx(2 ** (7 + 1 / 4), rel=INTERP_RTOL)


@pytest.mark.parametrize(
    "diff",
    [
        np.array([1.0, 2.0, 3.0, 4.0, 5.0]),  # always positive
        np.array([-1.0, -2.0, -3.0, -4.0, -5.0]),  # never positive
        np.array([-1.0, 1.0, -1.0, 0.5, 2.0]),  # crosses only before its maximum
    ],
)
def test_crossing_dk_none(diff):
    assert crossing_dk(D_K, diff) is None


@pytest.mark.parametrize("weight", [0.0, 0.9, 0.99])
def test_debiased_ema_is_tensorboards_smoothing(weight):
    """Against TensorBoard's loop, written out: last = last * w + (1 - w) x; smoothed =
    last / (1 - w^n); float64 on both sides, the same operations in the same order."""
    x = np.random.default_rng(0).standard_normal((2, 50))
    expected = np.empty_like(x)
    for row in range(2):
        last = 0.0
        for n, value in enumerate(x[row], start=1):
            last = last * weight + (1 - weight) * value
            expected[row, n - 1] = last / (1 - weight**n)
    np.testing.assert_array_equal(debiased_ema(x, weight), expected)
    assert np.all(debiased_ema(x, weight)[:, 0] == x[:, 0])


@pytest.mark.parametrize("weight", [-0.1, 1.0])
def test_debiased_ema_rejects_weights_outside_0_1(weight):
    with pytest.raises(ValueError, match="weight"):
        debiased_ema(np.ones(3), weight)


def test_first_nonfinite_steps_per_run():
    losses = np.array([[1.0, 2.0, 3.0], [1.0, np.nan, np.inf], [np.inf, 1.0, 1.0]])
    np.testing.assert_array_equal(first_nonfinite_steps(losses), [-1, 1, 0])
    assert first_nonfinite_steps(np.ones((2, 0))).tolist() == [-1, -1]


def test_summarize_losses_by_hand():
    """Two seeds from step 100: one crosses 1 at its third step and never 0.1; the other
    goes NaN at its second step (its smoothed curve NaN from there)."""
    loss = np.array([[3.0, 2.0, 0.5, 0.4], [3.0, np.nan, 1.0, 1.0]])
    run = summarize_losses(loss, lambda x: x, (("below_1", 1.0), ("below_0p1", 0.1)), 100)
    np.testing.assert_array_equal(run.steps, [100, 101, 102, 103])
    np.testing.assert_array_equal(run.diverged_step, [-1, 101])
    assert run.milestones == {"below_1": [102, 102], "below_0p1": [None, None]}
    np.testing.assert_array_equal(run.final_loss, [0.4, 1.0])


def test_summarize_losses_smooths_before_reading():
    loss = np.array([[2.0, 0.0, 2.0, 0.0]])
    run = summarize_losses(loss, lambda x: trailing_mean(x, 2), (("below_1", 1.0),))
    np.testing.assert_array_equal(run.smoothed, [[2.0, 1.0, 1.0, 1.0]])
    assert run.milestones["below_1"] == [1] and run.diverged_step[0] == -1
