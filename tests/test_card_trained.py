"""attnlab/studies/card/trained.py on the step-0 models (trained = initial, so no training
is compiled): bilinear logits have elasticity 2 and normalised q, k 0 (float32 bounds
below), a cap's falls with alpha; static drift leaves qk_norm's readings unchanged and only
sharpens scaled's attention, whose logit scale grows alpha^2; a diverged seed is left out;
``owner_words`` on each side."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import numpy as np
import pytest

from attnlab.core.owner import ALPHAS
from attnlab.core.references import load_mechanism
from attnlab.recall.config import RecallConfig
from attnlab.recall.step import initial_state
from attnlab.studies.card.trained import DRIFT_ALPHAS, trained_frames
from attnlab.studies.card.verdicts import owner_words

CONFIG = RecallConfig(d_k=16, d_model=16, seeds=2, eval_size=32, mechanisms=("scaled",))
NAMES = ("scaled", "qk_norm", "softcap30")
#: A forward-mode tangent summed over the eval set's rows x keys (32 x 16) terms: relative
#: rounding at most that many float32 eps (cancellation included), on e of size <= 2.
BOUND = 2 * 32 * 16 * np.finfo(np.float32).eps
#: The same logits computed from W_Q, W_K x alpha or x1 (rounded apart in the products of
#: 16-wide rows and in alpha itself), their within-row std compared: a few eps each, well
#: inside 64 eps relative.
SCALE_RTOL = 64 * np.finfo(np.float32).eps


@pytest.fixture(scope="module")
def frames():  # compiles three models' init, elasticity and drift programs
    mechanisms = [load_mechanism(n) for n in NAMES]
    initial = [initial_state(CONFIG, m).params for m in mechanisms]
    broken = jax.tree.map(lambda x: x.at[1].set(np.nan), initial[2])  # softcap30's seed 1
    results = [SimpleNamespace(state=SimpleNamespace(params=p)) for p in initial[:2]]
    results.append(SimpleNamespace(state=SimpleNamespace(params=broken)))
    return trained_frames(CONFIG, mechanisms, initial, results)


@pytest.mark.slow  # the fixture compiles nine programs
def test_elasticity_is_two_for_bilinear_and_zero_for_normalised_logits(frames):
    ownership, _ = frames
    scaled = ownership[ownership.mechanism == "scaled"]
    assert len(scaled) == 2 * len(ALPHAS) and (scaled.seeds == 2).all()
    np.testing.assert_allclose(scaled.elasticity_mean, 2.0, rtol=0, atol=BOUND)
    qk = ownership[ownership.mechanism == "qk_norm"]
    np.testing.assert_allclose(qk.elasticity_mean, 0.0, rtol=0, atol=BOUND)


@pytest.mark.slow  # the fixture compiles nine programs
def test_a_caps_elasticity_falls_and_a_diverged_seed_is_left_out(frames):
    ownership, drift = frames
    cap = ownership[(ownership.mechanism == "softcap30") & (ownership.stage == "trained")]
    assert (cap.seeds == 1).all() and cap.elasticity_sem.isna().all()
    e = cap.sort_values("alpha").elasticity_mean.to_numpy()
    assert (np.diff(e) < 0).all() and e[-1] < 1.0
    assert (drift[drift.mechanism == "softcap30"].seeds == 1).all()


@pytest.mark.slow  # the fixture compiles nine programs
def test_static_drift_leaves_qk_norm_and_sharpens_scaled(frames):
    _, drift = frames
    assert list(drift[drift.mechanism == "scaled"].alpha) == list(DRIFT_ALPHAS)
    qk = drift[drift.mechanism == "qk_norm"]
    for column in ("loss_mean", "entropy_mean", "max_weight_mean", "logit_std_mean"):
        values = qk[column].to_numpy()
        # q/|q| of alpha q differs from q/|q| by rounding only: a few eps relative
        np.testing.assert_allclose(values, values[0], rtol=SCALE_RTOL)
    scaled = drift[drift.mechanism == "scaled"].sort_values("alpha")
    # softmax(beta z)'s entropy falls as beta = alpha^2 grows; its max weight rises
    assert (np.diff(scaled.entropy_mean) < 0).all() and (np.diff(scaled.max_weight_mean) > 0).all()
    # the bilinear logits themselves: alpha^2 times alpha 1's (x16 at the verdict's x4)
    alphas = np.array(DRIFT_ALPHAS)
    grown = scaled.logit_std_mean.to_numpy() / scaled.logit_std_mean.iloc[0]
    np.testing.assert_allclose(grown, alphas**2, rtol=SCALE_RTOL)
    assert scaled.logit_std_mean.iloc[0] > 0 and (scaled.seeds == 2).all()


@pytest.mark.parametrize(
    ("start", "drifted", "owner"),
    [(2.0, 2.0, "weights"), (2.0, 0.1, "cap"), (1.0, 0.1, "cap"), (0.0, 0.0, "mechanism")],
)
def test_owner_words(start, drifted, owner):
    assert owner_words(start, drifted) == owner
