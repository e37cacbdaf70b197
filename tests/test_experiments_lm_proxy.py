"""experiments/14_lm_proxy.py end to end at tiny sizes: a user's mechanism file gets its row
of the sweep and its owner, the tables do not depend on the number of workers, the same
flags give byte-identical CSVs, bad input is one line, exit 2, nothing written, and the
models saved in Llama's layout (--layout llama) are read by 13 as their GPT-2 twins are."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from support import ALIBI_FILE
from support import LM_LOGIT_RTOL as LOGIT_RTOL
from support import LM_USER_FILE as USER_FILE

from attnlab.models import attnlab_llama
from attnlab.models.decoder import POSITION_TABLE, decoder_shapes
from attnlab.models.files import CONFIG, WEIGHTS
from attnlab.studies.lm_proxy.study import CURVES_CSV, OWNERSHIP_CSV, SINKS_CSV, SWEEP_CSV

CSVS = (SWEEP_CSV, CURVES_CSV, OWNERSHIP_CSV)
#: d_model 32 (2 heads), two rates of which the second is 10x the first, 4 steps; no sink
#: set (``test_the_sink_set_writes_its_heads`` runs one).
TINY = ["--widths", "32", "--one-width-mechanisms", "--sink-mechanisms", "--lrs", "1e-3", "1e-2",
        "--steps", "4", "--quiet"]  # fmt: skip
#: 13 at one row length, on 96 bytes of its default text (the prose 14 trains on).
TINY_13 = ["--lengths", "16", "--tokens", "96", "--counterfactual-length", "16", "--quiet"]


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("14_lm_proxy")


def _run(script, run_main, out, *flags):
    out.mkdir(exist_ok=True)
    return run_main(script, [*TINY, *flags, "--out-dir", str(out)])


@pytest.fixture(scope="module")
def users_run(script, run_main, tmp_path_factory):
    """One 14 run of two mechanisms a researcher brings from files: cosine logits (no
    positions) and ALiBi (positions and the head index), at --one-width 32 so that each
    model at its best rate is saved for 13."""
    folder = tmp_path_factory.mktemp("users")
    (folder / "my_attention.py").write_text(USER_FILE, encoding="utf-8")
    (folder / "my_alibi.py").write_text(ALIBI_FILE, encoding="utf-8")
    references = [f"{folder}/my_attention.py:cosine", f"{folder}/my_alibi.py:alibi"]
    out = folder / "out"
    flags = ("--mechanisms", *references, "--one-width", "32", "--jobs", "1")
    assert _run(script, run_main, out, *flags) == 0
    return out, references


@pytest.mark.slow  # users_run: 14 trains two user mechanisms (22 s of CPU cold)
def test_a_users_mechanism_gets_its_rows_and_its_owner(users_run):
    out, _ = users_run
    sweep = pd.read_csv(out / SWEEP_CSV)
    assert set(sweep.mechanism) == {"cosine", "alibi"}
    assert sorted(sweep[sweep.mechanism == "cosine"].lr) == [1e-3, 1e-2]
    assert (sweep.diverged_step == -1).all()
    ownership = pd.read_csv(out / OWNERSHIP_CSV)
    cosine = ownership[ownership.mechanism == "cosine"]
    assert set(cosine.owner) == {"mechanism"}  # cosine logits: elasticity 0
    best = cosine[cosine.weights == "best"]
    assert len(best) == 2 * 2  # 2 layers, 2 heads
    drifted = cosine[cosine.weights == "drifted"]  # 10x the best, if on the grid
    assert len(drifted) == (4 if best.lr.iloc[0] == 1e-3 else 0)
    sidecar = json.loads((out / SWEEP_CSV).with_suffix(".json").read_text())
    assert len(sidecar["flags"]["text_sha256"]) == 64


@pytest.mark.slow  # two runs of two workers each, then one
def test_tables_do_not_depend_on_the_workers_and_repeat_byte_for_byte(script, run_main, tmp_path):
    flags = ("--mechanisms", "scaled", "qk_norm")
    assert _run(script, run_main, tmp_path / "one", *flags, "--jobs", "1") == 0
    assert _run(script, run_main, tmp_path / "two", *flags, "--jobs", "2") == 0
    for name in CSVS:
        one = (tmp_path / "one" / name).read_bytes()
        assert one == (tmp_path / "two" / name).read_bytes(), name


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--widths", "40"], "--widths"),
        (["--mechanisms", "no_such_mechanism"], "--mechanisms"),
        (["--lrs", "-1"], "--lrs"),
        (["--steps", "1"], "--steps"),
        (["--text", "/nonexistent/text.txt"], "--text"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    script, run_main, tmp_path, capsys, flags, named
):
    out = tmp_path / "out"
    assert _run(script, run_main, out, *flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err
    assert not any(out.iterdir())


@pytest.mark.slow  # users_run: 14 trains two user mechanisms (22 s of CPU cold)
def test_a_users_alibi_runs_in_the_lm_and_is_refused_by_the_recall_scripts(
    users_run, run_main, load_script, tmp_path, capsys
):
    out, (_, reference) = users_run
    # z = alpha^2 q.k - m (i - j): the fixed bias owns the spread where q.k is small (4 steps
    # from N(0, 0.02^2) weights), the weights more as alpha grows (e -> 2 for large alpha).
    ownership = pd.read_csv(out / OWNERSHIP_CSV)
    alibi = ownership[ownership.mechanism == "alibi"]
    assert len(alibi) and (alibi.elasticity_8 > alibi.elasticity_1).all()
    recall = tmp_path / "recall"
    recall.mkdir()
    argv = ["--mechanisms", reference, "--steps", "4", "--quiet", "--out-dir", str(recall)]
    assert run_main(load_script("05_remedies"), argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs q_pos, k_pos, head, n_heads" in err
    assert not any(recall.iterdir())


def test_a_per_head_vector_of_the_wrong_length_is_one_line(script, run_main, tmp_path, capsys):
    (tmp_path / "per_head.py").write_text(
        "import attnlab, jax.numpy as jnp\n"
        "tau = attnlab.Mechanism('tau', lambda q, k, t: t * jnp.einsum('...qd,...kd->...qk', q, k),"
        " params={'t': lambda d: [0.25, 0.25, 0.25]}, per_head=('t',))\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    assert _run(script, run_main, out, "--mechanisms", f"{tmp_path}/per_head.py:tau") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--mechanisms" in err and "one number or 2" in err
    assert not any(out.iterdir())


@pytest.mark.slow  # users_run: 14 trains two user mechanisms (22 s of CPU cold)
def test_each_mechanisms_best_model_is_saved_for_13(users_run):
    """At --one-width, each mechanism's model at its best rate is a GPT-2 checkpoint that
    13's loader reads, recording the held-out loss of its row of the sweep and the reference
    it was made from; a researcher's mechanism is read only when supplied again, even the
    namesake of a built-in (ALiBi), never imported from the checkpoint."""
    from attnlab.core.references import load_mechanism
    from attnlab.models.files import UnknownMechanismError
    from attnlab.models.registry import read_checkpoint

    out, references = users_run
    sweep = pd.read_csv(out / SWEEP_CSV)
    for mechanism, reference in zip(("cosine", "alibi"), references, strict=True):
        directory = out / "checkpoints" / f"14_lm_{mechanism}_d32"
        with pytest.raises(UnknownMechanismError, match=re.escape(reference)):
            read_checkpoint(directory)
        mine = load_mechanism(reference)
        assert read_checkpoint(directory, {mechanism: mine}).config.attention is mine
        record = json.loads((directory / "config.json").read_text())["attnlab"]
        rows = sweep[sweep.mechanism == mechanism]
        best = rows.loc[rows.final_val_loss.idxmin()]
        assert record["made_by"]["mechanism"] == reference and record["made_by"]["lr"] == best.lr
        # the CSV keeps 8 significant digits (float32's): half a unit in the 8th
        assert record["held_out_loss"] == pytest.approx(best.final_val_loss, rel=5e-8)


@pytest.mark.slow  # users_run: 14 trains two user mechanisms (22 s of CPU cold)
def test_13_asks_for_the_users_own_file_never_the_path_a_checkpoint_names(
    users_run, run_main, load_script, tmp_path, capsys
):
    """A checkpoint of a mechanism that is not supplied: the one line names the mechanism
    and asks for the user's own file; the path its maker recorded is not offered as a
    command (a checkpoint's words are never code to run)."""
    out, references = users_run
    argv = ["--checkpoint", out / "checkpoints" / "14_lm_cosine_d32", "--quiet",
            "--out-dir", tmp_path]  # fmt: skip
    assert run_main(load_script("13_real_model"), argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--mechanisms path/to/your_file.py:cosine" in err, err
    assert f"--mechanisms {references[0]}" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # 13 on two checkpoints at the default --tokens
def test_13_reads_what_14_saved_with_no_flag_but_checkpoint_and_mechanisms(
    users_run, run_main, load_script, tmp_path, capsys
):
    """14 -> 13 in one go: 13's row lengths fit the checkpoints' 64 positions by default
    (its defaults, 32 128 256, were refused twice: too long, then the counterfactual length
    not among them)."""
    out, references = users_run
    folders = [out / "checkpoints" / f"14_lm_{m}_d32" for m in ("cosine", "alibi")]
    argv = ["--checkpoint", *folders, "--mechanisms", *references, "--quiet",
            "--out-dir", tmp_path]  # fmt: skip
    assert run_main(load_script("13_real_model"), argv) == 0, capsys.readouterr().err
    sidecar = json.loads((tmp_path / "13_real_model_causal_heads.json").read_text())
    assert sidecar["flags"]["lengths"] == [16, 32, 64]
    assert sidecar["flags"]["counterfactual_length"] == 64


def _layout_run(script, run_main, tmp_path_factory, layout: str):
    """qk_norm (its learned gain a tensor of either layout) at --one-width 32, its best
    model saved in ``layout``; the run's output folder."""
    out = tmp_path_factory.mktemp(layout)
    flags = ("--mechanisms", "qk_norm", "--one-width", "32", "--layout", layout)
    assert _run(script, run_main, out, *flags) == 0
    return out


@pytest.fixture(scope="module")
def llama_run(script, run_main, tmp_path_factory):
    return _layout_run(script, run_main, tmp_path_factory, "llama")


@pytest.fixture(scope="module")
def gpt2_run(script, run_main, tmp_path_factory):
    return _layout_run(script, run_main, tmp_path_factory, "gpt2")


def test_layout_llama_saves_an_attnlab_llama_checkpoint(llama_run):
    """--layout llama: ``config.json`` says ``attnlab_llama`` (never ``llama``: GPT-2's MLP
    and learned positions), the weights carry Llama's names, which are the ones 13's Llama
    decoder expects, and the sidecars record the layout."""
    from safetensors.numpy import load_file

    directory = llama_run / "checkpoints" / "14_lm_qk_norm_d32"
    config = json.loads((directory / CONFIG).read_text())
    assert config["model_type"] == attnlab_llama.MODEL_TYPE
    assert config["attnlab"]["mlp"] == "plain" and config["attnlab"]["positions"] == "learned"
    names = set(load_file(directory / WEIGHTS))
    decoder = attnlab_llama.parse_attnlab_llama_config(config, str(directory))
    assert names == set(decoder_shapes(decoder))
    assert {POSITION_TABLE, "model.layers.1.self_attn.attnlab.scale"} <= names
    sidecar = json.loads((llama_run / SWEEP_CSV).with_suffix(".json").read_text())
    assert sidecar["flags"]["layout"] == "llama"


@pytest.mark.slow  # two 14 runs (one per layout) and 13 on each: 34 s of CPU cold
def test_13_on_the_llama_layout_reads_what_it_reads_in_gpt2s(
    llama_run, gpt2_run, run_main, load_script, tmp_path, capsys
):
    """13 end to end on an ``attnlab_llama`` directory writes its heads table, and on the
    trained weights its numbers are those of the same model saved in GPT-2's layout (the
    'initial' rows are each family's own re-initialisation, drawn differently)."""
    for name in CSVS:  # the layout changes what is saved, not what is trained
        assert (llama_run / name).read_bytes() == (gpt2_run / name).read_bytes(), name
    tables = {}
    for layout, run in (("llama", llama_run), ("gpt2", gpt2_run)):
        out = tmp_path / layout
        out.mkdir()
        argv = ["--checkpoint", run / "checkpoints" / "14_lm_qk_norm_d32", *TINY_13,
                "--out-dir", out]  # fmt: skip
        assert run_main(load_script("13_real_model"), argv) == 0, capsys.readouterr().err
        heads = pd.read_csv(out / "13_real_model_causal_heads.csv")
        layers = pd.read_csv(out / "13_real_model_causal_layers.csv")
        tables[layout] = heads[heads.model == "trained"].reset_index(drop=True), layers
    (mine, _), (theirs, layers) = tables["llama"], tables["gpt2"]
    assert len(mine) == 2 * 2  # layers x heads
    exact = ["checkpoint", "mechanism", "row_length", "layer", "head", "rows", "owner"]
    pd.testing.assert_frame_equal(mine[exact], theirs[exact])
    # The two forwards differ by float32 rounding only (LayerNorm as RMSNorm over a centred
    # stream, transposed matmuls): any logit by at most LOGIT_RTOL (15 * 128 u, u = 2^-24:
    # 128-wide contractions, 15 of them) of the layer's largest |z|. A row's std, its
    # largest softmax weight (softmax's Jacobian rows sum to 2 p (1 - p) <= 1/2 in absolute
    # value) and their percentiles over rows move by at most that much (measured: 3e-7).
    bound = LOGIT_RTOL * layers.max_abs_logit.to_numpy()[theirs.layer]
    for column in [c for c in theirs.columns if c.startswith(("logit_std_", "max_weight_"))]:
        change = np.abs(mine[column] - theirs[column]).to_numpy()
        assert (change <= bound).all(), (column, change, bound)


def test_a_checkpoints_link_leading_outside_is_refused_before_training(
    script, run_main, tmp_path, capsys, monkeypatch
):
    """``--out-dir/checkpoints`` a link leading outside it: the saved models' paths are
    checked before any training (the final move refused them after, all work lost): one
    line naming --out-dir and checkpoints, exit 2, nothing written anywhere."""

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the output folder was checked")

    monkeypatch.setattr(script, "run_pieces", no_training)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir(), elsewhere.mkdir()
    (out / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    assert _run(script, run_main, out, "--one-width", "32") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out-dir" in err and "checkpoints" in err
    assert [p.name for p in out.iterdir()] == ["checkpoints"] and not any(elsewhere.iterdir())


@pytest.mark.slow  # two more compiled programs: 27 s of CPU from an empty cache
def test_the_sink_set_writes_its_heads(script, run_main, tmp_path):
    """``--sink-mechanisms sink --sink-seeds 2`` at d_model 32: the sink table holds the
    sink mechanism's heads on both seeds at the best rate (2 layers x 2 heads each), with
    their lane's loss and a sink of its own taking weight (``null_weight`` > 0); the
    sweep's tables hold no row of it, and no model of it is saved."""
    out = tmp_path / "out"
    assert _run(script, run_main, out, "--mechanisms", "scaled", "--sink-mechanisms", "sink",
                "--sink-seeds", "2", "--one-width", "32") == 0  # fmt: skip
    sinks = pd.read_csv(out / SINKS_CSV)
    best = sinks[sinks.weights == "best"]
    assert set(sinks.mechanism) == {"sink"} and sorted(set(best.seed)) == [0, 1]
    assert len(best) == 2 * 2 * 2 and (best.null_weight > 0).all()
    assert best.final_val_loss.notna().all() and best.first_weight.between(0, 1).all()
    assert "sink" not in set(pd.read_csv(out / SWEEP_CSV).mechanism)
    assert not (out / "checkpoints" / "14_lm_sink_d32").exists()
