"""The card's ``card.md``, the comparison of every card, and the report's section on them;
from the cards' tables only."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnlab.harness.tables import Tables
from attnlab.studies.card.headroom import headroom
from attnlab.studies.card.lm_verdicts import DRIFT_FACTOR, LM_DRIFT, LM_LOGITS, LM_OWNER
from attnlab.studies.card.sensitivity import sensitivity
from attnlab.studies.card.study import COMPARISON_CSV, LM_COMPARISON_CSV
from attnlab.studies.card.verdicts import (
    DRIFT_ALPHA,
    DRIFT_VERDICT,
    HIGH_LR_VERDICT,
    OWNER_VERDICT,
    Card,
)

MARKS = {True: "yes", False: "**no**", None: "undetermined"}
#: The first line of a ``--quick`` card, after its title.
QUICK_LINE = (
    "**Quick card** (`--quick`): fewer trials, seeds, steps and widths than the defaults; "
    "a verdict whose premise these sizes cannot meet (a width or a rate that learns, two "
    "swept widths) is *undetermined*. Run without `--quick` for the card."
)


def _mark(passed, value: str = "") -> str:
    if str(value).startswith("diverged"):
        return "**diverged**"
    if passed is None or (isinstance(passed, float) and np.isnan(passed)):
        return MARKS[None]
    return MARKS[bool(passed)]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _pm(mean: float, sem: float) -> str:
    if not np.isfinite(mean):
        return "—"
    return f"{mean:.3g} ± {sem:.2g}"


def verdict_lines(verdicts: pd.DataFrame, names: list[str]) -> list[str]:
    """The verdict table: one row per verdict, a column per mechanism, then the rule."""
    rows = []
    for verdict, group in verdicts.groupby("verdict", sort=False):
        by_name = group.set_index("mechanism")
        cells = [
            f"{_mark(by_name.passed[n], by_name.value[n])} ({by_name.value[n]})" for n in names
        ]
        rows.append([verdict, *cells, group.rule.iloc[0]])
    return _table(["verdict", *names, "rule"], rows)


def _statics_lines(statics: pd.DataFrame, name: str) -> list[str]:
    rows = []
    for _, r in statics[statics.mechanism == name].iterrows():
        rows.append(
            [
                r.sweep,
                int(r.d_k),
                int(r.n_keys),
                _pm(r.max_weight_mean, r.max_weight_sem),
                _pm(r.entropy_mean, r.entropy_sem),
                _pm(r.mass_mean, r.mass_sem),
                _pm(r.jacobian_fro_mean, r.jacobian_fro_sem),
                _pm(r.logit_std_mean, r.logit_std_sem),
            ]
        )
    header = ["sweep", "d_k", "n", "max weight", "entropy (nats)", "mass", "‖J‖_F", "logit std"]
    return _table(header, rows)


def _training_lines(training: pd.DataFrame, names: list[str]) -> list[str]:
    rows = []
    for n in names:
        g = training[training.mechanism == n]
        reached = g.step_loss_below_1.notna().sum()
        rows.append(
            [
                n,
                f"{g.grad_wq_step0.median():.3g}",
                f"{g.step_loss_below_1.astype(float).median():.0f} ({reached}/{len(g)})",
                f"{g.step_loss_below_0p1.astype(float).median():.0f}",
                f"{g.final_loss.median():.3g}",
                f"{g.eval_accuracy.median():.3f}",
                _diverged_text(g),
            ]
        )
    header = [
        "mechanism",
        "‖∇W_Q‖ step 0",
        "step to loss 1 (seeds)",
        "step to loss 0.1",
        "final loss",
        "held-out accuracy",
        "diverged",
    ]
    # a milestone never reached prints as "nan": say "never" (in the numbers, not the name)
    return _table(header, [[r[0], *(c.replace("nan", "never") for c in r[1:])] for r in rows])


def _diverged_text(rows: pd.DataFrame) -> str:
    bad = rows[rows.diverged_step.notna()]
    return ", ".join(
        f"seed {int(r.seed)} at step {int(r.diverged_step)} ({r.nonfinite})"
        for r in bad.itertuples()
    )


def _swept(
    frame: pd.DataFrame, names: list[str], by: str, swept: str
) -> tuple[list, list[tuple[str, object, pd.DataFrame]]]:
    """The sorted values of column ``swept``, and ``(mechanism, value of by, rows sorted by
    swept)`` per group of ``names``' rows of ``frame``, in the table's order."""
    groups = frame[frame.mechanism.isin(names)].groupby(["mechanism", by], sort=False)
    return sorted(frame[swept].unique()), [(n, k, g.sort_values(swept)) for (n, k), g in groups]


def _precision_lines(precision: pd.DataFrame, names: list[str]) -> list[str]:
    sigmas, groups = _swept(precision, names, "d_k", "sigma")
    rows = []
    for n, d_k, g in groups:
        cells = [
            f"{e:.1g}" if ok else "non-finite"
            for ok, e in zip(g.finite_float16.astype(bool), g.max_error, strict=True)
        ]
        room, top = headroom(g)
        rows.append([n, int(d_k), *cells, f"{'≥' if top else ''}{room:g}"])
    return _table(["mechanism", "d_k", *(f"σ {s:g}" for s in sigmas), "headroom"], rows)


def _ownership_lines(ownership: pd.DataFrame, names: list[str]) -> list[str]:
    alphas, groups = _swept(ownership, names, "stage", "alpha")
    rows = [[n, stage, *map(_pm, g.elasticity_mean, g.elasticity_sem)] for n, stage, g in groups]
    return _table(["mechanism", "weights", *(f"e at α {a:g}" for a in alphas)], rows)


def _drift_lines(drift: pd.DataFrame, names: list[str]) -> list[str]:
    rows = []
    for r in drift[drift.mechanism.isin(names)].itertuples():
        rows.append(
            [
                r.mechanism,
                f"{r.alpha:.3g}",
                _pm(r.loss_mean, r.loss_sem),
                _pm(r.accuracy_mean, r.accuracy_sem),
                _pm(r.entropy_mean, r.entropy_sem),
                _pm(r.max_weight_mean, r.max_weight_sem),
            ]
        )
    header = ["mechanism", "α", "held-out loss", "accuracy", "entropy (nats)", "max weight"]
    return _table(header, rows)


def _sweep_lines(sweep: pd.DataFrame, names: list[str]) -> list[str]:
    rates = sweep.lr.nunique()
    lines = []
    for (n, d_k), g in sweep[sweep.mechanism.isin(names)].groupby(["mechanism", "d_k"], sort=False):
        if g.lr.nunique() != rates:
            continue
        s = sensitivity(g)
        lines.append(
            f"- {n}, d_k {int(d_k)}: sensitivity {_pm(s.sensitivity.mean(), _sem(s.sensitivity))}"
            " (mean ± SE over seeds); per rate, median final loss / largest |logit| / "
            "diverged seeds: "
            + "; ".join(
                f"{lr:.3g}: {r.final_loss.median():.3g} / {r.max_logit.median():.3g} / "
                f"{int(r.diverged_step.notna().sum())}"
                for lr, r in g.groupby("lr")
            )
        )
    return lines


def _sem(values: pd.Series) -> float:
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else np.nan


def _median_step(steps: pd.Series) -> str:
    """The median of milestone steps over seeds, ``never`` where none reached it."""
    median = steps.astype(float).median()
    return f"{median:.0f}" if np.isfinite(median) else "never"


def _widths_lines(sweep: pd.DataFrame, names: list[str]) -> list[str]:
    base = sweep.groupby("lr").d_k.nunique().idxmax()
    rows = []
    at_base = sweep[sweep.lr == base]
    for (n, d_k), g in at_base[at_base.mechanism.isin(names)].groupby(
        ["mechanism", "d_k"], sort=False
    ):
        reached = int(g.step_loss_below_1.notna().sum())
        rows.append(
            [
                n,
                int(d_k),
                f"{_median_step(g.step_loss_below_1)} ({reached}/{len(g)})",
                f"{g.eval_accuracy.median():.3f}",
                f"{g.logit_std_step0.median():.3g}",
                f"{g.logit_std_end.median():.3g}",
                _diverged_text(g),
            ]
        )
    header = ["mechanism", "d_k", "step to loss 1 (seeds)", "accuracy", "logit std step 0"]
    return [
        f"At the base rate {base:g}:",
        "",
        *_table([*header, "logit std end", "diverged"], rows),
    ]


def reused_lines(reused: Mapping[str, str], same: str) -> list[str]:
    """One line per baseline whose rows were read from a committed card (``reused``:
    baseline -> folder), saying what the equal settings make the same (``same``)."""
    return [
        f"The rows of `{baseline}` were read from `{where}`, whose settings equal this card's "
        f"({same}), not recomputed."
        for baseline, where in reused.items()
    ]


def card_markdown(
    card: Card,
    verdicts: pd.DataFrame,
    name: str,
    reference: str,
    command: str,
    reused: Mapping[str, str],
    quick: bool = False,
) -> str:
    """``card.md`` of mechanism ``name`` (its baselines are the other mechanisms of
    ``card``'s tables); ``reused``: baseline -> the committed card its rows were read from;
    ``quick``: a ``--quick`` card, said in its first line."""
    names = [name] + [n for n in dict.fromkeys(card.statics.mechanism) if n != name]
    lines = [f"# Quick mechanism card: {name}" if quick else f"# Mechanism card: {name}", ""]
    if quick:
        lines += [QUICK_LINE, ""]
    lines += [
        *closing_lines(verdicts[verdicts.mechanism == name]),
        "",
        f"Mechanism `{reference}`, against {', '.join(names[1:]) or 'nothing'}. "
        f"Made by `{command}`; every number below is read from this folder's CSVs.",
    ]
    lines += reused_lines(reused, "same draws, seeds and data")
    lines += ["", "## Verdicts", "", *verdict_lines(verdicts, names), "", "![card](card.png)"]
    lines += [
        "",
        "## Statics at initialisation",
        "",
        "q and k with iid N(0, 1) entries, drawn as experiments 02 and 03 draw them; means "
        "± standard errors over trials. *mass* is the row's total weight; where it is not 1 "
        "the entropy is that of the normalised row and ‖J‖_F is the Frobenius norm of the "
        "weights' Jacobian with respect to the logits by autodiff (softmax's closed form "
        "otherwise); — where not computed.",
        "",
        *_statics_lines(card.statics, name),
        "",
        "## Float16 headroom and masks",
        "",
        "q and k with iid N(0, σ²) entries rounded to float16, through the mechanism in "
        "float16 and in float32: the largest weight difference per σ; the headroom is the "
        "largest σ up to which every cell is finite and within 1e-2 (≥: the grid's top).",
        "",
        *_precision_lines(card.precision, names),
        "",
    ]
    for r in card.masks[card.masks.mechanism == name].itertuples():
        lines.append(
            f"- fully masked row: finite output {bool(r.finite_output)}, finite gradients "
            f"{bool(r.finite_gradients)}, largest weight on a masked key {r.masked_weight_max:.2g},"
            f" largest output of the empty row {r.dead_row_max:.2g}"
        )
    lines += ["", "## Training (experiment 04's task and defaults)", ""]
    lines += _training_lines(card.training, names)
    lines += [
        "",
        "## Who owns the temperature",
        "",
        "Elasticity e = d ln std(z) / d ln α of the logits to q, k → αq, αk, q and k from the "
        "projections on held-out sequences (mean ± SE over seeds): 2 where the weights own "
        "the temperature, 0 where the mechanism does, falling from 2 under a cap.",
        "",
        *_ownership_lines(card.ownership, names),
        "",
        "## Static drift",
        "",
        "The trained model with W_Q and W_K multiplied by α, everything else fixed; held-out "
        "sequences, mean ± SE over seeds.",
        "",
        *_drift_lines(card.drift, names),
        "",
        "## Learning rates (Wortsman et al. 2023's sensitivity)",
        "",
        *_sweep_lines(card.sweep, names),
        "",
        "## Widths",
        "",
        *_widths_lines(card.sweep, names),
    ]
    return "\n".join(lines) + "\n"


def _owner(value: str) -> str:
    """The owner named at the start of the owner verdict's value (``weights: e = ...``)."""
    owner = str(value).split(":")[0]
    return owner if owner in ("weights", "mechanism", "cap") else "undetermined"


def closing_lines(verdicts: pd.DataFrame) -> list[str]:
    """The closing question answered, one line per mechanism of ``verdicts`` (a verdicts
    table or ``cards/comparison.csv``): who owns the temperature, whether it holds after
    x4 drift of W_Q and W_K, whether it is stable at high learning rates."""
    lines = []
    for name, g in verdicts.groupby("mechanism", sort=False):
        by = g.set_index("verdict")
        owner = _owner(by.value[OWNER_VERDICT])

        def answer(verdict: str, yes: str, no: str, by=by) -> str:
            mark = _mark(by.passed[verdict], by.value[verdict])
            return {"yes": yes, "**no**": no}.get(mark, f"{mark.strip('*')} ({verdict})")

        drift = answer(DRIFT_VERDICT, "holds", "does **not** hold")
        lr = answer(HIGH_LR_VERDICT, "stable", "**less** stable than scaled")
        lines.append(
            f"- **{name}**: owner **{owner}**; after x{DRIFT_ALPHA:g} drift of W_Q, W_K "
            f"{drift}; at high learning rates {lr}."
        )
    return lines


def comparison_markdown(verdicts: pd.DataFrame, owner: bool = False) -> str:
    """Every carded mechanism (rows) against every verdict (columns); ``owner``: a first
    column naming who owns the temperature (``closing_lines``' owner)."""
    names = list(dict.fromkeys(verdicts.mechanism))
    columns = list(dict.fromkeys(verdicts.verdict))
    rows = []
    for n in names:
        g = verdicts[verdicts.mechanism == n].set_index("verdict")
        marks = [_mark(g.passed[c], g.value[c]) for c in columns]
        rows.append([n, _owner(g.value[OWNER_VERDICT]), *marks] if owner else [n, *marks])
    header = ["mechanism", "owner", *columns] if owner else ["mechanism", *columns]
    return "\n".join(_table(header, rows)) + "\n"


def _comparison(tables: Tables, csv: str = COMPARISON_CSV) -> pd.DataFrame:
    """``cards/comparison.csv`` (or ``cards/lm/comparison.csv``): one row per (mechanism,
    verdict)."""
    return tables.get(csv, ["mechanism", "verdict", "rule", "value", "passed"])


def _rules(verdicts: pd.DataFrame) -> list[str]:
    return [f"- *{r.verdict}*: {r.rule}." for r in verdicts.drop_duplicates("verdict").itertuples()]


#: Why a language-model verdict came out the same for every built-in, where it does.
UNIFORM_WHY = {
    "LM: stable at high learning rates": (
        "its tolerance, 2 SE of the held-out losses' windows taken as independent, is wider "
        "than any built-in's excess over scaled's sensitivity, though the windows are shared "
        "(a paired SE would be narrower); where scaled and qk_norm part is *logits bounded*"
    ),
    "LM: holds its temperature after the weights drift": (
        "where the mechanism bounds the logits (qk_norm, cosine attention, the caps) its own "
        "learned gain or the cap's use still grows with the rate: bounded is not held"
    ),
}


def lm_findings(verdicts: pd.DataFrame) -> list[str]:
    """What the language-model verdicts cannot tell apart, read from them: verdicts with one
    answer for every mechanism (and why, where known), and mechanisms with identical values
    in every verdict."""
    lines = []
    for verdict, g in verdicts.groupby("verdict", sort=False):
        marks = {_mark(p, v) for p, v in zip(g.passed, g.value, strict=True)}
        if len(marks) == 1 and len(g) > 1:
            why = UNIFORM_WHY.get(verdict, "")
            lines.append(f"- *{verdict}* is {marks.pop()} for all {len(g)}" +
                         (f": {why}." if why else "."))  # fmt: skip
    values = verdicts.groupby("mechanism", sort=False).value.apply(tuple)
    for names in values.groupby(values).groups.values():
        if len(names) > 1:
            lines.append(
                f"- {' and '.join(f'**{n}**' for n in names)} give the same values in every "
                "verdict: in a causal model the mask already gives each row its own length, "
                "so SSMax's n is the query's position + 1 either way."
                if {"ssmax", "ssmax_causal"} <= set(names)
                else f"- {' and '.join(names)} give the same values in every verdict."
            )
    return ["What these verdicts cannot tell apart:", "", *lines] if lines else []


def lm_closing_lines(verdicts: pd.DataFrame) -> list[str]:
    """The closing question in the language model, one line per mechanism of ``verdicts``
    (``cards/lm/comparison.csv``): the owner per layer, drift, logits at the top rate."""
    lines = []
    for name, g in verdicts.groupby("mechanism", sort=False):
        by = g.set_index("verdict")
        owner, drift, logits = (by.loc[v] for v in (LM_OWNER.verdict, LM_DRIFT.verdict,
                                                    LM_LOGITS.verdict))  # fmt: skip
        lines.append(
            f"- **{name}**: {owner.value}; after {DRIFT_FACTOR:g}x the best rate "
            f"{_mark(drift.passed, drift.value)} ({drift.value}); largest logit at the top "
            f"rate {logits.value}."
        )
    return lines


def section(tables: Tables) -> str:
    """The report's section: the comparison of every built-in's card (``make cards``)."""
    verdicts = _comparison(tables)
    lines = [
        "## Mechanism cards (experiment 11)",
        "",
        "The battery of experiments 02-07 and 10, a learning-rate sweep and the trained "
        "model's ownership and drift, run on every built-in mechanism by "
        "`make cards`; a researcher's own runs through the same command "
        "(`python experiments/11_mechanism_card.py --mechanism path/to/file.py:NAME`). Each "
        "mechanism's card, with every number behind these verdicts, is "
        "`results/cards/NAME/card.md`; Figure 10 (`figures/fig10_cards.png`) overlays their "
        "statics and Figure 10 (d) and (e) the drift and learning-rate sweeps.",
        "",
        "The closing question (*which mechanism owns the attention temperature, and does it "
        "still hold after the weights have drifted*), answered from the cards:",
        "",
        *closing_lines(verdicts),
        "",
        comparison_markdown(verdicts).rstrip(),
        "",
        "Rules:",
        "",
        *_rules(verdicts),
    ]
    if tables.has(LM_COMPARISON_CSV):
        lm = _comparison(tables, LM_COMPARISON_CSV)
        lines += [
            "",
            "### In a language model (`--task lm`)",
            "",
            "The same question asked of experiment 14's byte-level causal LM, trained at "
            "five peak rates and two widths (rotary positions; ALiBi with none, as Press et "
            "al.), by `make cards`; each card is `results/cards/NAME/lm/card.md`. Per layer "
            "of the widest model at its best rate, who owns the temperature:",
            "",
            *lm_closing_lines(lm),
            "",
            comparison_markdown(lm).rstrip(),
            "",
            *lm_findings(lm),
            "",
            "Rules:",
            "",
            *_rules(lm),
        ]
    return "\n".join(lines)


def readme(tables: Tables) -> str:
    """README's block: one line per built-in, who owns its temperature and every verdict
    (among them: holds after drift, stable at high learning rates), the language model's
    verdicts (``LM: ...``) beside the recall task's; — where a task cannot run it."""
    recall = _comparison(tables)
    if not tables.has(LM_COMPARISON_CSV):
        return comparison_markdown(recall, owner=True).rstrip()
    lm = _comparison(tables, LM_COMPARISON_CSV)
    both = pd.concat([recall, lm], ignore_index=True)
    names = list(dict.fromkeys([*recall.mechanism, *lm.mechanism]))
    columns = list(dict.fromkeys(both.verdict))
    rows = []
    for n in names:
        g = both[both.mechanism == n].set_index("verdict")
        owner = _owner(g.value[OWNER_VERDICT]) if OWNER_VERDICT in g.index else "—"
        rows.append([n, owner, *(_mark(g.passed[c], g.value[c]) if c in g.index else "—"
                                 for c in columns)])  # fmt: skip
    return "\n".join(_table(["mechanism", "owner", *columns], rows))


def _verdicts_held(verdicts: pd.DataFrame) -> str:
    """How many verdicts each mechanism passes, of how many."""
    held = (
        f"{m} {int(g.passed.astype(float).fillna(0).sum())}/{len(g)}"
        for m, g in verdicts.groupby("mechanism", sort=False)
    )
    return ", ".join(held) + " verdicts hold"


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {csv: _verdicts_held for csv in (COMPARISON_CSV, LM_COMPARISON_CSV)}
