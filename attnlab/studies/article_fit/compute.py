"""Experiment 09's computation: screen, fit (scaled numbers only) and prediction.

See the package docstring for the score. Nothing here reads an unscaled number before
stage 3: stage 2 trains only ``scaled`` attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import jax
import numpy as np
import pandas as pd

from attnlab.core.curves import summarize_losses
from attnlab.core.temperature import MECHANISMS
from attnlab.harness.errors import RunError
from attnlab.recall.config import RecallConfig
from attnlab.recall.readings import (
    FIRST_SMOOTHING,
    RUN_LENGTHS,
    Reading,
    Smoothing,
    get_reading,
    kept,
    padded_groups,
    reading_config,
    step0_fingerprints,
)
from attnlab.recall.tables import MILESTONES, curves_frame, summary_frame
from attnlab.recall.trainer import Run, Trainer, TrainResult
from attnlab.studies.article_fit.study import (
    ARTICLE_SCALED,
    BOOTSTRAP_REPLICATES,
    NOISE_SE,
    TERMS,
)

#: The smoothed-loss thresholds of the two milestone terms.
THRESHOLDS: dict[str, float] = dict(MILESTONES)


def screen(readings: Iterable[Reading], seeds: int, seed: int) -> pd.DataFrame:
    """Stage 1: ``step0_fingerprints`` with the ``kept`` column."""
    frame = step0_fingerprints(list(readings), seeds=seeds, seed=seed)
    frame["kept"] = kept(frame)
    return frame


def score(logs: Mapping[str, float]) -> float:
    """Root-mean-square of the log ratios given (NaN terms are left out)."""
    values = [v for v in logs.values() if not math.isnan(v)]
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else math.nan


def log_ratio(ours: float, term: str) -> float:
    return math.log(ours / ARTICLE_SCALED[term]) if ours > 0 else math.nan


def seed_numbers(
    metrics: Mapping[str, np.ndarray],
    smoothing: Smoothing,
    run_lengths: Sequence[int],
    horizon: int | None = None,
) -> dict[str, np.ndarray]:
    """The scaled numbers of one trained reading, one value per seed (``metrics["loss"]``
    and ``metrics["grad_norm_wq"]``, ``[seeds, steps]`` from step 0): step-0
    ``||grad W_Q||``; both milestones of the loss under ``smoothing``, a seed that never
    crosses counting as crossing at ``horizon`` (the number of steps trained if None), with
    a ``censored_*`` flag; and the smoothed loss at step ``L - 1`` for every run length
    ``L`` trained."""
    run = summarize_losses(metrics["loss"], smoothing, THRESHOLDS.items())
    smoothed = run.smoothed
    horizon = smoothed.shape[1] if horizon is None else horizon
    out = {"grad_norm_wq": np.asarray(metrics["grad_norm_wq"][:, 0])}
    for term in THRESHOLDS:
        steps = run.milestones[term]
        out[term] = np.array([horizon if s is None else s for s in steps], np.float64)
        out["censored_" + term.removeprefix("step_loss_below_")] = np.array(
            [s is None for s in steps]
        )
    for length in run_lengths:
        if length <= smoothed.shape[1]:
            out[f"final_loss_{length}"] = smoothed[:, length - 1]
    return out


def median_numbers(per_seed: Mapping[str, np.ndarray], horizon: int) -> dict[str, float]:
    """``seed_numbers`` reduced over seeds: the median of every number, the count of
    censored seeds per milestone, and the ``horizon``."""
    out: dict[str, float] = {"horizon": horizon}
    for key, values in per_seed.items():
        censored = key.startswith("censored_")
        out[key] = int(values.sum()) if censored else float(np.median(values))
    return out


def score_row(
    reading: str, stage: str, numbers: Mapping[str, float], seeds: int, run_lengths: Sequence[int]
) -> dict:
    """One row of the scores table: the terms, the best run length (if any run length is
    within the horizon) and the score over the terms present."""
    row = {
        "reading": reading,
        "pass": stage,
        "seeds": seeds,
        **{
            k: numbers[k]
            for k in (
                "horizon",
                "grad_norm_wq",
                "step_loss_below_1",
                "step_loss_below_0p1",
                "censored_1",
                "censored_0p1",
            )
        },
    }
    finals = {L: numbers[f"final_loss_{L}"] for L in run_lengths if f"final_loss_{L}" in numbers}
    if finals:
        best = min(finals, key=lambda L: (abs(log_ratio(finals[L], "final_loss")), L))
        row["final_loss"], row["best_run_length"] = finals[best], best
    else:
        row["final_loss"], row["best_run_length"] = math.nan, None
    logs = {t: log_ratio(row[t], t) if not math.isnan(row[t]) else math.nan for t in TERMS}
    row.update({f"log_{t}": v for t, v in logs.items()})
    row["score"] = score(logs)
    return row


def rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Rank each pass's rows by score (1 = best; ties by reading name), best first."""
    frame = frame.sort_values(["pass", "score", "reading"], kind="stable").reset_index(drop=True)
    frame["rank"] = frame.groupby("pass").cumcount() + 1
    return frame


