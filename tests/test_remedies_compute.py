"""attnlab.studies.remedies.compute (experiment 05): the remedies, the fold, the sensitivity
grid, each called directly at tiny settings.

Checked: every table has the columns of the published one (``results/05_*.csv``); every
mechanism's first step is its own step-0 model on its seed's first batch (loss and W_Q
gradient against float64 autodiff); ``folded_init`` and the folded continuation compute the
scaled function at their start, bit for bit at d_k = 16 (a power of four, see
``test_fold_starts_from_the_folded_state``); the continuation picks up the head's state; the
grid's cells are the asked batch sizes and embedding scales, its ratios the quotients of
its milestones.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from attnlab.core.temperature import MECHANISMS
from attnlab.recall.config import RecallConfig, make_model, seed_keys
from attnlab.recall.model import RecallModel
from attnlab.recall.step import METRICS, initial_state, loss_and_aux
from attnlab.recall.tables import curves_frame, summary_frame
from attnlab.recall.task import stream_batch
from attnlab.recall.trainer import train
from attnlab.studies.remedies.compute import fold_params, run_fold, run_remedies, run_sensitivity

RESULTS = Path(__file__).resolve().parents[1] / "results"
EPS = float(np.finfo(np.float32).eps)
#: XLA's float32 exp, log and tanh are accurate to a few ulp; we allow 4 eps each.
ULPS = 4

#: d_k = 16: sqrt(d_k) = 4 and d_k^(1/4) = 2 are powers of two (see the fold tests). A
#: learning rate at which some runs reach the 1.0 milestone within 40 steps.
CONFIG = RecallConfig(
    d_k=16, d_model=8, pairs=4, n_key_tokens=8, n_value_tokens=8, steps=40, lr=3e-2,
    batch_size=8, seeds=2, eval_size=16, smoothing=5, chunk_steps=10,
    mechanisms=("scaled", "unscaled", "folded_init", "learned_temperature"),
)  # fmt: skip
#: ``CONFIG``'s mechanisms by name (its ``MechanismRef``s' ``.name``).
NAMES = [m.name for m in CONFIG.mechanisms]
FOLD_AT = 20
BATCH_SIZES, EMBED_STDS = (4, 16), (0.5, 2.0)


@pytest.fixture(scope="module")
def remedies():
    counts: list[int] = []
    return run_remedies(CONFIG, counts.append), counts


@pytest.fixture(scope="module")
def fold() -> tuple[pd.DataFrame, pd.DataFrame]:
    return run_fold(CONFIG, FOLD_AT)


@pytest.fixture(scope="module")
def sensitivity() -> pd.DataFrame:
    return run_sensitivity(CONFIG, BATCH_SIZES, EMBED_STDS)


def published_columns(name: str) -> list[str]:
    return list(pd.read_csv(RESULTS / f"{name}.csv", nrows=0).columns)


@functools.cache
def _float64_step0(config: RecallConfig) -> Callable:
    """Jitted, for every mechanism of ``config`` (keys of its result; one program), seeds
    vmapped: loss, |grad W_Q|, max |attention logit| and max |value logit| of the step-0
    model (to be called with float64 parameters under ``jax.enable_x64``)."""
    models = {m.name: make_model(config, m.mechanism) for m in config.mechanisms}

    def step0(model: RecallModel, params: dict, batch) -> tuple[jax.Array, ...]:
        loss, grads = jax.value_and_grad(lambda p: loss_and_aux(model, p, batch)[0])(params)
        (logits, _), state = model.apply({"params": params}, batch, mutable=["intermediates"])
        z = state["intermediates"]["logits"][0]
        return loss, jnp.linalg.norm(grads["W_Q"]), jnp.abs(z).max(), jnp.abs(logits).max()

    def every(params: dict, batches) -> dict:
        return {m: jax.vmap(lambda p, b, m=m: step0(models[m], p, b))(params[m], batches)
                for m in models}  # fmt: skip

    return jax.jit(every)


@functools.cache
def _float64_step0_values(config: RecallConfig) -> dict:
    """``_float64_step0`` of ``config`` as floats, ``(mechanism, seed) -> (loss, |grad W_Q|,
    max |z|, max |logit|)``: each mechanism's step-0 parameters of every seed
    (``initial_state``'s rows, each the seed's ``init_params``; its compiled initialiser is
    the training's), on batch 0 of each seed's training stream."""
    batches = [stream_batch(seed_keys(s).data, 0, config.batch_size, config.task)
               for s in config.seed_values]  # fmt: skip
    batches = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *batches)
    params = {m.name: initial_state(config, m.mechanism).params for m in config.mechanisms}
    with jax.enable_x64(True):
        p64 = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
        values = jax.tree.map(np.asarray, _float64_step0(config)(p64, batches))
    return {(m, seed): tuple(float(v[i]) for v in values[m])
            for m in params for i, seed in enumerate(config.seed_values)}  # fmt: skip


def step0_reference(config: RecallConfig, mechanism: str, seed: int) -> tuple[float, float, float]:
    """float64 loss and |grad W_Q| of ``mechanism``'s step-0 model of ``seed`` on batch 0 of
    the seed's training stream, by autodiff (``_float64_step0_values``), and the relative
    error bound of a float32 evaluation of either.

    The bound: a float32 reduction of length L errs by <= L EPS of the sum of magnitudes. On
    the forward path the reductions are E W_Q (d_model terms), the slot's key (2 d_model + 1),
    q . k (d_k) and its scale (2), the weighted values (pairs), o W_O (d_k), the
    cross-entropy's sum (n_values); the backward pass repeats them, W_Q's gradient sums over
    the batch's queries (batch_size) and its norm over d_model d_k squares. Each softmax
    turns a logit's relative error into its weight's by a factor up to 1 + 2 |logit|
    (ULPS for its exp and log), and the two softmaxes compound."""
    loss, grad_wq, max_z, max_logit = _float64_step0_values(config)[mechanism, seed]
    c = config
    forward = c.d_model + (2 * c.d_model + 1) + c.d_k + 2 + c.pairs + c.d_k + c.n_value_tokens
    lengths = 2 * forward + c.batch_size + c.d_model * c.d_k
    conditioning = (1 + 2 * max_z + ULPS) * (1 + 2 * max_logit + ULPS)
    return loss, grad_wq, lengths * EPS * conditioning


# --- remedies ----------------------------------------------------------------------------


def test_one_result_per_mechanism_in_order(remedies):
    results, counts = remedies
    assert [r.mechanism for r in results] == NAMES
    for r in results:
        assert r.seeds == CONFIG.seed_values and r.start_step == 0
        assert set(r.metrics) == set(METRICS)
        assert all(v.shape == (CONFIG.seeds, CONFIG.steps) for v in r.metrics.values())
        assert np.isfinite(r.metrics["loss"]).all()
        hits = r.eval_accuracy * CONFIG.eval_size  # a count of held-out sequences
        np.testing.assert_array_equal(hits, np.round(hits))
        assert ((hits >= 0) & (hits <= CONFIG.eval_size)).all()
    assert sum(counts) == CONFIG.steps * len(CONFIG.mechanisms)


def test_tables_have_the_published_columns(remedies, fold):
    results, _ = remedies
    curves, check = fold
    tables = {
        "05_remedies_curves": curves_frame(results, CONFIG),
        "05_remedies_summary": summary_frame(results, CONFIG),
        "05_fold_curves": curves,
        "05_fold_check": check,
    }
    for name, table in tables.items():
        assert list(table.columns) == published_columns(name), name


@pytest.mark.parametrize("mechanism", NAMES)
def test_first_step_is_the_step0_model_on_batch_0(remedies, mechanism):
    """Same seeds, initialisations and data for every mechanism: step 0's loss and W_Q
    gradient norm are those of ``init_params`` on batch 0 of the seed's stream (float64
    autodiff, within the float32 bound of ``step0_reference``)."""
    results, _ = remedies
    result = results[NAMES.index(mechanism)]
    for i, seed in enumerate(CONFIG.seed_values):
        loss, grad_wq, rtol = step0_reference(CONFIG, mechanism, seed)
        assert result.metrics["loss"][i, 0] == pytest.approx(loss, rel=rtol), seed
        assert result.metrics["grad_norm_wq"][i, 0] == pytest.approx(grad_wq, rel=rtol), seed


def test_folded_init_and_learned_temperature_start_as_scaled(remedies):
    """At d_k = 16 ``folded_init`` draws W_Q, W_K from the same keys times d_k^(-1/4) = 1/2, a
    power of two: every product and sum on the way to its logits q.k is the scaled model's
    times an exact power of two (scaling by 2^j commutes with float rounding), so its logits
    equal q.k / 4 bit for bit, hence the loss and the attention entropy; its W_Q gradient is
    exactly twice the scaled one (dL/dW_Q' = d_k^(1/4) dL/dW_Q when W_Q' = W_Q d_k^(-1/4)).
    ``learned_temperature`` starts at tau = 1/4 but multiplies inside another program (a
    parameter, not a constant): equal within two float32 evaluations."""
    by_name = {r.mechanism: r.metrics for r in remedies[0]}
    scaled, folded = by_name["scaled"], by_name["folded_init"]
    for name in ("loss", "attn_entropy", "attn_max_weight"):
        np.testing.assert_array_equal(folded[name][:, 0], scaled[name][:, 0], err_msg=name)
    np.testing.assert_array_equal(folded["grad_norm_wq"][:, 0], 2 * scaled["grad_norm_wq"][:, 0])
    learned = by_name["learned_temperature"]
    rtol = max(step0_reference(CONFIG, "scaled", s)[2] for s in CONFIG.seed_values)
    np.testing.assert_allclose(learned["loss"][:, 0], scaled["loss"][:, 0], rtol=2 * rtol)
    np.testing.assert_allclose(
        learned["grad_norm_wq"][:, 0], scaled["grad_norm_wq"][:, 0], rtol=2 * rtol
    )


# --- the fold ----------------------------------------------------------------------------


def test_fold_params_divides_w_q_only():
    # Seed 0's step-0 parameters (its init_params), as numpy: the training's initialiser.
    stacked = initial_state(CONFIG, MECHANISMS["scaled"]).params
    params = {name: np.asarray(value)[0] for name, value in stacked.items()}
    folded = fold_params(params, CONFIG.d_k)
    assert set(folded) == set(params)
    # Exact: the division by sqrt(16) = 4 is by a power of two.
    np.testing.assert_array_equal(folded["W_Q"], params["W_Q"] / 4)
    for name in set(params) - {"W_Q"}:
        np.testing.assert_array_equal(folded[name], params[name], err_msg=name)


def test_fold_tables_rows(fold):
    curves, check = fold
    steps = np.arange(FOLD_AT, CONFIG.steps)
    for seed in CONFIG.seed_values:
        np.testing.assert_array_equal(curves.loc[curves["seed"] == seed, "step"], steps)
    assert len(curves) == CONFIG.seeds * len(steps)
    assert check["seed"].tolist() == CONFIG.seed_values
    assert (check["fold_step"] == FOLD_AT).all()


def test_fold_starts_from_the_folded_state(fold):
    """The folded model (unscaled, W_Q / 4) computes the scaled model's function at the fold:
    with sqrt(d_k) = 4 a power of two, (x W_Q / 4) . k equals (x W_Q) . k / 4 bit for bit,
    so its logits, its first loss and every attention statistic equal the unfolded ones
    exactly, and its W_Q gradient is exactly 4 times theirs (dL/dW' = sqrt(d_k) dL/dW)."""
    curves, check = fold
    np.testing.assert_array_equal(check["logit_rel_diff_at_fold"], 0.0)
    np.testing.assert_array_equal(check["grad_wq_ratio_at_fold"], 4.0)
    first = curves[curves["step"] == FOLD_AT]
    np.testing.assert_array_equal(first["loss_folded"], first["loss_unfolded"])
    np.testing.assert_array_equal(first["grad_norm_wq_folded"], 4 * first["grad_norm_wq_unfolded"])


def test_fold_continuation_picks_up_the_head(fold):
    """The unfolded continuation's first loss is step FOLD_AT of one uninterrupted scaled
    run: the head's state after FOLD_AT steps on batch FOLD_AT of the same stream. The
    continuation trains other lanes beside it (another program shape), so the two are
    float32 evaluations of one function on the same inputs: within the bound at step 0
    (``step0_reference``), twice."""
    curves, _ = fold
    straight = train(CONFIG, MECHANISMS["scaled"]).metrics["loss"][:, FOLD_AT]
    first = curves[curves["step"] == FOLD_AT]["loss_unfolded"].to_numpy()
    rtol = max(step0_reference(CONFIG, "scaled", s)[2] for s in CONFIG.seed_values)
    np.testing.assert_allclose(first, straight, rtol=2 * rtol)


def test_fold_smoothing_restarts_at_the_fold(fold):
    """``smoothed_*`` is the trailing mean over the continuation's own steps: at step
    FOLD_AT + t the mean of its steps max(0, t - w + 1) .. t. float64 sums of <= w terms of
    size ~1 (the library's by cumulative sums over <= steps terms): within steps eps64."""
    curves, _ = fold
    w = CONFIG.smoothing
    for _, rows in curves.groupby("seed"):
        for kind in ("unfolded", "folded"):
            loss = rows[f"loss_{kind}"].to_numpy(np.float64)
            expected = [loss[max(0, t - w + 1) : t + 1].mean() for t in range(len(loss))]
            np.testing.assert_allclose(
                rows[f"smoothed_{kind}"], expected, rtol=CONFIG.steps * np.finfo(float).eps
            )


def test_fold_changes_the_trajectory(fold):
    """Adam's step is invariant to the gradient's scale, not the parameter's: the folded
    W_Q moves sqrt(d_k) times faster relative to its size, so the two models part. By the
    end their logits differ by more than a float32 re-evaluation of one model could."""
    _, check = fold
    rtol = max(step0_reference(CONFIG, "scaled", s)[2] for s in CONFIG.seed_values)
    assert (check["logit_rel_diff_at_end"] > 2 * rtol).all(), check["logit_rel_diff_at_end"]


# --- the sensitivity grid (slow: its cells compile their own programs) ------------------


@pytest.mark.slow
def test_grid_has_one_row_per_cell_and_seed(sensitivity):
    cells = [(b, s, seed) for b in BATCH_SIZES for s in EMBED_STDS for seed in CONFIG.seed_values]
    columns = ("batch_size", "embed_init_std", "seed")
    rows = zip(*(sensitivity[c] for c in columns), strict=True)
    assert list(rows) == cells
    assert list(sensitivity.columns) == published_columns("05_sensitivity")
    for column in sensitivity.columns:
        if column.endswith(("below_1", "below_0p1")) and not column.startswith("ratio"):
            assert sensitivity[column].dtype == "Int64", column


@pytest.mark.slow
def test_grid_cells_train_the_asked_settings(sensitivity):
    """Each row's step-0 gradient ratio unscaled / scaled is that of its own cell's models
    (its batch size, its embedding std, its seed), by float64 autodiff: the quotient of two
    float32 norms, each within the bound of ``step0_reference``."""
    for row in sensitivity.itertuples():
        cell = dataclasses.replace(
            CONFIG, batch_size=row.batch_size, embed_init_std=row.embed_init_std
        )
        _, scaled, rtol_s = step0_reference(cell, "scaled", row.seed)
        _, unscaled, rtol_u = step0_reference(cell, "unscaled", row.seed)
        assert row.grad_wq_ratio_step0 == pytest.approx(unscaled / scaled, rel=rtol_s + rtol_u)


@pytest.mark.slow
def test_grid_ratios_are_the_quotients_of_its_milestones(sensitivity):
    """``ratio_*`` = unscaled / scaled milestone where both were reached (one float64
    division of integers: exact to the rounding of the quotient), empty otherwise; a run
    reaching loss 0.1 reached 1.0 no later; milestones lie within the run."""
    reached_both = 0
    for milestone in ("step_loss_below_1", "step_loss_below_0p1"):
        s, u = sensitivity[f"scaled_{milestone}"], sensitivity[f"unscaled_{milestone}"]
        ratio = sensitivity[f"ratio_{milestone}"]
        both = s.notna() & u.notna()
        reached_both += int(both.sum())
        expected = u[both].astype(float) / s[both].astype(float)
        np.testing.assert_array_equal(ratio[both].astype(float), expected)
        assert ratio[~both].isna().all(), milestone
        for column in (s, u):
            reached = column.dropna()
            assert ((reached >= 0) & (reached < CONFIG.steps)).all()
    assert reached_both > 0  # the settings exercise the quotient, not only the empty case
    for variant in ("scaled", "unscaled"):
        one, tenth = (
            sensitivity[f"{variant}_step_loss_below_1"],
            sensitivity[f"{variant}_step_loss_below_0p1"],
        )
        assert one[tenth.notna()].notna().all()
        assert (one[tenth.notna()] <= tenth[tenth.notna()]).all()
