"""The report's section for experiment 13 run on experiment 14's causal language models."""

from __future__ import annotations

import pandas as pd

from attnlab.harness.headlines import medians
from attnlab.harness.tables import Tables, markdown_table
from attnlab.studies.real_model.study import (
    CAUSAL_COUNTERFACTUALS_CSV,
    CAUSAL_HEADS_CSV,
    CAUSAL_LAYERS_CSV,
    CAUSAL_TABLES,
    SATURATED_AT,
    SINK_AT,
    causal_table_names,
)

HEADS = ["checkpoint", "mechanism", "model", "row_length", "layer", "head", "logit_std_p50",
         "entropy_ratio_p50", "saturated_share", "max_weight_p50", "q_norm_p50", "k_norm_p50",
         "sigma", "elasticity_1", "elasticity_w", "max_signed_logit", "sink_share",
         "owner"]  # fmt: skip
LAYERS = ["checkpoint", "layer", "max_abs_qk", "max_abs_logit", "float16_max",
          "float16_error_mechanism", "float16_error_unscaled"]  # fmt: skip


def headline_length(tables: Tables, name: str = CAUSAL_TABLES) -> int:
    """The row length the counterfactuals of the causal tables ``name`` were run at (the
    per-layer table's)."""
    csv = causal_table_names(name)[CAUSAL_COUNTERFACTUALS_CSV]
    return int(tables.get(csv, ["row_length"]).row_length.iloc[0])


def per_layer(tables: Tables, name: str = CAUSAL_TABLES) -> pd.DataFrame:
    """Per checkpoint, model (trained, initial) and layer at the headline length: the
    median over heads of each head's median logits' std and entropy / ln n, the median
    saturated share and elasticities (after any q/k norm, and to the weights before it),
    the largest signed logit S over heads, the sink heads (first key's share above
    ``SINK_AT``), and the heads' owners, of the causal tables ``name``."""
    heads = tables.get(causal_table_names(name)[CAUSAL_HEADS_CSV], HEADS)
    at = heads[heads.row_length == headline_length(tables, name)]
    grouped = at.groupby(["checkpoint", "model", "layer"], sort=False)
    return grouped.agg(
        mechanism=("mechanism", "first"),
        logit_std=("logit_std_p50", "median"),
        logit_std_min=("logit_std_p50", "min"),
        logit_std_max=("logit_std_p50", "max"),
        entropy_ratio=("entropy_ratio_p50", "median"),
        saturated=("saturated_share", "median"),
        elasticity=("elasticity_1", "median"),
        elasticity_w=("elasticity_w", "median"),
        max_signed=("max_signed_logit", "max"),
        sinks=("sink_share", lambda x: int((x > SINK_AT).sum())),
        heads=("head", "size"),
        owners=("owner", lambda o: ", ".join(f"{k} {n}" for k, n in o.value_counts().items())),
    ).reset_index()


def layer_table(tables: Tables, name: str = CAUSAL_TABLES) -> str:
    """``per_layer`` as a markdown table, with float16's headroom per layer."""
    frame = per_layer(tables, name)
    csv = causal_table_names(name)[CAUSAL_LAYERS_CSV]
    layers = tables.get(csv, LAYERS).set_index(["checkpoint", "layer"])
    rows = []
    for r in frame.itertuples():
        fp16 = layers.loc[(r.checkpoint, r.layer)] if r.model == "trained" else None
        rows.append((
            f"`{r.checkpoint}`", r.model, str(r.layer),
            f"{r.logit_std:.3g} ({r.logit_std_min:.3g} – {r.logit_std_max:.3g})",
            f"{r.entropy_ratio:.3f}", f"{r.saturated:.1%}",
            f"{r.elasticity:.3g} / {r.elasticity_w:.3g}", f"{r.max_signed:.3g}",
            f"{r.sinks} of {r.heads}", r.owners,
            "" if fp16 is None else f"{fp16.max_abs_qk:.4g}",
            "" if fp16 is None else f"{fp16.float16_max / fp16.max_abs_qk:.0f}x",
        ))  # fmt: skip
    header = ["checkpoint", "weights", "layer", "logits' std: median (range) over heads",
              "entropy / ln n", f"rows with max weight >= {SATURATED_AT:g}",
              "elasticity: q, k as attention sees them / W_q, W_k", "largest S",
              f"sink heads (first key > {SINK_AT:g})", "owners (heads)", "largest |q·k|",
              "float16 headroom"]  # fmt: skip
    return markdown_table(header, rows)


