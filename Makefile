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

# ARGS: the demo's options (make run ARGS="--html demo.html"; make run ARGS=--help lists them). The demo is exec'd
# so that it is make's own child: a SIGTERM or Ctrl-C sent to the process group reaches it, and it stops what it started.
run: setup
	scripts/ensure-prometheus
	exec $(BIN)/python -m demo $(ARGS)

test: setup
	scripts/ensure-prometheus
	scripts/ensure-victoria-metrics
	scripts/ensure-chromium
	scripts/ensure-helm >/dev/null
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

# The gRPC stubs are generated from the .proto beside them and committed: the kubelet's pod-resources API
# (harness/node/podresources/api.proto) and KEDA's external scaler (adapter/keda/externalscaler/externalscaler.proto).
# An older grpcio-tools is pinned on purpose: generated code runs on any runtime at least as new as its generator, so
# this keeps both programs working with grpcio >= 1.66 and protobuf >= 5.27 (GPU images often carry older ones).
# $(call protoc,DIRECTORY,NAME): NAME_pb2.py, NAME_pb2.pyi and NAME_pb2_grpc.py from DIRECTORY/NAME.proto, the
# service module importing its messages from its own package, the typed stub formatted as the tree is.
define protoc
	/tmp/gpuscale-protoc/bin/python -m grpc_tools.protoc -I $(1) --python_out=$(1) --pyi_out=$(1) \
		--grpc_python_out=$(1) $(1)/$(2).proto
	sed -i 's/^import $(2)_pb2 as $(2)__pb2/from . import $(2)_pb2 as $(2)__pb2/' $(1)/$(2)_pb2_grpc.py
	$(BIN)/ruff format -q $(1)/$(2)_pb2.pyi  # wrapped first, so that the fixes below fit
	$(BIN)/ruff check -q --fix $(1)/$(2)_pb2.pyi
	$(BIN)/ruff format -q $(1)/$(2)_pb2.pyi
endef

protos:
	$(PYTHON) -m venv /tmp/gpuscale-protoc
	/tmp/gpuscale-protoc/bin/pip install -q grpcio-tools==1.66.2
	$(call protoc,harness/node/podresources,api)
	$(call protoc,adapter/keda/externalscaler,externalscaler)
