# dailyrec — `make help` lists the targets (their `## ` comments) and variables (`#: ` above each).
SHELL := /bin/bash
.DEFAULT_GOAL := help

#: Python (>= 3.11) that creates the venv
PYTHON ?= python3
comma := ,
#: the virtual environment every target installs into and runs from
VENV ?= .venv
#: torch build of make install: auto (CPU unless nvidia-smi lists a GPU), cpu or cuda
TORCH ?= auto
PY := $(VENV)/bin/python
# A benchmark run under the recorder: its result is stamped with the modules its processes loaded.
RECORD = $(PY) -m benchmarks.record
STAMP := $(VENV)/.installed
# Recipes run as in an activated venv, from a plain shell too: what they start finds the venv's
# console scripts (uvicorn, mlflow, kubectl) as the venv's python does.
export PATH := $(abspath $(VENV))/bin:$(PATH)
# Sample logs `make run` generates when DATA is left at its default and absent.
SAMPLE := data/raw
# `#: ` above a variable documents it in `make help`.
#: raw events the pipeline reads (dt=YYYY-MM-DD/ folders): make run DATA=path/to/raw
DATA ?= $(SAMPLE)
#: pipeline parameters of make run (configs/*.json): make run CONFIG=configs/debug.json
CONFIG ?= configs/local.json
#: storage root of local runs: datasets/, runs/ (summary.json; MLflow at runs/mlflow.db)
ROOT ?= .
#: where make run's tasks run: subprocess (this venv) or docker (REGISTRY/dailyrec-runtime:TAG)
RUNNER ?= subprocess
#: port of make ui (MLflow UI on 127.0.0.1)
UI_PORT ?= 5000
#: the registered model make serve serves
MODEL ?= models:/dailyrec@champion
#: port on 127.0.0.1 make serve answers on
SERVE_PORT ?= 5001
#: port of make monitor's Prometheus on 127.0.0.1
PROMETHEUS_PORT ?= 9090
#: port of make monitor's Pushgateway on 127.0.0.1 (a run pushes there with DAILYREC_PUSHGATEWAY)
PUSHGATEWAY_PORT ?= 9091
#: port a local training serves its progress on for make monitor (DAILYREC_METRICS_PORT)
METRICS_PORT ?= 9400
#: days of the sample logs make data generates
DAYS ?= 14
#: users of the sample logs
USERS ?= 20000
#: items of the sample logs
ITEMS ?= 50000
#: events a day of the sample logs
EVENTS_PER_DAY ?= 100000
#: item categories of the sample logs (at most ITEMS; empty: the generator's default, or ITEMS when fewer)
CATEGORIES ?=
#: seed of the sample logs
SEED ?= 7
#: window days of make preprocess (make run takes it from CONFIG)
WINDOW_DAYS ?= 11
#: look-back days of make preprocess (make run takes it from CONFIG)
HISTORY_DAYS ?= 3
#: dataset folder make preprocess writes and make bench-loader/bench-train read
DATASET ?= data/dataset
#: search settings of make tune
TUNE_CONFIG ?= configs/tune.json
#: extra pytest arguments of the test targets: make test PYTEST_ARGS='-k serve'
PYTEST_ARGS ?=
#: modules of make mutation (names in benchmarks/mutation.py; empty = all)
MODULES ?=
#: make bench-stale PLAN=1: say what is stale and how long measuring it takes; run nothing
PLAN ?=
#: cluster overlay of make compile/deploy (manifests/overlays/: a100, local; none: local launcher)
ENV ?= a100
#: Kubeflow Pipelines endpoint of make deploy/trigger (https://…)
KFP_HOST ?=
#: image registry of make images/deploy; empty: localhost (DRY_RUN=1: registry.example.com)
REGISTRY ?=
#: image tag of make images/deploy; empty: dev
TAG ?=
#: make deploy DRY_RUN=1: render and validate into build/deploy/, touch no cluster
DRY_RUN ?=
#: make images PUSH=1: push the built images to REGISTRY
PUSH ?=
#: make deploy SKIP_IMAGES=1: deploy images already built and pushed
SKIP_IMAGES ?=
#: docker-registry Secret(s) in the namespace for a private registry, comma-separated
IMAGE_PULL_SECRETS ?=
#: make deploy: the Secret KFP's launcher reads the pipeline root's credentials from, the one the
#: pipeline may read (empty: mlpipeline-minio-artifact; another bucket's as kfp-launcher names it)
OBJECT_STORE_SECRET ?=
#: make deploy: the MLflow server's image by digest, NAME@sha256:… (empty: the manifest's tag,
#: pinned by the digest a pull reports where a container engine answers)
MLFLOW_IMAGE ?=
#: deployment settings of make deploy, baked in per environment: SET='raw_uri=s3://… model_name=…'
SET ?=
#: make deploy: seconds a succeeded run's workflow (pods, logs) is kept (empty: 6 h)
TTL_SUCCESS_S ?=
#: make deploy: seconds a failed run's workflow (pods, logs) is kept (empty: a week)
TTL_FAILURE_S ?=

