# Two entry points, each self-contained on a fresh machine with Python 3.11.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
WHEELS := build/wheel
# Every file of the package's four source roots (docs/architecture.md, "Layout").
SOURCES := $(shell find thunder_mlir dialects passes tools -type f -not -path '*/__pycache__/*')

.PHONY: setup demo test bench

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The project is installed as the wheel `pip wheel .` builds (not editable), rebuilt and
# reinstalled whenever a source changes, so the demo and the tests run what users install.
$(VENV)/.installed: pyproject.toml $(SOURCES) | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	rm -rf $(WHEELS)
	$(BIN)/pip wheel -q --no-deps -w $(WHEELS) .
	$(BIN)/pip install -q "$$(ls $(WHEELS)/*.whl)[test,examples]"
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEELS)/*.whl
	touch $@

setup: $(VENV)/.installed

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/python examples/minilm_demo.py

test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n auto --dist loadfile tests

bench: setup
	$(BIN)/python benchmarks/bench.py