#: The bootstrap's key is ``fold_in(key(seed), BOOTSTRAP_STREAM)``, apart from the seeds' own
#: streams (``seed_keys`` folds in 0, 1 and 2).
BOOTSTRAP_STREAM = 9


def replicate_scores(
    per_seed: Mapping[str, np.ndarray], indices: np.ndarray, run_lengths: Sequence[int]
) -> np.ndarray:
    """The score recomputed on resampled seeds: row ``b`` of ``indices`` ``[B, n]`` picks the
    seeds of replicate ``b`` from ``per_seed`` (``seed_numbers``); each term is the median
    over the picked seeds, the final-loss term again takes the best of ``run_lengths``
    (those trained), and the score is ``score``'s root-mean-square log ratio. Returns
    ``[B]``; the identity resample gives ``score_row``'s score."""

    def log_ratio_of_medians(values: np.ndarray, term: str) -> np.ndarray:
        median = np.median(values[indices], axis=1)
        return np.log(np.where(median > 0, median, np.nan) / ARTICLE_SCALED[term])

    logs = [log_ratio_of_medians(per_seed[t], t) for t in TERMS if t != "final_loss"]
    finals = [
        log_ratio_of_medians(per_seed[f"final_loss_{length}"], "final_loss")
        for length in sorted(run_lengths)
        if f"final_loss_{length}" in per_seed
    ]
    if finals:
        finals = np.stack(finals)  # [lengths, B]; ties go to the shorter run, as score_row
        best = np.argmin(np.where(np.isnan(finals), np.inf, np.abs(finals)), axis=0)
        logs.append(np.take_along_axis(finals, best[None], axis=0)[0])
    squares = np.square(np.stack(logs))
    present = ~np.isnan(squares)
    return np.sqrt(np.where(present, squares, 0).sum(0) / present.sum(0))


def score_noise(
    frame: pd.DataFrame,
    per_seed: Mapping[str, Mapping[str, np.ndarray]],
    run_lengths: Sequence[int],
    key: jax.Array,
    replicates: int = BOOTSTRAP_REPLICATES,
) -> pd.DataFrame:
    """The noise columns of one ranked pass (``frame``; ``per_seed[reading]`` its readings'
    ``seed_numbers``, every reading on the same ``n`` seeds): the seeds are resampled with
    replacement, the same draw for every reading (they share seeds, hence data streams);
    ``score_se`` is the bootstrap standard deviation of a reading's score, ``gap_se`` that
    of its score minus the pass's best, and ``within_noise`` holds when
    ``score - best <= NOISE_SE * gap_se`` (always for the best itself)."""
    n = len(next(iter(per_seed.values()))["grad_norm_wq"])
    indices = np.asarray(jax.random.randint(key, (replicates, n), 0, n))
    scores = {r: replicate_scores(per_seed[r], indices, run_lengths) for r in frame.reading}
    best = frame.reading.iloc[int(np.argmin(frame["rank"].to_numpy()))]
    best_score = float(frame.score[frame.reading == best].iloc[0])
    out = frame.copy()
    out["score_se"] = [float(np.std(scores[r], ddof=1)) for r in frame.reading]
    out["gap_se"] = [float(np.std(scores[r] - scores[best], ddof=1)) for r in frame.reading]
    out["within_noise"] = (out.reading == best) | (out.score - best_score <= NOISE_SE * out.gap_se)
    return out


#: Steps per compiled chunk of the fit's runs (an early stop is decided between chunks).
FIT_CHUNK = 100
#: The per-step metrics the fit records.
FIT_METRICS = ("loss", "grad_norm_wq")


def all_crossed(threshold: float, smoothings: Sequence[Smoothing]) -> Callable[[Trainer], bool]:
    """An early stop: under every one of ``smoothings``, every lane's smoothed loss has been
    at or below ``threshold`` (later steps cannot change a milestone)."""

    def stop(trainer: Trainer) -> bool:
        loss = trainer.metrics["loss"]
        return all(bool((s(loss) <= threshold).any(axis=1).all()) for s in smoothings)

    return stop


