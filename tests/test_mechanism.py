"""attnlab/core/mechanism.py: the open mechanism API (Mechanism, as_mechanism,
load_mechanism, check_mechanism, l2_normalize), a mechanism defined outside the
package run through experiments 05 and 10 by MODULE:NAME and by file path, and the
learned sink and the output gate (their fields, and the sink's weights)."""

from __future__ import annotations

import dataclasses
import math
import shutil
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import attnlab
from attnlab.core.context import causal_context
from attnlab.core.hooks import scaled_logits, sigmoid_weights, softmax_weights, softpick_weights
from attnlab.core.mechanism import (
    Mechanism,
    MechanismError,
    MechanismReferenceError,
    as_mechanism,
    l2_normalize,
)
from attnlab.core.mechanism_check import check_mechanism
from attnlab.core.references import load_mechanism
from attnlab.core.temperature import BUILTINS

EPS32 = float(np.finfo(np.float32).eps)

#: A user's file: q.k/sqrt(d) as a plain function, and a Mechanism with a learned gain.
USER_FILE = textwrap.dedent(
    """
    import jax.numpy as jnp
    import attnlab

    def my_scaled(q, k):
        return jnp.einsum("...qd,...kd->...qk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))

    gained = attnlab.Mechanism(
        "gained",
        lambda q, k, g: g * jnp.einsum("...qd,...kd->...qk", q, k),
        params={"g": lambda d_k: d_k ** -0.5},
    )
    NOT_A_MECHANISM = 3
    """
)


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "mechanism_api_user.py"
    path.write_text(USER_FILE, encoding="utf-8")
    return path


def test_a_plain_function_is_a_softmax_mechanism_without_scalars():
    def dot(q, k):
        return jnp.einsum("...qd,...kd->...qk", q, k)

    mechanism = as_mechanism(dot)
    assert mechanism.name == "dot" and mechanism.weights is softmax_weights
    assert mechanism.params == () and mechanism.constants == ()
    assert mechanism.qk_init_exponent == 0.0 and not mechanism.normalize_qk
    assert as_mechanism(mechanism) is mechanism
    with pytest.raises(MechanismError, match="neither"):
        as_mechanism(3)


def test_initial_values_may_be_functions_of_the_width():
    m = Mechanism("m", lambda q, k, a, b: a * b * q @ jnp.swapaxes(k, -1, -2),
                  params={"a": lambda d: d**0.5}, constants={"b": 2.0})  # fmt: skip
    assert m.param_values(16) == {"a": 4.0}
    assert m.constant_values(16) == {"b": 2.0}
    assert m.initial_theta(4) == {"a": 2.0, "b": 2.0}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, "Mechanism.name must be"),
        ({"name": "a,b"}, "Mechanism.name must be"),
        ({"name": "x/../../scaled"}, "Mechanism.name must be"),
        ({"name": "/tmp/abs"}, "Mechanism.name must be"),
        ({"name": ".."}, "Mechanism.name must be"),
        ({"name": "a b"}, "Mechanism.name must be"),
        ({"name": "-flag"}, "Mechanism.name must be"),
        ({"name": "x" * 65}, "Mechanism.name must be"),
        ({"name": 3}, "Mechanism.name must be"),
        ({"logits": 3}, "logits must be callable"),
        ({"weights": None}, "weights must be callable"),
        ({"params": {"s": 1.0}, "constants": {"s": 2.0}}, "used twice"),
        ({"params": [("s",)]}, "must map names"),
        ({"qk_init_exponent": float("nan")}, "qk_init_exponent"),
        ({"qk_init_exponent": True}, "qk_init_exponent"),
        ({"normalize_qk": 1}, "normalize_qk"),
        ({"row_length": "yes"}, "row_length"),
    ],
)
def test_a_malformed_mechanism_is_refused_by_name(kwargs, match):
    fields = {"name": "m", "logits": lambda q, k: q @ jnp.swapaxes(k, -1, -2), **kwargs}
    with pytest.raises(MechanismError, match=match):
        Mechanism(**fields)