.PHONY: help install run data next-day preprocess tune compile ui screenshots serve monitor dashboard images test-images bench-images bench-distributed lock deploy trigger test test-tools test-reliability mutation bench bench-stale bench-quality bench-downsampling bench-preprocess bench-loader bench-train bench-estimate bench-tune bench-gpu bench-serving bench-gate docs lint format clean clean-data clean-runs

help: ## list the targets and the variables they read (make run DATA=… CONFIG=…)
	@echo "targets:"
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-17s %s\n", $$1, $$2}'
	@echo "variables (make TARGET NAME=value):"
	@awk -v sample=$(SAMPLE) '/^#: / {doc = substr($$0, 4); next} /^[A-Z_]+ \?=/ && doc != "" {name = $$1; \
	  sub(/^[^=]*\?= ?/, ""); sub(/\$$\(SAMPLE\)/, sample); printf "  %-18s %s (default: %s)\n", name, doc, ($$0 == "" ? "none" : $$0)} \
	  {doc = ""}' $(MAKEFILE_LIST)

install: $(STAMP) ## create .venv and install dailyrec (editable) with its test extras; idempotent

$(STAMP): pyproject.toml scripts/install-torch.sh
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "dailyrec needs Python >= 3.11"'
	@test -x $(PY) || { echo "creating $(VENV) ($$($(PYTHON) --version))"; $(PYTHON) -m venv $(VENV); }
	@scripts/install-torch.sh $(PY) "$$($(PYTHON) -c 'import images.lock as l; print(l.torch_pin())')" $(TORCH)
	@echo "installing dailyrec (editable) and its test tools into $(VENV): a few minutes on a fresh machine"
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

run: install data ## the main job: the daily KFP pipeline on this machine (kfp.local) on DATA with CONFIG (RUNNER=docker: every task in the runtime image)
	$(PY) -m pipelines.local --config $(CONFIG) --data $(DATA) --root $(ROOT) --runner $(RUNNER) \
	  --image $(or $(REGISTRY),localhost)/dailyrec-runtime:$(or $(TAG),dev)

data: install ## generate the synthetic sample logs into data/raw (skipped if present or DATA is yours)
	@if [ "$(DATA)" != "$(SAMPLE)" ]; then test -d "$(DATA)" || { echo "DATA=$(DATA): no such folder"; exit 2; }; \
	elif [ -f $(SAMPLE)/_datagen.json ] || [ -f $(SAMPLE)/datagen.json ]; then echo "$(SAMPLE) exists: keeping it (make clean-data to regenerate)"; \
	else $(PY) -m components.datagen --out $(SAMPLE) --days $(DAYS) --users $(USERS) --items $(ITEMS) \
	  --events-per-day $(EVENTS_PER_DAY) $(if $(CATEGORIES),--categories $(CATEGORIES)) --seed $(SEED); fi

next-day: install ## append tomorrow to the sample logs; the next `make run` retrains and meets the champion
	$(PY) -m components.datagen --out $(SAMPLE) --append-days 1

preprocess: install data ## only the preprocess stage, DATA -> DATASET (what `make bench` measures on)
	$(PY) -m components.preprocess --raw $(DATA) --out $(DATASET) --days $(WINDOW_DAYS) --history-days $(HISTORY_DAYS)

tune: install data ## hyperparameter search (Optuna ASHA) on DATA -> runs/<id>/tune/tuned.json, tuned/latest.json
	$(PY) -m pipelines.tune --config $(TUNE_CONFIG) --data $(DATA) --root $(ROOT)

compile: install ## compile the pipeline for ENV (default a100: TrainJobs on its node pool; ENV=none: local launcher) to build/pipeline.yaml
	$(PY) -m pipelines.compile --out build/pipeline.yaml --env $(ENV)

screenshots: install test-tools ## what the MLflow UI shows of the newest runs and version, as PNGs from headless Chromium -> ROOT/runs/screenshots/
	$(PY) -m pipelines.screenshots --root $(ROOT)

