"""The report's section on the cards and README's block: the comparison of every carded
mechanism, the closing question answered per mechanism, in the recall task and the
language model; from the cards' tables only. Each card's own page: ``recall_report``
(``card.md``) and ``lm_report`` (``lm/card.md``)."""

from __future__ import annotations

import pandas as pd

from attnlab.harness.tables import Tables
from attnlab.studies.card.lm_report import sink_cells
from attnlab.studies.card.lm_verdicts import DRIFT_FACTOR, LM_DRIFT, LM_LOGITS, LM_OWNER
from attnlab.studies.card.markdown import closing_lines, comparison_markdown, mark, owner_of, table
from attnlab.studies.card.study import COMPARISON_CSV, LM_COMPARISON_CSV
from attnlab.studies.card.verdicts import OWNER_VERDICT


def _comparison(tables: Tables, csv: str = COMPARISON_CSV) -> pd.DataFrame:
    """``cards/comparison.csv`` (or ``cards/lm/comparison.csv``): one row per (mechanism,
    verdict)."""
    return tables.get(csv, ["mechanism", "verdict", "rule", "value", "passed"])


def _rules(verdicts: pd.DataFrame) -> list[str]:
    return [f"- *{r.verdict}*: {r.rule}." for r in verdicts.drop_duplicates("verdict").itertuples()]


#: Why a language-model verdict came out the same for every built-in, where it does.
UNIFORM_WHY: dict[str, str] = {}  # none: each LM verdict differs between the built-ins


def lm_findings(verdicts: pd.DataFrame) -> list[str]:
    """What the language-model verdicts cannot tell apart, read from them: verdicts with one
    answer for every mechanism (and why, where known), and mechanisms with identical values
    in every verdict."""
    lines = []
    for verdict, g in verdicts.groupby("verdict", sort=False):
        marks = {mark(p, v) for p, v in zip(g.passed, g.value, strict=True)}
        if len(marks) == 1 and len(g) > 1:
            why = UNIFORM_WHY.get(verdict, "")
            lines.append(f"- *{verdict}* is {marks.pop()} for all {len(g)}" +
                         (f": {why}." if why else "."))  # fmt: skip
    values = verdicts.groupby("mechanism", sort=False).value.apply(tuple)
    for names in values.groupby(values).groups.values():
        if len(names) > 1:
            lines.append(
                f"- {' and '.join(f'**{n}**' for n in names)} give the same values in every "
                "verdict: in a causal model the mask already gives each row its own length, "
                "so SSMax's n is the query's position + 1 either way."
                if {"ssmax", "ssmax_causal"} <= set(names)
                else f"- {' and '.join(names)} give the same values in every verdict."
            )
    return ["What these verdicts cannot tell apart:", "", *lines] if lines else []


def lm_closing_lines(verdicts: pd.DataFrame) -> list[str]:
    """The closing question in the language model, one line per mechanism of ``verdicts``
    (``cards/lm/comparison.csv``): the owner per layer, drift, logits at the top rate."""
    lines = []
    for name, g in verdicts.groupby("mechanism", sort=False):
        by = g.set_index("verdict")
        owner, drift, logits = (by.loc[v] for v in (LM_OWNER.verdict, LM_DRIFT.verdict,
                                                    LM_LOGITS.verdict))  # fmt: skip
        lines.append(
            f"- **{name}**: {owner.value}; after {DRIFT_FACTOR:g}x the best rate "
            f"{mark(drift.passed, drift.value)} ({drift.value}); largest logit at the top "
            f"rate {logits.value}."
        )
    return lines


#: The attention sink's columns of a card's tables (the LM's ownership, the recall drift's).
LM_SINK_COLUMNS = ["mechanism", "weights", "d_model", "first_weight", "null_weight", "sink_head"]
RECALL_SINK_COLUMNS = ["alpha", "first_weight_mean", "null_weight_mean"]


def sink_lines(tables: Tables, names: list[str]) -> list[str]:
    """The attention sink per built-in, from its cards: in the LM, the sink heads (mean
    first-position weight above 0.3, Gu et al. 2024) of both widths at the best rate, the
    mean first-position weight and the mean weight on nothing; in the recall task (slots in
    random order, where no slot can be a sink), the weight on slot 0 and on nothing of the
    trained model; — where a card lacks them."""
    rows = []
    for name in names:
        cells = [name]
        lm_csv = f"cards/{name}/lm/lm_ownership.csv"
        lm = tables.get(lm_csv) if tables.has(lm_csv) else pd.DataFrame()
        if set(LM_SINK_COLUMNS) <= set(lm):
            first, sinks, null = sink_cells(lm[(lm.weights == "best") & (lm.mechanism == name)])
            cells += [sinks, first, null]  # its own heads, not its baselines'
        else:
            cells += ["—"] * 3
        recall_csv = f"cards/{name}/drift.csv"
        drift = tables.get(recall_csv) if tables.has(recall_csv) else pd.DataFrame()
        if set(RECALL_SINK_COLUMNS) <= set(drift):
            one = drift[drift.alpha == 1.0].iloc[0]
            cells += [f"{one.first_weight_mean:.3f}", f"{one.null_weight_mean:.3f}"]
        else:
            cells += ["—"] * 2
        rows.append(cells)
    header = ["mechanism", "LM: sink heads at the best rate", "LM: first-position weight",
              "LM: weight on nothing", "recall: weight on slot 0",
              "recall: weight on nothing"]  # fmt: skip
    return table(header, rows)


