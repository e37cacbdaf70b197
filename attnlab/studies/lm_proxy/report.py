"""The report's section for experiment 14, README's line, and the scripts' headlines."""

from __future__ import annotations

import pandas as pd

from attnlab.harness.tables import Tables, markdown_table
from attnlab.lm.sweep_tables import lr_sensitivity
from attnlab.studies.lm_proxy.answers import ANSWERS, degradation_note, unscaled_trains
from attnlab.studies.lm_proxy.sinks import (
    SINK_COLUMNS,
    sink_answers,
    sink_table,
    uniform_first_weight,
)
from attnlab.studies.lm_proxy.study import (
    CURVES_CSV,
    DRIFT_FACTOR,
    HOLDS_WITHIN,
    OWNERSHIP_CSV,
    SINKS_CSV,
    SWEEP_CSV,
)

SWEEP_COLUMNS = ["mechanism", "d_model", "lr", "seed", "final_val_loss", "initial_val_loss",
                 "max_attn_logit_layer0", "diverged_step"]  # fmt: skip
OWNERSHIP_COLUMNS = ["mechanism", "d_model", "weights", "layer", "head", "lr", "logit_scale",
                     "elasticity_1", "owner"]  # fmt: skip


def _sweep(tables: Tables) -> pd.DataFrame:
    return tables.get(SWEEP_CSV, SWEEP_COLUMNS)


def headline_width(sweep: pd.DataFrame) -> int:
    """The width every mechanism was swept at (the one-width mechanisms'), else the
    smallest."""
    counts = sweep.groupby("d_model").mechanism.nunique()
    return int(counts.idxmax())


def rate_table(sweep: pd.DataFrame, d_model: int) -> str:
    """Per mechanism and rate at ``d_model``: held-out loss / layer-0 max logit (median
    over seeds; "div." where a seed went non-finite)."""
    cell = sweep[sweep.d_model == d_model]
    rates = sorted(cell.lr.unique())
    rows = []
    for mechanism, group in cell.groupby("mechanism", sort=False):
        by_rate = group.groupby("lr")
        row = [mechanism]
        for rate in rates:
            if rate not in by_rate.groups:
                row.append("")
                continue
            g = by_rate.get_group(rate)
            mark = " (div.)" if (g.diverged_step >= 0).any() else ""
            row.append(f"{g.final_val_loss.median():.3f} / {g.max_attn_logit_layer0.median():.3g}"
                       f"{mark}")  # fmt: skip
        rows.append(row)
    return markdown_table(["mechanism", *(f"lr {r:g}" for r in rates)], rows)


def sensitivity_table(sweep: pd.DataFrame) -> str:
    table = lr_sensitivity(sweep)
    rows = [(r.mechanism, str(r.d_model), f"{r.lr_sensitivity:.3f}", f"{r.best_lr:g}",
             f"{r.best_loss:.3f}") for r in table.itertuples()]  # fmt: skip
    return markdown_table(["mechanism", "d_model", "LR sensitivity (nats)", "best lr",
                           "best held-out loss"], rows)  # fmt: skip


