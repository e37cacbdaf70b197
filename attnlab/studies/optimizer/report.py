"""The report's section for experiment 15, README's line, and the script's headlines."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.harness.headlines import counted, span
from attnlab.harness.tables import Tables, markdown_table
from attnlab.lm.sweep_tables import best_lane_rates
from attnlab.studies.optimizer.answers import (
    ANSWERS,
    Answer,
    multiple_pairs,
    nominal_pairs,
)
from attnlab.studies.optimizer.study import BLOWN, CURVES_CSV, LEDGER_CSV, ONE_UPDATE, RUNS_CSV

RUN_COLUMNS = ["part", "optimizer", "mechanism", "qk_clip_tau", "lr", "seed", "steps",
               "final_val_loss", "max_attn_logit", "max_signed_logit",
               "max_signed_after_first_clip", "steps_over_bound_after_first_clip",
               "first_clip_step", "clip_fraction", "clip_fraction_first_quarter",
               "clip_fraction_last_quarter", "final_qk_spectral_norm",
               "diverged_step"]  # fmt: skip
LEDGER_COLUMNS = ["optimizer", "mechanism", "qk_clip_tau", "lr", "step", "layer", "head",
                  "max_logit", "spectral_norm", "elasticity", "owner", "q_moved",
                  "k_moved"]  # fmt: skip
CURVE_COLUMNS = ["part", "optimizer", "mechanism", "qk_clip_tau", "lr", "seed", "layer",
                 "step", "max_attn_logit", "clip_fraction"]  # fmt: skip
#: The trajectory table's points: these fractions of the long run (log-spaced).
TRAJECTORY_FRACTIONS = (0.05, 0.1, 0.2, 0.5, 1.0)
#: The clip's firing over the long run, in this many equal parts.
FIRING_PARTS = 5


def run_name(row) -> str:
    """``scaled``, or ``scaled + QK-Clip 100``."""
    tau = row.qk_clip_tau
    return row.mechanism if pd.isna(tau) else f"{row.mechanism} + QK-Clip {tau:g}"


def sweep_table(runs: pd.DataFrame) -> str:
    """Per optimizer and run, at every rate: held-out loss / largest logit (median over
    seeds; "div." where a seed went non-finite)."""
    sweep = runs[runs.part == "sweep"].assign(run=lambda f: [run_name(r) for r in f.itertuples()])
    rates = sorted(sweep.lr.unique())
    rows = []
    for (optimizer, name), cell in sweep.groupby(["optimizer", "run"], sort=False):
        row = [optimizer, name]
        for rate in rates:
            g = cell[np.isclose(cell.lr, rate)]
            mark = " (div.)" if (g.diverged_step >= 0).any() else ""
            row.append(f"{g.final_val_loss.median():.3f} / {g.max_attn_logit.median():.3g}{mark}"
                       if len(g) else "")  # fmt: skip
        rows.append(row)
    return markdown_table(["optimizer", "run", *(f"lr {r:g}" for r in rates)], rows)


def long_table(runs: pd.DataFrame) -> str:
    """The long run's lanes: loss, logits, the clip's firing, the bilinear form's norm."""
    rows = []
    for r in runs[runs.part == "long"].itertuples():
        clipped = not pd.isna(r.qk_clip_tau)
        rows.append((r.optimizer, run_name(r), f"{r.lr:g}", str(r.seed), f"{r.final_val_loss:.3f}",
                     f"{r.max_attn_logit:.3g}",
                     f"{r.max_signed_after_first_clip:.3g} ({r.steps_over_bound_after_first_clip}"
                     f" steps > {ONE_UPDATE:g} tau)" if clipped else "",
                     (str(r.first_clip_step) if r.first_clip_step >= 0 else "never")
                     if clipped else "",
                     f"{r.clip_fraction_first_quarter:.1%} / {r.clip_fraction_last_quarter:.1%}"
                     if clipped else "",
                     f"{r.final_qk_spectral_norm:.3g}"))  # fmt: skip
    header = ["optimizer", "run", "lr", "seed", "held-out loss", "largest logit",
              "largest S after the first clip", "first clip step",
              "heads clipped, first / last quarter", "final max sigma(W_q W_k^T)"]  # fmt: skip
    return markdown_table(header, rows)


