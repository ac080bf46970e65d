# PagedAttention reproduction. `make help` lists the targets.
# Every target that needs Python creates .venv on first use (python3 -m venv + pip install -e ".[dev]", with
# constraints.txt: the versions that make the figure files byte-identical).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
EXECUTED := build/notebooks
FIGURES := figures
# A notebook reruns when its fingerprint changes: its cells, the package files it imports, the data,
# the environment, its parameters (paged/experiments/notebook/provenance.py), or when figures/ holds
# figures of another run (paged/experiments/notebook/reproduce.py says which and why).
# Notebooks run on this environment's own python3 kernel: papermill's engine "paged"
# (paged/experiments/notebook/papermill_engine.py, registered by the package's entry points).
PAPERMILL := $(VENV)/bin/papermill --engine paged --kernel python3 --no-progress-bar
# JupyterLab refuses to start as root without --allow-root (containers, CI).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# Notebooks at once for reproduce/report: make's -jN.
JOBS = $(or $(patsubst -j%,%,$(filter -j%,$(MAKEFLAGS))),1)
# Ctrl-C: the command prints one line ("interrupted") and exits 130, its figures whole; the recipe's
# shell then reports success so that make, which had the same SIGINT, stops with status 130 and
# without an "Error 130" line of its own. A command that exits 130 without a Ctrl-C still fails.
interruptible = trap 'int=1' INT; $(1); s=$$?; test $$s -eq 130 -a -n "$$int" && exit 0; exit $$s
# Threads for torch inside notebooks and tests (the reference machine has 2 cores).
export OMP_NUM_THREADS ?= 2
export PYTHONHASHSEED := 0
# The real Alpaca sample and WMT16 test set that `make data` derives traces from (read by nothing else).
SHARED ?= ../shared/data

.DEFAULT_GOAL := help
.PHONY: help venv test quick reproduce nb report sweep lab data bench bench-allocator bench-kernel bench-sim bench-engine bench-engine-step bench-cpu-attention bench-workloads bench-cluster gpu-check model clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-20s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	@touch $@

venv: $(STAMP) ## Create .venv and install the project with its dev extra

test: $(STAMP) ## Run the whole test suite (unit, property, kernel, notebooks)
	$(PY) -m pytest -n 2 -q

quick: $(STAMP) ## Check an installation: every notebook with small parameters into build/quick/ (figures/ untouched)
	@$(call interruptible,$(PY) -m paged.experiments.notebook.quick --notebooks notebooks --out build/quick)

reproduce: $(STAMP) ## Rerun the notebooks whose figures are out of date (and say why), then README.md's claims table; -j2: two at once
	@$(call interruptible,$(PY) -m paged.experiments.notebook.reproduce --notebooks notebooks --figures $(FIGURES) --executed $(EXECUTED) --workers $(JOBS))

nb: $(STAMP) ## Run one notebook into build/notebooks/ and its figures into figures/: make nb NB=03 [ARGS='--backend dask [--address tcp://host:8786]']
	@test -n "$(NB)" || { echo "usage: make nb NB=01 (one of: $(notdir $(basename $(NOTEBOOKS))))"; exit 2; }
	@$(call interruptible,$(PY) -m paged.experiments.notebook.reproduce --notebooks notebooks --figures $(FIGURES) --executed $(EXECUTED) --only $(NB) --force --runner "make nb" $(ARGS))

report: $(STAMP) ## One self-contained HTML report (this run's claims, every figure, paper vs this run); reruns what is out of date first
	@$(call interruptible,$(PY) -m paged.experiments.notebook.reproduce --notebooks notebooks --figures $(FIGURES) --executed $(EXECUTED) --workers $(JOBS))
	$(PY) -m paged report --notebooks $(EXECUTED) --figures $(FIGURES) --out build/report.html

