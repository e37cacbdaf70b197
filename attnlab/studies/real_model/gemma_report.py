"""The report's section for experiment 13 on a real modern LLM, Gemma 3 270M read from its
GGUF (``make gemma``: the tables ``13_real_model_gemma3_*``), and README's sentence on it.

Who owns each layer's temperature (the elasticities to the q/k norm gains and to W_q, W_k),
the gains' spread, S per head, sink heads, how the logits' spread, entropy / ln n and the
sink's share move with the row length in the sliding layers (window 512) against the global
ones, the static drift's cost in next-token loss, and float16's headroom.
"""

from __future__ import annotations

import pandas as pd

from attnlab.harness.tables import Tables, markdown_table
from attnlab.studies.real_model.causal_report import (
    HEADS,
    LAYERS,
    answer,
    counterfactual_table,
    headline_length,
    per_layer,
)
from attnlab.studies.real_model.study import (
    CAUSAL_COUNTERFACTUALS_CSV,
    CAUSAL_HEADS_CSV,
    CAUSAL_LAYERS_CSV,
    GEMMA_TABLES,
    LEDGER_CSV,
    SINK_AT,
    causal_table_names,
)

NAMES = causal_table_names(GEMMA_TABLES)
HEADS_CSV, LEDGER = NAMES[CAUSAL_HEADS_CSV], NAMES[LEDGER_CSV]
LEDGER_COLUMNS = ["layer", "layer_type", "heads", "kv_heads", "head_dim", "divisor_width",
                  "rope_theta", "q_norm_gain", "k_norm_gain"]  # fmt: skip
#: The ledger's layer types, as the report names them.
KINDS = {"sliding_attention": "sliding", "full_attention": "global"}


def present(tables: Tables) -> bool:
    """Whether ``make gemma`` has written the tables."""
    return all(tables.has(name) for name in NAMES.values())


def layers(tables: Tables) -> pd.DataFrame:
    """The ledger one row per layer (``LEDGER_COLUMNS``: every head of a layer shares them),
    by layer, with ``kind`` its type as the report names it (``KINDS``) and ``q``, ``k`` the
    RMS of its q and k norm gains."""
    per_layer = tables.get(LEDGER, LEDGER_COLUMNS).groupby("layer").first()
    return per_layer.assign(kind=per_layer.layer_type.map(KINDS), q=per_layer.q_norm_gain,
                            k=per_layer.k_norm_gain)  # fmt: skip


def by_length(tables: Tables) -> pd.DataFrame:
    """Per layer type and row length, the trained heads' medians of the logits' std,
    entropy / ln n and the sink's share, and the largest S."""
    heads = tables.get(HEADS_CSV, HEADS)
    trained = heads[heads.model == "trained"]
    trained = trained.assign(kind=trained.layer.map(layers(tables).kind))
    return (
        trained.groupby(["kind", "row_length"])
        .agg(
            logit_std=("logit_std_p50", "median"),
            entropy_ratio=("entropy_ratio_p50", "median"),
            sink_share=("sink_share", "median"),
            sinks=("sink_share", lambda x: int((x > SINK_AT).sum())),
            heads=("head", "size"),
            max_signed=("max_signed_logit", "max"),
        )
        .reset_index()
    )


def _layer_table(tables: Tables) -> str:
    frame = per_layer(tables, GEMMA_TABLES)
    frame = frame[frame.model == "trained"].set_index("layer")
    float16 = tables.get(NAMES[CAUSAL_LAYERS_CSV], LAYERS).set_index("layer")
    rows = []
    for layer, g in layers(tables).iterrows():
        r, fp16 = frame.loc[layer], float16.loc[layer]
        rows.append((
            str(layer), g.kind, f"{g.q:.3g} / {g.k:.3g}",
            f"{r.elasticity:.3g} / {r.elasticity_w:.2g}",
            f"{r.logit_std:.3g} ({r.logit_std_min:.3g} – {r.logit_std_max:.3g})",
            f"{r.entropy_ratio:.3f}", f"{r.max_signed:.3g}", f"{r.sinks} of {r.heads}", r.owners,
            f"{fp16.max_abs_qk:.4g}", f"{fp16.float16_max / fp16.max_abs_qk:.0f}x",
        ))  # fmt: skip
    header = ["layer", "type", "q / k norm gain (RMS)",
              "elasticity: gains / W_q, W_k", "logits' std: median (range) over heads",
              "entropy / ln n", "largest S", f"sink heads (first key > {SINK_AT:g})",
              "owners (heads)", "largest |q·k|", "float16 headroom"]  # fmt: skip
    return markdown_table(header, rows)


def _length_table(tables: Tables) -> str:
    rows = [
        (r.kind, str(r.row_length), f"{r.logit_std:.3g}", f"{r.entropy_ratio:.3f}",
         f"{r.sink_share:.3f}", f"{r.sinks} of {r.heads}", f"{r.max_signed:.3g}")
        for r in by_length(tables).itertuples()
    ]  # fmt: skip
    header = ["layers", "row length T", "logits' std (median head)", "entropy / ln n",
              "first key's share (median head)", "sink heads", "largest S"]  # fmt: skip
    return markdown_table(header, rows)