def firing_table(curves: pd.DataFrame) -> str:
    """The fraction of heads clipped in each of ``FIRING_PARTS`` parts of the long run (the
    recorded steps, every ``RECORD_EVERY``-th), per clipped lane."""
    long = curves[(curves.part == "long") & curves.qk_clip_tau.notna()]
    rows = []
    for (optimizer, rate, seed), cell in long.groupby(["optimizer", "lr", "seed"], sort=False):
        steps = cell.step.max() + 1
        part = np.minimum(cell.step * FIRING_PARTS // steps, FIRING_PARTS - 1)
        shares = cell.groupby(part).clip_fraction.mean().reindex(range(FIRING_PARTS))
        rows.append((optimizer, f"{rate:g}", str(seed), *(f"{s:.1%}" for s in shares)))
    header = ["optimizer", "lr", "seed", *(f"part {i + 1}" for i in range(FIRING_PARTS))]
    return markdown_table(header, rows)


def trajectory(ledger: pd.DataFrame) -> pd.DataFrame:
    """Per long run (its seeds together) at the ledger's points nearest
    ``TRAJECTORY_FRACTIONS`` of the run: the median over seeds, layers and heads of the
    largest signed logit, the bilinear form's spectral norm, the elasticity and the
    distance W_Q moved; the owner most heads have."""
    rows = []
    keys = ["optimizer", "mechanism", "qk_clip_tau", "lr"]
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
                         "q_moved": at.q_moved.median()})  # fmt: skip
    return pd.DataFrame(rows)


def trajectory_table(ledger: pd.DataFrame) -> str:
    rows = [(r.optimizer, run_name(r), f"{r.lr:g}", str(r.step), f"{r.max_logit:.3g}",
             f"{r.spectral_norm:.3g}", f"{r.elasticity:.2f}", r.owner, f"{r.q_moved:.3g}")
            for r in trajectory(ledger).itertuples()]  # fmt: skip
    header = ["optimizer", "run", "lr", "step", "max logit (held-out)", "sigma(W_q W_k^T)",
              "elasticity", "owner", "W_Q moved"]  # fmt: skip
    return markdown_table(header, rows)


def _rank_correlation(x: pd.Series, y: pd.Series) -> float:
    return float(np.corrcoef(x.rank(), y.rank())[0, 1])


def k2_note(runs: pd.DataFrame) -> str:
    """Kimi K2's observation against ours, and what the runs show of why: the largest logit
    against the spectral norm of W_q,h W_k,h^T in the final weights (unclipped ``scaled``
    in the sweep), at matched nominal rates and at each optimizer's best rate."""
    nominal, multiples = nominal_pairs(runs), multiple_pairs(runs)
    sweep = runs[(runs.part == "sweep") & runs.qk_clip_tau.isna() & (runs.mechanism == "scaled")]
    if sweep.optimizer.nunique() < 2:
        return ""
    finite = sweep[np.isfinite(sweep.max_attn_logit) & np.isfinite(sweep.final_qk_spectral_norm)]
    rho = _rank_correlation(finite.max_attn_logit, finite.final_qk_spectral_norm)
    norms = sweep.groupby(["optimizer", "lr"]).final_qk_spectral_norm.median().unstack(0)
    best = {o: best_lane_rates(cell, 1.0)[0] for o, cell in sweep.groupby("optimizer")}

    def count(pairs) -> str:
        return f"{sum(m > a for _, m, a in pairs)} of {len(pairs)}"

    spectral = ", ".join(f"{norms.muon[r]:.3g} vs {norms.adamw[r]:.3g} (lr {r:g})"
                         for r in norms.dropna().index)  # fmt: skip
    return (
        f"**Kimi K2 at our scale.** Muon's largest logit is above AdamW's at {count(nominal)} "
        f"matched nominal rates and at {count(multiples)} matched multiples of each one's best "
        f"rate (AdamW's best {best['adamw']:g}, Muon's {best['muon']:g}). What the runs show "
        "of why: the largest logit follows the largest spectral norm of W_q,h W_k,h^T in the "
        f"final weights (rank correlation {rho:.2f} over the unclipped scaled runs of the "
        f"sweep), and that norm is, Muon vs AdamW, {spectral}. At one nominal rate Muon's "
        "RMS-matched update (RMS 0.2 per matrix) grows the bilinear form less than AdamW's "
        f"does; but Muon's best rate is {best['muon'] / best['adamw']:.3g}x AdamW's, so at the "
        "same multiple of its best rate it takes larger steps, and its bilinear form and "
        "logits grow more. K2 compares each optimizer at its own tuned recipe: the second "
        "comparison is theirs."
    )


