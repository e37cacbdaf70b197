"""The article's question answered in plain sentences, from the committed CSVs alone (pandas,
no JAX): README's first block and the opening of ``results/REPORT.md``.

*Can Attention Work Without the sqrt(d) Scaling?* Five sentences, each a template whose
numbers are read from the result CSVs and whose verbs are chosen by rules stated here, so
that the data can contradict every one of them:

1. the statics (01): the std of ``q . k`` is ``sqrt(d_k)`` to within ``TRACKS_WITHIN`` at
   every d_k (else it *departs*), so its variance grows as d_k and the divisor restores
   unit variance (else *does not*);
2. saturation and the softmax Jacobian (02, 03): unscaled attention *saturates* when its
   largest weight at the largest d_k exceeds ``SATURATED`` (else *does not saturate*); its
   Jacobian norm at the largest d_k *falls below* scaled's (else *stays above*);
3. the training demo (04, and 09's fits): unscaled attention *trains* when every seed's
   smoothed loss reaches the last milestone (*does not train* when none does, *trains on
   only k of n seeds* between); it trains *more slowly* or *faster* by the median per-seed
   ratio of steps to the first milestone, under 04's reading, then the fits' alternatives;
4. the language model (14): who owns the temperature under scaled and unscaled attention
   (the ownership table's ``owner``), and whether it *held* after the weights drifted
   (``attnlab.studies.lm_proxy.report.drift``: the logit scale grew at most
   ``HOLDS_WITHIN``), in all, none or some of the layers; qk-layernorm beside them;
5. the optimizer (15): whether QK-Clip *held* S within one update's growth of tau in Kimi
   K2's regime, whether it fired *less* late than early on K2's plateau, and where Muon's
   logits grew more than AdamW's (``optimizer_sentence``).

Each sentence is a pure function of data frames (the tests give them hand-made tables);
``opening`` reads the CSVs and leaves out a sentence whose CSVs are absent. It is
``attnlab.report``'s default ``Opening``, imported only when a report is built
(``attnlab.report.ANSWER_MODULE`` says why).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnlab.claims import TRAINING_CLAIMS, RatioClaim
from attnlab.harness.errors import DataError
from attnlab.harness.io import MalformedError
from attnlab.harness.tables import Tables
from attnlab.recall.predictions import fit_predictions
from attnlab.studies import predictions
from attnlab.studies.lm_proxy.report import OWNERSHIP_COLUMNS, drift
from attnlab.studies.lm_proxy.study import DRIFT_FACTOR, HOLDS_WITHIN, OWNERSHIP_CSV
from attnlab.studies.optimizer.answers import (
    clip_fires_less_late,
    compared_arms,
    more_of,
    multiple_pairs,
    nominal_pairs,
    regime_groups,
)
from attnlab.studies.optimizer.report import RUN_COLUMNS
from attnlab.studies.optimizer.study import (
    ONE_UPDATE,
    PINNED,
    RUNS_CSV,
    optimizer_name,
)
from attnlab.studies.real_model import gemma_report
from attnlab.studies.recall.report import natural_name
from attnlab.studies.recall.study import SUMMARY_CSV
from attnlab.studies.statics.study import JACOBIAN_CSV, LOGIT_CSV, SATURATION_CSV

#: The question the sentences answer (article 004's title).
QUESTION = "Can attention work without the `sqrt(d)` scaling?"
#: 1: the std of q . k "is sqrt(d_k)" when no d_k's relative error (high-precision column)
#: exceeds this.
TRACKS_WITHIN = 0.01
#: 2: unscaled attention "saturates" when its mean largest weight at the largest d_k is above
#: this: most of a row's mass on one key.
SATURATED = 0.5
#: 3: the milestones, in the order the summary's columns give them: the first prices the
#: cost, the last says whether a seed trained.
MILESTONES = ("step_loss_below_1", "step_loss_below_0p1")
#: 3: 04's default reading, the one declared before any result was seen.
NATURAL = "natural"
#: 4: the article's two mechanisms, and the one beside them whose mechanism owns the
#: temperature (how the sentence names each).
ARTICLE_MECHANISMS = {"scaled": "scaled", "unscaled": "unscaled"}
CONTRAST = ("qk_norm", "qk-layernorm")


def threshold(column: str) -> float:
    """The loss a milestone column names: ``step_loss_below_0p1`` -> 0.1."""
    return float(column.rsplit("_", 1)[1].replace("p", "."))


def rounded(x: float) -> str:
    """``x`` to two significant digits, without an exponent: 302 -> "300", 1596 -> "1,600",
    3.91 -> "3.9"."""
    if not np.isfinite(x) or x == 0:
        return f"{x:g}"
    digits = 1 - math.floor(math.log10(abs(x)))
    value = round(x, digits)
    return f"{value:,.0f}" if digits <= 0 else f"{value:.{digits}f}"


def loss(x: float) -> str:
    """A loss threshold as the article writes it: 1 -> "1.0", 0.1 -> "0.1"."""
    return f"{x:.1f}" if float(x).is_integer() else f"{x:g}"


def percent(x: float) -> str:
    return f"{100 * x:.2g}%"


def _dk(x: float) -> str:
    return f"{int(x)}"


# --- 1: the variance of q . k ----------------------------------------------------------------


def variance_sentence(logit: pd.DataFrame) -> str:
    """From 01's table (``d_k``, ``std_hp``, ``rel_error_hp``)."""
    rows = logit.sort_values("d_k")
    error = rows.rel_error_hp.astype(float).abs()
    worst, top = rows.loc[error.idxmax()], rows.iloc[-1]
    lo, hi = _dk(rows.d_k.iloc[0]), _dk(top.d_k)
    subject = "Without the divisor, the standard deviation of `q · k` (unit-variance entries)"
    if error.max() <= TRACKS_WITHIN:
        return (
            f"{subject} is `sqrt(d_k)` to within {percent(error.max())} at every d_k from {lo} "
            f"to {hi} ({top.std_hp:.2f} at d_k = {hi}), so its variance grows as d_k, and "
            "dividing by `sqrt(d_k)` restores unit variance."
        )
    return (
        f"{subject} departs from `sqrt(d_k)` by up to {percent(error.max())} (at d_k = "
        f"{_dk(worst.d_k)}; {top.std_hp:.2f} at d_k = {hi}), so its variance does not grow as "
        "d_k, and dividing by `sqrt(d_k)` does not restore unit variance."
    )


