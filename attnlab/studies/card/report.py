"""The card's ``card.md``, the comparison of every card, and the report's section on them;
from the cards' tables only."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnlab.harness.tables import Tables
from attnlab.studies.card.verdicts import Card

MARKS = {True: "yes", False: "**no**", None: "undetermined"}


def _mark(passed) -> str:
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
        cells = [f"{_mark(by_name.passed[n])} ({by_name.value[n]})" for n in names]
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
            ]
        )
    header = [
        "mechanism",
        "‖∇W_Q‖ step 0",
        "step to loss 1 (seeds)",
        "step to loss 0.1",
        "final loss",
        "held-out accuracy",
    ]
    # a milestone never reached prints as "nan": say "never" (in the numbers, not the name)
    return _table(header, [[r[0], *(c.replace("nan", "never") for c in r[1:])] for r in rows])


def _widths_lines(widths: pd.DataFrame, lr: pd.DataFrame, names: list[str]) -> list[str]:
    base = widths.groupby("lr").d_k.nunique().idxmax()
    rows = []
    at_base = widths[widths.lr == base]
    scaled = at_base[at_base.mechanism == "scaled"].groupby("d_k").step_loss_below_1
    scaled_steps = scaled.apply(lambda s: s.astype(float).median())
    for (n, d_k), g in at_base.groupby(["mechanism", "d_k"], sort=False):
        if n not in names:
            continue
        step = g.step_loss_below_1.astype(float).median()
        ref = scaled_steps.get(d_k, np.nan)
        slow = f"{step / ref:.2f}" if np.isfinite(step) and np.isfinite(ref) else "—"
        rows.append(
            [
                n,
                int(d_k),
                f"{g.eval_accuracy.median():.3f}",
                f"{g.routing_accuracy_end.median():.3f}",
                slow,
                f"{g.logit_std_step0.median():.3g}",
                f"{g.logit_std_end.median():.3g}",
            ]
        )
    header = ["mechanism", "d_k", "accuracy", "routing accuracy", "slow-down vs scaled"]
    lines = _table([*header, "logit std step 0", "logit std end"], rows)
    best = lr[lr.best.astype(bool) & lr.mechanism.isin(names)]
    rates = ", ".join(f"{x:g}" for x in sorted(lr.lr.unique()))
    lines += ["", f"Best learning rate (of {rates}) per swept width:", ""]
    for n, g in best.groupby("mechanism", sort=False):
        lines.append(f"- {n}: " + ", ".join(f"d_k {int(r.d_k)}: {r.lr:g}" for r in g.itertuples()))
    return lines


def card_markdown(
    card: Card,
    verdicts: pd.DataFrame,
    name: str,
    reference: str,
    command: str,
    reused: Mapping[str, str],
) -> str:
    """``card.md`` of mechanism ``name`` (its baselines are the other mechanisms of
    ``card``'s tables); ``reused``: baseline -> the committed card its rows were read from."""
    names = [name] + [n for n in dict.fromkeys(card.statics.mechanism) if n != name]
    lines = [
        f"# Mechanism card: {name}",
        "",
        f"Mechanism `{reference}`, against {', '.join(names[1:]) or 'nothing'}. "
        f"Made by `{command}`; every number below is read from this folder's CSVs.",
    ]
    for baseline, where in reused.items():
        lines.append(
            f"The rows of `{baseline}` were read from `{where}`, whose settings equal this "
            "card's (same draws, seeds and data), not recomputed."
        )
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
        "## Precision and masks",
        "",
    ]
    precision = card.precision[card.precision.mechanism == name]
    for r in precision.itertuples():
        lines.append(
            f"- float16 at d_k {r.d_k}: finite {bool(r.finite_float16)}, max |p16 - p32| "
            f"{r.max_error:.2g}"
        )
    for r in card.masks[card.masks.mechanism == name].itertuples():
        lines.append(
            f"- fully masked row: finite output {bool(r.finite_output)}, finite gradients "
            f"{bool(r.finite_gradients)}, largest weight on a masked key {r.masked_weight_max:.2g},"
            f" largest output of the empty row {r.dead_row_max:.2g}"
        )
    lines += ["", "## Training (experiment 04's task and defaults)", ""]
    lines += _training_lines(card.training, names)
    lines += ["", "## Widths (experiment 10's sweep)", ""]
    lines += _widths_lines(card.widths, card.lr, names)
    return "\n".join(lines) + "\n"


def comparison_markdown(verdicts: pd.DataFrame) -> str:
    """Every carded mechanism (rows) against every verdict (columns)."""
    names = list(dict.fromkeys(verdicts.mechanism))
    columns = list(dict.fromkeys(verdicts.verdict))
    rows = []
    for n in names:
        g = verdicts[verdicts.mechanism == n].set_index("verdict")
        rows.append([n, *(_mark(g.passed[c]) for c in columns)])
    return "\n".join(_table(["mechanism", *columns], rows)) + "\n"


def _comparison(tables: Tables) -> pd.DataFrame:
    """``cards/comparison.csv``: one row per (mechanism, verdict)."""
    return tables.get("cards/comparison.csv", ["mechanism", "verdict", "rule", "passed"])


def section(tables: Tables) -> str:
    """The report's section: the comparison of every built-in's card (``make cards``)."""
    verdicts = _comparison(tables)
    rules = verdicts.drop_duplicates("verdict")
    lines = [
        "## Mechanism cards (experiment 11)",
        "",
        "The battery of experiments 02-07 and 10 run on every built-in mechanism by "
        "`make cards`; a researcher's own runs through the same command "
        "(`python experiments/11_mechanism_card.py --mechanism path/to/file.py:NAME`). Each "
        "mechanism's card, with every number behind these verdicts, is "
        "`results/cards/NAME/card.md`; Figure 10 (`figures/fig10_cards.png`) overlays their "
        "statics.",
        "",
        comparison_markdown(verdicts).rstrip(),
        "",
        "Rules:",
        "",
        *(f"- *{r.verdict}*: {r.rule}." for r in rules.itertuples()),
    ]
    return "\n".join(lines)


def readme(tables: Tables) -> str:
    """README's block: every built-in against every verdict (``comparison_markdown``)."""
    return comparison_markdown(_comparison(tables)).rstrip()


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    "cards/comparison.csv": lambda f: (
        ", ".join(
            f"{m} {int(g.passed.astype(float).fillna(0).sum())}/{len(g)}"
            for m, g in f.groupby("mechanism", sort=False)
        )
        + " verdicts hold"
    ),
}
