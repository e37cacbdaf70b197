"""The headline number of a result CSV: what a script prints beside ``wrote PATH``.

Each study's report module maps its CSV names to a ``Headline`` (``HEADLINES``); the
registry's ``attnlab.studies.headline`` finds it. The helpers below format the usual ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

#: A CSV's headline from its table.
Headline = Callable[[pd.DataFrame], str]


def _value(x: float, digits: int) -> str:
    return "never" if not np.isfinite(x) else f"{x:.{digits}g}"


def medians(frame: pd.DataFrame, by: str, column: str, label: str, digits: int = 3) -> str:
    """``"<label>: a 63, b 230"``: the median of ``column`` per value of ``by`` (in order of
    appearance; a group whose every value is missing reads "never")."""
    groups = frame.groupby(by, sort=False)[column]
    parts = [f"{name} {_value(float(g.astype(float).median()), digits)}" for name, g in groups]
    return f"{label}: " + ", ".join(parts)


def at_row(frame: pd.DataFrame, where: dict, columns: dict[str, str], digits: int = 3) -> str:
    """``"<label> x, ..."`` read from the one row where every ``where`` column has its
    value (``columns``: column -> label); empty if there is no such row."""
    rows = frame
    for column, value in where.items():
        rows = rows[rows[column] == value]
    if rows.empty:
        return ""
    row = rows.iloc[0]
    setting = ", ".join(f"{k} {v}" for k, v in where.items())
    values = ", ".join(f"{label} {_value(float(row[c]), digits)}" for c, label in columns.items())
    return f"at {setting}: {values}"


def span(values: Iterable[float], words: str | Callable[[float], str]) -> str:
    """``"low-high"``: the smallest and largest of ``values`` as ``words`` writes them (a
    format spec such as ``".3g"``, or a function), or one value where both read the same
    (one run, or a tie: never "37%-37%"); NaN is left out ("none" where nothing is left),
    so the order of the values never decides what is written."""
    values = [v for v in values if v == v]  # NaN != NaN
    if not values:
        return "none"
    write = words if callable(words) else (lambda v: format(v, words))
    low, high = write(min(values)), write(max(values))
    return low if low == high else f"{low}-{high}"


def counted(n: int, noun: str) -> str:
    """``"1 seed"``, ``"2 seeds"``: ``n`` and ``noun``, plural (an ``s``) unless ``n`` is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
