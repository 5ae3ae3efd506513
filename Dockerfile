# syntax=docker/dockerfile:1
#
# Image of nvidia-device-plugin (Python). One image runs every component of the
# Helm chart; the chart picks the entry point with `command`:
#   nvidia-device-plugin     the device plugin (default entry point)
#   gpu-feature-discovery    the node labeller
#   mps-control-daemon       the MPS control daemon (and its `mount-shm` init step)
#
# The image is published in no registry: build and push it yourself, for both
# architectures the chart's nodes may have (docs/deployment.md):
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     -t <registry>/nvidia-device-plugin-py:v0.1.0 --push .
#
# Reproducible: the base image is pinned to an exact Python and Debian release,
# and every Python package (the runtime dependencies, pip, and the build
# backend) is pinned by constraints.txt, generated from a tested environment
# with scripts/gen_constraints.py. Nothing is downloaded per architecture: pip
# picks the wheel of the platform being built, and the project itself is pure
# Python.
#
# Two stages on the same base: the first installs the project and its
# dependencies into a virtual environment (wheels only, no compiler needed),
# the second copies just that environment, so no build tooling or pip cache
# ends up in the image.

ARG PYTHON_IMAGE=python:3.12.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# PIP_CONSTRAINT also reaches the isolated environment pip builds the project
# in, so the build backend (setuptools, wheel) is pinned too.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/constraints.txt \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
COPY src ./src
RUN pip install --constraint constraints.txt pip \
 && pip install --constraint constraints.txt . \
 && pip check \
 && pip uninstall --yes pip \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="nvidia-device-plugin-py" \
      org.opencontainers.image.description="NVIDIA device plugin for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      summary="NVIDIA device plugin for Kubernetes" \
      description="NVIDIA device plugin for Kubernetes"
# NVIDIA_* make the NVIDIA container runtime inject the driver libraries and
# tools (NVML, nvidia-cuda-mps-control) into every container of the image.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_DISABLE_REQUIRE=true \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=build /opt/venv /opt/venv
COPY config/ /opt/nvidia-device-plugin/config/
# Fail the build if an entry point the chart runs is missing. `mount` (util-linux,
# part of the base image) is what `mps-control-daemon mount-shm` calls.
RUN for cmd in nvidia-device-plugin gpu-feature-discovery mps-control-daemon mount; do \
      command -v "$cmd" >/dev/null || { echo "missing command: $cmd" >&2; exit 1; }; \
    done
# Root, but without capabilities unless the chart grants them: the plugin creates
# its sockets in the kubelet's root-owned /var/lib/kubelet/device-plugins, GFD
# writes to /etc/kubernetes/node-feature-discovery/features.d, and mount-shm
# mounts a tmpfs. The chart drops every capability where it can.
USER 0:0
ENTRYPOINT ["nvidia-device-plugin"]
