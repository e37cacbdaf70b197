"""``results/bench.md``: the bench table as Markdown, and the profile of one recall step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.harness.tables import markdown_table


def fmt_cell(value: float, spec: str) -> str:
    return "" if value is None or not np.isfinite(value) else format(value, spec)


def profile_paragraph(frame: pd.DataFrame) -> str:
    """The "Profile of one recall step" paragraph; empty without the ``profile_step_*`` rows."""
    rows = {row.name: row for row in frame.itertuples(index=False)}
    parts = ", ".join(f"{n.removeprefix('profile_step_')} {1e3 * r.ours_seconds:.3g} ms"
                      for n, r in rows.items() if n.startswith("profile_step_"))  # fmt: skip
    if not parts:
        return ""
    text = f"Time per training step of the recall model (experiment 04), by part: {parts}."
    if "train_step_peak_fraction" in rows:
        share = 100 * rows["train_step_peak_fraction"].peak_fraction
        text += f" The step's matmul FLOPs run at {share:.2g}% of this run's matmul peak."
    if "train_step_vs_reference" in rows:
        text += f" It is {rows['train_step_vs_reference'].speedup:.2f}x the step before the "
        text += "speed-ups (row train_step_vs_reference)."
    return f"**Profile of one recall step.** {text} Reproduce with `make bench`.\n"


def bench_markdown(frame: pd.DataFrame) -> str:
    """One line per row of ``frame``, the details below, then ``profile_paragraph``."""
    rows = [
        (f"`{r.name}`", fmt_cell(r.ours_seconds, ".3g"), fmt_cell(r.baseline_seconds, ".3g"),
         fmt_cell(r.speedup, ".2f") + ("x" if np.isfinite(r.speedup) else ""),
         fmt_cell(100 * r.peak_fraction, ".2g"))
        for r in frame.itertuples(index=False)
    ]  # fmt: skip
    header = ("benchmark", "ours (s)", "baseline (s)", "speedup", "% of peak")
    details = "\n".join(f"- `{row.name}`: {row.detail}" for row in frame.itertuples(index=False))
    profile = profile_paragraph(frame)
    return f"{markdown_table(header, rows)}\n\n{details}\n" + (f"\n{profile}" if profile else "")