def section(tables: Tables) -> str:
    """The report's section: the comparison of every built-in's card (``make cards``)."""
    verdicts = _comparison(tables)
    lines = [
        "## Mechanism cards (experiment 11)",
        "",
        "The battery of experiments 02-07 and 10, a learning-rate sweep and the trained "
        "model's ownership and drift, run on every built-in mechanism by "
        "`make cards`; a researcher's own runs through the same command "
        "(`python experiments/11_mechanism_card.py --mechanism path/to/file.py:NAME`). Each "
        "mechanism's card, with every number behind these verdicts, is "
        "`results/cards/NAME/card.md`; Figure 10 (`figures/fig10_cards.png`) overlays their "
        "statics and Figure 10 (d) and (e) the drift and learning-rate sweeps.",
        "",
        "The closing question (*which mechanism owns the attention temperature, and does it "
        "still hold after the weights have drifted*), answered from the cards:",
        "",
        *closing_lines(verdicts),
        "",
        comparison_markdown(verdicts).rstrip(),
        "",
        "Rules:",
        "",
        *_rules(verdicts),
    ]
    if tables.has(LM_COMPARISON_CSV):
        lm = _comparison(tables, LM_COMPARISON_CSV)
        lines += [
            "",
            "### In a language model (`--task lm`)",
            "",
            "The same question asked of experiment 14's byte-level causal LM, trained at "
            "five peak rates and two widths (rotary positions; ALiBi with none, as Press et "
            "al.), by `make cards`; each card is `results/cards/NAME/lm/card.md`. Per layer "
            "of the widest model at its best rate, who owns the temperature:",
            "",
            *lm_closing_lines(lm),
            "",
            comparison_markdown(lm).rstrip(),
            "",
            *lm_findings(lm),
            "",
            "Rules:",
            "",
            *_rules(lm),
            "",
            "### Where the excess weight goes: the attention sink",
            "",
            "Per built-in, from its cards: in the LM the heads of both widths at the best rate "
            "whose mean weight on the first position exceeds 0.3 (Gu et al. 2024's sink "
            "heads; uniform causal attention over 64 positions puts 0.074 there), their mean "
            "weight on the first position and on nothing (a learned sink's share, `sink`; "
            "sigmoid's rows need not sum to one); in the recall task, whose slots come in "
            "random order so that no slot can be a sink, the trained model's weight on slot 0 "
            "(1/16 for a row blind to the order) and on nothing. `gated` multiplies each "
            "head's output by a sigmoid gate of the block's input (Qiu et al. 2025) and "
            "`sink` adds a learned logit per head to the softmax's normaliser (gpt-oss); "
            "experiment 14's sink set holds their known answers over seeds.",
            "",
            *sink_lines(tables, list(dict.fromkeys(lm.mechanism))),
        ]
    return "\n".join(lines)


def readme(tables: Tables) -> str:
    """README's block: one line per built-in, who owns its temperature and every verdict
    (among them: holds after drift, stable at high learning rates), the language model's
    verdicts (``LM: ...``) beside the recall task's; — where a task cannot run it."""
    recall = _comparison(tables)
    if not tables.has(LM_COMPARISON_CSV):
        return comparison_markdown(recall, owner=True).rstrip()
    lm = _comparison(tables, LM_COMPARISON_CSV)
    both = pd.concat([recall, lm], ignore_index=True)
    names = list(dict.fromkeys([*recall.mechanism, *lm.mechanism]))
    columns = list(dict.fromkeys(both.verdict))
    rows = []
    for n in names:
        g = both[both.mechanism == n].set_index("verdict")
        owner = owner_of(g.value[OWNER_VERDICT]) if OWNER_VERDICT in g.index else "—"
        rows.append([n, owner, *(mark(g.passed[c], g.value[c]) if c in g.index else "—"
                                 for c in columns)])  # fmt: skip
    return "\n".join(table(["mechanism", "owner", *columns], rows))


def _verdicts_held(verdicts: pd.DataFrame) -> str:
    """How many verdicts each mechanism passes, of how many."""
    held = (
        f"{m} {int(g.passed.astype(float).fillna(0).sum())}/{len(g)}"
        for m, g in verdicts.groupby("mechanism", sort=False)
    )
    return ", ".join(held) + " verdicts hold"


#: The headline of each CSV (``attnlab.studies.headline``).
HEADLINES = {csv: _verdicts_held for csv in (COMPARISON_CSV, LM_COMPARISON_CSV)}
