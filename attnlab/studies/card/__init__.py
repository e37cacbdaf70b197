"""The mechanism card (experiment 11): the battery of experiments 02-07 and 10 run on any
attention mechanism, with verdicts by stated rules; method in this folder's README.md."""