@pytest.mark.parametrize("name", ["scaled", "_mine", "soft-cap_2", "x" * 64])
def test_a_plain_name_is_taken(name):
    assert Mechanism(name, lambda q, k: q @ jnp.swapaxes(k, -1, -2)).name == name


def test_program_ignores_what_only_sets_initial_values():
    """scaled, unscaled, folded and 1/d share one program; the caps another; qk_norm not."""
    programs = {name: BUILTINS[name].program() for name in BUILTINS}
    assert programs["scaled"] == programs["unscaled"] == programs["folded_init"]
    assert programs["scaled"] == programs["inv_d"]
    assert programs["softcap30"] == programs["softcap50"] != programs["scaled"]
    assert programs["qk_norm"] != programs["learned_temperature"]


def test_l2_normalize_is_finite_at_zero_and_unit_elsewhere():
    x = np.asarray([[0.0, 0.0], [3.0, 4.0]], np.float32)
    out = np.asarray(l2_normalize(x))
    assert np.all(out[0] == 0)
    # |x| = 5: 5 / sqrt(25 + 1e-6) = 1 - 2e-8, below float32 resolution near 1
    np.testing.assert_allclose(out[1], [0.6, 0.8], rtol=0, atol=2 * EPS32)


def test_load_mechanism_builtins_are_the_registry_objects():
    for name, mechanism in BUILTINS.items():
        assert load_mechanism(name) is mechanism
    assert attnlab.Mechanism is Mechanism and attnlab.load_mechanism is load_mechanism


def test_load_mechanism_by_file_and_by_module(user_file, monkeypatch):
    by_file = load_mechanism(f"{user_file}:my_scaled")
    assert by_file.name == "my_scaled" and by_file.weights is softmax_weights
    monkeypatch.syspath_prepend(str(user_file.parent))
    gained = load_mechanism("mechanism_api_user:gained")
    assert gained.name == "gained" and gained.param_values(16) == {"g": 0.25}
    assert load_mechanism(f"{user_file}:my_scaled") is by_file  # cached: one program


@pytest.mark.parametrize(
    ("reference", "match"),
    [
        ("no-such-mechanism", "not a built-in"),
        ("no_such_module_xyz:f", "cannot import module"),
        ("attnlab:no_such_name", "has no attribute"),
        ("attnlab.core.temperature:MECHANISMS", "not a Mechanism"),
        ("/nonexistent/m.py:f", "no file"),
    ],
)
def test_a_bad_reference_says_why(reference, match):
    with pytest.raises(MechanismReferenceError, match=match):
        load_mechanism(reference)