def clip_bound_note(runs: pd.DataFrame) -> str:
    """Where the clip let S past ``ONE_UPDATE`` tau after it first fired, and at what
    multiple of the optimizer's best rate (unclipped ``scaled`` in the sweep)."""
    clipped = runs[runs.qk_clip_tau.notna() & (runs.first_clip_step >= 0)]
    over = clipped[clipped.max_signed_after_first_clip > ONE_UPDATE * clipped.qk_clip_tau]
    if over.empty:
        return ""
    sweep = runs[(runs.part == "sweep") & runs.qk_clip_tau.isna() & (runs.mechanism == "scaled")]
    best = {o: best_lane_rates(cell, 1.0)[0] for o, cell in sweep.groupby("optimizer")}
    listed = "; ".join(
        f"{r.part} {r.optimizer} lr {r.lr:g} ({r.lr / best[r.optimizer]:.3g}x its best), "
        f"seed {r.seed}: "
        f"{r.max_signed_after_first_clip / r.qk_clip_tau:.3g} tau, on "
        f"{r.steps_over_bound_after_first_clip} of {r.steps - r.first_clip_step - 1} steps"
        for r in over.itertuples()
        if r.optimizer in best
    )
    return (
        "**Where (b) fails, and why.** The clip acts after a step, on the logits of that "
        "step's batch: the next step's S is this step's tau times one update's growth (and "
        f"the batch's). The rule allowed {ONE_UPDATE:g}x; at rates far above the best, single "
        f"updates grew S by more: {listed}. Everywhere else S stayed within "
        f"{ONE_UPDATE:g} tau after the first firing."
    )


def negative_note(runs: pd.DataFrame) -> str:
    """Where a clipped run's largest |logit| is far beyond its largest signed logit: large
    negative logits, which QK-Clip (keyed on the signed maximum S, K2's) leaves alone."""
    clipped = runs[runs.qk_clip_tau.notna() & (runs.first_clip_step >= 0)]
    far = clipped[clipped.max_attn_logit > BLOWN]
    if far.empty:
        return ""
    listed = "; ".join(f"{r.part} {r.optimizer} lr {r.lr:g} seed {r.seed}: |z| "
                       f"{r.max_attn_logit:.3g}, S {r.max_signed_logit:.3g}"
                       for r in far.itertuples())  # fmt: skip
    return (
        "**What QK-Clip does not bound.** It keys on each head's largest *signed* logit S "
        "(K2's definition): the softmax's largest weight. A logit far below zero is left "
        f"alone, and in {len(far)} clipped runs the largest |logit| passed {BLOWN:g}, far "
        f"above the largest S over the run: {listed}. Such a logit takes no weight in the "
        "softmax, but it is what overflows a low-precision format first."
    )


def _listed(answers: list[Answer]) -> str:
    return "\n".join(f"- {'holds' if a.holds else '**does not hold**'}: {a.label} — {a.detail}"
                     for a in answers)  # fmt: skip


def _seeds(n: object) -> str:
    """A sidecar's seed count in words (``"? seeds"`` where it does not say)."""
    return counted(n, "seed") if isinstance(n, int) else "? seeds"


