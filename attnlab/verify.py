"""Do regenerated results agree with the committed ones? (``make verify``)

Byte-identical CSVs hold only on one CPU, and unscaled training is chaotic under float32
rounding, so each CSV is compared with the committed one column by column, with one rule
per column, declared once beside the column in its study's ``study.py``
(``attnlab.harness.declaration``) and collected in :data:`SPECS`:

* **keys** (d_k, n, variant, seed, step, ...): the two CSVs hold the same rows, matched by
  their key columns (compared as text, order ignored). A missing or extra row fails; two
  rows with the same keys in either CSV make it malformed (a DataError, never "agrees").
* **se** ``(mean, se)``: Monte-Carlo means with standard errors agree when
  ``|a - b| <= 4 sqrt(2) sqrt(se_a^2 + se_b^2)`` (the report's 4 sqrt(2) SEM rule on the
  combined SE). Regenerating with fewer trials (``--quick``) stays valid: its SE is larger.
  An SE of 0 on both sides (identities: d_k = 1, closed forms in 08) demands equality.
* **exact**: equal values (NaN equals NaN): fold-at-checkpoint identities, failure-mode
  verdicts, closed-form predictions.
* **close** ``(column, atol, rtol)``: deterministic but rounding-sensitive values
  (float16 errors, step-0 gradients): ``|a - b| <= atol + rtol |b|`` (equal infs pass);
  atol is float16's eps 2^-10 for TV errors, bfloat16's 2^-7 for masked row sums, 4 of 256
  rows for zero-row fractions; rtol 1% for the step-0 gradient ratio (TF32 matmuls).
* **seed_range**: per-seed training results (04, 05), per group of the key columns other
  than ``seed``: with the committed seeds' values ``c`` and the regenerated ones ``r``,
  ``w = max(max c - min c, floor * |median c|)``, agree when
  ``min c - w <= median r <= max c + w``. NaN ("never": a milestone not reached, no
  plateau) counts as +inf, so a committed "never" on some seeds widens the range to
  everything and a "never" on all seeds demands a "never" median. ``floor`` is 0 except
  for 05_sensitivity, whose cells have one seed each (no spread): floor 1, a band of
  ``[0, 2c]`` (the unscaled seeds of 04/05 spread by 0.3-2x their median). A column may
  declare a floor of its own and an absolute width ``atol``:
  ``w = max(spread, floor * |median c|, atol)``; 14's one-seed columns take their floors
  from five seeds' spread, and a value 0 in exact arithmetic its float32 bound as ``atol``
  (``attnlab.studies.lm_proxy.study``).
* **chaotic** (a subset of a CSV's seed_range columns): whether unscaled training stalls on
  a plateau, or reaches a milestone before the run ends, flips from seed to seed under
  float32 rounding alone: the committed code regenerated with one XLA thread instead of two
  turned 05's unscaled plateaus from "none" on 3 of 3 seeds to found on 2 of 3, and one
  sensitivity cell's loss-0.1 step from 1110 to "never". With one to three seeds no
  statement about how often that happens can be made, so for these columns a "never"
  (NaN) is left out: the seeds' finite values follow the seed_range rule with the floor of
  one-seed cells (1: a band of ``[0, 2c]`` around a single value), and a group with no
  finite value on one side agrees (its detail says so).
* **chance, counted** (seed_range groups of two or more seeds, no floor): with few seeds the
  range rule fails by chance even when both sides are draws of one distribution: for iid
  normal seeds a group is outside its widened range with probability ``p(n_c, n_r)``, 8.3%
  for 3 against 3 and 0.65% for 5 against 5 (``chance_outside``, simulated). A column of
  ``G`` groups therefore agrees when (a) at most ``allowed`` groups are outside, the
  ``1 - ALPHA`` quantile of Binomial(G, p), never all of them, and (b) no group is outside
  by more than ``K`` of its spreads, ``K`` the ``1 - ALPHA / G`` quantile of that
  distance under the same null (``gross_multiple``). With ``ALPHA = 1e-3`` a faithful
  regeneration fails a column with probability about 1e-3 (more where groups are
  correlated), while a systematic shift moves many groups and a gross one any group.
  For 3 seeds and 56 groups ``K`` is about 100 spreads: 3 seeds catch only systematic or
  gross changes. A column of one group keeps the plain rule (none outside allowed).
* **curves** (per step): rows must match on (variant, seed, step); each seed's curve is
  then summarised by its mean over steps, and those means follow the seed_range rule.
* **unchecked**: trial counts (``--quick`` lowers them; the SE carries them) and columns
  derived from checked ones (ratios, z-scores).

A CSV *agrees* when every rule holds. Each check gets a score, <= 1 when it holds; the
worst one is reported (SE: ``z / 4 sqrt(2)`` with ``z = |a - b| / combined SE``; range: the
distance from the centre in half-widths, or ``1 + distance outside / w``).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.harness.declaration import CsvSpec
from attnlab.harness.errors import RunError
from attnlab.harness.io import read_csv_checked, require_unique_keys
from attnlab.studies import STUDIES, made_by

SE_LIMIT = 4 * math.sqrt(2)
SEED = "seed"
EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"


def script_of(name: str) -> str:
    """The script (stem under ``experiments/``) that makes ``name``, from the registry."""
    for study in STUDIES:
        if name in study.outputs:
            return study.outputs[name].script.removesuffix(".py")
    raise KeyError(name)


def arguments_of(name: str) -> str:
    """The flags beyond ``--out-dir`` the study of ``name`` runs its script with."""
    return next(study.arguments_of(name) for study in STUDIES if name in study.outputs)


#: Result CSV -> its rules, from the studies' declarations: every CSV in results/ but the
#: timings and the cards.
SPECS: dict[str, CsvSpec] = {
    name: output.spec()
    for study in STUDIES
    if study.verified
    for name, output in study.outputs.items()
}


def selected(quick: bool, only: Iterable[str] | None = None) -> list[str]:
    """The CSVs a run checks: all, or with ``quick`` the statics and failure modes; with
    ``only``, those of them named there."""
    named = None if only is None else set(only)
    return [
        name
        for name, spec in SPECS.items()
        if (not quick or spec.quick_flags is not None) and (named is None or name in named)
    ]


@dataclass(frozen=True)
class Finding:
    column: str
    score: float  # <= 1 when the rule holds
    detail: str


@dataclass(frozen=True)
class Verdict:
    name: str
    findings: tuple[Finding, ...]

    @property
    def agrees(self) -> bool:
        return all(f.score <= 1 for f in self.findings)

    def line(self) -> str:
        worst = max(self.findings, key=lambda f: f.score, default=None)
        where = f"worst {worst.column}: {worst.detail}" if worst else "nothing to compare"
        return f"{self.name:<34} {'agrees' if self.agrees else 'differs':<7} {where}"


def _label(keys: Iterable[str], values: Iterable[object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True)) or "all seeds"


def _equal(a: pd.Series, b: pd.Series) -> np.ndarray:
    if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
        x, y = a.to_numpy(float), b.to_numpy(float)
        return (x == y) | (np.isnan(x) & np.isnan(y))
    return (a.astype(str) == b.astype(str)).to_numpy()


def _worst_row(score: np.ndarray) -> int:
    return int(np.argmax(np.where(np.isnan(score), np.inf, score)))


def check_se(a: np.ndarray, se_a: np.ndarray, b: np.ndarray, se_b: np.ndarray) -> np.ndarray:
    """z = |a - b| / sqrt(se_a^2 + se_b^2) per row (0 where equal, inf where unmatched)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.abs(a - b) / np.hypot(se_a, se_b)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    return np.where(same, 0.0, np.where(np.isnan(z), np.inf, z))