def drift(ownership: pd.DataFrame) -> pd.DataFrame:
    """Per mechanism, width and layer: the owner at the best rate and at ``DRIFT_FACTOR``
    times it (the most common over heads and seeds), the median logit scale at each, their
    ratio, and whether the temperature holds (the ratio within a factor ``HOLDS_WITHIN``
    either way: ``max(r, 1/r) <= HOLDS_WITHIN``; a scale that shrank 10x moved too)."""
    rows = []
    keys = ["mechanism", "d_model", "layer"]
    for (mechanism, d_model, layer), cell in ownership.groupby(keys, sort=False):
        best = cell[cell.weights == "best"]
        drifted = cell[cell.weights == "drifted"]
        row = {"mechanism": mechanism, "d_model": d_model, "layer": layer,
               "owner_best": best.owner.mode().iloc[0],
               "scale_best": best.logit_scale.median()}  # fmt: skip
        if len(drifted):
            ratio = drifted.logit_scale.median() / row["scale_best"]
            row |= {"owner_drifted": drifted.owner.mode().iloc[0],
                    "scale_drifted": drifted.logit_scale.median(), "ratio": ratio,
                    "holds": bool(max(ratio, 1 / ratio) <= HOLDS_WITHIN)}  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def drift_table(ownership: pd.DataFrame) -> str:
    frame = drift(ownership)
    rows = []
    for r in frame.itertuples():
        drifted = getattr(r, "owner_drifted", None)
        has = isinstance(drifted, str)
        rows.append((r.mechanism, str(r.d_model), str(r.layer), r.owner_best,
                     f"{r.scale_best:.3g}",
                     drifted if has else "— (10x off the grid)",
                     f"{r.scale_drifted:.3g}" if has else "",
                     f"{r.ratio:.3g}x" if has else "",
                     ("yes" if r.holds else "no") if has else ""))  # fmt: skip
    header = ["mechanism", "d_model", "layer", "owner at best lr", "logit scale",
              f"owner at {DRIFT_FACTOR:g}x", "logit scale", "grew", "holds"]  # fmt: skip
    return markdown_table(header, rows)


def _own(owner: str) -> str:
    return "own" if owner == "weights" else "owns"


def answer(tables: Tables) -> str:
    """README's line: who owns the temperature in the LM and whether it holds."""
    frame = drift(tables.get(OWNERSHIP_CSV, OWNERSHIP_COLUMNS))
    parts = []
    for mechanism, cell in frame.groupby("mechanism", sort=False):
        owners = "/".join(sorted(set(cell.owner_best)))
        judged = cell.dropna(subset=["ratio"]) if "ratio" in cell else cell.iloc[:0]
        if len(judged):
            held = int(judged.holds.sum())
            grew = f"{judged.ratio.min():.2g}-{judged.ratio.max():.2g}x"
            parts.append(f"{mechanism}: the {owners} {_own(owners)} it; at {DRIFT_FACTOR:g}x "
                         f"the best rate its logit scale grows {grew}, holding in {held} of "
                         f"{len(judged)} layers")  # fmt: skip
        else:
            parts.append(f"{mechanism}: the {owners} {_own(owners)} it")
    return "; ".join(parts)


def readme(tables: Tables) -> str:
    return (
        f"**A byte-level causal LM** (experiment 14, who owns the temperature): {answer(tables)}."
    )


def section(tables: Tables) -> str:
    sweep = _sweep(tables)
    tables.get(CURVES_CSV)  # the figure's; its absence leaves the section out too
    ownership = tables.get(OWNERSHIP_CSV, OWNERSHIP_COLUMNS)
    flags = tables.flags(SWEEP_CSV)
    lm = flags.get("lm_config", {})
    d = headline_width(sweep)
    answers = [f(sweep) for f in ANSWERS]
    listed = "\n".join(f"- {'holds' if a.holds else '**does not hold**'}: {a.label} — "
                       f"{a.detail}" for a in answers)  # fmt: skip
    listed += f"\n\n{degradation_note(sweep)}"
    return "\n\n".join([
        "### The small-scale proxy: a byte-level causal LM (experiment 14)",
        f"**Headline.** {answer(tables)}.",
        f"GPT-2 layout (pre-LN, causal, {lm.get('positions', '?')} positions, no biases, untied "
        f"head), {lm.get('n_layers', '?')} layers, head width {lm.get('d_head', '?')}, sequence "
        f"{lm.get('seq_len', '?')} bytes, batch {lm.get('batch_size', '?')}, "
        f"{lm.get('steps', '?')} AdamW steps (warmup {lm.get('warmup', '?')}, cosine, clipping "
        f"{lm.get('clip', '?')}, independent weight decay {lm.get('weight_decay', '?')}, z-loss "
        f"{lm.get('z_loss_weight', '?')}); text: {flags.get('text_source', '?')} (SHA-256 "
        f"`{str(flags.get('text_sha256', '?'))[:16]}…`), the last "
        f"{lm.get('held_out', 0):.0%} held out. Method: `attnlab/studies/lm_proxy/README.md`.",
        f"**Held-out loss (nats per byte) / largest layer-0 attention logit over training**, "
        f"d_model {d}:",
        rate_table(sweep, d),
        "**LR sensitivity** (Wortsman et al.: the mean over rates of min(loss, initial loss) "
        "minus the best):",
        sensitivity_table(sweep),
        "**Known answers** (rules: `attnlab/studies/lm_proxy/answers.py`):",
        listed,
        f"**The article's question in the LM.** {unscaled_trains(sweep)}.",
        f"**Who owns the temperature, and does it hold after the weights drift** (the trained "
        f"model at its best rate and at {DRIFT_FACTOR:g}x it; logit scale: the within-row std "
        f"of the logits, median over heads; holds: it changed by at most {HOLDS_WITHIN:g}x "
        "either way):",
        drift_table(ownership),
        *sink_section(tables),
    ])  # fmt: skip