def answer(tables: Tables) -> str:
    """The section's headline: per optimizer, over the long run's seeds, the largest logit
    at the clipped rate without and with QK-Clip (after it first fired) and how often the
    clip fired early and late; then Muon against AdamW at matched rates."""
    runs = tables.get(RUNS_CSV, RUN_COLUMNS)
    long = runs[(runs.part == "long") & runs.qk_clip_tau.notna()]
    parts = []
    for (optimizer, rate, tau), cell in long.groupby(["optimizer", "lr", "qk_clip_tau"],
                                                     sort=False):  # fmt: skip
        free = runs[(runs.part == "long") & (runs.optimizer == optimizer)
                    & runs.qk_clip_tau.isna() & np.isclose(runs.lr, rate)]  # fmt: skip
        fired = cell[cell.first_clip_step >= 0]
        clipped = (
            f"{span(fired.max_signed_after_first_clip, '.3g')} after QK-Clip {tau:g} first "
            f"fired (steps {span(fired.first_clip_step, 'd')}), the clip firing on "
            f"{span(fired.clip_fraction_first_quarter, '.0%')} of head-steps in the first "
            f"quarter and {span(fired.clip_fraction_last_quarter, '.0%')} in the last"
            if len(fired) == len(cell)
            else f"with QK-Clip, which fired on {len(fired)} of {counted(len(cell), 'seed')}"
        )
        reached = span(free.max_attn_logit, ".3g") if len(free) else "not run"
        seeds = counted(len(cell), "seed")
        parts.append(f"under {optimizer} at lr {rate:g} ({seeds}) the largest logit "
                     f"reached {reached} unclipped and {clipped}")  # fmt: skip
    nominal, multiples = nominal_pairs(runs), multiple_pairs(runs)

    def above(pairs) -> str:
        return f"{sum(m > a for _, m, a in pairs)} of {len(pairs)}"

    head = f"Over {int(long.steps.max())} steps, " + "; ".join(parts) + ". " if parts else ""
    return (
        f"{head}Muon's largest logit exceeded AdamW's at {above(nominal)} matched nominal "
        f"rates and at {above(multiples)} matched multiples of each one's best rate"
    )


def section(tables: Tables) -> str:
    runs = tables.get(RUNS_CSV, RUN_COLUMNS)
    curves = tables.get(CURVES_CSV, CURVE_COLUMNS)
    ledger = tables.get(LEDGER_CSV, LEDGER_COLUMNS)
    flags = tables.flags(RUNS_CSV)
    lm = flags.get("lm_config", {})
    tau = f"{flags['qk_clip']:g}" if isinstance(flags.get("qk_clip"), float | int) else "?"
    answers = [f(runs) for f in ANSWERS]
    return "\n\n".join([
        "### When the optimizer owns the temperature: Muon and QK-Clip (experiment 15)",
        f"**Headline.** {answer(tables)}.",
        f"14's causal LM at d_model {lm.get('d_model', '?')} ({lm.get('n_layers', '?')} layers, "
        f"head width {lm.get('d_head', '?')}), sequence {lm.get('seq_len', '?')} bytes, batch "
        f"{lm.get('batch_size', '?')}; AdamW as 14, or Muon on the hidden matrices with that "
        f"AdamW on the rest; QK-Clip after every step at tau {tau} "
        f"(Kimi K2's). The sweep: {flags.get('steps', '?')} steps on "
        f"{flags.get('text_source', '?')}, {_seeds(flags.get('seeds'))}. The long run: "
        f"{flags.get('long_steps', '?')} steps on {_seeds(flags.get('long_seeds'))} on "
        f"{flags.get('long_text_source', '?')} "
        f"(SHA-256 `{str(flags.get('long_text_sha256', '?'))[:16]}…`). Method: "
        "`attnlab/studies/optimizer/README.md`.",
        "**The sweep: held-out loss (nats per byte) / largest attention logit over training** "
        "(median over seeds):",
        sweep_table(runs),
        "**The long run** (each optimizer's best rate, and the lowest rate where its logits "
        f"passed {BLOWN:g} in the sweep, with and without the clip):",
        long_table(runs),
        "**The clip's firing over the long run** (the fraction of heads clipped, per fifth of "
        "the run, on the recorded steps):",
        firing_table(curves),
        "**Who owns the temperature along the long run** (the ledger on held-out windows, "
        "median over seeds, layers and heads; elasticity 2: the weights own it; W_Q moved: "
        "|W_Q(t) - W_Q(0)| / |W_Q(0)|):",
        trajectory_table(ledger),
        "**Known answers** (rules: `attnlab/studies/optimizer/answers.py`):",
        _listed(answers),
        clip_bound_note(runs),
        k2_note(runs),
        negative_note(runs),
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
        + ", ".join(f"{o} {g.max_attn_logit.max():.3g}" for o, g in f.groupby("optimizer"))
    ),
    CURVES_CSV: lambda f: f"{f.step.max() + 1 if len(f) else 0} steps at most",
    LEDGER_CSV: _ledger_headline,
}
