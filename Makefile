# Two entry points: `make run` (the main job) and `make test`. Both set up what they need first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup run test lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

run: setup
	$(BIN)/python -m collector --fallback-simulated-gpus 2

test: setup
	scripts/ensure-prometheus
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check collector adapter tests bench
	$(BIN)/ruff format --check collector adapter tests bench
	$(BIN)/mypy

bench: setup
	$(BIN)/python bench/collector_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
