# Two entry points, each self-contained on a fresh machine with Python 3.11.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
WHEELS := build/wheel
# Every file of the package's four source roots (docs/architecture.md, "Layout").
SOURCES := $(shell find thunder_mlir dialects passes tools -type f -not -path '*/__pycache__/*')

# The tested versions inside pyproject's ranges (constraints/default.txt; docs/compat.md).
CONSTRAINTS := constraints/default.txt
# tests/test_litgpt.py's litgpt and what it imports, installed without their declared
# dependencies: litgpt 0.5.13 (the only release) pins huggingface-hub<1.4, which
# transformers 5.23's >=1.31 excludes, so it cannot be a test extra pip resolves; it
# imports and runs with the hub transformers brings (versions in constraints/default.txt)
LITGPT := litgpt lightning lightning-utilities torchmetrics jsonargparse psutil
# tests/test_peft.py's peft and accelerate (which peft imports), installed without their
# declared dependencies as litgpt is: what else they import, transformers and torch bring
# (a resolver run could move torch off its pin)
PEFT := peft accelerate
# tests/test_timm.py's timm and what it imports (torchvision, pillow), installed without
# their declared dependencies into $(VENV)/timm-site, which only test_timm.py puts on
# sys.path. Apart because PyPI's torchvision is a CUDA build: on the CPU-only torch its C
# extension cannot load and `import torchvision` fails (test_timm.py works around it), and
# with pillow importable transformers imports torchvision for every model class
# (is_torchvision_available), which would break every transformers test and the demo
TIMM := timm torchvision pillow

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
	$(BIN)/pip install -q --no-deps -c $(CONSTRAINTS) $(LITGPT)
	$(BIN)/pip install -q --no-deps -c $(CONSTRAINTS) $(PEFT)
	rm -rf $(VENV)/timm-site
	$(BIN)/pip install -q --no-deps -c $(CONSTRAINTS) --target $(VENV)/timm-site $(TIMM)
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEELS)/*.whl
	touch $@

setup: $(VENV)/.installed

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/python examples/minilm_demo.py

test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n auto --dist loadfile --durations=40 tests

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
# torch's nvidia wheels are needed even on the CPU: installed with --no-deps, `import torch`
# fails (libcudnn.so.9 not found: libtorch_cuda.so, loaded by every import, needs 12 of
# them). Cold, torch and its wheels (2.6 GB) download in ~75 s and install in ~90 s.
COMPAT_PY ?= $(or $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12))),python3.12)
COMPAT_VENV ?= .venv-compat
COMPAT_WHEELS := build/compat-wheel
# The subset CI runs (.ci/run, after `make test`), chosen to fit CI's 30 minutes on 2 cores
# with the venv built from a cold pip cache (docs/compat.md, "What CI runs"). Per-file times
# measured on this stack (2026-12-02, 2 cores at load average 4-7: about twice a quiet
# machine's), summed over xdist workers:
#   the required part (issue 45): models forward (test_models 67 s) and training
#   (test_train_step 65 s), generate (269 s), the dynamo backend (100 s), autocast (61 s
#   without its two OpInfo sweeps), the idiom catalogues (test_idioms_*: 314 s);
#   the stack's version-specific code, cheap: torch/jaxlib internals (test_compat 3 s),
#   higher-order ops (24 s), fallback backward (28 s), DLPack/runtime (42 s),
#   test_computed_once (5 s), caches (6 s), layers, the CUDA tests (collected, skipped here).
#   Dropped 2026-12-02 for CI time (make test took 1,950 s in stop 49's CI): resident
#   buffers (test_resident 95 s) and XLA scheduling by thunder.after (test_recomputation
#   172 s); `make compat COMPAT_TESTS=...` runs them. Deselected 2026-12-02 (CI time, make
#   test 2,155 s): test_idioms_modules' LSTM with dropout (149 s) and test_generate (269 s),
#   run by make test on the default stack; `make compat COMPAT_TESTS=...` runs them.
# Not run: the OpInfo sweeps, whose cost is tracing every op (test_autocast's two: 486 s
# and 476 s here; test_opinfo*, test_written_after 436 s, test_region_reads 369 s),
# test_moe (915 s), test_fuzz, test_distributed (a subprocess over 600 s on a loaded
# machine). The autocast tables they would check per version are checked directly against
# the installed dispatcher (test_op_lists_are_the_ones_the_installed_torch_registers).
# `make compat COMPAT_TESTS=tests COMPAT_DESELECT=` runs everything (~45 min here).
COMPAT_TESTS ?= tests/test_models.py tests/test_train_step.py \
	tests/test_dynamo_backend.py tests/test_autocast.py tests/test_idioms_aliasing.py \
	tests/test_idioms_autocast.py tests/test_idioms_autograd.py tests/test_idioms_errors.py \
	tests/test_idioms_gradnum.py tests/test_idioms_guards.py tests/test_idioms_modules.py \
	tests/test_idioms_mutation.py tests/test_compat.py tests/test_higher_order.py \
	tests/test_fallback.py tests/test_runtime.py tests/test_computed_once.py \
	tests/test_cache.py tests/test_layers.py tests/test_cuda.py
COMPAT_DESELECT ?= --deselect tests/test_autocast.py::test_opinfo_cpu_autocast_matches_eager \
	--deselect tests/test_autocast.py::test_opinfo_cuda_autocast_dtypes_match_fake_eager \
	--deselect tests/test_idioms_modules.py::test_lstm_with_dropout_between_layers
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
	$(COMPAT_VENV)/bin/python -c "import sys, torch, jax, jaxlib, transformers; print('make compat: Python', sys.version.split()[0], '| torch', torch.__version__, '| jax', jax.__version__, '| jaxlib', jaxlib.__version__, '| transformers', transformers.__version__)"
	HF_HUB_OFFLINE=1 THUNDER_TEST_SUBPROCESS_TIMEOUT=1800 $(COMPAT_VENV)/bin/python -m pytest -n $(COMPAT_JOBS) --dist loadfile \
		$(COMPAT_DESELECT) $(COMPAT_TESTS)

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
