"""The pieces every card page and the report's section share: a verdict's mark, markdown
tables, the verdict table, the closing question answered per mechanism and the comparison
of mechanisms (pandas only)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnlab.studies.card.verdicts import DRIFT_ALPHA, DRIFT_VERDICT, HIGH_LR_VERDICT, OWNER_VERDICT

MARKS = {True: "yes", False: "**no**", None: "undetermined"}


#: The first line of a ``--quick`` card, after its title.
QUICK_LINE = (
    "**Quick card** (`--quick`): fewer trials, seeds, steps and widths than the defaults; "
    "a verdict whose premise these sizes cannot meet (a width or a rate that learns, two "
    "swept widths) is *undetermined*. Run without `--quick` for the card."
)


def mark(passed, value: str = "") -> str:
    """A verdict's mark: yes, **no**, undetermined (``passed`` None or NaN), or
    **diverged** where its value says so."""
    if str(value).startswith("diverged"):
        return "**diverged**"
    if passed is None or (isinstance(passed, float) and np.isnan(passed)):
        return MARKS[None]
    return MARKS[bool(passed)]


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines: ``header``, then one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def pm(mean: float, sem: float) -> str:
    """``mean ± sem`` to three and two significant figures; — where ``mean`` is not finite."""
    if not np.isfinite(mean):
        return "—"
    return f"{mean:.3g} ± {sem:.2g}"


def verdict_lines(verdicts: pd.DataFrame, names: list[str]) -> list[str]:
    """The verdict table: one row per verdict, a column per mechanism, then the rule."""
    rows = []
    for verdict, group in verdicts.groupby("verdict", sort=False):
        by_name = group.set_index("mechanism")
        cells = [f"{mark(by_name.passed[n], by_name.value[n])} ({by_name.value[n]})" for n in names]
        rows.append([verdict, *cells, group.rule.iloc[0]])
    return table(["verdict", *names, "rule"], rows)


def reused_lines(reused: Mapping[str, str], same: str) -> list[str]:
    """One line per baseline whose rows were read from a committed card (``reused``:
    baseline -> folder), saying what the equal settings make the same (``same``)."""
    return [
        f"The rows of `{baseline}` were read from `{where}`, whose settings equal this card's "
        f"({same}), not recomputed."
        for baseline, where in reused.items()
    ]


def owner_of(value: str) -> str:
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
        owner = owner_of(by.value[OWNER_VERDICT])

        def answer(verdict: str, yes: str, no: str, by=by) -> str:
            shown = mark(by.passed[verdict], by.value[verdict])
            return {"yes": yes, "**no**": no}.get(shown, f"{shown.strip('*')} ({verdict})")

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
        marks = [mark(g.passed[c], g.value[c]) for c in columns]
        rows.append([n, owner_of(g.value[OWNER_VERDICT]), *marks] if owner else [n, *marks])
    header = ["mechanism", "owner", *columns] if owner else ["mechanism", *columns]
    return "\n".join(table(header, rows)) + "\n"
