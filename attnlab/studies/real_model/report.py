"""The report's section for experiment 13, and README's one-line answer for the model."""

from __future__ import annotations

import pandas as pd

from attnlab.harness.headlines import medians
from attnlab.harness.tables import Tables, markdown_table
from attnlab.studies.real_model import causal_report, gemma_report
from attnlab.studies.real_model.study import (
    CAUSAL_HEADS_CSV,
    COUNTERFACTUALS_CSV,
    HEADS_CSV,
    LAYERS_CSV,
    MODELS,
    SATURATED_AT,
    SINK_AT,
)

#: The per-head quantities of the headline: column (the head's median over rows) -> label.
HEADLINE = {
    "logit_std_p50": "logits' std",
    "entropy_ratio_p50": "entropy / ln T",
    "saturated_share": f"share of rows with max weight >= {SATURATED_AT:g}",
}
HEADS = ["model", "row_length", "layer", "head", "rows", *HEADLINE, "max_weight_p50",
         "jacobian_norm_p50", "q_norm_p50", "k_norm_p50", "sigma", "elasticity_1",
         "elasticity_8", "owner", "sink_share"]  # fmt: skip


def _spread(values: pd.Series) -> str:
    """``median (min - max)`` over heads."""
    return f"{values.median():.3g} ({values.min():.3g} – {values.max():.3g})"


def headline_length(tables: Tables) -> int:
    """The row length the counterfactuals were run at (the headline's)."""
    frame = tables.get(COUNTERFACTUALS_CSV, ["row_length"])
    return int(frame.row_length.iloc[0])


def _at(heads: pd.DataFrame, model: str, length: int) -> pd.DataFrame:
    return heads[(heads.model == model) & (heads.row_length == length)]


def headline_table(tables: Tables) -> str:
    """Per model and row length: median and range over heads of the headline quantities."""
    heads = tables.get(HEADS_CSV, HEADS)
    rows = []
    for (model, length), group in heads.groupby(["model", "row_length"], sort=False):
        rows.append((model, str(length), *(_spread(group[c]) for c in HEADLINE)))
    header = ["weights", "row length T", *(f"{label}: median (range) over heads"
                                            for label in HEADLINE.values())]  # fmt: skip
    return markdown_table(header, rows)


def answer(tables: Tables) -> str:
    """Who owns the temperature after training, and how far it sits from where the
    divisor put it (README's line and the section's headline)."""
    heads = tables.get(HEADS_CSV, HEADS)
    length = headline_length(tables)
    trained, initial = (_at(heads, m, length) for m in MODELS)
    owners = trained.owner.value_counts()
    e = trained.elasticity_1
    if len(owners) == 1:
        owned = f"the **{owners.index[0]}** own the temperature in all {len(trained)} heads"
    else:
        owned = "owners: " + ", ".join(f"{o} in {n} heads" for o, n in owners.items())
    ratio = trained.logit_std_p50.median() / initial.logit_std_p50.median()
    return (
        f"{owned[0].upper()}{owned[1:]} (ownership elasticity {e.min():.3f} to "
        f"{e.max():.3f}). At T = {length} the median head's logits have std "
        f"{trained.logit_std_p50.median():.2f} (heads {trained.logit_std_p50.min():.2f} – "
        f"{trained.logit_std_p50.max():.2f}), {ratio:.0f}x BERT's initialisation "
        f"({initial.logit_std_p50.median():.2f}) and {trained.logit_std_p50.median():.1f}x "
        "the 1 the divisor aims at; entropy / ln T "
        f"{trained.entropy_ratio_p50.median():.2f} (initialised "
        f"{initial.entropy_ratio_p50.median():.3f}), saturated rows "
        f"{trained.saturated_share.median():.0%} (initialised "
        f"{initial.saturated_share.median():.0%})."
    )


def readme(tables: Tables) -> str:
    """README's one-line answer for the packaged model."""
    return f"**all-MiniLM-L6-v2** (experiment 13, on real text): {answer(tables)}"


def _counterfactual_table(tables: Tables) -> str:
    frame = tables.get(COUNTERFACTUALS_CSV)
    rows = [
        (
            r.counterfactual,
            f"{r.qk_scale:.3g}",
            f"{r.logit_factor:.3g}",
            f"{r.logit_std_median:.3g}",
            f"{r.entropy_ratio_median:.3g}",
            f"{r.max_weight_median:.3g}",
            f"{r.saturated_share:.1%}",
            f"{r.cosine_mean:.3f} (min {r.cosine_min:.3f})",
        )
        for r in frame.itertuples()
    ]
    header = ["counterfactual", "α on q, k", "logits ×", "logits' std", "entropy / ln T",
              "max weight", "saturated", "embedding cosine to the original"]  # fmt: skip
    return markdown_table(header, rows)


