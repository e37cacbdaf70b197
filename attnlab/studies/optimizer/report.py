"""The report's section for experiment 15, README's line, and the script's headlines."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.harness.headlines import counted, span
from attnlab.harness.tables import Tables, markdown_table
from attnlab.studies.optimizer.answers import (
    Answer,
    answers,
    arm_of,
    arm_words,
    arms_of,
    best_rate,
    compared_arms,
    far_above,
    more_of,
    multiple_pairs,
    nominal_pairs,
)
from attnlab.studies.optimizer.study import (
    BASELINE,
    CURVES_CSV,
    LEDGER_CSV,
    ONE_UPDATE,
    PINNED,
    RUNS_CSV,
    arm_optimizer,
    optimizer_name,
)

RUN_COLUMNS = ["part", "optimizer", "side", "side_lr", "schedule", "mechanism", "qk_clip_on",
               "qk_clip_tau", "lr", "seed", "steps", "final_val_loss", "max_attn_logit",
               "max_signed_logit", "max_signed_after_first_clip", "max_abs_after_first_clip",
               "steps_over_bound_after_first_clip", "over_bound_clipped_before",
               "over_bound_negative_before", "over_bound_from_below", "first_clip_step",
               "clip_fraction", "clip_fraction_first_quarter", "clip_fraction_last_quarter",
               "clip_fraction_plateau_first", "clip_fraction_plateau_last", "probes",
               "update_growth_median", "update_growth_p90", "update_growth_max",
               "after_clip_max", "final_ln1_gain_rms", "final_qk_spectral_norm",
               "diverged_step"]  # fmt: skip
LEDGER_COLUMNS = ["optimizer", "side", "schedule", "mechanism", "qk_clip_tau", "lr", "seed",
                  "step", "layer", "head", "max_logit", "max_abs_logit", "entropy",
                  "spectral_norm", "elasticity", "owner", "q_moved", "gain_rms"]  # fmt: skip
CURVE_COLUMNS = ["part", "optimizer", "side", "schedule", "mechanism", "qk_clip_tau", "lr",
                 "seed", "layer", "step", "max_attn_logit", "clip_fraction"]  # fmt: skip
#: The trajectory table's points: these fractions of the long run (log-spaced).
TRAJECTORY_FRACTIONS = (0.05, 0.1, 0.2, 0.5, 1.0)
#: The clip's firing over the long run, in this many equal parts.
FIRING_PARTS = 5


def _with_arm(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(arm=arm_of(frame))


def run_name(row) -> str:
    """``scaled``, ``scaled + QK-Clip 100`` or ``scaled + QK-Clip 20 on |z|``, with the
    schedule where it is not cosine."""
    tau = row.qk_clip_tau
    name = row.mechanism if pd.isna(tau) else f"{row.mechanism} + QK-Clip {tau:g}"
    name += " on |z|" if getattr(row, "qk_clip_on", "signed") == "abs" else ""
    return name + (f", {row.schedule}" if row.schedule != "cosine" else "")


def _range(values: pd.Series, spec: str = ".3g") -> str:
    """``median [least, largest]`` over seeds; one value alone where one seed."""
    values = values.dropna()
    if values.empty:
        return "—"
    low, high = format(values.min(), spec), format(values.max(), spec)
    if low == high:
        return low
    return (f"{format(values.median(), spec)} [{format(values.min(), spec)}, "
            f"{format(values.max(), spec)}]")  # fmt: skip


def sweep_table(runs: pd.DataFrame) -> str:
    """Per arm and run, at every rate: held-out loss / largest |logit| (median over seeds;
    "div." where a seed went non-finite)."""
    sweep = _with_arm(runs[runs.part == "sweep"])
    sweep = sweep.assign(run=[run_name(r) for r in sweep.itertuples()])
    rates = sorted(sweep.lr.unique())
    rows = []
    for (arm, name), cell in sweep.groupby(["arm", "run"], sort=False):
        row = [arm, name]
        for rate in rates:
            g = cell[np.isclose(cell.lr, rate)]
            mark = " (div.)" if (g.diverged_step >= 0).any() else ""
            row.append(f"{g.final_val_loss.median():.3f} / {g.max_attn_logit.median():.3g}{mark}"
                       if len(g) else "")  # fmt: skip
        rows.append(row)
    return markdown_table(["arm", "run", *(f"lr {r:g}" for r in rates)], rows)


def _multiple(runs: pd.DataFrame, arm: str, rate: float) -> str:
    best = best_rate(runs, arm)
    return f"{rate:g} ({rate / best:.3g}x best)" if best else f"{rate:g}"


def tau_table(runs: pd.DataFrame) -> str:
    """The tau sweep, per arm, rate and tau (seeds as median [range]): whether and when the
    clip first fired, S and |z| after it (over tau), the heads clipped, the held-out loss."""
    taus = _with_arm(runs[runs.part == "taus"])
    rows = []
    for (arm, rate, on, tau), g in taus.groupby(["arm", "lr", "qk_clip_on", "qk_clip_tau"],
                                                sort=False):  # fmt: skip
        fired = g[g.first_clip_step >= 0]
        keyed = f"{tau:g}" + (" on |z|" if on == "abs" else "")
        rows.append((arm, _multiple(runs, arm, rate), keyed,
                     f"{len(fired)} of {len(g)}", _range(fired.first_clip_step, ".0f"),
                     _range(fired.max_signed_after_first_clip / fired.qk_clip_tau),
                     _range(fired.max_abs_after_first_clip / fired.qk_clip_tau),
                     _range(g.clip_fraction, ".1%"), _range(g.final_val_loss, ".3f")))  # fmt: skip
    header = ["arm", "lr", "tau", "fired (seeds)", "first firing step",
              "S after it / tau", "|z| after it / tau", "head-steps clipped",
              "held-out loss"]  # fmt: skip
    return markdown_table(header, rows)


def long_table(runs: pd.DataFrame) -> str:
    """The long run, per arm, run and rate (seeds as median [range]): loss, largest |z|, S
    after the first firing over tau, the over-bound head-steps by cause, one update's
    growth at the probes and S after the clip, the layer-norm gain, the plateau's firing."""
    long = _with_arm(runs[runs.part == "long"])
    rows = []
    for (arm, name, rate), g in long.assign(run=[run_name(r) for r in long.itertuples()]).groupby(
            ["arm", "run", "lr"], sort=False):  # fmt: skip
        clipped = g.qk_clip_tau.notna().all()
        tau = g.qk_clip_tau.iloc[0]
        causes = (f"{g.over_bound_clipped_before.sum()} / {g.over_bound_negative_before.sum()} / "
                  f"{g.over_bound_from_below.sum()}")  # fmt: skip
        plateau = (f"{_range(g.clip_fraction_plateau_first, '.1%')} → "
                   f"{_range(g.clip_fraction_plateau_last, '.1%')}"
                   if (g.schedule == "wsd").all() else "")  # fmt: skip
        rows.append((arm, name, _multiple(runs, arm, rate), _range(g.final_val_loss, ".3f"),
                     _range(g.max_attn_logit),
                     _range(g.max_signed_after_first_clip / tau) if clipped else "",
                     causes if clipped else "",
                     f"{_range(g.update_growth_median)} / {_range(g.update_growth_p90)} / "
                     f"{_range(g.update_growth_max)}" if clipped else "",
                     _range(g.after_clip_max) if clipped else "",
                     _range(g.final_ln1_gain_rms), plateau))  # fmt: skip
    header = ["arm", "run", "lr", "held-out loss", "largest |z|", "S after the first firing / tau",
              f"head-steps over {ONE_UPDATE:g} tau: clipped before / negative before / from below",
              "one update's growth S'/S: median / p90 / largest", "S after the clip / tau, largest",
              "ln_1 gain RMS (final)", "WSD plateau: clipped, first → last quarter"]  # fmt: skip
    return markdown_table(header, rows)