def candidates(screen_frame: pd.DataFrame, limit: int) -> list[str]:
    """The kept readings, nearest the article's step-0 norm first (the score's first term,
    a scaled number); the first ``limit`` of them (all if ``limit`` is 0)."""
    frame = screen_frame[screen_frame["kept"].astype(bool)].copy()
    frame["distance"] = np.abs(np.log(frame.grad_norm_wq_scaled / ARTICLE_SCALED["grad_norm_wq"]))
    names = frame.sort_values(["distance", "name"], kind="stable")["name"].tolist()
    return names if limit == 0 else names[:limit]


def train_scaled(
    readings: Sequence[Reading],
    base: RecallConfig,
    until: int,
    stop: Callable[[Trainer], bool] | None = None,
    on_reading: Callable[[int], None] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Scaled attention of every reading on ``base``'s seeds (``train``'s initialisation,
    batch stream and Adam), to step ``until`` or until ``stop`` holds for its group; each
    reading's ``FIT_METRICS`` from step 0, ``[seeds, steps]``. The readings of one slot,
    bias and batch size train as lanes of one ``Trainer``, zero-padded to the group's
    widest d_model (``padded_groups``: the same training, to float32 summation order)."""
    out = {}
    for config, group, states in padded_groups(readings, base):
        runs = [
            Run(config, MECHANISMS["scaled"], state=s, label=r.name)
            for r, s in zip(group, states, strict=True)
        ]
        trainer = Trainer(runs, metrics=FIT_METRICS)
        trainer.run(until, stop=stop)
        for run, metrics in zip(runs, trainer.metrics_by_run(), strict=True):
            out[run.label] = metrics
        if on_reading:
            on_reading(len(group))
    return out


#: How a fit names a member: its reading and the smoothing its milestones are read under.
Naming = Callable[[Reading, Smoothing], str]


def by_reading(reading: Reading, smoothing: Smoothing) -> str:
    """The first fit's names: one smoothing, so the reading alone."""
    return reading.name


def first_member(name: str) -> tuple[Reading, Smoothing]:
    """The first fit's member ``name``: that reading, read under ``FIRST_SMOOTHING``."""
    return get_reading(name), FIRST_SMOOTHING


def _scored(
    trained: Mapping[str, Mapping[str, np.ndarray]],
    smoothings: Sequence[Smoothing],
    naming: Naming,
    stage: str,
    lengths: Sequence[int],
    horizon: int,
) -> tuple[pd.DataFrame, dict[str, dict[str, np.ndarray]], dict[str, str]]:
    """Every smoothing of every trained reading scored (``score_row``), ranked; with the
    per-seed numbers ``score_noise`` resamples and each member's reading."""
    rows, per_seed, reading_of = [], {}, {}
    for name, metrics in trained.items():
        seeds = metrics["loss"].shape[0]
        for smoothing in smoothings:
            member = naming(get_reading(name), smoothing)
            per_seed[member] = seed_numbers(metrics, smoothing, lengths, horizon)
            numbers = median_numbers(per_seed[member], horizon)
            rows.append({**score_row(member, stage, numbers, seeds, lengths),
                         "smoothing": smoothing.name})  # fmt: skip
            reading_of[member] = name
    return rank(pd.DataFrame(rows)), per_seed, reading_of


def finalist_readings(ranked: pd.DataFrame, reading_of: Mapping[str, str], n: int) -> list[str]:
    """The readings of a ranked pass's best members, best first, until ``n`` distinct."""
    names: list[str] = []
    for member in ranked.sort_values("rank").reading:
        if reading_of[member] not in names:
            names.append(reading_of[member])
        if len(names) == n:
            break
    return names


