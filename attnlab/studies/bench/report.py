"""``results/bench.md``: the bench table as Markdown."""

from __future__ import annotations

import numpy as np
import pandas as pd


def fmt_cell(value: float, spec: str) -> str:
    return "" if value is None or not np.isfinite(value) else format(value, spec)


def markdown_table(frame: pd.DataFrame) -> str:
    """The README's "Performance" table: one line per row of ``frame``, details below."""
    lines = [
        "| benchmark | ours (s) | baseline (s) | speedup | % of peak | slope |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in frame.itertuples(index=False):
        speedup = fmt_cell(row.speedup, ".2f")
        lines.append(
            f"| `{row.name}` | {fmt_cell(row.ours_seconds, '.3g')} | "
            f"{fmt_cell(row.baseline_seconds, '.3g')} | {speedup + 'x' if speedup else ''} | "
            f"{fmt_cell(100 * row.peak_fraction, '.2g')} | {fmt_cell(row.slope, '.2f')} |"
        )
    lines.append("")
    lines.extend(f"- `{row.name}`: {row.detail}" for row in frame.itertuples(index=False))
    return "\n".join(lines) + "\n"
