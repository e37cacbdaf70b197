"""Sizes checked before work (attnlab/harness/memory.py): a run whose flags need more memory
than the machine has is refused in one line naming the flag, before anything is computed;
the committed defaults are not."""

from __future__ import annotations

import dataclasses

import pytest

from attnlab.core.machine import MEMORY_ENV, memory_budget_bytes
from attnlab.core.softmax_sweeps import SoftmaxSweepConfig
from attnlab.harness import cli, memory
from attnlab.harness.errors import UsageError
from attnlab.harness.memory import Need, check_memory, check_needs, count, size, total_bytes
from attnlab.recall.config import RecallConfig
from attnlab.recall.flags import recall_needs
from attnlab.studies.companion.compute import CompanionConfig, companion_needs
from attnlab.studies.condensation.compute import CondensationConfig, condensation_needs
from attnlab.studies.failure_modes.compute import (
    CorrelationConfig,
    OverflowConfig,
    failure_modes_needs,
)
from attnlab.studies.lm_proxy.flags import DEFAULT as PROXY_DEFAULT
from attnlab.studies.lm_proxy.flags import QUICK as PROXY_QUICK
from attnlab.studies.lm_proxy.flags import proxy_jobs, proxy_needs
from attnlab.studies.remedies.flags import remedies_needs, remedies_run
from attnlab.studies.statics.compute import LogitVarianceConfig, logit_variance_needs
from attnlab.studies.statics.flags import sweep_needs
from attnlab.studies.widths.flags import widths_config, widths_needs

GIB = 2**30


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """``machine(n)`` makes this a machine of ``n`` bytes (``ATTNLAB_MEMORY_BYTES``)."""

    def set_bytes(n: int) -> None:
        monkeypatch.setenv(MEMORY_ENV, str(n))

    return set_bytes


# --- the check ------------------------------------------------------------------------------


def test_check_memory_allows_the_budget_and_refuses_one_byte_more(machine):
    machine(8 * GIB)
    budget = memory_budget_bytes()
    assert budget == 4 * GIB
    check_memory(budget, "--dk", "one chunk", 4)  # just under (at) the budget: allowed
    with pytest.raises(UsageError) as raised:
        check_memory(budget + 1, "--dk", "one chunk", 4000000000)
    message = str(raised.value)
    assert message.startswith("--dk: 4000000000 needs about 4.3 GB for one chunk, ")
    assert "over half the 8.6 GB this process may use; use a smaller value" in message
    assert "\n" not in message


def test_format_bytes_reads_at_every_scale():
    assert memory.format_bytes(999) == "999 B"
    assert memory.format_bytes(64 * 10**9) == "64.0 GB"
    assert memory.format_bytes(3_200 * 10**9) == "3.2 TB"
    assert memory.format_bytes(10**400) == "10^400 bytes"


def test_check_needs_names_the_flag_that_grew_in_the_largest_need(machine):
    machine(8 * GIB)
    small = Need(10**6, "the rows", (size("--trials", 2000, 2000),))
    large = Need(
        10**12,
        "one chunk",
        (size("--n-keys", 256, 256), size("--dk", [1, 4000000000], [1, 1024])),
    )
    check_needs([small])
    with pytest.raises(UsageError, match=r"^--dk: 4000000000 needs about 1\.0 TB for one chunk"):
        check_needs([small, large])
    many = Need(10**12, "the lanes", (count("--lrs", [1.0] * 600, [1.0] * 6),))
    with pytest.raises(UsageError, match=r"^--lrs: a list of 600 values needs about"):
        check_needs([many])


def test_a_flag_past_floats_still_gives_one_line(machine):
    machine(8 * GIB)
    need = Need(10**400, "the rows", (size("--trials", 10**400, 2000),))
    with pytest.raises(UsageError, match=r"^--trials: 1000+ needs about 10\^400 bytes"):
        check_needs([need])


# --- the scripts: absurd sizes refused before work ------------------------------------------