ui: install ## MLflow UI on 127.0.0.1 over the local registry (ROOT/runs/mlflow.db)
	@$(VENV)/bin/python -m components.common.tracking $(abspath $(ROOT))/runs/mlflow.db
	@echo "MLflow UI on http://127.0.0.1:$(UI_PORT)/#/experiments?workflowType=machine_learning  (Ctrl-C stops it)"
	MLFLOW_DISABLE_TELEMETRY=true $(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(abspath $(ROOT))/runs/mlflow.db \
	  --host 127.0.0.1 --port $(UI_PORT)

serve: install ## serve MODEL (verified) with MLflow's scoring app on 127.0.0.1:SERVE_PORT: POST raw-id requests to /invocations
	$(PY) -m components.score.serve --model $(MODEL) --port $(SERVE_PORT) \
	  --tracking-uri $(or $(MLFLOW_TRACKING_URI),sqlite:///$(abspath $(ROOT))/runs/mlflow.db)

monitor: install test-tools ## Prometheus with the alert rules and a Pushgateway on 127.0.0.1 (state in ROOT/runs/monitor/): a make run with the variables it prints shows up there
	$(PY) -m pipelines.monitor serve --root $(ROOT) --prometheus-port $(PROMETHEUS_PORT) \
	  --pushgateway-port $(PUSHGATEWAY_PORT) --trainer-port $(METRICS_PORT)

dashboard: install ## the monitoring dashboard's key panels as PNGs from ROOT/runs/*/summary.json -> ROOT/runs/dashboard/
	$(PY) -m pipelines.monitor plots --root $(ROOT)

images: ## build the runtime and trainer images REGISTRY/dailyrec-{runtime,trainer}:TAG with docker or podman (default localhost/…:dev; PUSH=1 pushes; images/build.sh lists BASE, TRAINER, WHEELS, CA_BUNDLE)
	@test -z "$(PUSH)" -o -n "$(REGISTRY)" || { echo "PUSH=1 needs REGISTRY, e.g. make images REGISTRY=ghcr.io/you TAG=0.1.0 PUSH=1"; exit 2; }
	images/build.sh $(or $(REGISTRY),localhost) $(or $(TAG),dev) $(if $(PUSH),--push)

test-images: install ## check the built images (localhost/…:dev or REGISTRY/…:TAG): non-root, pip check, every rendered command, object stores, each stage's CLI
	DAILYREC_IMAGES=$(or $(REGISTRY),localhost):$(or $(TAG),dev) $(PY) -m pytest -q -m images tests/containers $(PYTEST_ARGS)

lock: $(VENV)/.dev ## re-resolve the images' hash-locked requirements (images/*/requirements.lock) after changing dependencies
	$(PY) images/lock.py

$(VENV)/.dev: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,dev]'
	@touch $@

deploy: install ## ENV=a100 KFP_HOST=… REGISTRY=… [SET='name=value …'] [TAG=…] [SKIP_IMAGES=1] [DRY_RUN=1 → build/deploy/ only]
	$(PY) -m pipelines.deploy --env $(ENV) --registry "$(or $(REGISTRY),$(if $(DRY_RUN),registry.example.com/dailyrec,))" \
	  $(if $(KFP_HOST),--host $(KFP_HOST)) $(if $(TAG),--tag $(TAG)) $(if $(DRY_RUN),--dry-run) $(if $(SKIP_IMAGES),--skip-images) \
	  $(foreach s,$(subst $(comma), ,$(IMAGE_PULL_SECRETS)),--image-pull-secret $(s)) $(if $(OBJECT_STORE_SECRET),--object-store-secret $(OBJECT_STORE_SECRET)) $(if $(MLFLOW_IMAGE),--mlflow-image $(MLFLOW_IMAGE)) \
	  $(foreach s,$(SET),--set '$(s)') $(if $(TTL_SUCCESS_S),--ttl-success-s $(TTL_SUCCESS_S)) $(if $(TTL_FAILURE_S),--ttl-failure-s $(TTL_FAILURE_S))

trigger: install ## start one run of the deployed pipeline now (as the UI's Create run): KFP_HOST=…
	$(PY) -m pipelines.deploy trigger $(if $(KFP_HOST),--host $(KFP_HOST))

# Debian packages the tests start: a real Pushgateway and Prometheus, promtool (monitoring) and Chromium
# (the MLflow pages, make screenshots); pip cannot install them.
TEST_TOOLS := prometheus prometheus-pushgateway chromium

test-tools: ## install Prometheus, the Pushgateway, promtool and Chromium with apt-get where possible (else their tests skip)
	@if command -v prometheus >/dev/null && command -v prometheus-pushgateway >/dev/null && command -v promtool >/dev/null && command -v chromium >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing $(TEST_TOOLS) (apt-get) for the monitoring and browser tests"; \
	  apt-get install -y -qq --no-install-recommends $(TEST_TOOLS) >/dev/null \
	    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $(TEST_TOOLS) >/dev/null; } \
	    || echo "could not install $(TEST_TOOLS): their tests will be skipped"; \
	else echo "$(TEST_TOOLS) not installed (apt-get install $(TEST_TOOLS) as root): their tests will be skipped"; fi

test: install test-tools ## run the test suite (unit, integration, deploy, fast reliability checks; tiny data; one worker per core)
	$(PY) -m pytest -q -m "not slow and not images" -n auto --dist loadfile $(PYTEST_ARGS)

test-reliability: install ## every fault-injection, bad-input and security test, the slow ones too; writes docs/reliability.md's table
	DAILYREC_RELIABILITY_REPORT=benchmarks/results/reliability.json $(RECORD) reliability -- \
	  $(PY) -m pytest -q tests/reliability $(PYTEST_ARGS)
	$(PY) -m benchmarks.readme reliability

mutation: $(VENV)/.mutation ## mutation testing (mutmut) of the critical modules [MODULES=…] -> benchmarks/results/mutation.json, docs/
	$(PY) -m benchmarks.mutation $(if $(MODULES),--only $(MODULES))

$(VENV)/.mutation: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,mutation]'
	@touch $@

