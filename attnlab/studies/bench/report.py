"""``results/bench.md``: the bench table as Markdown."""

from __future__ import annotations

import numpy as np
import pandas as pd


def fmt_cell(value: float, spec: str) -> str:
    return "" if value is None or not np.isfinite(value) else format(value, spec)


#: The parts of the step profile, as the paragraph names them.
PROFILE_PARTS = {
    "profile_step_data": "data generation",
    "profile_step_forward": "forward",
    "profile_step_forward_backward": "forward and backward",
    "profile_step_adam": "the Adam update",
}


#: The categories of the kernel profile, as the paragraph names them.
KERNEL_NAMES = {
    "matmul": "matmuls",
    "forward_backward": "the rest of forward and backward",
    "adam": "Adam",
}


def profile_paragraph(frame: pd.DataFrame) -> str:
    """The "Profile of one recall step" paragraph: the ``profile_step_*`` rows of ``frame``
    in milliseconds per step, and the command that reproduces them; empty without them."""
    ms = {
        row.name: format(1e3 * row.ours_seconds, ".3g") + " ms"
        for row in frame.itertuples(index=False)
        if row.name.startswith("profile_step_")
    }
    if not ms:
        return ""
    parts = ", ".join(f"{what} {ms[name]}" for name, what in PROFILE_PARTS.items() if name in ms)
    sentences = [f"Time per training step of the recall model (experiment 04): {parts}."]
    if "profile_step_full" in ms:
        whole = f"The whole step takes {ms['profile_step_full']}"
        if "profile_step_rolled_full" in ms:
            whole += (
                f", {ms['profile_step_rolled_full']} with the random bits by JAX's rolled "
                "threefry loop on CPU"
            )
        if "profile_step_reference_full" in ms:
            whole += (
                f" and {ms['profile_step_reference_full']} as it was before the speed-ups "
                "(each batch drawn inside its step, that loop, and the gathers' gradient by "
                "plain autodiff)"
            )
        sentences.append(whole + ".")
    if "train_step_matmul_bound" in set(frame.name):
        bound = frame[frame.name == "train_step_matmul_bound"].iloc[0]
        sentences.append(
            f"Its FLOPs, run at the {100 * bound.peak_fraction:.0f}% of the matmul peak that "
            "this CPU reaches on one product of the step's projection shape, would take "
            f"{1e3 * bound.ours_seconds:.3g} ms (row train_step_matmul_bound)."
        )
    kernels = {
        row.name.removeprefix("profile_kernels_"): row
        for row in frame.itertuples(index=False)
        if row.name.startswith("profile_kernels_")
    }
    if kernels:
        wall = kernels.pop("wall", None)
        spent = ", ".join(
            f"{KERNEL_NAMES.get(name, name)} {1e3 * row.ours_seconds:.3g} ms"
            for name, row in kernels.items()
        )
        sentences.append(
            f"XLA's own trace of train()'s compiled chunk charges its kernels per step (summed "
            f"over XLA's threads): {spent}"
            + (f"; the traced step takes {1e3 * wall.ours_seconds:.3g} ms." if wall else ".")
        )
    if "profile_step_train_chunk" in ms:
        sentences.append(
            f"train() runs it at {ms['profile_step_train_chunk']} per step, its host work "
            "between chunks included."
        )
    sentences.append(
        "Each part is its own compiled lax.scan over one chunk of steps at the sizes the "
        "rows' details give; reproduce with `make bench` (or `python experiments/bench.py`)."
    )
    return " ".join(["**Profile of one recall step.**", *sentences]) + "\n"


def markdown_table(frame: pd.DataFrame) -> str:
    """The README's "Performance" table: one line per row of ``frame``, details below, then
    the ``profile_paragraph`` where ``frame`` has the profile rows."""
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
    profile = profile_paragraph(frame)
    return "\n".join(lines) + "\n" + (f"\n{profile}" if profile else "")
