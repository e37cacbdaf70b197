"""Flags of experiment 14, kept beside its configurations: what is swept (mechanisms,
widths, rates, steps, positions, text), the layout of the saved models, and the
``ProxyConfig`` they give."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from pathlib import Path

import numpy as np

from attnlab.core.mechanism import MechanismError
from attnlab.core.references import MechanismRef, mechanism_reference, resolve
from attnlab.core.text import TextSource, byte_tokens, read_text
from attnlab.harness import cli
from attnlab.harness.memory import (
    FLOAT32_BYTES,
    Need,
    check_needs,
    count,
    fitting_jobs,
    product,
    size,
)
from attnlab.lm.export import LAYOUTS
from attnlab.lm.flags import add_optimizer_flag, add_qk_clip_flag, warmup_for
from attnlab.lm.model import POSITIONS, VOCAB
from attnlab.lm.train import STEP_METRICS, LMConfig
from attnlab.studies.lm_proxy.compute import ProxyConfig

DEFAULT = ProxyConfig()
#: ``--quick``: a one-minute look: one width, three rates, fewer steps; every mechanism at
#: that width, so the models it trains are saved for 13 as the full run's are.
QUICK = dataclasses.replace(
    DEFAULT,
    lm=dataclasses.replace(DEFAULT.lm, steps=200, warmup=20),
    widths=(32,),
    one_width_d_model=32,
    lrs=(1e-3, 1e-2, 1e-1),
    sink_seeds=2,
)


def _words(values) -> str:
    return " ".join(f"{v:g}" for v in values)


def add_proxy_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of experiment 14 but ``--out-dir``. The flags ``--quick`` changes default
    to None (given or not is then plain: a flag given always wins over ``--quick``, whatever
    its value), their help saying both defaults."""
    for flag, nargs, default, what in (
        ("--mechanisms", "+", DEFAULT.swept, "mechanisms swept at every width"),
        ("--one-width-mechanisms", "*", DEFAULT.one_width, "mechanisms swept at --one-width only"),
        ("--sink-mechanisms", "*", DEFAULT.sinks, "the attention sink's set, at --one-width on "
         "--sink-seeds seeds of their own (14_lm_sinks.csv; none: no sink table rows)"),
    ):  # fmt: skip
        parser.add_argument(flag, nargs=nargs, type=mechanism_reference, metavar="SPEC",
                            default=[m.text for m in default], help=what)  # fmt: skip
    both = "(default: {}; with --quick {})"
    cli.add_int_flag(parser, "--widths", None, "d_model values (head width 16) " + both.format(
        _words(DEFAULT.widths), _words(QUICK.widths)), 2, many=True)  # fmt: skip
    cli.add_int_flag(parser, "--one-width", None, "d_model of the one-width mechanisms, where "
                     "each mechanism's best model is saved for 13 " + both.format(
                         DEFAULT.one_width_d_model, QUICK.one_width_d_model), 2)  # fmt: skip
    cli.add_rates_flag(parser, None, "peak learning rates " + both.format(
        _words(DEFAULT.lrs), _words(QUICK.lrs)))  # fmt: skip
    cli.add_int_flag(parser, "--steps", None, "training steps; warmup is min(50, steps // 10) "
                     + both.format(DEFAULT.lm.steps, QUICK.lm.steps), 2)  # fmt: skip
    cli.add_int_flag(parser, "--seeds", DEFAULT.seeds, "seeds per rate")
    cli.add_int_flag(parser, "--sink-seeds", None, "seeds per rate of the sink set "
                     + both.format(DEFAULT.sink_seeds, QUICK.sink_seeds))  # fmt: skip
    add_optimizer_flag(parser, DEFAULT.lm.optimizer, "adamw (14's), or muon on the hidden "
                       "matrices with adamw on the rest, or any of "
                       "attnlab/training/optimizers.py")  # fmt: skip
    add_qk_clip_flag(parser, None, "QK-Clip after every step at TAU (Kimi K2: 100; default: "
                     "none); the curves then record each layer's largest signed logit and the "
                     "fraction of heads clipped")  # fmt: skip
    parser.add_argument(
        "--positions",
        choices=POSITIONS,
        default="learned",
        help="learned absolute positions (GPT-2), rotary (Wortsman et al.) or none (NoPE)",
    )
    parser.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=DEFAULT.layout,
        help="the layout of the models saved for 13: gpt2 (GPT-2's, which 13's committed "
        "tables read) or llama (Llama's as model_type attnlab_llama, never llama: the MLP "
        "is GPT-2's ungated GELU and the positions learned; attnlab/lm/export.py). Not an "
        "output flag: llama runs go to a run folder of their own",
    )
    parser.add_argument(
        "--text",
        type=cli.a_path,
        default=None,
        help="a UTF-8 text file to train on (default: pydoc_data's prose)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a one-minute look: d_model {_words(QUICK.widths)}, rates {_words(QUICK.lrs)}, "
        f"{QUICK.lm.steps} steps (a flag given beside it wins)",
    )
    cli.add_seed_flag(parser)
    cli.add_jobs_flag(parser, "the sweep's pieces (one per mechanism and width)")


