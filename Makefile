# attnlab: `make all` regenerates what is stale, `make test` runs ruff and the tests.
# Both build .venv first when it is missing or older than pyproject.toml.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

CORE := attnlab/attention.py attnlab/softmax_stats.py attnlab/parallel.py attnlab/cli.py attnlab/io.py
STATICS := $(CORE) attnlab/sampling.py attnlab/statics.py

RECALL := $(CORE) attnlab/temperature.py attnlab/curves.py \
	$(filter-out attnlab/recall/remedies.py,$(wildcard attnlab/recall/*.py))

STATIC_CSVS := results/01_logit_variance.csv results/02_saturation_sweep.csv results/03_jacobian_norm.csv
RECALL_CSVS := results/04_recall_curves.csv results/04_recall_summary.csv
REMEDY_CSVS := results/05_remedies_curves.csv results/05_remedies_summary.csv \
	results/05_fold_curves.csv results/05_fold_check.csv results/05_sensitivity.csv
FAILURE_CSVS := results/07_failure_modes_overflow.csv results/07_failure_modes_masks.csv \
	results/07_failure_modes_correlation.csv
BEYOND_CSVS := results/06_condensation.csv $(FAILURE_CSVS) results/08_companion_claims.csv
CSVS := $(STATIC_CSVS) $(RECALL_CSVS) $(REMEDY_CSVS) $(BEYOND_CSVS)
FIGURES := figures/fig1_saturation.png figures/fig2_jacobian_norm.png figures/fig3_training.png figures/fig4_remedies.png \
	figures/fig5_condensation.png figures/fig6_failure_modes.png

.PHONY: all test lint clean venv reproduce bench
.DELETE_ON_ERROR:

all: $(CSVS) $(FIGURES) results/REPORT.md

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

results/01_logit_variance.csv: experiments/01_logit_variance.py $(STATICS) | $(STAMP)
	$(PY) $<

results/02_saturation_sweep.csv: experiments/02_saturation_sweep.py $(STATICS) | $(STAMP)
	$(PY) $<

results/03_jacobian_norm.csv: experiments/03_jacobian_norm.py $(STATICS) | $(STAMP)
	$(PY) $<

$(RECALL_CSVS) &: experiments/04_associative_recall.py $(RECALL) | $(STAMP)
	$(PY) $<

figures/fig3_training.png: experiments/plot_figures.py attnlab/plotting.py $(RECALL_CSVS) | $(STAMP)
	$(PY) experiments/plot_figures.py fig3_training

$(REMEDY_CSVS) &: experiments/05_remedies.py attnlab/recall/remedies.py $(RECALL) | $(STAMP)
	$(PY) $<

figures/fig4_remedies.png: experiments/plot_figures.py attnlab/plotting.py $(REMEDY_CSVS) | $(STAMP)
	$(PY) experiments/plot_figures.py fig4_remedies

results/06_condensation.csv: experiments/06_condensation.py attnlab/condensation.py $(STATICS) | $(STAMP)
	$(PY) $<

$(FAILURE_CSVS) &: experiments/07_failure_modes.py attnlab/failure_modes.py $(STATICS) | $(STAMP)
	$(PY) $<

results/08_companion_claims.csv: experiments/08_companion_claims.py attnlab/companion.py $(STATICS) | $(STAMP)
	$(PY) $<

figures/fig5_condensation.png figures/fig6_failure_modes.png &: experiments/plot_figures.py attnlab/plotting.py attnlab/condensation.py attnlab/failure_modes.py results/06_condensation.csv $(FAILURE_CSVS) | $(STAMP)
	$(PY) experiments/plot_figures.py --group beyond

figures/fig1_saturation.png figures/fig2_jacobian_norm.png &: experiments/plot_figures.py attnlab/plotting.py $(STATIC_CSVS) | $(STAMP)
	$(PY) experiments/plot_figures.py --group statics

results/REPORT.md: experiments/make_report.py attnlab/report.py attnlab/claims.py attnlab/curves.py \
		attnlab/condensation.py attnlab/failure_modes.py $(CSVS) | $(STAMP)
	$(PY) experiments/make_report.py

# Regenerate every result from scratch, even where make thinks it is up to date.
reproduce: $(STAMP)
	touch experiments/*.py
	$(MAKE) all

# Timings, not results: always rerun, never part of `all` (2-4 minutes on 2 CPU cores).
bench: | $(STAMP)
	$(PY) experiments/bench.py

lint: $(STAMP)
	$(PY) -m ruff check attnlab experiments tests
	$(PY) -m ruff format --check attnlab experiments tests

# Two workers: the suite is dominated by XLA compiling small programs, one core each.
test: lint
	$(PY) -m pytest -q -n 2

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
