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
)
#: Every card of a run side by side (``make cards``: every built-in).
COMPARISON_CSV = "cards/comparison.csv"

STUDY = Study(
    "card",
    9,
    {
        COMPARISON_CSV: Output("11_mechanism_card.py"),
    },
    figures=("fig10_cards",),
    arguments="--mechanism " + " ".join(BUILTIN_NAMES),
)