# --- 2: saturation and the softmax Jacobian --------------------------------------------------


def _by_variant(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """``column`` per d_k (rows) and variant (columns), the first row of each pair."""
    rows = frame.drop_duplicates(["variant", "d_k"])
    return rows.pivot(index="d_k", columns="variant", values=column).astype(float).sort_index()


def saturation_sentence(saturation: pd.DataFrame, jacobian: pd.DataFrame) -> str:
    """From 02's table (``max_weight_mean``, ``n_keys``) and 03's (``jacobian_fro_mean``),
    per ``variant`` and ``d_k``."""
    weight = _by_variant(saturation, "max_weight_mean")
    lo, hi = weight.index[0], weight.index[-1]
    unscaled, scaled = weight["unscaled"], weight["scaled"]
    keys = int(saturation.n_keys.iloc[0])
    if unscaled[hi] > SATURATED:
        rows = f"unscaled, the softmax over {keys} keys saturates as d_k grows: its largest"
    else:
        rows = f"unscaled, the softmax over {keys} keys does not saturate: its largest"
    rows += (
        f" weight goes from {unscaled[lo]:.2g} at d_k = {_dk(lo)} to {unscaled[hi]:.2g} at "
        f"d_k = {_dk(hi)}, while with the divisor it stays between {scaled.min():.2g} and "
        f"{scaled.max():.2g}"
    )
    norm = _by_variant(jacobian, "jacobian_fro_mean")
    top = norm.index[-1]
    peak = norm["unscaled"].idxmax()
    at_top, scaled_top = norm["unscaled"][top], norm["scaled"][top]
    where = "falls to" if at_top < norm["unscaled"][peak] else "stays at"
    side = "below" if at_top < scaled_top else "still above"
    gradient = (
        f"the norm of its Jacobian, which scales every gradient passing through it, peaks at"
        f" {norm['unscaled'][peak]:.3f} at d_k = {_dk(peak)} and {where} "
        f"{at_top:.3f} at d_k = {_dk(top)}, {side} scaled attention's {scaled_top:.3f}"
    )
    return f"{rows[0].upper()}{rows[1:]}; {gradient}."


# --- 3: the training demo --------------------------------------------------------------------


def step_ratio(summary: pd.DataFrame, column: str = MILESTONES[0]) -> float:
    """The median over seeds of unscaled's steps to the milestone ``column`` over scaled's,
    paired by seed (a seed that never reached it left out; NaN where none did)."""
    wide = summary.pivot(index="seed", columns="variant", values=column).astype(float)
    ratios = (wide["unscaled"] / wide["scaled"]).dropna()
    return float(ratios.median()) if len(ratios) else math.nan


def _steps(summary: pd.DataFrame, variant: str, column: str) -> str:
    steps = summary[summary.variant == variant][column].astype(float).dropna()
    return f"{steps.median():.0f}" if len(steps) else "never"


def training_sentence(
    summary: pd.DataFrame,
    reading: str,
    article_ratio: float,
    alternatives: Sequence[float] = (),
) -> str:
    """From 04's per-seed summary (``variant``, ``seed`` and the ``MILESTONES`` columns)
    under 04's ``reading``, the article's step ratio at the first milestone, and the same
    ratio under each alternative reading (09's fits)."""
    first, last = MILESTONES[0], MILESTONES[-1]
    unscaled = summary[summary.variant == "unscaled"]
    n = unscaled.seed.nunique()
    k = int(unscaled[last].astype(float).notna().sum())
    reached = f"smoothed loss below {loss(threshold(last))} on {k} of {n} seeds"
    if k == n:
        head = f"unscaled attention trains ({reached})"
    elif k == 0:
        head = f"unscaled attention does not train ({reached})"
    else:
        head = f"unscaled attention trains on only {k} of {n} seeds ({reached})"
    ratio = step_ratio(summary, first)
    text = f"On the article's recall task {head}"
    if np.isfinite(ratio):
        if ratio > 1:
            speed = ", but more slowly than scaled attention" if k else "; it is slower"
        elif ratio < 1:
            speed = ", and faster than scaled attention" if k else "; it is faster"
        else:
            speed = ", and as fast as scaled attention" if k else "; it is as fast"
        which = (
            "as declared before any result was seen"
            if reading == NATURAL
            else "as 04 was run with `--reading`"
        )
        text += (
            f"{speed}. With the details the article leaves unstated filled in {which} "
            f"(`{reading}`), it takes a median {_steps(summary, 'unscaled', first)} steps to "
            f"reach smoothed loss {loss(threshold(first))} against scaled attention's "
            f"{_steps(summary, 'scaled', first)}: {ratio:.2g}x as many (the median of the "
            f"per-seed ratios), where the article has {article_ratio:.2g}x"
        )
        shown = [f"{r:.2g}x" for r in alternatives if np.isfinite(r)]
        if shown:
            text += (
                "; with them fitted afterwards to the article's scaled run (experiment 09), "
                f"{' and '.join(shown)}"
            )
    return text + "."


# --- 4: who owns the temperature in the language model ----------------------------------------


def _owners(frame: pd.DataFrame) -> tuple[str, str]:
    """``("the weights", "own")`` from the owner column of ``frame``'s layers."""
    owners = sorted(set(frame.owner_best))
    single = len(owners) == 1 and owners[0] != "weights"
    return " or ".join(f"the {o}" for o in owners), "owns" if single else "own"


def held(k: int, n: int) -> str:
    """Whether the temperature held in ``k`` of ``n`` layers, in words."""
    if k == n:
        return f"held in all {n} layers" if n > 1 else "held"
    if k == 0:
        return f"did not hold in any of {n} layers" if n > 1 else "did not hold"
    return f"held in only {k} of {n} layers"


def _judged(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.dropna(subset=["ratio"]) if "ratio" in frame else frame.iloc[:0]


def _growth(frame: pd.DataFrame) -> str:
    return f"{rounded(frame.ratio.min())}-{rounded(frame.ratio.max())}x"


def lm_sentence(
    frame: pd.DataFrame, factor: float = DRIFT_FACTOR, holds_within: float = HOLDS_WITHIN
) -> str:
    """From 14's drift table (``drift``: per mechanism, width and layer, ``owner_best``,
    ``ratio`` and ``holds``)."""
    article = [m for m in ARTICLE_MECHANISMS if m in set(frame.mechanism)]
    cells = {m: frame[frame.mechanism == m] for m in article}
    owned = {m: _owners(cell) for m, cell in cells.items()}
    text = "In a small byte-level language model (experiment 14)"
    if len(set(owned.values())) == 1:
        who, verb = owned[article[0]]
        under = " and ".join(ARTICLE_MECHANISMS[m] for m in article)
        alike = " alike" if len(article) > 1 else ""
        text += (
            f", {who} {verb} the attention temperature (the logits' scale, which sets how "
            f"sharp the softmax is) under {under} attention{alike}"
        )
    else:
        parts = [f"{who} {verb} it under {ARTICLE_MECHANISMS[m]} attention"
                 for m, (who, verb) in owned.items()]  # fmt: skip
        text += (
            ", the attention temperature (the logits' scale, which sets how sharp the "
            f"softmax is) has different owners: {' and '.join(parts)}"
        )
    judged = {m: _judged(cell) for m, cell in cells.items()}
    judged = {m: j for m, j in judged.items() if len(j)}
    if judged:
        k = sum(int(j.holds.sum()) for j in judged.values())
        n = sum(len(j) for j in judged.values())
        grew = " and ".join(f"{_growth(j)} ({ARTICLE_MECHANISMS[m]})"
                            for m, j in judged.items())  # fmt: skip
        text += (
            f", and it {held(k, n)} when the weights drifted: trained at {factor:g}x the best "
            f"learning rate, the logits' scale grew {grew}, where holding is changing by at "
            f"most {holds_within:g}x either way"
        )
    mechanism, name = CONTRAST
    contrast = frame[frame.mechanism == mechanism]
    if len(contrast):
        who, verb = _owners(contrast)
        text += f"; under {name} {who} {verb} it"
        j = _judged(contrast)
        if len(j):
            text += f" and it {held(int(j.holds.sum()), len(j))} ({_growth(j)})"
    return text + "."


# --- 5: the optimizer as owner ---------------------------------------------------------------


def optimizer_sentence(runs: pd.DataFrame) -> str:
    """From 15's runs table (``attnlab.studies.optimizer.answers``): in Kimi K2's regime
    (at most 3x each arm's best rate, a tau that binds) whether QK-Clip *held* S within
    (b)'s bound after it first fired on every seed (else *let it reach* its worst), its
    worst median over seeds; on K2's constant-rate plateau whether it fired *less* late
    than early ((d)); and at how many matched multiples of each best rate, and matched
    nominal rates, each optimizer's logits grew more than AdamW's with the seeds' ranges
    apart (every arm but AdamW and the pinned ones: Muon's is Moonlight's one rate for both
    sides)."""
    arms = [a for a in compared_arms(runs) if not a.endswith(PINNED)]
    names = [optimizer_name(a) for a in arms]
    text = f"Under {' and '.join(names) or 'AdamW'} and Kimi K2's QK-Clip (experiment 15)"
    groups = regime_groups(runs)
    if len(groups):
        worst, median = float(groups["max"].max()), float(groups["median"].max())
        held = (f"held S within {ONE_UPDATE:g} tau on every seed" if worst <= ONE_UPDATE
                else f"let S reach {rounded(worst)} tau on its worst seed")  # fmt: skip
        plateau = clip_fires_less_late(runs)
        late = (f", firing {'less' if plateau.holds else 'no less'} late than early on K2's "
                "constant-rate plateau" if "plateau" in plateau.detail else "")  # fmt: skip
        text += (f", at each optimizer's best rate and 3x it with a tau that binds, the clip "
                 f"{held} after it first fired (its worst median over seeds "
                 f"{rounded(median)} tau){late}")  # fmt: skip
    grew = [f"{name}'s logits grew more than AdamW's, seeds apart, at "
             f"{more_of(multiple_pairs(runs, arm))} matched multiples of the best rate and "
             f"{more_of(nominal_pairs(runs, arm))} matched nominal rates"
             for arm, name in zip(arms, names, strict=True)]  # fmt: skip
    return f"{'; '.join([text, *grew])}."


# --- the whole ---------------------------------------------------------------------------------


def _statics(tables: Tables) -> str:
    return variance_sentence(tables.get(LOGIT_CSV, ["d_k", "std_hp", "rel_error_hp"]))


def _saturation(tables: Tables) -> str:
    columns = ["variant", "d_k"]
    return saturation_sentence(
        tables.get(SATURATION_CSV, [*columns, "n_keys", "max_weight_mean"]),
        tables.get(JACOBIAN_CSV, [*columns, "jacobian_fro_mean"]),
    )


def _article_ratio() -> float:
    return next(c.article for c in TRAINING_CLAIMS
                if isinstance(c, RatioClaim) and c.column == MILESTONES[0])  # fmt: skip


def _training(tables: Tables) -> str:
    columns = ["variant", "seed", *MILESTONES]
    summary = tables.get(SUMMARY_CSV, columns)
    alternatives = []
    for csv, _ in predictions("summary"):
        if tables.has(csv):
            best = fit_predictions(tables, csv)[0]
            alternatives.append(step_ratio(tables.get(best.csv, columns)))
    return training_sentence(summary, natural_name(tables), _article_ratio(), alternatives)


def _lm(tables: Tables) -> str:
    return lm_sentence(drift(tables.get(OWNERSHIP_CSV, OWNERSHIP_COLUMNS)))


def _optimizer(tables: Tables) -> str:
    return optimizer_sentence(tables.get(RUNS_CSV, RUN_COLUMNS))


def _real_model(tables: Tables) -> str:
    return gemma_report.sentence(tables)


#: The sentences in order: what each is about, and how it is made from the tables.
SENTENCES = (
    ("the training demo", _training),
    ("the variance of q . k", _statics),
    ("saturation and the softmax Jacobian", _saturation),
    ("the language model", _lm),
    ("the optimizer", _optimizer),
    ("a real model", _real_model),
)


def opening(tables: Tables) -> str:
    """The answer: the question in bold, then each sentence of ``SENTENCES`` whose CSVs are
    there (one whose CSVs are absent is left out; a malformed one stops, as in the report);
    empty when none is."""
    sentences = []
    for what, sentence in SENTENCES:
        try:
            with tables.values_of(f"the answer's sentence on {what}"):
                sentences.append(sentence(tables))
        except MalformedError:
            raise
        except DataError:
            continue
    return f"**{QUESTION}** " + " ".join(sentences) if sentences else ""
