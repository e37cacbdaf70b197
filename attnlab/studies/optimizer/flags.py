"""Flags of experiment 15, kept beside its configuration: what is swept (optimizers,
mechanisms, the clip, rates, steps, seeds, width), the long run and the texts, and the
``OptimizerConfig`` they give."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp

from attnlab.core.mechanism import MechanismError
from attnlab.core.owner import MECHANISM_OWNS_AT
from attnlab.core.references import mechanism_reference, resolve
from attnlab.core.text import TextSource, byte_tokens, read_text
from attnlab.harness import cli
from attnlab.harness.memory import FLOAT32_BYTES, Need, check_needs, count, product, size
from attnlab.lm.corpus import stdlib_source
from attnlab.lm.flags import add_qk_clip_flag, qk_clip_tau, warmup_for
from attnlab.lm.qk_clip import clip_handle
from attnlab.lm.train import CLIP_ON
from attnlab.studies.optimizer.compute import SCALED, OptimizerConfig
from attnlab.studies.optimizer.study import BASELINE, LEDGER_POINTS, PINNED
from attnlab.training.optimizers import OPTIMIZERS, hyperparameters

DEFAULT = OptimizerConfig()
#: ``--quick``: a look in about a minute and a half: Muon (one rate) on ``scaled`` with and
#: without the clip at two rates (AdamW's best and 10x it), one seed, 100 steps, no tau
#: sweep; a long run of 200 steps on one seed, on the cosine schedule, with tau 10 (which
#: binds in 200 steps), so that Muon's clip is seen firing.
QUICK = dataclasses.replace(
    DEFAULT,
    lm=dataclasses.replace(DEFAULT.lm, steps=100, warmup=10),
    arms=("muon",),
    mechanisms=(SCALED,),
    lrs=(1e-2, 1e-1),
    taus=(),
    long_tau=10.0,
    long_schedules=("cosine",),
    seeds=1,
    long_steps=200,
    long_seeds=1,
)


def arm_choices() -> list[str]:
    """Every registered optimizer's name, and ``NAME_pinned`` for those with a side rate."""
    pinned = [name + PINNED for name in OPTIMIZERS if "side_lr" in hyperparameters(name)]
    return [*OPTIMIZERS, *pinned]


def _words(values) -> str:
    return " ".join(f"{v:g}" for v in values)


