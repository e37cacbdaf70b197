"""Study card, declared: its outputs, their columns and the rules ``make verify``
compares them by, its figures and its place in the report."""

from __future__ import annotations

from attnlab.harness.declaration import Output, Study

#: Every built-in mechanism (``attnlab.core.temperature.BUILTINS``, in its order), named
#: here so that the declaration, which every report and figure process reads through the
#: registry, loads no JAX (tests/test_card_compute.py checks they are the same).
BUILTIN_NAMES = (
    "scaled",
    "unscaled",
    "folded_init",
    "qk_norm",
    "learned_temperature",
    "inv_d",
    "softcap30",
    "softcap50",
    "ssmax",
    "sigmoid",
    "softpick",
    "cosine_tau",
    "gated",
    "sink",
)
#: The language model's three built-ins beyond those (``attnlab.core.positional``), which
#: the recall task cannot run: they read positions and heads.
POSITIONAL_NAMES = ("alibi", "ssmax_causal", "log_length")
#: Every card of a run side by side (``make cards``: every built-in).
COMPARISON_CSV = "cards/comparison.csv"
#: The same for the language-model cards (``--task lm``).
LM_COMPARISON_CSV = "cards/lm/comparison.csv"

STUDY = Study(
    "card",
    9,
    {
        COMPARISON_CSV: Output("11_mechanism_card.py"),
        LM_COMPARISON_CSV: Output(
            "11_mechanism_card.py",
            arguments="--task lm --mechanism " + " ".join(BUILTIN_NAMES + POSITIONAL_NAMES),
        ),
    },
    figures=("fig10_cards",),
    arguments="--mechanism " + " ".join(BUILTIN_NAMES),
)