def sink_section(tables: Tables) -> list[str]:
    """The attention sink's paragraphs (``sinks``): its table and answers (f)-(j)."""
    sinks = tables.get(SINKS_CSV, SINK_COLUMNS)
    flags = tables.flags(SINKS_CSV)
    length = int(flags.get("lm_config", {}).get("seq_len", 64))
    answers = sink_answers(sinks, length)
    listed = "\n".join(f"- {'holds' if a.holds else '**does not hold**'}: {a.label} — "
                        f"{a.detail}" for a in answers)  # fmt: skip
    if not answers[0].holds:
        listed += (
            "\n\nWhere (f) does not hold, (g) has nothing to remove. The cause we find is scale: "
            "Gu et al. see sinks emerge in models of about 60M parameters trained on far more "
            "tokens, ours has under 0.2M and sees half a million bytes; its heads put about "
            "uniform attention's weight on the first position (above), no excess to dump. "
            "Experiment 13 reads the sink heads of trained models of real size (its tables' "
            "`sink_share`; the sections above) against none in 14's saved models."
        )
    d = ", ".join(str(d) for d in sorted(set(sinks.d_model)))
    return [
        f"**Where the excess weight goes: the attention sink** (d_model {d}, "
        f"{flags.get('sink_seeds', '?')} seeds each; a head is a sink head when its mean weight "
        f"on the first position exceeds 0.3, Gu et al. 2024; uniform causal attention puts "
        f"{uniform_first_weight(length):.3f} there over {length} positions; the weight on "
        "nothing is a learned sink's share). At "
        "the best rate, mean ± SE over seeds:",
        sink_table(sinks),
        "**Known answers of sinks and gates** (rules: `attnlab/studies/lm_proxy/sinks.py`):",
        listed,
    ]


HEADLINES = {
    SWEEP_CSV: lambda f: (
        "largest layer-0 logit: "
        + ", ".join(
            f"{m} {g.max_attn_logit_layer0.max():.3g}"
            for m, g in f.groupby("mechanism", sort=False)
        )
    ),
    CURVES_CSV: lambda f: (
        "largest recorded logit per layer: "
        + ", ".join(f"{layer} {g.max_logit.max():.3g}" for layer, g in f.groupby("layer"))
    ),
    SINKS_CSV: lambda f: (
        "sink heads at the best rate: "
        + ", ".join(
            f"{m} {g[g.weights == 'best'].sink_head.mean():.2f}"
            for m, g in f.groupby("mechanism", sort=False)
        )  # fmt: skip
    ),
    OWNERSHIP_CSV: lambda f: (
        f"owners of {len(f)} heads: "
        + ", ".join(
            f"{m} {'/'.join(sorted(set(g.owner)))}" for m, g in f.groupby("mechanism", sort=False)
        )
    ),
}