def test_a_file_that_does_not_import_says_why(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("this is not python\n", encoding="utf-8")
    with pytest.raises(MechanismReferenceError, match="importing .* failed"):
        load_mechanism(f"{path}:f")


def test_a_user_mechanism_gives_the_builtins_weights(user_file):
    """The file's q.k/sqrt(d) and the built-in scaled agree to float32 rounding."""
    q, k = jax.random.normal(jax.random.key(1), (2, 2, 5, 32))
    ours = np.asarray(load_mechanism(f"{user_file}:my_scaled")(q, k))
    scaled = np.asarray(BUILTINS["scaled"](q, k))
    # einsum vs the suite's dot product: 32-term sums, logits ~3, softmax conditioning ~1
    np.testing.assert_allclose(ours, scaled, rtol=0, atol=32 * EPS32 * 3)
    assert math.isclose(ours.sum(axis=-1).mean(), 1.0, abs_tol=1e-6)


# --- a user's mechanism through experiments 05 and 10 -------------------------------------

TINY_RECALL = ["--dk", "16", "--d-model", "16", "--steps", "20", "--batch-size", "8",
               "--seeds", "1", "--eval-size", "32", "--chunk-steps", "10", "--quiet"]  # fmt: skip


def _rows(frame: pd.DataFrame, column: str, name: str) -> pd.DataFrame:
    rows = frame[frame[column] == name].drop(columns=column)
    return rows.reset_index(drop=True)


@pytest.mark.slow  # compiles 05's and 10's programs (the card's own test is fast)
@pytest.mark.parametrize("by", ["file", "module"])
def test_a_user_mechanism_runs_through_05_and_10(
    by, user_file, monkeypatch, load_script, run_main, tmp_path
):
    """By file path and by MODULE:NAME: rows for it appear, and its rows equal scaled's
    (``my_scaled`` is q.k/sqrt(d); same seeds, same data; identical on one machine only if
    both dot products round alike, so compared to float32 rounding of a 20-step run)."""
    monkeypatch.syspath_prepend(str(user_file.parent))
    reference = f"{user_file}:my_scaled" if by == "file" else "mechanism_api_user:my_scaled"
    out05, out10 = tmp_path / "05", tmp_path / "10"
    out05.mkdir(), out10.mkdir()
    argv05 = [*TINY_RECALL, "--mechanisms", "scaled", reference, "--fold-step", "10",
              "--sensitivity-batch-sizes", "8", "--sensitivity-embed-stds", "1.0",
              "--sensitivity-seeds", "1", "--out-dir", str(out05)]  # fmt: skip
    assert run_main(load_script("05_remedies"), argv05) == 0
    summary = pd.read_csv(out05 / "05_remedies_summary.csv")
    assert set(summary.variant) >= {"scaled", "my_scaled"}
    ours, scaled = _rows(summary, "variant", "my_scaled"), _rows(summary, "variant", "scaled")
    # step-0 gradients: one forward and backward pass, conditioning ~1: 1e3 eps relative
    np.testing.assert_allclose(ours.grad_wq_step0, scaled.grad_wq_step0, rtol=1e3 * EPS32)

    argv10 = [*TINY_RECALL[2:], "--dk", "16", "--mechanisms", "scaled", reference,
              "--lrs", "0.0003", "0.001", "--lr-dks", "16", "--lr-mechanisms", reference,
              "--drift-dk", "16", "--record-every", "10", "--jacobian-trials", "16",
              "--out-dir", str(out10)]  # fmt: skip
    assert run_main(load_script("10_widths"), argv10) == 0
    widths = pd.read_csv(out10 / "10_widths_summary.csv")
    assert {"scaled", "my_scaled"} <= set(widths.mechanism)
    lr = pd.read_csv(out10 / "10_lr_transfer.csv")
    assert set(lr.mechanism) >= {"my_scaled"} and lr.best.any()


# --- what only jit or grad finds, and the API's limits: one line each --------------------


def _einsum(q, k):
    return jnp.einsum("...qd,...kd->...qk", q, k)


@pytest.mark.parametrize("name", ["W_Q", "b_O", "E_key", "n", "q_pos", "head"])
@pytest.mark.parametrize("field", ["params", "constants"])
def test_a_reserved_scalar_name_is_refused(name, field):
    with pytest.raises(MechanismError, match=f"'{name}' is reserved"):
        Mechanism("reserved", lambda q, k, **theta: _einsum(q, k), **{field: {name: 1.0}})


def test_the_reserved_prefixes_hold_every_models_parameters():
    """Core names no model's parameters; every model's own names take a reserved form."""
    from attnlab.core.mechanism import RESERVED_PREFIXES
    from attnlab.lm.model import CausalLM
    from attnlab.recall.model import MODEL_PARAMS

    lm = CausalLM(BUILTINS["scaled"], d_model=16, n_layers=1, n_heads=2, max_length=4)
    # Initialised in one program (eager init compiles every op of the model on its own).
    params = jax.jit(lm.init)(jax.random.key(0), np.zeros((1, 4), np.int32))["params"]
    attention = params["h_0"]["attn"]  # where the LM stores a mechanism's scalars
    for name in (*MODEL_PARAMS, *attention):
        assert name.startswith(RESERVED_PREFIXES), name


def test_a_syntax_error_is_worded_with_its_line(tmp_path):
    path = tmp_path / "syntax.py"
    path.write_text("def logits(q, k)\n    return q\n", encoding="utf-8")
    with pytest.raises(MechanismReferenceError) as caught:
        load_mechanism(f"{path}:logits")
    assert str(caught.value).endswith("failed: syntax error at line 1: expected ':'")


# --- a mechanism that diverges: recorded by 05 and 10, never a traceback -------------------

#: NaN once its learned gain has moved 0.004 from 1 (a few Adam steps), and NaN from the
#: start at d_k >= 256 only: both pass check_mechanism (d_k 16, the initial gain). The NaN
#: is computed from the logits (the log of a negative number), never a NaN constant:
#: XLA's CPU compiler (jaxlib 0.10.2) turns exp of a product with a NaN constant into
#: unwritten memory, and this test then failed at random (finite losses where it diverges;
#: the module docstring of attnlab.core.mechanism, *Limits*).
DIVERGING = textwrap.dedent(
    """
    import jax.numpy as jnp
    import attnlab

    def _dots(q, k):
        return jnp.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5

    def _nan(z):
        return jnp.log(-1.0 - jnp.abs(z))

    nan_mid = attnlab.Mechanism(
        "nan_mid",
        lambda q, k, g: jnp.where(jnp.abs(g - 1.0) > 0.004, _nan(_dots(q, k)), g * _dots(q, k)),
        params={"g": 1.0},
    )

    def nan_large_dk(q, k):
        z = _dots(q, k)
        return _nan(z) if q.shape[-1] >= 256 else z
    """
)


@pytest.mark.slow  # trains 05's, 10's and 11's tiny runs
def test_a_diverging_mechanism_is_recorded_not_a_traceback(
    load_script, run_main, tmp_path, monkeypatch, capsys
):
    (tmp_path / "diverging.py").write_text(DIVERGING, encoding="utf-8")
    references = [f"{tmp_path}/diverging.py:{n}" for n in ("nan_mid", "nan_large_dk")]
    monkeypatch.chdir(tmp_path)
    tiny = ["--d-model", "16", "--steps", "40", "--batch-size", "8", "--seeds", "2",
            "--eval-size", "32", "--chunk-steps", "10", "--quiet", "--lr", "0.003"]  # fmt: skip
    argv05 = [*tiny, "--dk", "256", "--mechanisms", "scaled", *references, "--fold-step", "10",
              "--sensitivity-batch-sizes", "8", "--sensitivity-embed-stds", "1"]  # fmt: skip
    assert run_main(load_script("05_remedies"), argv05) == 0
    out = capsys.readouterr().out
    assert "nan_mid seed 0 at step" in out and "nan_large_dk seed 0 at step" in out
    (run,) = (tmp_path / "results" / "runs").iterdir()
    summary = pd.read_csv(run / "05_remedies_summary.csv")
    diverged = summary[summary.variant != "scaled"]
    assert diverged.final_loss.isna().all() and diverged.eval_accuracy.isna().all()
    assert summary[summary.variant == "scaled"].final_loss.notna().all()
    shutil.rmtree(run)

    argv10 = [*tiny, "--dk", "16", "256", "--mechanisms", "scaled", *references,
              "--lrs", "0.003", "--lr-dks", "16", "--drift-dk", "16",
              "--record-every", "10", "--jacobian-trials", "16"]  # fmt: skip
    assert run_main(load_script("10_widths"), argv10) == 0
    assert "nan_large_dk at d_k 256, lr 0.003: 2 of 2 seeds" in capsys.readouterr().out
    (run,) = (tmp_path / "results" / "runs").iterdir()
    widths = pd.read_csv(run / "10_widths_summary.csv")
    large = widths[(widths.mechanism == "nan_large_dk") & (widths.d_k == 256)]
    assert large.diverged_step.notna().all()
    shutil.rmtree(run)

    from support import TINY_CARD as TINY

    from attnlab.studies.card import wings

    script = load_script("11_mechanism_card")
    # the tiny card, its training at d_k 256 and lr 3e-3: both mechanisms diverge there
    training = dataclasses.replace(TINY.training, d_k=256, lr=3e-3, steps=40)
    monkeypatch.setattr(wings, "QUICK", dataclasses.replace(TINY, training=training))
    code = run_main(script, ["--mechanism", *references, "--quick", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    runs = tmp_path / "results" / "runs"
    assert all(any(r.iterdir()) for r in runs.iterdir()), "an empty run folder is left"
    # A complete card whose verdict table says where the run diverged.
    (card_md,) = sorted(tmp_path.glob("results/**/*nan_mid/card.md"))
    assert "diverged" in card_md.read_text(encoding="utf-8")


# --- the context: positions, heads, a mask of its own, per-head values -------------------


def _window(q, k, q_pos, k_pos):
    """Scaled logits; the mask below keeps the last 2 keys of each row (a sliding window)."""
    return _einsum(q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))


WINDOWED = Mechanism("windowed", _window, mask=lambda q_pos, k_pos: q_pos - k_pos < 2)


def test_a_mechanism_asking_for_positions_is_refused_without_them_in_one_line():
    with pytest.raises(MechanismError, match="needs q_pos, k_pos.*recall task") as info:
        WINDOWED.scores(jnp.ones((1, 2, 4)), jnp.ones((1, 3, 4)), {})
    assert "\n" not in str(info.value)
    assert WINDOWED.needs_positions() == ("q_pos", "k_pos", "mask")
    own_mask_only = Mechanism("own_mask", _einsum, mask=lambda q_pos, k_pos: q_pos >= k_pos)
    with pytest.raises(MechanismError, match="needs mask.*recall task"):
        own_mask_only.attend(jnp.ones((1, 2, 4)), jnp.ones((1, 3, 4)), {})


def test_a_mask_of_its_own_is_combined_with_the_models():
    """The window keeps keys i-1 and i, the causal mask keys <= i: rows attend at most 2."""
    check_mechanism(WINDOWED)
    context = causal_context(5, 1)
    causal = np.asarray(context.k_pos) <= np.asarray(context.q_pos)
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 1, 5, 4), np.float32)
    _, p, used = WINDOWED.attend(q, k, {}, causal, context)
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    allowed = (j <= i) & (i - j < 2)
    np.testing.assert_array_equal(np.asarray(used)[0] if np.ndim(used) == 3 else used, allowed)
    assert np.all(np.asarray(p)[0][~allowed] == 0)
    np.testing.assert_allclose(np.asarray(p).sum(-1), 1.0, rtol=0, atol=4 * EPS32)