def fit(
    names: Sequence[str],
    smoothings: Sequence[Smoothing],
    *,
    seeds: int,
    seed: int,
    milestone_steps: int,
    finalists: int,
    run_lengths: Sequence[int] = RUN_LENGTHS,
    pass_a_seeds: int | None = None,
    naming: Naming = by_reading,
    on_reading: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Stage 2 over the readings ``names``, each member a reading read under one of
    ``smoothings`` (named by ``naming``); seeds from ``seed``.

    Pass 2a: every reading on ``pass_a_seeds`` seeds (``seeds`` if None) up to
    ``milestone_steps`` steps, stopped early once every seed has crossed loss 0.1 under
    every smoothing; every member scored on three terms. Pass 2b: the readings of the best
    2a members (``finalists`` distinct readings) on ``seeds`` seeds from step 0 to
    ``max(run_lengths)`` steps (a reading's 2a seeds are its first 2b seeds, same
    initialisation and data, so 2b repeats them), every member of them scored on four
    terms. Each pass ranked, with its bootstrap noise columns (``score_noise``, keyed by
    ``seed``; a pass of one seed has none: zero) and a ``smoothing`` column."""
    if not names:
        raise RunError("stage 2: the screen kept no reading (nothing to fit)")

    def base(n: int) -> RecallConfig:
        return RecallConfig(
            seeds=n, seed=seed, steps=1, mechanisms=("scaled",), chunk_steps=FIT_CHUNK
        )

    stop = all_crossed(min(THRESHOLDS.values()), smoothings)
    readings = [get_reading(n) for n in names]
    trained = train_scaled(readings, base(pass_a_seeds or seeds), milestone_steps, stop,
                           on_reading)  # fmt: skip
    first, first_seeds, reading_of = _scored(trained, smoothings, naming, "2a", (), milestone_steps)
    chosen = [get_reading(n) for n in finalist_readings(first, reading_of, finalists)]
    horizon = max(run_lengths)
    longer = train_scaled(chosen, base(seeds), horizon, on_reading=on_reading)
    second, second_seeds, _ = _scored(
        longer, smoothings, naming, "2b", run_lengths, max(horizon, milestone_steps)
    )
    key = jax.random.fold_in(jax.random.key(seed), BOOTSTRAP_STREAM)
    frame = pd.concat(
        [
            score_noise(first, first_seeds, (), key),
            score_noise(second, second_seeds, run_lengths, key),
        ],
        ignore_index=True,
    )
    frame["best_run_length"] = frame["best_run_length"].astype("Int64")
    return frame


def predicted_readings(scores: pd.DataFrame) -> list[tuple[str, int]]:
    """Stage 3's members: those of the last pass within the score's noise of its best
    (``score_noise``), best first, each with its best run length."""
    last = scores[scores["pass"] == scores["pass"].max()].sort_values("rank")
    last = last[last.within_noise.astype(bool)]
    return [
        (str(r.reading), int(max(RUN_LENGTHS) if pd.isna(r.best_run_length) else r.best_run_length))
        for r in last.itertuples()
    ]


def predict(
    members: Sequence[tuple[str, int]],
    seeds: int,
    seed: int,
    resolve: Callable[[str], tuple[Reading, Smoothing]],
    on_chunk: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stage 3: for every member ``(name, run length)`` (``resolve`` gives its reading and
    smoothing), both variants of its reading on ``seeds`` seeds from ``seed``, identical
    initialisation and data. Each reading is trained once, to its members' longest run
    length, and summarised at each member's run length (held-out accuracy then) under its
    smoothing. Returns (curves, summary), a first column ``reading`` naming the member."""
    at: dict[tuple[str, int], tuple[RecallConfig, list[TrainResult]]] = {}
    for reading, wanted in _lengths_by_reading(members, resolve).items():
        config = reading_config(reading, RecallConfig(seeds=seeds, seed=seed, steps=1))
        trainer = Trainer([Run(config, m.mechanism) for m in config.mechanisms])
        for length in wanted:
            trainer.run(length, on_chunk)
            at[reading.name, length] = (config, trainer.results())
    curves, summaries = [], []
    for member, length in members:
        reading, smoothing = resolve(member)
        config, results = at[reading.name, length]
        curves.append(curves_frame(results, config, smoothing).assign(reading=member))
        summaries.append(summary_frame(results, config, smoothing).assign(reading=member))
    return _reading_first(curves), _reading_first(summaries)


def _lengths_by_reading(
    members: Sequence[tuple[str, int]], resolve: Callable[[str], tuple[Reading, Smoothing]]
) -> dict[Reading, list[int]]:
    """The run lengths ``predict`` summarises each reading at, ascending."""
    lengths: dict[Reading, set[int]] = {}
    for member, length in members:
        lengths.setdefault(resolve(member)[0], set()).add(length)
    return {reading: sorted(wanted) for reading, wanted in lengths.items()}


def prediction_steps(
    members: Sequence[tuple[str, int]], resolve: Callable[[str], tuple[Reading, Smoothing]]
) -> int:
    """Training steps ``predict`` takes (both variants, each reading to its longest run
    length), for a progress bar."""
    return 2 * sum(wanted[-1] for wanted in _lengths_by_reading(members, resolve).values())


def _reading_first(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frame = pd.concat(frames, ignore_index=True)
    return frame[["reading", *frame.columns.drop("reading")]]
