# Each user-facing target sets itself up: on a fresh machine `make demo` or `make test` is the only command needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.encoderlab-installed
BASE_STAMP := $(VENV)/.encoderlab-base
TORCH_VERSION ?= 2.13.0
# Where torch comes from: pip's own index by default; e.g. https://download.pytorch.org/whl/cpu where PyPI's Linux
# wheel is a CUDA build and the machine has no GPU.
TORCH_INDEX ?=
# An empty or blank ENCODERLAB_HOME counts as unset, as encoderlab reads it (core/io.py), so that make and the
# command line pick the same folder; `override` covers `make demo ENCODERLAB_HOME=` too.
ifeq ($(strip $(ENCODERLAB_HOME)),)
override ENCODERLAB_HOME := $(HOME)/.cache/encoderlab
endif
export ENCODERLAB_HOME

.PHONY: setup demo test test-all bench gpu-wheels gpu-check lint clean

setup: $(STAMP)

# torch is pinned and installed with pip, which reads the machine's pip settings (a find-links folder, an index),
# so that encoderlab's `torch>=2.6` is met by that build and pulls no other. The rest installs with uv, 2-3x faster
# than pip with an empty cache, bytecode compiled as pip does (no process then compiles its imports): with uv, torch
# (pip, without its dependencies) and everything else (uv, torch left out) install at once, then uv adds torch's own
# dependencies (docs/benchmarks.md: a fresh setup took 23 s against 47). uv reads its own settings (UV_INDEX_URL,
# uv.toml), not pip's: where packages come only through a pip.conf index or proxy, `make setup INSTALLER=pip`. The demo
# needs encoderlab alone; the tests need the extras too (dev; gguf with accelerate: the SmolLM2
# continued-pretraining study imports a GGUF).
INSTALLER ?= uv
NON_INSTALLING_GOALS := clean gpu-check
PIP_TORCH = $(BIN)/python -m pip install --quiet torch==$(TORCH_VERSION) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
ifeq ($(INSTALLER),uv)
INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode
# uv into the venv where it is not yet: a fresh one, or one whose base INSTALLER=pip set up (`make demo
# INSTALLER=pip`, then `make test`).
GET_UV := test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet 'uv>=0.13'
else ifeq ($(INSTALLER),pip)
INSTALL := $(BIN)/python -m pip install --quiet
GET_UV :=
# clean and gpu-check install nothing (gpu-check uses the machine's own python3): a bogus INSTALLER is refused, as
# the Makefile is read, only where some goal installs (no goal means setup).
else ifneq ($(if $(MAKECMDGOALS),$(filter-out $(NON_INSTALLING_GOALS),$(MAKECMDGOALS)),setup),)
$(error INSTALLER=$(INSTALLER): give uv (the default) or pip)
endif

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
ifeq ($(INSTALLER),uv)
	$(GET_UV)
	echo torch > $(VENV)/uv-excludes.txt
# A background job of a non-interactive shell ignores Ctrl-C: the trap stops pip, which would go on writing
# torch into the venv after make has given up (and alongside the next `make setup`).
	$(PIP_TORCH) --no-deps & torch=$$!; trap 'kill $$torch 2>/dev/null; exit 130' INT TERM; \
		$(INSTALL) --excludes $(VENV)/uv-excludes.txt -e .; rest=$$?; wait $$torch && exit $$rest
else
	$(PIP_TORCH)
endif
	$(INSTALL) -e .
	touch $@

$(STAMP): $(BASE_STAMP)
	$(GET_UV)
	$(INSTALL) -e '.[dev,gguf]'
	touch $@

demo: $(BASE_STAMP)
	$(BIN)/encoderlab demo

# As root, a read-only folder does not stop a writer (CAP_DAC_OVERRIDE), so the tests of unwritable outputs would
# skip: where setpriv exists, the tests run without that capability and exercise them.
NO_DAC_OVERRIDE := $(shell [ "$$(id -u)" = 0 ] && command -v setpriv >/dev/null && echo setpriv \
	--bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search)

test: setup
	$(NO_DAC_OVERRIDE) $(BIN)/python -m pytest -q -n 2 --dist worksteal tests

test-all: setup
	$(NO_DAC_OVERRIDE) $(BIN)/python -m pytest -q -n 2 --dist worksteal -m "slow or not slow" tests

# Throughput against transformers (same process, alternating steps), MFU against the bf16 peak measured in the same
# run, and peak memory; tiny and mini at 512 tokens (the shape of docs/benchmarks.md), the paper's 210M shape at 128.
# On a GPU machine it measures the GPU. Override with e.g. `make bench BENCH_ARGS="--presets 210m:1024 --batch 16"`.
BENCH_ARGS ?= --presets tiny mini 210m:128 --objectives mlm40 clm --reps 4 --warmup 1

bench: setup
	$(BIN)/python benchmarks/pretrain_throughput.py $(BENCH_ARGS)

# The GPU path (docs/benchmarks.md, "GPU"). gpu-wheels, where PyPI is reachable: the wheels of the requirements a GPU
# machine without network lacks, into the git-ignored .whl/. gpu-check, on the GPU machine, with its own python3 and
# torch (no setup: that would install the CPU torch): installs what is missing from .whl/, then checks and measures.
GPU_WHEELS ?= .whl
GPU_OUT    ?= gpu-check

gpu-wheels: setup
	$(BIN)/python benchmarks/gpu_check.py --prepare-wheels $(GPU_WHEELS)

gpu-check:
	$(PYTHON) benchmarks/gpu_check.py --install-wheels $(GPU_WHEELS) --out $(GPU_OUT)

lint: setup
	$(BIN)/ruff check src tests tools
	$(BIN)/python tools/code_size.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