def test_per_head_values_are_vectors_and_a_wrong_length_is_one_line():
    scaled = Mechanism("per_head", lambda q, k, tau: tau * _einsum(q, k),
                       params={"tau": 0.25}, per_head=("tau",))  # fmt: skip
    np.testing.assert_array_equal(scaled.head_values(16, 3)["tau"], [0.25] * 3)
    check_mechanism(scaled)
    vector = dataclasses.replace(scaled, params={"tau": lambda d: [1.0, 0.5, 0.25, 0.125]})
    check_mechanism(vector)  # checked at its own four heads
    with pytest.raises(MechanismError, match="per head: it must be one number or 2") as info:
        vector.head_values(16, 2)
    assert "\n" not in str(info.value)
    with pytest.raises(MechanismError, match="not its params"):
        Mechanism("bad", _einsum, per_head=("tau",))


def test_positional_builtins_are_named_but_not_carded_on_recall():
    from attnlab.core.positional import POSITIONAL

    for name in POSITIONAL:
        assert load_mechanism(name) is POSITIONAL[name] and name not in BUILTINS


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_a_users_logits_see_half_precision_q_and_k_in_float32_as_the_built_ins(dtype):
    """README's my_attention.py (q . k / sqrt(d) by einsum) on float16 q and k: the same
    float32 logits as the built-in scaled's, bit for bit (without the cast, the einsum ran
    in float16 and the card read 32 as its float16 headroom against scaled's 64)."""
    mine = Mechanism(
        "mine", lambda q, k: jnp.einsum("...qd,...kd->...qk", q, k) / jnp.sqrt(q.shape[-1])
    )
    q = jax.random.normal(jax.random.key(0), (3, 5, 64)).astype(dtype) * 30
    k = jax.random.normal(jax.random.key(1), (3, 7, 64)).astype(dtype) * 30
    theirs = BUILTINS["scaled"]
    z = mine.scores(q, k, {})
    assert z.dtype == jnp.float32
    np.testing.assert_array_equal(z, theirs.scores(q, k, theirs.initial_theta(64)))