def proxy_config(args: argparse.Namespace) -> ProxyConfig:
    """The flags as a ``ProxyConfig``: each flag given, else ``--quick``'s value where it is
    given, else the default; a bad value is a ``cli.UsageError`` naming its flag."""
    base = QUICK if args.quick else DEFAULT
    steps = base.lm.steps if args.steps is None else args.steps
    try:
        lm = dataclasses.replace(
            base.lm, steps=steps, warmup=warmup_for(steps, base.lm.warmup),
            positions=args.positions, optimizer=args.optimizer, qk_clip_tau=args.qk_clip,
        )  # fmt: skip
    except ValueError as err:
        raise cli.UsageError(f"--steps: {err}") from None
    chosen = {
        "swept": tuple(map(resolve, args.mechanisms)),
        "one_width": tuple(map(resolve, args.one_width_mechanisms)),
        "widths": base.widths if args.widths is None else tuple(args.widths),
        "lrs": base.lrs if args.lrs is None else tuple(args.lrs),
        "sinks": tuple(map(resolve, args.sink_mechanisms)),
        "sink_seeds": base.sink_seeds if args.sink_seeds is None else args.sink_seeds,
    }
    one_width = base.one_width_d_model if args.one_width is None else args.one_width
    for d in (*chosen["widths"], one_width):
        if d % lm.d_head:
            raise cli.UsageError(f"--widths: {d} is not a multiple of the head width {lm.d_head}")
    config = dataclasses.replace(
        base, lm=lm, one_width_d_model=one_width, seeds=args.seeds, seed=args.seed,
        layout=args.layout, **chosen,
    )  # fmt: skip
    check_needs(proxy_needs(config, proxy_jobs(config, args.jobs)))
    cells = (("--mechanisms", chosen["swept"], chosen["widths"]),
             ("--one-width-mechanisms", chosen["one_width"], (one_width,)),
             ("--sink-mechanisms", chosen["sinks"], (one_width,)))  # fmt: skip
    for flag, references, widths in cells:
        for reference, d in itertools.product(references, widths):
            try:  # per-head vectors must have one value per head at every width
                reference.mechanism.head_values(lm.d_head, d // lm.d_head)
            except MechanismError as err:
                raise cli.UsageError(f"{flag}: {err}") from None
    check_names(chosen["swept"], chosen["one_width"])
    check_names((), chosen["sinks"], "--sink-mechanisms")
    cli.check_seeds(args.seed, args.seeds, "--seeds")
    cli.check_seeds(args.seed, config.sink_seeds, "--sink-seeds")
    return config


#: Bytes per parameter of a lane: the float32 value, Adam's two moments, the gradient, and
#: the final parameters kept on the host.
LM_PARAM_BYTES = 5 * FLOAT32_BYTES
#: float32 numbers per token and layer a training step keeps for the backward pass, in
#: units of d_model: the layer norms' outputs (2), q, k, v (3), the heads' output and its
#: projection (2), the MLP's hidden layer before and after GELU (2 x 4), rounded up.
TOKEN_LAYER_ACTIVATIONS = 16
#: The same for the held-out evaluation (forward only: one layer's at a time).
EVAL_ACTIVATIONS = 8


def lm_params(config: LMConfig) -> int:
    """Parameters of the causal LM of ``config`` (``attnlab.lm.model``): per block
    ``W_Q, W_K, W_V, W_O`` (``4 d^2``), the MLP (``8 d^2``) and two layer-norm scales; the
    byte embedding and the untied head (``2 * 256 d``), the positions (``T d``, learned
    only) and the final layer norm's scale."""
    d, positions = config.d_model, config.seq_len if config.positions == "learned" else 0
    return config.n_layers * (12 * d * d + 2 * d) + (2 * VOCAB + positions + 1) * d


def piece_bytes(config: LMConfig, lanes: int) -> int:
    """Bytes of one piece (a mechanism at one width, ``lanes`` rates and seeds trained as
    lanes of one program): per lane its parameters (``lm_params * LM_PARAM_BYTES``), a
    step's activations (``B T L (TOKEN_LAYER_ACTIVATIONS d + 2 H T) + 2 B T 256`` float32:
    the attention logits and weights ``H T`` per token and layer, the output logits and
    their gradient) and the held-out evaluation's (``W T (EVAL_ACTIVATIONS d + 2 H T + 2 *
    256)`` float32 for ``W`` eval windows)."""
    d, t, h = config.d_model, config.seq_len, config.n_heads
    step = (
        config.batch_size
        * t
        * (config.n_layers * (TOKEN_LAYER_ACTIVATIONS * d + 2 * h * t) + 2 * VOCAB)
    )
    held_out = config.eval_windows * t * (EVAL_ACTIVATIONS * d + 2 * h * t + 2 * VOCAB)
    per_lane = lm_params(config) * LM_PARAM_BYTES + (step + held_out) * FLOAT32_BYTES
    return product(lanes, per_lane)


def proxy_jobs(config: ProxyConfig, jobs: int) -> int:
    """The workers 14 runs: ``--jobs``, fewer where that many pieces at once would not fit
    the memory budget (``fitting_jobs``)."""
    return fitting_jobs(lambda j: proxy_needs(config, j), jobs)


def proxy_needs(config: ProxyConfig, jobs: int) -> list[Need]:
    """Experiment 14's largest allocations (``attnlab.harness.memory``): the ``jobs``
    costliest pieces at once (``piece_bytes``; pieces run in ``jobs`` worker processes),
    and the per-step metrics of every piece's lanes (``steps * (1 + 4 L)`` float32 per
    lane, and their copy when joined)."""
    lane_sizes = (
        count("--lrs", config.lrs, DEFAULT.lrs),
        size("--seeds", config.seeds, DEFAULT.seeds),
        size("--sink-seeds", config.sink_seeds, DEFAULT.sink_seeds),
    )
    cells = config.cells()
    pieces = sorted(((piece_bytes(config.width(c.d_model), len(config.lrs) * len(c.seeds)),
                      c.d_model) for c in cells), reverse=True)[: max(1, jobs)]  # fmt: skip
    widest = max(d for _, d in pieces)
    flag = "--widths" if widest in config.widths else "--one-width"
    default = max(DEFAULT.widths) if flag == "--widths" else DEFAULT.one_width_d_model
    per_step = (1 + (len(STEP_METRICS) - 1) * config.lm.n_layers) * FLOAT32_BYTES * 2
    lanes = sum(len(config.lrs) * len(c.seeds) for c in cells)
    return [
        Need(
            sum(nbytes for nbytes, _ in pieces),
            "the models, Adam moments and activations of the pieces trained at once",
            (size(flag, widest, default), *lane_sizes),
        ),
        Need(
            product(lanes, config.lm.steps, per_step),
            "the per-step metrics of every lane",
            (size("--steps", config.lm.steps, DEFAULT.lm.steps), *lane_sizes),
        ),
    ]


def warmup_note(config: ProxyConfig) -> str | None:
    """The line 14 prints where ``--steps`` moved the warmup from its default."""
    if config.lm.warmup == DEFAULT.lm.warmup:
        return None
    return (f"warmup: {config.lm.warmup} steps (min(50, steps // 10) of --steps "
            f"{config.lm.steps})")  # fmt: skip


def sidecar_flags(flags: dict, config: ProxyConfig, source: TextSource) -> dict:
    """What 14's sidecars record: the parsed ``flags``, what ran (``ran``), the text's
    source and SHA-256, and the language model's configuration."""
    return {**flags, **ran(config), "text_source": source.source,
            "text_sha256": source.sha256,
            "lm_config": dataclasses.asdict(config.lm)}  # fmt: skip


def ran(config: ProxyConfig) -> dict:
    """What a sidecar records of the flags ``--quick`` and the defaults resolve: the values
    that ran, not None or a default ``--quick`` replaced; the mechanisms by the references
    that named them."""
    return {
        "mechanisms": [m.text for m in config.swept],
        "one_width_mechanisms": [m.text for m in config.one_width],
        "widths": list(config.widths),
        "one_width": config.one_width_d_model,
        "lrs": list(config.lrs),
        "steps": config.lm.steps,
        "sink_mechanisms": [m.text for m in config.sinks],
        "sink_seeds": config.sink_seeds,
    }


def check_names(
    swept: tuple[MechanismRef, ...],
    one_width: tuple[MechanismRef, ...],
    one_width_flag: str = "--one-width-mechanisms",
) -> None:
    """A ``cli.UsageError`` where two mechanisms of a run share a name (the same one twice,
    or a researcher's namesake beside the built-in, as the card and 13 refuse): 14's rows
    and saved models (``14_lm_<name>_d<width>``) are told apart by name, so one would
    replace the other."""
    seen: dict[str, str] = {}
    for flag, references in (("--mechanisms", swept), (one_width_flag, one_width)):
        for ref in references:
            name, reference = ref.name, ref.text
            if name in seen:
                builtin = reference == name or seen[name] == name
                advice = "rename yours" if builtin else "give each a name of its own"
                raise cli.UsageError(
                    f"{flag}: {reference!r} and {seen[name]!r} are both named {name!r}, and "
                    f"14 tells rows and saved models apart by name: {advice}"
                    if reference != seen[name]
                    else f"{flag}: {reference!r} is given twice"
                )
            seen[name] = reference


def text_tokens(path: Path | None, config: ProxyConfig) -> tuple[TextSource, np.ndarray]:
    """``--text`` read (``None``: the default prose) and its bytes as tokens; a file that
    cannot be read, is not a regular file (a FIFO, ``/dev/zero``: ``read_text``) or is too
    short for one held-out window, is a ``cli.UsageError``."""
    try:
        source = read_text(path)
    except (OSError, ValueError) as err:  # ValueError: not a regular file, not UTF-8
        raise cli.UsageError(f"--text: cannot read {path} ({err})") from None
    tokens = byte_tokens(source.text)
    if len(tokens) * config.lm.held_out < config.lm.seq_len + 1:
        raise cli.UsageError(f"--text: {len(tokens)} bytes are too few for a held-out window")
    return source, tokens