sweep: $(if $(and $(NB),$(GRID)),$(STAMP)) ## One notebook per parameter set: make sweep NB=notebooks/03_throughput.ipynb GRID='{block_size: [8, 16]}' [OUT=build/sweep] [ARGS='--backend dask --address tcp://host:8786']
	@test -n "$(NB)" -a -n "$(GRID)" || { echo "usage: make sweep NB=03 (or NB=notebooks/NN_name.ipynb) GRID='{name: [v1, v2]}'"; exit 2; }
	$(PY) -m paged sweep-notebook $(or $(wildcard $(NB)),$(filter notebooks/$(NB)%,$(NOTEBOOKS)),$(NB)) --grid "$(GRID)" --out $(or $(OUT),build/sweep) $(ARGS)

# Lab's settings for this checkout (.jupyter/lab/settings/overrides.json: no news or update pop-up);
# the user's own settings in ~/.jupyter still apply on top.
lab: $(STAMP) ## JupyterLab on 127.0.0.1 at the repository root (figures/, build/ one click away), the tour open
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks/00_tour.ipynb \
		--LabApp.app_settings_dir=$(CURDIR)/.jupyter/lab/settings --LabApp.news_url=None \
		--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
		--KernelManager.transport_encryption=auto --ip=127.0.0.1 --no-browser $(ALLOW_ROOT)

data: $(STAMP) ## Rebuild every derived trace in data/ (ShareGPT package + SHARED=../shared/data: Alpaca, WMT16)
	$(PY) -m paged traces --out-dir data --shared-data $(SHARED)

model: $(STAMP) ## Retrain the small shipped model in data/models/ (about 10-15 min on 2 cores)
	$(PY) -m paged.tools.training --out data/models/sharegpt-llama-tiny --steps 600 --seed 0

bench: bench-allocator bench-kernel bench-sim bench-engine bench-workloads ## Run every benchmark and print its figures

bench-allocator: $(STAMP) ## Allocator and fork speed vs a bare Python list
	$(PY) -m paged.bench.allocator

bench-kernel: $(STAMP) ## Paged vs contiguous attention latency (Fig. 18a points), roofline, AOT compile check
	$(PY) -m paged.bench.kernel

# Extra arguments for gpu-check, e.g. GPU_CHECK_ARGS=--autotune (see python -m paged.bench.gpu_check --help).
GPU_CHECK_ARGS ?=
gpu-check: $(STAMP) ## CUDA GPU only (<5 min): GPU tests, Fig. 18a + long contexts, split-K; JSON + figure in build/gpu_check
	$(PY) -m paged.bench.gpu_check --out build/gpu_check $(GPU_CHECK_ARGS)

bench-sim: $(STAMP) ## Simulator speed vs a baseline commit, interleaved (BASE=HEAD~1, ROUNDS=5)
	$(PY) -m paged.bench.sim --base $(or $(BASE),HEAD~1) --rounds $(or $(ROUNDS),5)

bench-cluster: $(STAMP) ## Notebook 03's simulations on a local Dask and Ray cluster vs joblib's processes (ROUNDS=3, interleaved)
	$(PY) -m paged.bench.cluster --rounds $(or $(ROUNDS),3)

bench-workloads: $(STAMP) ## Loading a ShareGPT JSON: first (tokenize) vs cached load, fresh processes
	$(PY) -m paged.bench.workloads

bench-engine-step: $(STAMP) ## The engine's decode and prefill step vs a dense HF forward (CPU time, interleaved rounds)
	$(PY) -m paged.bench.engine_step

bench-cpu-attention: $(STAMP) ## CPU decode attention (C kernel, bucketed torch path) vs contiguous SDPA: batch 1-128 × context to 2,048 × uniform/mixed × fp32/bf16
	$(PY) -m paged.bench.cpu_attention

bench-engine: $(STAMP) ## Real-model engine throughput ratios, then where its time goes
	$(PY) -m paged.bench.engine
	$(PY) -m paged.bench.engine_profile

clean: ## Remove build outputs and caches (keeps .venv and committed figures)
	rm -rf build .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +
