# Two entry points: `make run` (the main job) and `make test`. Both set up what they need first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup run test lint bench clean protos

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

run: setup
	scripts/ensure-prometheus
	$(BIN)/python -m demo

test: setup
	scripts/ensure-prometheus
	scripts/ensure-victoria-metrics
	scripts/ensure-chromium
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check common collector adapter loadgen image harness demo tests bench
	$(BIN)/ruff format --check common collector adapter loadgen image harness demo tests bench
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m bench.collector_bench
	$(BIN)/python -m bench.shared_bench
	$(BIN)/python -m bench.adapter_bench --rss-series 50000

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The kubelet pod-resources stubs are generated from collector/pods/podresources/api.proto and committed. An older
# grpcio-tools is pinned on purpose: generated code runs on any runtime at least as new as its generator, so this
# keeps the collector working with grpcio >= 1.66 and protobuf >= 5.27 (GPU images often carry older ones).
protos:
	$(PYTHON) -m venv /tmp/gpuscale-protoc
	/tmp/gpuscale-protoc/bin/pip install -q grpcio-tools==1.66.2
	/tmp/gpuscale-protoc/bin/python -m grpc_tools.protoc -I collector/pods/podresources --python_out=collector/pods/podresources \
		--pyi_out=collector/pods/podresources --grpc_python_out=collector/pods/podresources collector/pods/podresources/api.proto
	sed -i 's/^import api_pb2 as api__pb2/from . import api_pb2 as api__pb2/' collector/pods/podresources/api_pb2_grpc.py
	$(BIN)/ruff format -q collector/pods/podresources/api_pb2.pyi  # wrapped first, so that the fixes below fit
	$(BIN)/ruff check -q --fix collector/pods/podresources/api_pb2.pyi
	$(BIN)/ruff format -q collector/pods/podresources/api_pb2.pyi