def add_optimizer_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of experiment 15 but ``--out-dir``. The flags ``--quick`` changes default
    to None (a flag given always wins over ``--quick``), their help saying both defaults."""
    both = "(default: {}; with --quick {})"
    parser.add_argument("--optimizers", dest="arms", nargs="+", choices=arm_choices(),
                        default=None, metavar="ARM",
                        help="the arms: any optimizer of attnlab/training/optimizers.py by "
                        f"name ({', '.join(OPTIMIZERS)}), NAME{PINNED} for one whose side rate "
                        "is pinned at --side-lr (muon_pinned: Muon's AdamW side); each is "
                        f"compared against {BASELINE} " + both.format(
                            " ".join(DEFAULT.arms), " ".join(QUICK.arms)))  # fmt: skip
    parser.add_argument("--side-lr", type=cli.positive_float, default=DEFAULT.side_lr,
                        metavar="LR", help="a pinned arm's side peak rate (AdamW's best rate "
                        "here)")  # fmt: skip
    parser.add_argument("--mechanisms", nargs="+", type=mechanism_reference,
                        default=None, metavar="SPEC",
                        help="mechanisms swept under every arm " + both.format(
                            " ".join(m.text for m in DEFAULT.mechanisms),
                            " ".join(m.text for m in QUICK.mechanisms)) + " (a built-in name, "
                        "MODULE:NAME or path/to/file.py:NAME)")  # fmt: skip
    parser.add_argument("--clipped", nargs="*", type=mechanism_reference,
                        default=[m.text for m in DEFAULT.clipped], metavar="SPEC",
                        help="mechanisms swept with QK-Clip besides; the long run needs "
                        "scaled here")  # fmt: skip
    add_qk_clip_flag(parser, DEFAULT.tau, "QK-Clip's threshold in the sweep (K2's)")
    parser.add_argument("--qk-clip-on", choices=CLIP_ON, default=DEFAULT.clip_on,
                        help="what the sweep's and the long run's clip reads of each head: "
                        "signed, its largest logit (Kimi K2's), or abs, its largest |logit| "
                        "(not K2's: it clips large negative logits too)")  # fmt: skip
    parser.add_argument("--taus", nargs="+", type=qk_clip_tau, default=None, metavar="TAU",
                        help="the tau sweep's thresholds, at each arm's best rate and 3x it "
                        + both.format(_words(DEFAULT.taus), "none: no tau sweep"))  # fmt: skip
    parser.add_argument("--long-tau", type=qk_clip_tau, default=None, metavar="TAU",
                        help="the long run's threshold (one that binds at the best rate) "
                        + both.format(f"{DEFAULT.long_tau:g}", f"{QUICK.long_tau:g}"))  # fmt: skip
    cli.add_rates_flag(parser, None, "peak learning rates " + both.format(
        _words(DEFAULT.lrs), _words(QUICK.lrs)))  # fmt: skip
    cli.add_int_flag(parser, "--steps", None, "steps of the sweep; warmup min(50, steps // "
                     "10) " + both.format(DEFAULT.lm.steps, QUICK.lm.steps), 2)  # fmt: skip
    cli.add_int_flag(parser, "--long-steps", None, "steps of the long run, 0 for none "
                     + both.format(DEFAULT.long_steps, QUICK.long_steps), 0)  # fmt: skip
    cli.add_int_flag(parser, "--seeds", None, "seeds per rate of the sweep "
                     + both.format(DEFAULT.seeds, QUICK.seeds))  # fmt: skip
    cli.add_int_flag(parser, "--long-seeds", None, "seeds per rate of the long run (the "
                     "checkpoints: the first) " + both.format(DEFAULT.long_seeds,
                                                              QUICK.long_seeds))  # fmt: skip
    cli.add_int_flag(parser, "--width", DEFAULT.lm.d_model, "d_model (head width "
                     f"{DEFAULT.lm.d_head})", DEFAULT.lm.d_head)  # fmt: skip
    parser.add_argument(
        "--text",
        type=cli.a_path,
        default=None,
        help="the sweep's UTF-8 text (default: 14's, pydoc_data's prose)",
    )
    parser.add_argument("--long-text", type=cli.a_path, default=None,
                        help="the long run's UTF-8 text (default: the standard library's "
                        "top-level modules, attnlab/lm/corpus.py)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help=f"a look in about a minute and a half: Muon on scaled at rates "
                        f"{_words(QUICK.lrs)}, {QUICK.seeds} seed, {QUICK.lm.steps} steps, no tau "
                        f"sweep, a long run of {QUICK.long_steps} on {QUICK.long_seeds} seed "
                        f"with tau {QUICK.long_tau:g} (a flag given beside it wins)")  # fmt: skip
    cli.add_seed_flag(parser)
    cli.add_jobs_flag(parser, "the pieces (one per arm, mechanism, clip and schedule)")


def optimizer_config(args: argparse.Namespace) -> OptimizerConfig:
    """The flags as an ``OptimizerConfig``: each flag given, else ``--quick``'s value where
    it is given, else the default; a bad value is a ``cli.UsageError`` naming its flag."""
    base = QUICK if args.quick else DEFAULT
    steps = base.lm.steps if args.steps is None else args.steps
    long_steps = base.long_steps if args.long_steps is None else args.long_steps
    if args.width % DEFAULT.lm.d_head:
        raise cli.UsageError(f"--width: {args.width} is not a multiple of the head width "
                             f"{DEFAULT.lm.d_head}")  # fmt: skip
    if 0 < long_steps < LEDGER_POINTS:
        raise cli.UsageError(f"--long-steps: {long_steps} is neither 0 nor at least "
                             f"{LEDGER_POINTS} (the ledger's points)")  # fmt: skip
    lm = dataclasses.replace(base.lm, steps=steps, warmup=warmup_for(steps), d_model=args.width)
    mechanisms = (base.mechanisms if args.mechanisms is None
                  else tuple(map(resolve, args.mechanisms)))  # fmt: skip
    clipped = tuple(map(resolve, args.clipped))
    for flag, references in (("--mechanisms", mechanisms), ("--clipped", clipped)):
        names = [r.name for r in references]
        if len(set(names)) < len(names):
            raise cli.UsageError(f"{flag}: two mechanisms named alike, of {' '.join(names)}")
        for reference in references:
            try:  # per-head vectors must have one value per head at this width
                reference.mechanism.head_values(lm.d_head, lm.n_heads)
            except MechanismError as err:
                raise cli.UsageError(f"{flag}: {err}") from None
    for reference in clipped:
        handle = clip_handle(reference.mechanism, lm.d_head, lm.n_heads)
        if handle <= MECHANISM_OWNS_AT:
            raise cli.UsageError(
                f"--clipped: {reference.name} normalises q and k (its logits' elasticity to "
                f"W_q, W_k is {handle:.2g}, not 2): QK-Clip would change none of its logits"
            )
    if len(set(args.lrs or ())) < len(args.lrs or ()):
        raise cli.UsageError(f"--lrs: a rate given twice, of {_words(args.lrs)}")
    arms = base.arms if args.arms is None else tuple(args.arms)
    if len(set(arms)) < len(arms):
        raise cli.UsageError(f"--optimizers: given twice, of {' '.join(arms)}")
    taus = base.taus if args.taus is None else tuple(sorted(args.taus))
    if len(set(taus)) < len(taus):
        raise cli.UsageError(f"--taus: a tau given twice, of {_words(taus)}")
    seeds = base.seeds if args.seeds is None else args.seeds
    cli.check_seeds(args.seed, seeds, "--seeds")
    long_seeds = base.long_seeds if args.long_seeds is None else args.long_seeds
    cli.check_seeds(args.seed, long_seeds, "--long-seeds")
    config = dataclasses.replace(
        base, lm=lm, arms=arms, mechanisms=mechanisms, clipped=clipped, tau=args.qk_clip,
        clip_on=args.qk_clip_on, taus=taus, side_lr=args.side_lr,
        long_tau=base.long_tau if args.long_tau is None else args.long_tau,
        lrs=base.lrs if args.lrs is None else tuple(sorted(args.lrs)), seeds=seeds,
        seed=args.seed, long_steps=long_steps, long_seeds=long_seeds,
    )  # fmt: skip
    check_needs(optimizer_needs(config, args.jobs))
    return config


#: float32 copies a lane holds of each parameter: the value, two optimizer moments, the
#: gradient, and the final parameters kept on the host.
PARAM_COPIES = 5


def optimizer_needs(config: OptimizerConfig, jobs: int) -> list[Need]:
    """Experiment 15's largest allocations (``attnlab.harness.memory``): the parameters of
    the lanes of ``jobs`` pieces at once (``PARAM_COPIES`` float32 copies of each, counted
    from the model's shapes; activations are not counted), and the per-step metrics of
    every lane of the sweep, the tau sweep and the long run (``1 + (6 + 5 H) L`` float32 a
    step at most, and their copy when joined)."""
    lm = config.lm
    model = lm.model(SCALED.mechanism)
    dummy = jax.ShapeDtypeStruct((1, lm.seq_len), jnp.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), dummy))
    n_params = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))
    lanes = len(config.lrs) * config.seeds
    lane_sizes = (count("--lrs", config.lrs, DEFAULT.lrs),
                  size("--seeds", config.seeds, DEFAULT.seeds))  # fmt: skip
    per_step = (1 + (6 + 5 * lm.n_heads) * lm.n_layers) * FLOAT32_BYTES * 2
    steps = ((len(config.cells()) * lanes + config.tau_lanes) * lm.steps
             + config.long_lanes * config.long_steps)  # fmt: skip
    return [
        Need(product(max(1, jobs), lanes, n_params, PARAM_COPIES, FLOAT32_BYTES),
             "the models and optimizer states of the pieces trained at once",
             (size("--width", lm.d_model, DEFAULT.lm.d_model), *lane_sizes)),
        Need(product(steps, per_step), "the per-step metrics of every lane",
             (size("--steps", lm.steps, DEFAULT.lm.steps),
              size("--long-steps", config.long_steps, DEFAULT.long_steps),
              size("--long-seeds", config.long_seeds, DEFAULT.long_seeds), *lane_sizes)),
    ]  # fmt: skip


def ran(config: OptimizerConfig) -> dict:
    """What a sidecar records of the flags ``--quick`` and the defaults resolve; the
    mechanisms by the references that named them."""
    return {"arms": list(config.arms), "mechanisms": [m.text for m in config.mechanisms],
            "clipped": [m.text for m in config.clipped], "lrs": list(config.lrs),
            "taus": list(config.taus), "long_tau": config.long_tau, "side_lr": config.side_lr,
            "qk_clip_on": config.clip_on, "long_schedules": list(config.long_schedules),
            "steps": config.lm.steps,
            "seeds": config.seeds, "long_steps": config.long_steps,
            "long_seeds": config.long_seeds}  # fmt: skip


def texts(args: argparse.Namespace, config: OptimizerConfig) -> dict[str, TextSource]:
    """The sweep's text (``--text``, default 14's prose) and the long run's (``--long-text``,
    default ``stdlib_source``); one that cannot be read, is not a regular file (a FIFO,
    ``/dev/zero``: ``read_text``) or is too short for a held-out window, is a
    ``cli.UsageError``."""
    chosen = {}
    for flag, path, default in (("--text", args.text, None),
                                ("--long-text", args.long_text, stdlib_source)):  # fmt: skip
        try:
            source = read_text(path) if path is not None or default is None else default()
        except (OSError, ValueError) as err:  # ValueError: not a regular file, not UTF-8
            raise cli.UsageError(f"{flag}: cannot read {path} ({err})") from None
        if len(byte_tokens(source.text)) * config.lm.held_out < config.lm.seq_len + 1:
            raise cli.UsageError(f"{flag}: too few bytes for a held-out window")
        chosen[flag] = source
    return chosen


def sidecar_flags(flags: dict, config: OptimizerConfig, chosen: dict[str, TextSource]) -> dict:
    """What 15's sidecars record: the parsed ``flags``, what ran (``ran``), the texts
    (``sidecar_text``) and the language model's configuration."""
    return {**flags, **ran(config), **sidecar_text(chosen),
            "lm_config": dataclasses.asdict(config.lm)}  # fmt: skip


def sidecar_text(chosen: dict[str, TextSource]) -> dict[str, str]:
    """The texts' sources and SHA-256, as the sidecars record them."""
    return dict(itertools.chain.from_iterable(
        ((f"{name}_source", s.source), (f"{name}_sha256", s.sha256))
        for name, s in (("text", chosen["--text"]), ("long_text", chosen["--long-text"]))
    ))  # fmt: skip