def counterfactual_table(tables: Tables, name: str = CAUSAL_TABLES) -> str:
    """The static drift's table (next-token loss, top-1 agreement) as markdown."""
    frame = tables.get(causal_table_names(name)[CAUSAL_COUNTERFACTUALS_CSV])
    rows = [
        (f"`{r.checkpoint}`", r.counterfactual, f"{r.qk_scale:.3g}", f"{r.logit_factor:.3g}",
         f"{r.logit_std_median:.3g}", f"{r.entropy_ratio_median:.3g}",
         f"{r.saturated_share:.1%}", f"{r.next_token_loss:.4f}",
         f"{r.next_token_loss_change:+.4f}", f"{r.top1_agreement:.1%}")
        for r in frame.itertuples()
    ]  # fmt: skip
    header = ["checkpoint", "counterfactual", "α on q, k", "q·k ×", "logits' std",
              "entropy / ln n", "saturated", "next-token loss (nats)", "change",
              "top-1 unchanged"]  # fmt: skip
    return markdown_table(header, rows)


def answer(tables: Tables, name: str = CAUSAL_TABLES) -> str:
    """Per checkpoint: who owns the temperature and the trained logits' spread per layer."""
    heads = tables.get(causal_table_names(name)[CAUSAL_HEADS_CSV], HEADS)
    length = headline_length(tables, name)
    frame = per_layer(tables, name)
    parts = []
    for name, group in frame[frame.model == "trained"].groupby("checkpoint", sort=False):
        at = heads[(heads.checkpoint == name) & (heads.model == "trained")
                   & (heads.row_length == length)]  # fmt: skip
        owners = at.owner.value_counts()
        if len(owners) == 1:
            verb = "own" if owners.index[0].endswith("s") else "owns"
            owned = f"the {owners.index[0]} {verb} the temperature in all {len(at)} heads"
        else:
            owned = "owners: " + ", ".join(f"{o} in {n} heads" for o, n in owners.items())
        spread = ", ".join(f"{s:.2f}" for s in group.logit_std)
        parts.append(
            f"`{name}` ({group.mechanism.iloc[0]}): {owned} (elasticity "
            f"{at.elasticity_1.min():.3g} to {at.elasticity_1.max():.3g}), median head's "
            f"logits' std per layer {spread}"
        )
    return "; ".join(parts) + f" (T = {length})."


def section(tables: Tables) -> str:
    """Experiment 13's tables for 14's causal models: per layer, the drift on next-token
    loss, float16."""
    flags = tables.flags(CAUSAL_HEADS_CSV)
    checkpoints = flags.get("checkpoint", [])
    return "\n\n".join(
        [
            "### In the suite's own causal models: 13 on 14's checkpoints",
            f"**Headline.** {answer(tables)}",
            f"Checkpoints {', '.join(f'`{c}`' for c in checkpoints)} (GPT-2 layout, written "
            "by experiment 14 at its best rate, width 64); text: "
            f"{flags.get('text_source', '?')}, the first {flags.get('text_tokens_used', '?')} "
            "bytes, which 14 trained on. Causal rows: query i attends to keys 0..i, each "
            "statistic over the rows with two keys or more, entropy over ln of the row's own "
            "length n = i + 1; re-initialised as GPT-2 initialises (key `--seed`).",
            layer_table(tables),
            "**Static drift at inference** (q, k → α q, α k before the mechanism), measured "
            "on the next-token loss where the encoder's table gives the embedding cosine:",
            counterfactual_table(tables),
        ]
    )


#: The headline of each CSV (``attnlab.studies.headline``).
CAUSAL_HEADLINES = {
    CAUSAL_HEADS_CSV: lambda f: medians(
        f[f.model == "trained"], "checkpoint", "logit_std_p50", "median head's logits' std"
    ),
    CAUSAL_COUNTERFACTUALS_CSV: lambda f: medians(
        f[f.qk_scale == f.qk_scale.max()],
        "checkpoint",
        "next_token_loss_change",
        "next-token loss change at the largest drift",
    ),  # fmt: skip
    CAUSAL_LAYERS_CSV: lambda f: f"largest |q.k| {f.max_abs_qk.max():.4g} of float16's 65504",
}