def check_close(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """|a - b| / (atol + rtol |b|) per row: the score of the ``close`` rule."""
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.abs(a - b) / (atol + rtol * np.abs(b))
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    return np.where(same, 0.0, np.where(np.isnan(score), np.inf, score))


def seed_range(
    committed: np.ndarray,
    ours: np.ndarray,
    floor: float = 0.0,
    chaotic: bool = False,
    atol: float = 0.0,
) -> tuple[float, str]:
    """The seed_range rule for one group and column: (score, detail). ``chaotic``: NaNs are
    left out (the module docstring's chaotic rule); ``atol``: the least width."""
    if chaotic:
        finite_c, finite_r = committed[~np.isnan(committed)], ours[~np.isnan(ours)]
        if not (finite_c.size and finite_r.size):
            return 0.0, (
                f"found on {finite_r.size} of {ours.size} seeds against "
                f"{finite_c.size} of {committed.size} (chaotic: not compared)"
            )
        committed, ours, floor = finite_c, finite_r, max(floor, 1.0)
    c = np.where(np.isnan(committed), np.inf, committed)
    r = np.where(np.isnan(ours), np.inf, ours)
    low, high, median = float(c.min()), float(c.max()), float(np.median(r))
    spread = 0.0 if low == high else high - low
    w = max(spread, floor * abs(float(np.median(c))) if floor else 0.0, atol)
    lo, hi = (-math.inf, math.inf) if math.isinf(w) else (low - w, high + w)
    text = f"median {median:.6g} of {len(r)} seeds, widened range [{lo:.6g}, {hi:.6g}]"
    if lo <= median <= hi:
        half = (hi - lo) / 2
        inside = abs(median - (lo + hi) / 2) / half if 0 < half < math.inf else 0.0
        return inside, text
    outside = lo - median if median < lo else median - hi
    score = 1 + outside / w if 0 < w < math.inf and not math.isinf(outside) else math.inf
    return score, f"{text}: outside by {outside:.6g}" + (
        f" ({outside / w:.2g} spreads)" if w else ""
    )


#: The false-failure rate per column that the counted rule allows (see the module docstring).
ALPHA = 1e-3
#: Draws of the null simulation behind ``chance_outside`` and ``gross_multiple``.
NULL_DRAWS = 1_000_000


@cache
def _null_distance(n_committed: int, n_ours: int) -> np.ndarray:
    """Sorted distances outside the widened range, in spreads (0 inside), of the median of
    ``n_ours`` iid N(0, 1) seeds against ``n_committed`` others: the null of seed_range."""
    rng = np.random.default_rng(0)
    c = rng.standard_normal((NULL_DRAWS, n_committed))
    r = np.median(rng.standard_normal((NULL_DRAWS, n_ours)), axis=1)
    low, high = c.min(axis=1), c.max(axis=1)
    w = high - low
    return np.sort(np.maximum(np.maximum(low - w - r, r - high - w), 0.0) / w)


def chance_outside(n_committed: int, n_ours: int) -> float:
    """``p(n_c, n_r)``: how often a faithful group is outside its widened range."""
    return float(np.mean(_null_distance(n_committed, n_ours) > 0))


def gross_multiple(n_committed: int, n_ours: int, level: float) -> float:
    """``K``: the distance outside (in spreads) exceeded with probability ``level``."""
    null = _null_distance(n_committed, n_ours)
    return float(null[min(len(null) - 1, int(np.ceil((1 - level) * len(null))))])


def allowed_outside(groups: int, p: float) -> int:
    """The ``1 - ALPHA`` quantile of Binomial(groups, p), at most ``groups - 1``."""
    total = 0.0
    for k in range(groups):
        total += math.comb(groups, k) * p**k * (1 - p) ** (groups - k)
        if total >= 1 - ALPHA:
            return k
    return groups - 1


@dataclass(frozen=True)
class _GroupCheck:
    score: float
    text: str
    group: tuple
    n_committed: int
    n_ours: int


def _column_finding(name: str, checks: list[_GroupCheck], groups: list[str], counted: bool):
    """One column's finding: the worst group, or (``counted``) the chance rule over groups."""
    worst = max(checks, key=lambda check: check.score)
    where = f"{worst.text} at {_label(groups, worst.group)}"
    sizes = {(c.n_committed, c.n_ours) for c in checks}
    if not counted or worst.score <= 1 or min(n for pair in sizes for n in pair) < 2:
        return Finding(name, worst.score, where)
    outside = [c for c in checks if c.score > 1]
    p = max(chance_outside(*pair) for pair in sizes)
    allowed = allowed_outside(len(checks), p)
    gross = min(gross_multiple(*pair, ALPHA / len(checks)) for pair in sizes)
    distance = worst.score - 1  # spreads outside the widened range
    count = f"{len(outside)} of {len(checks)} groups outside (allowed {allowed} at p {p:.2g})"
    text = f"{count}; worst {distance:.2g} spreads (gross above {gross:.3g}): {where}"
    if len(outside) > allowed:
        return Finding(name, 1 + (len(outside) - allowed) / len(checks), text)
    if distance > gross:
        return Finding(name, 1 + (distance - gross) / max(gross, 1.0), text)
    return Finding(name, max(len(outside) / (allowed + 1), distance / (gross + 1)), text)


def _seed_ranges(spec: CsvSpec, ours: pd.DataFrame, ref: pd.DataFrame) -> list[Finding]:
    keys = [k for k in spec.keys if k != spec.curve_step]
    cols = list(spec.seed_range)
    if spec.curve_step:
        ours, ref = (f.groupby(keys, sort=False)[cols].mean().reset_index() for f in (ours, ref))
    groups = [k for k in keys if k != SEED]
    ref_groups, our_groups = (
        dict(iter(f.groupby(groups, sort=False))) if groups else {(): f} for f in (ref, ours)
    )
    widths = {column: (floor, atol) for column, floor, atol in spec.widths}
    findings = []
    for column in cols:
        chaotic = column in spec.chaotic
        floor, atol = widths.get(column, (spec.spread_floor, 0.0))
        checks = []
        for g, c in ref_groups.items():
            committed = c[column].to_numpy(float)
            regenerated = our_groups[g][column].to_numpy(float)
            score, text = seed_range(committed, regenerated, floor, chaotic, atol)
            checks.append(_GroupCheck(score, text, g, committed.size, regenerated.size))
        name = f"{column} (mean over steps)" if spec.curve_step else column
        counted = not chaotic and not floor and not atol
        findings.append(_column_finding(name, checks, groups, counted))
    return findings


def compare(spec: CsvSpec, ours: pd.DataFrame, ref: pd.DataFrame) -> list[Finding]:
    """Every rule of ``spec`` applied to ``ours`` against the committed ``ref``."""
    missing = [c for c in spec.columns() if c not in ours.columns]
    if missing:
        return [Finding(c, math.inf, "column missing") for c in missing]
    keys = list(spec.keys)
    ours, ref = (f.astype({k: str for k in keys}) for f in (ours, ref))
    if ours.duplicated(keys).any():
        return [Finding("rows", math.inf, "duplicate key rows")]
    ours_idx, ref_idx = (pd.MultiIndex.from_frame(f[keys]) for f in (ours, ref))
    lacking, extra = ref_idx.difference(ours_idx), ours_idx.difference(ref_idx)
    if len(lacking) or len(extra):
        first = _label(keys, (lacking if len(lacking) else extra)[0])
        text = f"{len(lacking)} committed rows missing, {len(extra)} extra (first: {first})"
        return [Finding("rows", math.inf, text)]
    ours = ours.iloc[ours_idx.get_indexer(ref_idx)].reset_index(drop=True)
    ref = ref.reset_index(drop=True)

    def at(row: int) -> str:
        return _label(keys, ref.loc[row, keys])

    findings = []
    for mean, se in spec.se:
        a, b = ours[mean].to_numpy(float), ref[mean].to_numpy(float)
        z = check_se(a, ours[se].to_numpy(float), b, ref[se].to_numpy(float))
        i = _worst_row(z)
        text = (
            f"{z[i]:.2f} SE (limit {SE_LIMIT:.2f}) at {at(i)}: {a[i]:.6g} vs committed {b[i]:.6g}"
        )
        findings.append(Finding(mean, z[i] / SE_LIMIT, text))
    for column in spec.exact:
        equal = _equal(ours[column], ref[column])
        if equal.all():
            findings.append(Finding(column, 0.0, f"all {len(equal)} rows equal"))
            continue
        i = int(np.argmin(equal))
        text = (f"{(~equal).sum()} of {len(equal)} rows differ, first at {at(i)}: "
                f"{ours.loc[i, column]} vs {ref.loc[i, column]}")  # fmt: skip
        findings.append(Finding(column, math.inf, text))
    for column, atol, rtol in spec.close:
        a, b = ours[column].to_numpy(float), ref[column].to_numpy(float)
        score = check_close(a, b, atol, rtol)
        i = _worst_row(score)
        text = f"|{a[i]:.6g} - {b[i]:.6g}| = {score[i]:.2g} x tolerance at {at(i)}"
        findings.append(Finding(column, float(score[i]), text))
    return findings + _seed_ranges(spec, ours, ref)


def read_keyed(path: Path, spec: CsvSpec, command: str) -> pd.DataFrame:
    """The CSV at ``path`` (``read_csv_checked``: cut short, not a CSV or lacking one of
    ``spec``'s columns is a DataError naming it and ``command``), refused as well when two
    of its rows have the same keys (``require_unique_keys``)."""
    frame = read_csv_checked(path, spec.columns(), command)
    require_unique_keys(frame, spec.keys, path, command)
    return frame


def verify_csv(name: str, results_dir: Path, reference_dir: Path) -> Verdict:
    """Compare ``results_dir/name`` with ``reference_dir/name``. A missing result is a
    difference; a malformed result or reference (cut short, not a CSV, lacking a column,
    rows with the same keys), or a missing reference, raises a DataError naming it."""
    spec = SPECS[name]
    command = made_by(name)
    ref = read_keyed(reference_dir / name, spec, command)
    if not (results_dir / name).is_file():
        text = f"{results_dir / name} is missing; run `{command}` to make it"
        return Verdict(name, (Finding("file", math.inf, text),))
    ours = read_keyed(results_dir / name, spec, command)
    try:
        return Verdict(name, tuple(compare(spec, ours, ref)))
    except (ValueError, TypeError) as err:  # e.g. text in a numeric column
        reason = " ".join(str(err).split())
        return Verdict(name, (Finding("file", math.inf, f"unreadable values ({reason})"),))


def run_script(script: str, argv: list[str]) -> int:
    """``experiments/<script>.py``'s ``main(argv)`` in this process, as an exit status."""
    path = EXPERIMENTS_DIR / f"{script}.py"
    module_name = f"attnlab_verify_{script}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    module_spec.loader.exec_module(module)
    try:
        code = module.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return 0 if code is None else int(code)


def regenerate(
    names: Iterable[str],
    into: Path,
    quick: bool,
    quiet: bool,
    run: Callable[[str, list[str]], int] = run_script,
) -> None:
    """Run each script that makes one of ``names`` once, its outputs going into ``into``."""
    scripts: dict[tuple[str, str], list[str]] = {}
    for name in names:
        spec = SPECS[name]
        flags = list(spec.quick_flags or ()) if quick else []
        target = into / name if spec.out_flag == "--out" else into
        arguments = arguments_of(name)  # one script may run twice (13: BERT, then GPT-2)
        argv = [*arguments.split(), *flags, spec.out_flag, str(target)]
        scripts.setdefault((script_of(name), arguments), argv)
    for (script, _), argv in scripts.items():
        argv = [*argv, "--quiet"] if quiet else argv
        if not quiet:
            print(f"regenerating: experiments/{script}.py {' '.join(argv)}", file=sys.stderr)
        code = run(script, argv)
        if code != 0:
            raise RunError(f"experiments/{script}.py {' '.join(argv)} exited with status {code}")


def verdicts_of(
    names: Sequence[str], results_dir: Path | None, reference_dir: Path, quick: bool, quiet: bool
) -> list[Verdict]:
    """The verdict on each of ``names`` against ``reference_dir``'s CSV: the CSV in
    ``results_dir``, or, where it is None, regenerated into a temporary folder
    (``regenerate``, with ``quick`` and ``quiet``), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="attnlab-verify-") as tmp:
        if results_dir is None:
            results_dir = Path(tmp)
            regenerate(names, results_dir, quick, quiet)
        return [verify_csv(name, results_dir, reference_dir) for name in names]


def tally(verdicts: Sequence[Verdict], reference_dir: Path, seconds: float) -> str:
    """The check's last line: how many of ``verdicts`` agree with ``reference_dir``'s CSVs,
    and the ``seconds`` it took."""
    agree = sum(v.agrees for v in verdicts)
    return f"{agree} of {len(verdicts)} CSVs agree with {reference_dir} ({seconds:.0f} s)"


def check_agreement(verdicts: Sequence[Verdict], reference_dir: Path) -> None:
    """A RunError naming every CSV of ``verdicts`` that differs from ``reference_dir``'s;
    nothing when all agree."""
    differ = [v.name for v in verdicts if not v.agrees]
    if differ:
        raise RunError(f"{', '.join(differ)} differ from {reference_dir}")