def _shape(tables: Tables) -> str:
    """``18 layers of 4 query heads and 1 key/value head of width 256, 15 sliding (rope
    base 10000) and 3 global (rope base 1e+06)``, from the ledger."""
    static = layers(tables)
    first = static.iloc[0]
    kinds = [f"{len(g)} {kind} (rope base {g.rope_theta.iloc[0]:g})"
             for kind, g in static.groupby("kind", sort=False)]  # fmt: skip
    return (f"{len(static)} layers of {first.heads} query heads and {first.kv_heads} key/value "
            f"head(s) of width {first.head_dim}, {' and '.join(kinds)}")  # fmt: skip


def _divisor(tables: Tables) -> str:
    """The logits' divisor as the ledger records it: ``256^-1/2``."""
    return f"{layers(tables).divisor_width.iloc[0]:g}^-1/2"


def section(tables: Tables) -> str:
    """Experiment 13 on Gemma 3 270M: the owner per layer, the gains, the row length, the
    static drift and float16."""
    flags = tables.flags(HEADS_CSV)
    length = headline_length(tables, GEMMA_TABLES)
    lengths = sorted(tables.get(HEADS_CSV, HEADS).row_length.unique())
    sha = (flags.get("weights_sha256") or ["?"])[0]
    return "\n\n".join([
        "### In a real modern LLM: Gemma 3 270M (experiment 13, `make gemma`)",
        f"**Headline.** {answer(tables, GEMMA_TABLES)}",
        "Google's Gemma 3 270M as its users hold it: llama.cpp's GGUF in Q4_K_M (SHA-256 "
        f"`{sha[:16]}…`, the registry package `make gemma` installs), its tensors dequantized "
        "to float32 and its tokenizer built from the file's own metadata "
        f"(`attnlab/models/gguf_checkpoint.py`); {_shape(tables)}, q and k RMS-normalised per "
        "head with learned gains. The file does not store the attention scale: "
        f"{_divisor(tables)}, as llama.cpp takes it. Tests check the reading against outside known "
        "answers: transformers' token ids and next-token losses of the same file, a float64 "
        "forward's S, logits' std and first-key share per head "
        "(`tests/fixtures/gemma3_270m_reference.json`). Text: "
        f"{flags.get('text_source', '?')}, the first {flags.get('text_tokens_used', '?')} "
        f"tokens, in rows of {', '.join(map(str, lengths))}, each opening with BOS as the "
        "model's users read it; re-initialised as Hugging Face initialises Gemma (key "
        f"`--seed`). Per layer at T = {length}:",
        _layer_table(tables),
        "**With the row length** (trained weights; medians over the layers' heads): a "
        "temperature that does not scale with the length dilutes the softmax as ln n grows "
        "(SSMax's motivation, Llama 4's `attn_temperature_tuning`); the sliding layers never "
        "see more than 512 keys, the global ones see the whole row. The first key's share "
        "is over the rows that see it: a sliding layer's rows past its window do not see "
        "the first key (BOS) at all.",
        _length_table(tables),
        "**Static drift at inference** (q, k → α q, α k after the norms, as the gains would "
        "move them), on the next-token loss:",
        counterfactual_table(tables, GEMMA_TABLES),
    ])  # fmt: skip


def sentence(tables: Tables) -> str:
    """README's sentence: who owns the temperature in Gemma 3 270M, the gains' range, the
    length trend of the global layers against the sliding ones, and the cost of the drift
    that doubles the logits."""
    heads = tables.get(HEADS_CSV, HEADS)
    at = heads[
        (heads.model == "trained") & (heads.row_length == headline_length(tables, GEMMA_TABLES))
    ]
    owners = at.owner.value_counts()
    owned = (f"the q/k norms' gains own the temperature in all {len(at)} heads"
             if list(owners.index) == ["norm gains"] else
             "owners: " + ", ".join(f"{o} in {n} heads" for o, n in owners.items()))  # fmt: skip
    g = layers(tables)
    low, high = float(g[["q", "k"]].min().min()), float(g[["q", "k"]].max().max())
    trend = by_length(tables).set_index(["kind", "row_length"])
    first, last = min(trend.index.levels[1]), max(trend.index.levels[1])

    def moved(kind: str) -> str:
        a, b = trend.loc[(kind, first)], trend.loc[(kind, last)]
        return f"{a.entropy_ratio:.2f} to {b.entropy_ratio:.2f}"

    drift = tables.get(NAMES[CAUSAL_COUNTERFACTUALS_CSV])
    doubled = drift[(drift.counterfactual == "drift") & (drift.logit_factor.round(6) == 2.0)]
    cost = (f"; doubling the logits costs {doubled.next_token_loss_change.iloc[0]:.2f} nats"
            if len(doubled) else "")  # fmt: skip
    return (
        f"In a real LLM, Gemma 3 270M (its GGUF; experiment 13), {owned} (elasticity "
        f"to W_q, W_k at most {at.elasticity_w.abs().max():.1g}, to the gains "
        f"{at.elasticity_1.median():.3g}; gains' RMS {low:.2g} to {high:.2g}); from T = {first} "
        f"to {last}, entropy / ln n goes {moved('global')} (global layers), "
        f"{moved('sliding')} (sliding){cost}."
    )