# ------------------------------------------------------------ the sink and the gate


def _sink_mechanism(sink=0.0, name="with_sink"):
    """q.k / sqrt(8) through the built-in scaled logits, with a learned sink."""
    return Mechanism(name, scaled_logits, constants={"scale": 8**-0.5}, sink=sink)


def test_a_sink_is_a_param_learned_per_head_added_once():
    """``sink=`` adds one param ``sink`` at that initial value, learned per head (one value
    a head in ``head_values``); ``replace`` with a new name keeps exactly one; the program
    of two sinks that differ only in their initial value is one, and differs from the
    program without a sink."""
    m = _sink_mechanism(-1.5)
    assert m.params == (("sink", -1.5),) and m.per_head == ("sink",)
    assert m.param_values(8) == {"sink": -1.5}
    np.testing.assert_array_equal(m.head_values(8, 3)["sink"], [-1.5] * 3)
    renamed = dataclasses.replace(m, name="renamed")
    assert renamed.params == (("sink", -1.5),) and renamed.per_head == ("sink",)
    again = dataclasses.replace(renamed, name="again")
    assert [n for n, _ in again.params] == ["sink"] and again.per_head == ("sink",)
    assert m.program() == _sink_mechanism(0.0).program() == _sink_mechanism(3.0).program()
    plain = Mechanism("with_sink", scaled_logits, constants={"scale": 8**-0.5})
    assert plain.program() != m.program()
    assert plain.params == () and plain.per_head == ()


