# Two entry points, each self-contained on a fresh machine with Python 3.11.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,examples]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/python examples/minilm_demo.py

test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests

bench: setup
	$(BIN)/python benchmarks/bench.py