bench: bench-quality bench-downsampling bench-preprocess bench-loader bench-train bench-estimate bench-tune bench-gpu bench-images bench-distributed bench-serving bench-gate test-reliability mutation ## every measurement -> benchmarks/results/ and docs/ (hours on 2 cores; one: make bench-quality, bench-downsampling, bench-preprocess, bench-loader, bench-train, bench-estimate, bench-tune, bench-gpu, bench-images, bench-distributed, bench-serving, bench-gate)
	-$(PY) -m benchmarks.fingerprint

bench-quality bench-downsampling bench-preprocess bench-estimate bench-tune: $(VENV)/.bench
	$(RECORD) $(@:bench-%=%) -- $(PY) -m benchmarks.$(@:bench-%=%)

bench-loader bench-train: $(VENV)/.bench data preprocess
	$(RECORD) $(@:bench-%=%) -- $(PY) -m benchmarks.$(@:bench-%=%) --data $(DATASET)

bench-images: install ## image sizes and cold build times (images/build.sh without layer cache) -> benchmarks/results/images.json, docs/containers.md
	$(RECORD) images -- $(PY) -m benchmarks.images

bench-distributed: install ## preprocess on 1 vs 2 Dask worker containers, training on 1 vs 2 node containers (after make images) -> benchmarks/results/distributed.json, docs/containers.md
	$(RECORD) distributed -- $(PY) -m benchmarks.distributed

bench-serving: $(VENV)/.bench ## the scoring server vs mlflow models serve: requests/s, p50/p99, memory by request size -> benchmarks/results/serving.json, docs/performance.md
	$(RECORD) serving -- $(PY) -m benchmarks.serving

bench-gate: $(VENV)/.bench ## the champion gate by simulation: interval coverage, false refusals, power, speed on 10 M rows -> benchmarks/results/gate.json, docs/stages.md
	$(RECORD) gate -- $(PY) -m benchmarks.gate

bench-stale: $(VENV)/.bench ## measure again exactly the stale results and mutation modules, cheapest first (says how long first; PLAN=1: only say)
	$(PY) -m benchmarks.rerun $(if $(PLAN),--plan)

bench-gpu: $(VENV)/.bench
	@if $(PY) -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then $(RECORD) gpu -- $(PY) -m benchmarks.gpu; \
	else echo "no CUDA device: python -m benchmarks.gpu --dry only (benchmarks/results/gpu.json kept)"; $(PY) -m benchmarks.gpu --dry; fi

$(VENV)/.bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	@touch $@

docs: install ## rewrite the generated blocks of README.md and docs/ from benchmarks/results/ and the compiled pipeline, marking each stale result (no measuring)
	$(PY) -m benchmarks.readme

lint: install ## ruff: lint and check the formatting (what CI checks)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: install ## ruff: format the code and apply the safe lint fixes
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean-data: ## delete the sample logs (data/) and ROOT's datasets (refused while a run holds ROOT's lock)
	rm -rf data
	@if [ -x $(PY) ]; then $(PY) -m pipelines.clean datasets --root $(ROOT); else rm -rf $(ROOT)/datasets; fi

clean-runs: ## delete ROOT's local runs and its local MLflow registry (refused while a run holds ROOT's lock)
	@if [ -x $(PY) ]; then $(PY) -m pipelines.clean runs --root $(ROOT); else rm -rf $(ROOT)/runs; fi

clean: ## delete the venv, caches, generated data and runs
	rm -rf $(VENV) data datasets runs .pytest_cache .ruff_cache .hypothesis build benchmarks/scratch