def _layers_table(tables: Tables) -> str:
    frame = tables.get(LAYERS_CSV)
    rows = [
        (
            str(int(r.layer)),
            f"{r.max_abs_qk:.4g}",
            f"{r.max_abs_logit:.4g}",
            f"{r.float16_max / r.max_abs_qk:.0f}x",
            f"{r.float16_error_scaled:.2g}",
            f"{r.float16_error_unscaled:.2g}",
        )
        for r in frame.itertuples()
    ]
    header = ["layer", "largest |q·k|", "largest logit", "float16 headroom (65504 / |q·k|)",
              "float16 error, scaled", "float16 error, divisor removed"]  # fmt: skip
    return markdown_table(header, rows)


def sink_sentence(heads: pd.DataFrame) -> str:
    """The attention sink in the encoder: per model and row length, the heads whose mean
    weight on the first key (``[CLS]``) exceeds ``SINK_AT`` (Gu et al. 2024)."""
    parts = [f"{model} T = {T}: {int((g.sink_share > SINK_AT).sum())} of {len(g)} (median "
             f"head {g.sink_share.median():.3f})"
             for (model, T), g in heads.groupby(["model", "row_length"], sort=False)]  # fmt: skip
    return (f"**The attention sink** (heads whose mean weight on `[CLS]`, the first key, "
            f"exceeds {SINK_AT:g}, Gu et al. 2024): " + "; ".join(parts) + ".")  # fmt: skip


def section(tables: Tables) -> str:
    """Experiment 13: the encoder's section (``encoder_section``) and, where 13 was run on
    14's checkpoints, theirs (``causal_report.section``)."""
    parts = [encoder_section(tables)]
    if tables.has(CAUSAL_HEADS_CSV):
        parts.append(causal_report.section(tables))
    if gemma_report.present(tables):
        parts.append(gemma_report.section(tables))
    return "\n\n".join(parts)


def encoder_section(tables: Tables) -> str:
    """Experiment 13 on the encoder: trained against initial per head, what sets the
    temperature, the counterfactuals and float16."""
    heads = tables.get(HEADS_CSV, HEADS)
    flags = tables.flags(HEADS_CSV)
    length = headline_length(tables)
    trained, initial = (_at(heads, m, length) for m in MODELS)
    by_length = heads[heads.model == "trained"].groupby("row_length")
    max_weight = ", ".join(f"T = {T}: {g.max_weight_p50.median():.3f}" for T, g in by_length)
    source = (
        f"Checkpoint `{flags.get('checkpoint', '?')}` (model.safetensors SHA-256 "
        f"`{str(flags.get('weights_sha256', '?'))[:16]}…`); text: "
        f"{flags.get('text_source', '?')}, the first {flags.get('text_tokens_used', '?')} "
        f"tokens (SHA-256 `{str(flags.get('text_sha256', '?'))[:16]}…`), cut into rows of "
        f"{', '.join(str(T) for T in sorted(heads.row_length.unique()))} tokens."
    )
    return "\n\n".join(
        [
            "### In a real model: all-MiniLM-L6-v2 (experiment 13)",
            f"**Headline.** {answer(tables)}",
            source,
            "Per head, each statistic is the median over the head's attention rows; below, "
            "the median and range of those medians over the 72 heads (6 layers × 12), "
            "trained against the same architecture re-initialised as BERT initialises it "
            "(every weight N(0, 0.02), key `--seed`).",
            headline_table(tables),
            f"**What sets it** (T = {length}, median over heads, trained / initialised): "
            f"|q| {trained.q_norm_p50.median():.3g} / {initial.q_norm_p50.median():.3g}, "
            f"|k| {trained.k_norm_p50.median():.3g} / {initial.k_norm_p50.median():.3g}, "
            f"σ(W_Q W_Kᵀ / √d) {_spread(trained.sigma)} / {_spread(initial.sigma)}. "
            "BERT's initialisation gives q and k entries of std about 0.02 √384 ≈ 0.39, not "
            "the unit variance the divisor assumes, so its logits start far below 1. "
            f"Max weight (median head) against row length, trained: {max_weight}.",
            sink_sentence(heads),
            "**Counterfactuals at inference** (trained weights, T = "
            f"{length}): the card's static drift q, k → α q, α k and the divisor removed "
            "(logits √d times larger, the drift α = d^¼); statistics pooled over every "
            "layer, head and row; cosine of each row's sentence embedding to the original.",
            _counterfactual_table(tables),
            "**float16** (trained weights): the largest |q·k| met on this text against "
            "float16's 65504, and the largest error of attention from float16 q, k, v "
            "(softmax in float32, the suite's policy) relative to the largest output.",
            _layers_table(tables),
        ]
    )


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {
    HEADS_CSV: lambda f: medians(f, "model", "logit_std_p50", "median head's logits' std"),
    COUNTERFACTUALS_CSV: lambda f: medians(
        f.assign(what=f.counterfactual + " " + f.qk_scale.map("{:.3g}".format)),
        "what",
        "cosine_mean",
        "embedding cosine",
    ),
    LAYERS_CSV: lambda f: f"largest |q.k| {f.max_abs_qk.max():.4g} of float16's 65504",
    **causal_report.CAUSAL_HEADLINES,
}