@pytest.mark.parametrize("weights", [sigmoid_weights, softpick_weights])
def test_a_sink_with_weights_other_than_softmax_is_refused(weights):
    with pytest.raises(MechanismError, match="sink belongs to softmax"):
        Mechanism("m", scaled_logits, weights=weights, constants={"scale": 1.0}, sink=0.0)


@pytest.mark.parametrize("gate", [None, "head", "element"])
def test_a_gate_of_each_kind_is_taken(gate):
    assert Mechanism("m", _einsum, gate=gate).gate == gate


@pytest.mark.parametrize("gate", ["elementwise", "Head", "", True, 1, ("head",)])
def test_any_other_gate_is_refused_in_one_line(gate):
    with pytest.raises(MechanismError, match="gate must be None or one of") as info:
        Mechanism("m", _einsum, gate=gate)
    assert "\n" not in str(info.value)


def test_the_sink_is_not_passed_to_logits():
    """``logits(q, k, scale)`` names no ``sink``: under a sink mechanism ``scores`` passes it
    only the scale (a ``sink=`` keyword would be a TypeError), and the weights see the sink.
    The logits are the built-in's, bit for bit (the same function on the same inputs)."""
    seen = []

    def logits(q, k, scale):
        seen.append(scale)
        return scale * _einsum(q, k)

    m = Mechanism("mine", logits, constants={"scale": 0.5}, sink=0.0)
    q, k = np.random.default_rng(0).standard_normal((2, 3, 5, 8)).astype(np.float32)
    theta = m.initial_theta(8)
    assert theta == {"sink": 0.0, "scale": 0.5}
    z = m.scores(q, k, theta)
    np.testing.assert_array_equal(z, 0.5 * _einsum(q, k))
    p = m(q, k)
    assert seen and p.shape == (3, 5, 5)


