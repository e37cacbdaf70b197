# attnlab: `make all` regenerates what is stale, `make test` runs ruff and the tests.
# Both build .venv first when it is missing or older than pyproject.toml.
#
# One rule per study of attnlab/studies (the registry in attnlab/studies/__init__.py).
# A result depends on its script, the shared package (core, harness, registry) and its
# study's folder by wildcard, so editing any module it imports makes it stale;
# tests/test_registry.py checks every import of every script against these prerequisites.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The shared package every script imports, and what only figures and the report import.
PRESENTATION := attnlab/harness/figures.py attnlab/harness/tables.py \
	attnlab/harness/verdicts.py attnlab/claims.py
PACKAGE := attnlab/__init__.py attnlab/studies/__init__.py $(wildcard attnlab/core/*.py) \
	$(filter-out $(PRESENTATION),$(wildcard attnlab/harness/*.py))
# What a study's computation imports: its folder (and those of the studies it builds on),
# less its figure and report modules.
compute = $(PACKAGE) \
	$(filter-out %/figure.py %/report.py,$(wildcard $(1:%=attnlab/studies/%/*.py)))
# What a study's figures import: its whole folder (and those of the studies it draws on).
folder = $(PACKAGE) $(PRESENTATION) $(wildcard $(1:%=attnlab/studies/%/*.py))

STATICS_CSVS := results/01_logit_variance.csv results/02_saturation_sweep.csv \
	results/03_jacobian_norm.csv
RECALL_CSVS := results/04_recall_curves.csv results/04_recall_summary.csv
REMEDIES_CSVS := results/05_remedies_curves.csv results/05_remedies_summary.csv \
	results/05_fold_curves.csv results/05_fold_check.csv results/05_sensitivity.csv
CONDENSATION_CSVS := results/06_condensation.csv
FAILURE_MODES_CSVS := results/07_failure_modes_overflow.csv results/07_failure_modes_masks.csv \
	results/07_failure_modes_correlation.csv
COMPANION_CSVS := results/08_companion_claims.csv
ARTICLE_FIT_CSVS := results/09_fit_screen.csv results/09_fit_scores.csv \
	results/09_fit_prediction_curves.csv results/09_fit_prediction_summary.csv
WIDTHS_CSVS := results/10_widths_summary.csv results/10_widths_curves.csv \
	results/10_lr_transfer.csv results/10_jacobian_n16.csv
CARD_CSVS := results/cards/comparison.csv
CSVS := $(STATICS_CSVS) $(RECALL_CSVS) $(REMEDIES_CSVS) $(CONDENSATION_CSVS) \
	$(FAILURE_MODES_CSVS) $(COMPANION_CSVS) $(ARTICLE_FIT_CSVS) $(WIDTHS_CSVS) $(CARD_CSVS)
# The mechanisms `make cards` cards: every built-in (attnlab.core.temperature.BUILTINS;
# tests/test_registry.py checks the two agree).
BUILTIN_MECHANISMS := scaled unscaled folded_init qk_norm learned_temperature inv_d \
	softcap30 softcap50 ssmax sigmoid softpick cosine_tau

STATICS_FIGURES := figures/fig1_saturation.png figures/fig2_jacobian_norm.png
RECALL_FIGURES := figures/fig3_training.png
REMEDIES_FIGURES := figures/fig4_remedies.png
CONDENSATION_FIGURES := figures/fig5_condensation.png
FAILURE_MODES_FIGURES := figures/fig6_failure_modes.png
ARTICLE_FIT_FIGURES := figures/fig7_article_fit.png
WIDTHS_FIGURES := figures/fig8_widths.png figures/fig9_drift.png
CARD_FIGURES := figures/fig10_cards.png
FIGURES := $(STATICS_FIGURES) $(RECALL_FIGURES) $(REMEDIES_FIGURES) $(CONDENSATION_FIGURES) \
	$(FAILURE_MODES_FIGURES) $(ARTICLE_FIT_FIGURES) $(WIDTHS_FIGURES) $(CARD_FIGURES)
PLOT := experiments/plot_figures.py

.PHONY: all test test-all test-matrix verify verify-quick lint clean venv reproduce bench cards
.DELETE_ON_ERROR:

all: $(CSVS) $(FIGURES) results/REPORT.md

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# ---------------------------------------------------------------- statics (01-03)
$(STATICS_CSVS): results/%.csv: experiments/%.py $(call compute,statics) | $(STAMP)
	$(PY) $<

$(STATICS_FIGURES) &: $(PLOT) $(call folder,statics) $(STATICS_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study statics

# ---------------------------------------------------------------- recall (04)
$(RECALL_CSVS) &: experiments/04_associative_recall.py $(call compute,recall) | $(STAMP)
	$(PY) $<

# Figure 3 draws 04's reading beside the one experiment 09 fitted.
$(RECALL_FIGURES) &: $(PLOT) $(call folder,recall) $(RECALL_CSVS) $(ARTICLE_FIT_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study recall

# ---------------------------------------------------------------- remedies (05)
$(REMEDIES_CSVS) &: experiments/05_remedies.py $(call compute,remedies recall) | $(STAMP)
	$(PY) $<

$(REMEDIES_FIGURES) &: $(PLOT) $(call folder,remedies) $(REMEDIES_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study remedies

# ---------------------------------------------------------------- condensation (06)
$(CONDENSATION_CSVS) &: experiments/06_condensation.py $(call compute,condensation) | $(STAMP)
	$(PY) $<

$(CONDENSATION_FIGURES) &: $(PLOT) $(call folder,condensation) $(CONDENSATION_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study condensation

# ---------------------------------------------------------------- failure modes (07)
$(FAILURE_MODES_CSVS) &: experiments/07_failure_modes.py $(call compute,failure_modes) | $(STAMP)
	$(PY) $<

$(FAILURE_MODES_FIGURES) &: $(PLOT) $(call folder,failure_modes) $(FAILURE_MODES_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study failure_modes

# ---------------------------------------------------------------- companion (08)
$(COMPANION_CSVS) &: experiments/08_companion_claims.py $(call compute,companion) | $(STAMP)
	$(PY) $<

# ---------------------------------------------------------------- article fit (09)
$(ARTICLE_FIT_CSVS) &: experiments/09_article_fit.py $(call compute,article_fit recall) | $(STAMP)
	$(PY) $<

$(ARTICLE_FIT_FIGURES) &: $(PLOT) $(call folder,article_fit recall) $(ARTICLE_FIT_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study article_fit

# ---------------------------------------------------------------- widths and drift (10)
$(WIDTHS_CSVS) &: experiments/10_widths.py $(call compute,widths recall statics) | $(STAMP)
	$(PY) $<

$(WIDTHS_FIGURES) &: $(PLOT) $(call folder,widths) $(WIDTHS_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study widths

# ---------------------------------------------------------------- mechanism cards (11)
# One run cards every built-in, sharing draws, programs and training lanes; each card is
# results/cards/NAME/ (its CSVs, card.png and card.md), and comparison.csv stands for them.
$(CARD_CSVS) &: experiments/11_mechanism_card.py $(call folder,card) \
		$(call compute,recall widths statics) | $(STAMP)
	$(PY) $< --mechanism $(BUILTIN_MECHANISMS) --quiet

cards: $(CARD_CSVS) $(CARD_FIGURES)

$(CARD_FIGURES) &: $(PLOT) $(call folder,card) $(CARD_CSVS) | $(STAMP)
	$(PY) $(PLOT) --study card

# ---------------------------------------------------------------- the report
# The report names every CSV's provenance, bench.csv's too where a bench has written one
# (so `make all` after `make bench` refreshes that line).
results/REPORT.md: experiments/make_report.py attnlab/report.py $(PACKAGE) $(PRESENTATION) \
		$(wildcard attnlab/studies/*/*.py) $(CSVS) $(wildcard results/bench.csv) | $(STAMP)
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

# Two workers: the suite is dominated by XLA compiling small programs, one core each.
# `make test` (CI) leaves out the tests marked slow, to stay within 5 minutes on 2 cores;
# `make test-all` runs every test (about 6 minutes there).
test: lint
	$(PY) -m pytest -q -n 2 -m "not slow"

test-all: lint
	$(PY) -m pytest -q -n 2

# The suite under configurations that change XLA's CPU code paths and the device layout
# (see .ci/test-matrix); run it before every change to numerics.
test-matrix: lint
	PY=$(PY) bash .ci/test-matrix

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
