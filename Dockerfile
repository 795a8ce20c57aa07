# syntax=docker/dockerfile:1
#
# One image for both components; the command picks one:
#   gpuscale-collector   one per GPU node (DaemonSet)
#   gpuscale-adapter     the metrics API server (Deployment)
# A spec written for the image it replaces gives arguments only; the entry point `gpuscale` then picks the component
# from them (image/entrypoint.py): prometheus-adapter's arguments (which may start with /adapter, as its Helm chart
# passes them) run the adapter; dcgm-exporter's (`-f <counters file>`, other collector flags, or none) the collector.
# /adapter is also the adapter, for a spec that names prometheus-adapter's binary as its command.
#
#   docker build -t ghcr.io/gpuscale/gpuscale:0.1.0 .
#
# It runs as an unprivileged user (65532), which is all the adapter needs. The collector needs more, and
# manifests/base/collector-daemonset.yaml gives it:
#   - the driver's libnvidia-ml.so.1: the NVIDIA container toolkit mounts it into a container that has
#     NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility (or runs with runtimeClassName: nvidia);
#     the image carries nothing from CUDA or the driver;
#   - uid 0, with every capability dropped, to connect to the kubelet's pod-resources socket (owned by root);
#   - hostPID, only for per-pod values on shared GPUs (manifests/components/shared-gpus).
# The load generator's extra (PyTorch) is left out: GPU workload images carry their own.

ARG PYTHON_VERSION=3.12

FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
# Only what the wheel is built from, so that edits to tests or docs do not rebuild it.
COPY pyproject.toml README.md ./
COPY collector/ collector/
COPY common/ common/
COPY adapter/ adapter/
COPY loadgen/ loadgen/
COPY image/ image/
# gpuscale's wheel and one for every dependency (all publish manylinux wheels: no compiler needed)
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim AS runtime
LABEL org.opencontainers.image.title="gpuscale" \
      org.opencontainers.image.description="GPU metrics collector (dcgm-exporter compatible) and custom/external metrics adapter for Kubernetes HPAs" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 65532 gpuscale \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin gpuscale
# The wheels are mounted for the install only, so they take no layer of their own.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index --find-links=/wheels gpuscale
# The base image deletes the standard library's bytecode, and nothing here may write it back (the variable above, a
# non-root user): each start would compile every standard module it imports, which took 0.35 s of CPU and left the
# collector 0.4-2.1 MB larger (docs/collector-bench.md, bytecode). pip has compiled the packages it installed; this
# compiles the standard library once (13 MB of image), leaving out pip's own files, which nothing here imports.
RUN python -m compileall -q -j0 -x /site-packages/ "$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"
RUN ln -s "$(command -v gpuscale-adapter)" /adapter
USER 65532:65532
# collector /metrics, adapter HTTPS
EXPOSE 9400 6443
ENTRYPOINT ["gpuscale"]
