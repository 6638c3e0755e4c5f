# Two entry points, each self-contained on a fresh machine with Python 3.11.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
WHEELS := build/wheel
# Every file of the package's four source roots (docs/architecture.md, "Layout").
SOURCES := $(shell find thunder_mlir dialects passes tools -type f -not -path '*/__pycache__/*')

# The tested versions inside pyproject's ranges (constraints/default.txt; docs/compat.md).
CONSTRAINTS := constraints/default.txt

.PHONY: setup demo test bench bench-big compat gpu-bundle gpu-aot gpu-programs

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The project is installed as the wheel `pip wheel .` builds (not editable), rebuilt and
# reinstalled whenever a source changes, so the demo and the tests run what users install.
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) $(SOURCES) | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	rm -rf $(WHEELS)
	$(BIN)/pip wheel -q --no-deps -w $(WHEELS) .
	$(BIN)/pip install -q -c $(CONSTRAINTS) "$$(ls $(WHEELS)/*.whl)[test,examples]"
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEELS)/*.whl
	touch $@

setup: $(VENV)/.installed

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/python examples/minilm_demo.py

test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n auto --dist loadfile tests

bench: setup
	$(BIN)/python benchmarks/bench.py
	$(BIN)/python benchmarks/optimizer_step.py --whole --threads 1
	$(BIN)/python benchmarks/optimizer_step.py --whole --threads 0

# the whole-step table with GPT-2 4x512 (batch 4 x 128) too: minutes per thread count
bench-big: setup
	$(BIN)/python benchmarks/optimizer_step.py --big --threads 1
	$(BIN)/python benchmarks/optimizer_step.py --big --threads 0

# --- make compat: the suite on the lent GPU machine's stack, reproduced on the CPU ---------
# Python 3.12, torch 2.11.0 (PyPI's CUDA build, ~5 GB with its nvidia wheels; it runs on the
# CPU), jax/jaxlib 0.11.2, transformers 5.17.0 (constraints/compat.txt), the project's wheel.
COMPAT_PY ?= $(or $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12))),python3.12)
COMPAT_VENV ?= .venv-compat
COMPAT_WHEELS := build/compat-wheel
# A named subset (the whole suite takes ~15 min on 2 free cores, the OpInfo sweeps most of
# it): tracing, ops, grad, runtime (DLPack, XLA, compile cache), models (GPT-2, Llama,
# MiniLM), generate, modules, higher-order ops, dynamic shapes, autocast, random, fallback,
# the idiom catalogues, the layer check and the CUDA-only tests (collected, skipped here).
# `make compat COMPAT_TESTS=tests` runs everything.
COMPAT_TESTS ?= tests/test_ops.py tests/test_grad.py tests/test_runtime.py tests/test_models.py \
	tests/test_generate.py tests/test_module.py tests/test_higher_order.py \
	tests/test_dynamic_shapes.py tests/test_autocast.py tests/test_random.py \
	tests/test_fallback.py tests/test_cache.py tests/test_compile_cache.py tests/test_layers.py \
	tests/test_idioms_aliasing.py tests/test_idioms_autograd.py tests/test_idioms_modules.py \
	tests/test_idioms_autocast.py tests/test_idioms_guards.py tests/test_pytree.py \
	tests/test_distributed.py tests/test_cuda.py tests/test_compat.py
COMPAT_JOBS ?= 2

$(COMPAT_VENV)/bin/python:
	$(COMPAT_PY) -m venv $(COMPAT_VENV)

$(COMPAT_VENV)/.installed: pyproject.toml constraints/compat.txt $(SOURCES) | $(COMPAT_VENV)/bin/python
	$(COMPAT_VENV)/bin/pip install -q --upgrade pip
	rm -rf $(COMPAT_WHEELS)
	$(COMPAT_VENV)/bin/pip wheel -q --no-deps -w $(COMPAT_WHEELS) .
	$(COMPAT_VENV)/bin/pip install -q -c constraints/compat.txt "$$(ls $(COMPAT_WHEELS)/*.whl)[test,examples]"
	$(COMPAT_VENV)/bin/pip install -q --force-reinstall --no-deps $(COMPAT_WHEELS)/*.whl
	touch $@

compat: $(COMPAT_VENV)/.installed
	HF_HUB_OFFLINE=1 THUNDER_TEST_SUBPROCESS_TIMEOUT=1800 $(COMPAT_VENV)/bin/python -m pytest -n $(COMPAT_JOBS) --dist loadfile \
		$(COMPAT_TESTS)

# --- make gpu-bundle: what tools/gpu_check.sh installs on the lent GPU machine -------------
# The device's image (Python 3.12, torch 2.11.0+cu130, jax 0.11.2 with its CUDA plugin,
# transformers 5.17) lacks torch-mlir, optree and filecheck and has no network; a device call
# carries at most 64 MiB. build/gpu-bundle/ (ignored, like build/) holds: the project's wheel,
# optree's cp312 and filecheck's wheels, and torch-mlir's cp312 wheel unpacked without its
# `torch-mlir-opt` binary (unused by the project) as torch_mlir.tar.xz (xz -6). < 60 MiB.
GPU_BUNDLE := build/gpu-bundle
GPU_DL := build/gpu-download
GPU_PLATFORM := --only-binary=:all: --python-version 3.12 --implementation cp \
	--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64

gpu-bundle: $(BIN)/python
	rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)/wheels $(GPU_DL)
	$(BIN)/pip wheel -q --no-deps -w $(GPU_BUNDLE)/wheels .
	$(BIN)/pip download -q --no-deps $(GPU_PLATFORM) -d $(GPU_DL) torch-mlir==20261001 "optree>=0.13" "filecheck>=1.0"
	cp $(GPU_DL)/optree-*.whl $(GPU_DL)/filecheck-*.whl $(GPU_BUNDLE)/wheels/
	rm -rf $(GPU_DL)/unpacked && mkdir -p $(GPU_DL)/unpacked
	cd $(GPU_DL)/unpacked && $(CURDIR)/$(BIN)/python -m zipfile -e ../torch_mlir-20261001-*.whl .
	find $(GPU_DL)/unpacked -name 'torch-mlir-opt*' -type f -delete
	tar -C $(GPU_DL)/unpacked -cf - . | xz -6 -T2 > $(GPU_BUNDLE)/torch_mlir.tar.xz
	du -sh $(GPU_BUNDLE); ls -l $(GPU_BUNDLE) $(GPU_BUNDLE)/wheels
	@test $$(du -sm $(GPU_BUNDLE) | cut -f1) -lt 60 || (echo "gpu-bundle is over 60 MiB" && false)

# --- make gpu-aot: XLA's GPU compiler without a GPU (docs/gpu.md, toolchain.md section 11) ---
# A Python 3.12 venv with jax/jaxlib 0.12.0.1, the CUDA 12 plugin and ptxas (about 1.2 GB),
# built once: benchmarks/gpu_compile.py compiles thunder_mlir's captured GPU programs and
# the plain-jax references in it for an H100/H200 that is not there.
GPU_AOT_VENV ?= .venv-gpu-aot
GPU_AOT_PKGS := jax==0.12.0.1 jaxlib==0.12.0.1 jax-cuda12-plugin==0.12.0.1 \
	jax-cuda12-pjrt==0.12.0.1 nvidia-cuda-nvcc-cu12
GPU_TARGET ?= h100

$(GPU_AOT_VENV)/.installed:
	$(COMPAT_PY) -m venv $(GPU_AOT_VENV)
	$(GPU_AOT_VENV)/bin/pip install -q --upgrade pip
	$(GPU_AOT_VENV)/bin/pip install -q $(GPU_AOT_PKGS)
	touch $@

gpu-aot: $(GPU_AOT_VENV)/.installed

# the table of docs/gpu.md: every workload compiled for $(GPU_TARGET) (about 25 minutes on 2 cores)
gpu-programs: setup gpu-aot
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/gpu_programs.py --target $(GPU_TARGET)