def firing_table(curves: pd.DataFrame) -> str:
    """The fraction of heads clipped in each of ``FIRING_PARTS`` parts of the long run (the
    recorded steps, every ``RECORD_EVERY``-th), per clipped arm, schedule and rate, median
    over seeds."""
    long = _with_arm(curves[(curves.part == "long") & curves.qk_clip_tau.notna()])
    rows = []
    for (arm, schedule, rate), cell in long.groupby(["arm", "schedule", "lr"], sort=False):
        steps = cell.step.max() + 1
        part = np.minimum(cell.step * FIRING_PARTS // steps, FIRING_PARTS - 1)
        shares = (cell.assign(part=part).groupby(["seed", "part"]).clip_fraction.mean()
                  .groupby("part").median().reindex(range(FIRING_PARTS)))  # fmt: skip
        rows.append((arm, schedule, f"{rate:g}", *(f"{s:.1%}" for s in shares)))
    header = ["arm", "schedule", "lr", *(f"part {i + 1}" for i in range(FIRING_PARTS))]
    return markdown_table(header, rows)


def saturated_heads(ledger: pd.DataFrame) -> pd.DataFrame:
    """The long run's clipped heads at the ledger's points whose signed S sat at or below
    tau while their |logit| passed ``ONE_UPDATE`` tau: large negative logits, which the
    clip on the signed S leaves alone; with their entropy (near 0: saturated)."""
    clipped = ledger[ledger.qk_clip_tau.notna()]
    return clipped[(clipped.max_logit <= clipped.qk_clip_tau)
                   & (clipped.max_abs_logit > ONE_UPDATE * clipped.qk_clip_tau)]  # fmt: skip


def saturated_note(ledger: pd.DataFrame) -> str:
    found = _with_arm(saturated_heads(ledger))
    if found.empty:
        return (
            "**Negative logits.** At no ledger point of a clipped long run did a head's "
            f"|logit| pass {ONE_UPDATE:g} tau with its signed S at or below tau."
        )
    listed = "; ".join(f"{arm} lr {rate:g}: {counted(len(g), 'head-point')}, |z| up to "
                       f"{g.max_abs_logit.max():.3g}, entropy {_range(g.entropy, '.2g')} nats"
                       for (arm, rate), g in found.groupby(["arm", "lr"]))  # fmt: skip
    return (
        "**Negative logits the clip does not touch** (K2's S is each head's largest *signed* "
        f"logit): ledger points of clipped long runs where a head's S sat at or below tau while "
        f"its |logit| passed {ONE_UPDATE:g} tau: {listed}. A head with such logits is not idle: "
        "where its entropy is near 0 it is saturated, its weight on one key."
    )


def trajectory(ledger: pd.DataFrame) -> pd.DataFrame:
    """Per long run (its seeds together) at the ledger's points nearest
    ``TRAJECTORY_FRACTIONS`` of the run: the median over seeds, layers and heads of the
    largest signed logit, the bilinear form's spectral norm, the elasticity, the distance
    W_Q moved and the ``ln_1`` gain's RMS; the owner most heads have."""
    rows = []
    ledger = _with_arm(ledger)
    keys = ["arm", "schedule", "mechanism", "qk_clip_tau", "lr"]
    for key, lane in ledger.groupby(keys, sort=False, dropna=False):
        steps = np.sort(lane.step.unique())
        last = steps[-1]
        chosen = sorted({int(steps[np.argmin(abs(steps - f * last))])
                         for f in TRAJECTORY_FRACTIONS})  # fmt: skip
        for step in chosen:
            at = lane[lane.step == step]
            rows.append({**dict(zip(keys, key, strict=True)), "step": step,
                         "max_logit": at.max_logit.median(),
                         "spectral_norm": at.spectral_norm.median(),
                         "elasticity": at.elasticity.median(), "owner": at.owner.mode().iloc[0],
                         "q_moved": at.q_moved.median(),
                         "gain_rms": at.gain_rms.median()})  # fmt: skip
    return pd.DataFrame(rows)


def trajectory_table(ledger: pd.DataFrame) -> str:
    rows = [(r.arm, run_name(r), f"{r.lr:g}", str(r.step), f"{r.max_logit:.3g}",
             f"{r.spectral_norm:.3g}", f"{r.elasticity:.2f}", r.owner, f"{r.q_moved:.3g}",
             f"{r.gain_rms:.3g}")
            for r in trajectory(ledger).itertuples()]  # fmt: skip
    header = ["arm", "run", "lr", "step", "max logit (held-out)", "sigma(W_q W_k^T)",
              "elasticity", "owner", "W_Q moved", "ln_1 gain RMS"]  # fmt: skip
    return markdown_table(header, rows)


def _tally(pairs) -> str:
    words = [p[-1] for p in pairs]
    return (
        f"more at {words.count('more')}, less at {words.count('less')}, a tie (seeds' "
        f"ranges overlap) at {words.count('tie')} of {len(pairs)}"
    )


def side_note(runs: pd.DataFrame, side_lr: object) -> str:
    """Per pinned arm (``NAME_pinned`` beside ``NAME``): the pinned side's rate against
    AdamW's best in this sweep, and what pinning did to the logits at each rate (median
    over seeds, unclipped ``scaled``)."""
    adamw = best_rate(runs, BASELINE)
    arms = arms_of(runs)
    pinned_arms = [a for a in arms if a.endswith(PINNED) and arm_optimizer(a) in arms]
    if adamw is None or not isinstance(side_lr, float | int) or not pinned_arms:
        return ""
    check = "equals" if np.isclose(adamw, side_lr) else "differs from"
    free = _with_arm(runs[(runs.part == "sweep") & runs.qk_clip_tau.isna()
                          & (runs.mechanism == "scaled")])  # fmt: skip
    lines = []
    for arm in pinned_arms:
        name = arm_optimizer(arm)
        shared, pinned = (free[free.arm == a].groupby("lr").max_attn_logit.median()
                          for a in (name, arm))  # fmt: skip
        both = ", ".join(f"lr {r:g}: {shared[r]:.3g} → {pinned[r]:.3g}" for r in shared.index
                         if r in pinned.index)  # fmt: skip
        lines.append(f"{arm} trains {optimizer_name(name)}'s AdamW side "
                     f"(embeddings, head, LayerNorm gains) at {side_lr:g}; its largest logit, "
                     f"one rate for both sides → the side pinned: {both}")  # fmt: skip
    return (
        "**Rates apart.** " + "; ".join(lines) + f". {side_lr:g} was declared before the run "
        f"as AdamW's best rate; this sweep's AdamW best is {adamw:g}, which {check} it."
    )


def k2_note(runs: pd.DataFrame) -> str:
    """Kimi K2's observation (a) against ours, per arm compared with AdamW, with the seeds'
    spread."""
    lines = []
    for arm in compared_arms(runs):
        nominal, multiples = nominal_pairs(runs, arm), multiple_pairs(runs, arm)
        if nominal or multiples:
            lines.append(f"{arm}: at matched nominal rates {_tally(nominal)}; at matched "
                         f"multiples of each best rate {_tally(multiples)}")  # fmt: skip
    if not lines:
        return ""
    return (
        "**Kimi K2's (a) at our scale**, each arm's largest logit against AdamW's, a rate counted "
        "only where the seeds' ranges are apart: " + "; ".join(lines) + ". Moonlight's RMS "
        "matching exists so that Muon can take AdamW's rate and decay; the matched nominal "
        "rate is that comparison, the matched multiple the other."
    )


def _listed(answers: list[Answer]) -> str:
    return "\n".join(f"- {'holds' if a.holds else '**does not hold**'}: {a.label} — {a.detail}"
                     for a in answers)  # fmt: skip


def _number(value: object) -> str:
    """A sidecar's number as ``:g`` writes it (``"?"`` where it is none)."""
    return f"{value:g}" if isinstance(value, float | int) else "?"


def _seeds(n: object) -> str:
    """A sidecar's seed count in words (``"? seeds"`` where it does not say)."""
    return counted(n, "seed") if isinstance(n, int) else "? seeds"


def answer(tables: Tables) -> str:
    """The section's headline: per arm, over the long run's seeds at its best rate and 3x
    it on the cosine schedule, the largest |logit| without the clip, and S after the clip's
    first firing (over tau) with it; then each arm against AdamW at matched rates."""
    runs = tables.get(RUNS_CSV, RUN_COLUMNS)
    long = _with_arm(runs[(runs.part == "long") & (runs.schedule == "cosine")])
    parts = []
    for arm in arms_of(runs):
        cell = long[long.arm == arm]
        clipped = cell[cell.qk_clip_tau.notna()]
        if clipped.empty:
            continue
        tau = clipped.qk_clip_tau.iloc[0]
        fired = clipped[clipped.first_clip_step >= 0]
        free = cell[cell.qk_clip_tau.isna()]
        ratio = fired.max_signed_after_first_clip / tau
        after = f", S after its first firing {span(ratio, '.3g')} tau" if len(fired) else ""
        parts.append(
            f"{arm}: unclipped |z| up to {span(free.max_attn_logit, '.3g')}; QK-Clip {tau:g} "
            f"fired in {len(fired)} of {counted(len(clipped), 'run')}{after}"
        )
    steps = int(long.steps.max()) if len(long) else 0
    head = (f"Over {steps} steps at each arm's best rate and 3x it (" + "; ".join(parts) + "). "
            if parts else "")  # fmt: skip
    tallies = []
    for arm in compared_arms(runs):
        nominal = nominal_pairs(runs, arm)
        if nominal:
            tallies.append(f"{arm}: {more_of(multiple_pairs(runs, arm))} matched multiples, "
                           f"{more_of(nominal)} matched nominal rates")  # fmt: skip
    return head + ("The largest logit above AdamW's, seeds apart: " + "; ".join(tallies)
                   if tallies else "")  # fmt: skip


def section(tables: Tables) -> str:
    runs = tables.get(RUNS_CSV, RUN_COLUMNS)
    curves = tables.get(CURVES_CSV, CURVE_COLUMNS)
    ledger = tables.get(LEDGER_CSV, LEDGER_COLUMNS)
    flags = tables.flags(RUNS_CSV)
    lm = flags.get("lm_config", {})
    tau = f"{flags['qk_clip']:g}" if isinstance(flags.get("qk_clip"), float | int) else "?"
    known = answers(runs)
    far = far_above(runs)
    arms = "; ".join(arm_words(a) + (f" at {_number(flags.get('side_lr'))}"
                                     if a.endswith(PINNED) else "")
                     for a in arms_of(runs))  # fmt: skip
    if "muon" in set(runs.optimizer):
        arms += " (Muon on the hidden matrices, AdamW on the rest)"
    return "\n\n".join([
        "### When the optimizer owns the temperature: Muon and QK-Clip (experiment 15)",
        f"**Headline.** {answer(tables)}.",
        f"14's causal LM at d_model {lm.get('d_model', '?')} ({lm.get('n_layers', '?')} layers, "
        f"head width {lm.get('d_head', '?')}), sequence {lm.get('seq_len', '?')} bytes, batch "
        f"{lm.get('batch_size', '?')}; weight decay {lm.get('weight_decay', '?')} "
        f"{lm.get('decay', '?')} to each side's rate, on matrices only (LayerNorm gains not "
        f"decayed). Arms: {arms}. QK-Clip after every step (Kimi K2's rule, on "
        f"each head's largest signed logit S), tau {tau} in the sweep, "
        f"{_number(flags.get('long_tau'))} in the long run. The sweep and the tau sweep: "
        f"{flags.get('steps', '?')} steps on {flags.get('text_source', '?')}, "
        f"{_seeds(flags.get('seeds'))}. The long run: {flags.get('long_steps', '?')} steps on "
        f"{_seeds(flags.get('long_seeds'))} on {flags.get('long_text_source', '?')} "
        f"(SHA-256 `{str(flags.get('long_text_sha256', '?'))[:16]}…`), 14's cosine and K2's "
        "warmup-stable-decay. Method: `attnlab/studies/optimizer/README.md`.",
        side_note(runs, flags.get("side_lr")),
        "**The sweep: held-out loss (nats per byte) / largest |logit| over training** "
        "(median over seeds):",
        sweep_table(runs),
        "**The tau sweep** (at each arm's best rate and 3x it; seeds as median [range]; S the "
        "largest signed logit, |z| the largest |logit|, each after the first firing, over "
        "tau):",
        tau_table(runs),
        "**The long run** (seeds as median [range]; one update's growth S'/S: the probes every "
        "10 steps, S before the update and S' after it on the same batch, heads with S > "
        "tau/2; S after the clip on that batch, over tau):",
        long_table(runs),
        "**The clip's firing over the long run** (the fraction of heads clipped, per fifth of "
        "the run, on the recorded steps, median over seeds):",
        firing_table(curves),
        saturated_note(ledger),
        "**Who owns the temperature along the long run** (the ledger on held-out windows, "
        "median over seeds, layers and heads; elasticity 2: the weights own it; W_Q moved: "
        "|W_Q(t) - W_Q(0)| / |W_Q(0)|):",
        trajectory_table(ledger),
        "**Known answers** (rules: `attnlab/studies/optimizer/answers.py`):",
        _listed(known),
        ("**Far above the best rate** (the sweep's clipped runs, tau " + tau + "; not K2's "
         "regime, reported): " + "; ".join(far) + ".") if far else "",
        k2_note(runs),
    ])  # fmt: skip


def _ledger_headline(ledger: pd.DataFrame) -> str:
    """The ledger's last point: how many heads, their largest logit and their owners."""
    if ledger.empty:
        return ""
    last = ledger[ledger.step == ledger.step.max()]
    owners = "/".join(sorted(set(last.owner)))
    return (f"{len(last)} heads at step {last.step.iloc[0]}: largest logit "
            f"{last.max_logit.max():.3g}, owned by the {owners}")  # fmt: skip


HEADLINES = {
    RUNS_CSV: lambda f: (
        "largest logit: "
        + ", ".join(f"{a} {g.max_attn_logit.max():.3g}" for a, g in f.groupby(arm_of(f)))
    ),
    CURVES_CSV: lambda f: f"{f.step.max() + 1 if len(f) else 0} steps at most",
    LEDGER_CSV: _ledger_headline,
}