#: (script, flags, the flag named): the sizes issue 55 measured (tracebacks, a C++ abort,
#: a hang) and one per size flag of each script beside them.
ABSURD = [
    ("01_logit_variance", ["--samples", str(10**12)], "--samples"),
    ("01_logit_variance", ["--hp-samples", str(10**12)], "--hp-samples"),
    ("01_logit_variance", ["--dk", "4000000000"], "--dk"),
    ("02_saturation_sweep", ["--dk", "4000000000"], "--dk"),
    ("02_saturation_sweep", ["--trials", str(10**12)], "--trials"),
    ("03_jacobian_norm", ["--n-keys", str(10**12)], "--n-keys"),
    ("03_jacobian_norm", ["--n-keys", str(10**12), "--sampler", "exact"], "--n-keys"),
    ("04_associative_recall", ["--batch-size", str(10**8)], "--batch-size"),
    ("04_associative_recall", ["--dk", str(10**8)], "--dk"),
    ("04_associative_recall", ["--d-model", str(10**8)], "--d-model"),
    ("04_associative_recall", ["--eval-size", str(10**10)], "--eval-size"),
    ("04_associative_recall", ["--steps", str(10**12)], "--steps"),
    ("05_remedies", ["--dk", str(10**8)], "--dk"),
    ("05_remedies", ["--sensitivity-batch-sizes", "16", str(10**8)], "--sensitivity-batch-sizes"),
    ("06_condensation", ["--n-keys", str(10**12)], "--n-keys"),
    ("06_condensation", ["--trials", str(10**12)], "--trials"),
    ("07_failure_modes", ["--rows", str(10**12)], "--rows"),
    ("07_failure_modes", ["--samples", str(10**12)], "--samples"),
    ("07_failure_modes", ["--dk", "4000000000"], "--dk"),
    ("08_companion_claims", ["--trials", str(10**12)], "--trials"),
    ("08_companion_claims", ["--fold-setups", str(10**12)], "--fold-setups"),
    ("10_widths", ["--batch-size", str(10**8)], "--batch-size"),
    ("10_widths", ["--dk", "64", "256", "1024", str(10**8)], "--dk"),
    ("10_widths", ["--jacobian-trials", str(10**12)], "--jacobian-trials"),
    ("14_lm_proxy", ["--widths", "16000000"], "--widths"),
    ("14_lm_proxy", ["--one-width", "16000000"], "--one-width"),
    ("14_lm_proxy", ["--steps", str(10**12)], "--steps"),
]


def _forbidden(*args, **kwargs):
    raise AssertionError("the run went on to compute: its sizes must be refused before")


@pytest.mark.parametrize(("name", "words", "flag"), ABSURD)
def test_an_absurd_size_is_refused_in_one_line(
    name, words, flag, load_script, run_main, tmp_path, capsys, monkeypatch, machine
):
    machine(8 * GIB)
    monkeypatch.setattr(cli, "progress", _forbidden)  # every script computes under a bar
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = run_main(load_script(name), [*words, "--quiet", "--out-dir", out_dir])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n"), captured.err
    assert "Traceback" not in captured.err
    assert f"error: {flag}: " in captured.err, captured.err
    assert "over half the 8.6 GB this process may use; use a smaller value" in captured.err
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("word", ["1e12", "1e8", "4e9"])
def test_a_size_in_float_notation_is_refused_in_one_line(word, load_script, run_main, capsys):
    """Integer flags take integers only: ``--samples 1e12`` is one line naming the flag."""
    code = run_main(load_script("01_logit_variance"), ["--samples", word, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--samples" in err and word in err


# --- the committed defaults: never refused --------------------------------------------------


def _parsed(load_script, name: str):
    return load_script(name).build_parser().parse_args([])


def test_the_defaults_fit_a_machine_of_8_gib(load_script, machine):
    """Every script's estimate at its committed defaults is under the budget of a machine
    of 8 GiB (half of it, 4 GiB), 14 with the 16 workers of a 16-core machine."""
    machine(8 * GIB)
    budget = memory_budget_bytes()
    estimates = {
        "01": logit_variance_needs(LogitVarianceConfig()),
        "02/03": sweep_needs(SoftmaxSweepConfig()),
        "02/03 exact": sweep_needs(SoftmaxSweepConfig(sampler="exact")),
        "04": recall_needs(RecallConfig()),
        "05": remedies_needs(remedies_run(_parsed(load_script, "05_remedies"))),
        "06": condensation_needs(CondensationConfig()),
        "07": failure_modes_needs(OverflowConfig(), CorrelationConfig()),
        "08": companion_needs(CompanionConfig()),
        "10": widths_needs(widths_config(_parsed(load_script, "10_widths"))),
        "14": proxy_needs(PROXY_DEFAULT, proxy_jobs(PROXY_DEFAULT, 16)),
        "14 --quick": proxy_needs(PROXY_QUICK, proxy_jobs(PROXY_QUICK, 16)),
    }
    for script, needs in estimates.items():
        assert total_bytes(needs) <= budget, (script, memory.format_bytes(total_bytes(needs)))
        check_needs(needs)


def test_a_larger_run_that_fits_is_allowed(machine):
    """Sizes well past the defaults that a machine of 8 GiB holds are not refused."""
    machine(8 * GIB)
    check_needs(sweep_needs(SoftmaxSweepConfig(dks=(1, 2**16), trials=20_000)))
    check_needs(recall_needs(dataclasses.replace(RecallConfig(), d_k=4096, batch_size=256)))
    check_needs(condensation_needs(CondensationConfig(n_keys=(4, 2**16), trials=2000)))


def test_fitting_jobs_takes_the_most_workers_that_fit(machine):
    """On an 8 GiB machine (a 4.3 GB budget), pieces of 1 GB each: four at once fit, five
    do not; a piece larger than the budget leaves one worker (check_needs then refuses)."""
    machine(8 * GIB)
    piece = Need(10**9, "a piece", ())
    assert memory.fitting_jobs(lambda j: [piece] * j, 16) == 4
    assert memory.fitting_jobs(lambda j: [piece] * j, 3) == 3
    assert memory.fitting_jobs(lambda j: [Need(10**10, "a piece", ())] * j, 16) == 1
