# dailyrec — `make help` lists the targets (from the `## ` comments).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA ?= data
# Size of the sample dataset `make run` generates (if $(DATA)/raw is absent).
DAYS ?= 14
USERS ?= 20000
ITEMS ?= 50000
EVENTS_PER_DAY ?= 100000
SEED ?= 7
# Preprocess window: the last WINDOW_DAYS days; HISTORY_DAYS before them feed histories only.
WINDOW_DAYS ?= 11
HISTORY_DAYS ?= 3
PYTEST_ARGS ?=

.PHONY: help install run data preprocess test bench lint clean clean-data

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-12s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv and install dailyrec (editable) with its test extras; idempotent

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "dailyrec needs Python >= 3.11"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

run: install data preprocess ## the main job: generate sample logs (if absent), preprocess them, print the summary

data: install ## generate the synthetic sample logs into $(DATA)/raw (skipped if present)
	@if [ -f $(DATA)/raw/datagen.json ]; then echo "$(DATA)/raw exists: keeping it (make clean-data to regenerate)"; \
	else $(PY) -m components.datagen --out $(DATA)/raw --days $(DAYS) --users $(USERS) --items $(ITEMS) \
	  --events-per-day $(EVENTS_PER_DAY) --seed $(SEED); fi

preprocess: install ## run the preprocess stage on $(DATA)/raw into $(DATA)/dataset
	$(PY) -m components.preprocess --raw $(DATA)/raw --out $(DATA)/dataset --days $(WINDOW_DAYS) --history-days $(HISTORY_DAYS)

test: install ## run the test suite (unit + integration, tiny data)
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: install data preprocess ## measured comparisons against baselines -> benchmarks/results/ and README
	$(PY) benchmarks/preprocess.py
	$(PY) benchmarks/loader.py --data $(DATA)/dataset
	$(PY) benchmarks/train.py --data $(DATA)/dataset
	$(PY) benchmarks/estimate.py
	@if $(PY) -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then $(PY) benchmarks/gpu.py; \
	else echo "no CUDA device: benchmarks/gpu.py --dry only"; $(PY) benchmarks/gpu.py --dry; fi

lint: install ## ruff
	$(PY) -m ruff check .

clean-data: ## delete generated data ($(DATA)/)
	rm -rf $(DATA)

clean: ## delete the venv, caches and generated data
	rm -rf $(VENV) $(DATA) .pytest_cache .ruff_cache .hypothesis build benchmarks/scratch