def test_a_sink_mechanisms_rows_sum_below_one_and_a_very_low_sink_is_the_softmax():
    """``m(q, k)`` at sink 0: each row sums to ``1 - 1 / (1 + sum_l e^{z_l})`` of its own
    logits (float64 from the float32 z; bound: each of the 5 weights within (|z - m| +
    ULPS 4 + n + 3) EPS of itself, summed in float64, and 5 TINY for weights flushed to 0),
    which is below 1 by more than that; masked keys get 0. At sink -1e4 the sink's term
    ``e^{-1e4 - max z}`` is exactly 0 in float32 (below the smallest subnormal,
    e^{-103.3}), so the weights are the softmax's up to the rounding of two float32
    softmaxes of the same logits: twice (max |z - m| + ULPS 4 + n + 3) EPS relative."""
    rng = np.random.default_rng(1)
    q, k = (2.0 * rng.standard_normal((2, 3, 5, 8))).astype(np.float32)
    m = _sink_mechanism(0.0)
    z = np.asarray(m.scores(q, k, m.initial_theta(8)), np.float64)
    p = np.asarray(m(q, k), np.float64)
    spread = np.abs(z - np.maximum(z.max(-1, keepdims=True), 0.0)).max()
    rounding = (spread + 4 + 5 + 3) * EPS32
    sums = p.sum(-1)
    expected = 1.0 - 1.0 / (1.0 + np.exp(z).sum(-1))
    tiny = 5 * float(np.finfo(np.float32).tiny)
    assert np.all(np.abs(sums - expected) <= rounding * expected + tiny)
    assert np.all(sums < 1.0 - (rounding + tiny))
    mask = np.tril(np.ones((5, 5), bool))
    masked = np.asarray(m(q, k, mask))
    assert np.all(masked[..., ~mask] == 0) and np.all(masked.sum(-1) < 1.0)

    low = np.asarray(_sink_mechanism(-1e4)(q, k))
    softmax = np.asarray(softmax_weights(z.astype(np.float32)))
    spread = np.abs(z - z.max(-1, keepdims=True)).max()
    np.testing.assert_allclose(low, softmax, rtol=2 * (spread + 4 + 5 + 3) * EPS32, atol=0)
    assert np.abs(p - softmax).max() > 0.01  # at sink 0 they differ: the check can fail


def test_a_per_head_sink_moves_each_heads_null_weight():
    """``theta["sink"]`` ``[H, 1, 1]`` (as the models pass it): a head with a higher sink
    puts less weight on the keys, on every row (the sink's share e^s / (e^s + sum e^z)
    increases with s)."""
    q, k = np.random.default_rng(2).standard_normal((2, 3, 4, 8)).astype(np.float32)
    m = _sink_mechanism()
    theta = {"scale": 8**-0.5, "sink": jnp.asarray([-2.0, 0.0, 2.0]).reshape(3, 1, 1)}
    mass = np.asarray(m(q, k, theta=theta)).sum(-1)  # [H, T]
    assert np.all(mass[0] > mass[1]) and np.all(mass[1] > mass[2])


def test_replace_moves_or_removes_the_sink_and_a_param_named_sink_is_refused():
    """``dataclasses.replace`` rebuilds the sink from ``sink``: a new initial value is the
    one the models start from, ``sink=None`` leaves no sink param (and logits without one);
    a scalar of the user's named ``sink`` would be mistaken for it, so it is refused."""
    m = Mechanism("s", scaled_logits, constants={"scale": 0.5}, sink=0.0)
    moved = dataclasses.replace(m, sink=1.5)
    assert moved.params == (("sink", 1.5),) and moved.per_head == ("sink",)
    assert moved.param_values(8) == {"sink": 1.5}
    removed = dataclasses.replace(m, sink=None)
    assert removed.params == () and removed.per_head == ()
    q = jnp.ones((3, 4))
    np.testing.assert_array_equal(removed(q, q), BUILTINS["scaled"].weights(0.5 * q @ q.T))
    with pytest.raises(MechanismError, match="reserved"):
        Mechanism("x", scaled_logits, params={"sink": 1.0})
