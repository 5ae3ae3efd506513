"""The label keys GPU feature discovery writes, in one place.

Keys are an external contract (node selectors, the MPS daemon's
nodeSelector, NFD rules match them), so they are spelled once here and the
documentation test checks that ``docs/labels.md`` lists every one of them.
Per-resource keys are ``<resource>.<suffix>``, where the resource is
``nvidia.com/gpu`` or, under the ``mixed`` MIG strategy, ``nvidia.com/mig-<profile>``.
"""

from __future__ import annotations

__all__ = [
    "CUDA_KEYS",
    "GPU_RESOURCE",
    "MIG_ATTRIBUTE_SUFFIXES",
    "NODE_KEYS",
    "RESOURCE_SUFFIXES",
]

PREFIX = "nvidia.com/"
GPU_RESOURCE = PREFIX + "gpu"
MIG_RESOURCE_PREFIX = PREFIX + "mig-"

TIMESTAMP = PREFIX + "gfd.timestamp"
MACHINE = PREFIX + "gpu.machine"
MIG_CAPABLE = PREFIX + "mig.capable"
MIG_STRATEGY = PREFIX + "mig.strategy"
MPS_CAPABLE = PREFIX + "mps.capable"
GPU_MODE = PREFIX + "gpu.mode"
GPU_CLIQUE = PREFIX + "gpu.clique"
VGPU_PRESENT = PREFIX + "vgpu.present"
VGPU_HOST_DRIVER_VERSION = PREFIX + "vgpu.host-driver-version"
VGPU_HOST_DRIVER_BRANCH = PREFIX + "vgpu.host-driver-branch"

# The older cuda.driver.* / cuda.runtime.* spellings are kept next to the
# newer *-version.* ones because existing node selectors use both.
CUDA_DRIVER_MAJOR = PREFIX + "cuda.driver.major"
CUDA_DRIVER_MINOR = PREFIX + "cuda.driver.minor"
CUDA_DRIVER_REV = PREFIX + "cuda.driver.rev"
CUDA_RUNTIME_MAJOR = PREFIX + "cuda.runtime.major"
CUDA_RUNTIME_MINOR = PREFIX + "cuda.runtime.minor"
DRIVER_VERSION_MAJOR = PREFIX + "cuda.driver-version.major"
DRIVER_VERSION_MINOR = PREFIX + "cuda.driver-version.minor"
DRIVER_VERSION_REVISION = PREFIX + "cuda.driver-version.revision"
DRIVER_VERSION_FULL = PREFIX + "cuda.driver-version.full"
RUNTIME_VERSION_MAJOR = PREFIX + "cuda.runtime-version.major"
RUNTIME_VERSION_MINOR = PREFIX + "cuda.runtime-version.minor"
RUNTIME_VERSION_FULL = PREFIX + "cuda.runtime-version.full"

CUDA_KEYS = (
    CUDA_DRIVER_MAJOR,
    CUDA_DRIVER_MINOR,
    CUDA_DRIVER_REV,
    CUDA_RUNTIME_MAJOR,
    CUDA_RUNTIME_MINOR,
    DRIVER_VERSION_MAJOR,
    DRIVER_VERSION_MINOR,
    DRIVER_VERSION_REVISION,
    DRIVER_VERSION_FULL,
    RUNTIME_VERSION_MAJOR,
    RUNTIME_VERSION_MINOR,
    RUNTIME_VERSION_FULL,
)

NODE_KEYS = (
    TIMESTAMP,
    MACHINE,
    *CUDA_KEYS,
    MIG_CAPABLE,
    MIG_STRATEGY,
    MPS_CAPABLE,
    GPU_MODE,
    GPU_CLIQUE,
    VGPU_PRESENT,
    VGPU_HOST_DRIVER_VERSION,
    VGPU_HOST_DRIVER_BRANCH,
)

PRODUCT = "product"
COUNT = "count"
REPLICAS = "replicas"
SHARING_STRATEGY = "sharing-strategy"
MEMORY = "memory"
FAMILY = "family"
COMPUTE_MAJOR = "compute.major"
COMPUTE_MINOR = "compute.minor"
MULTIPROCESSORS = "multiprocessors"
SLICES_GI = "slices.gi"
SLICES_CI = "slices.ci"
ENGINES_COPY = "engines.copy"
ENGINES_DECODER = "engines.decoder"
ENGINES_ENCODER = "engines.encoder"
ENGINES_JPEG = "engines.jpeg"
ENGINES_OFA = "engines.ofa"

MIG_ATTRIBUTE_SUFFIXES = (
    MULTIPROCESSORS,
    SLICES_GI,
    SLICES_CI,
    ENGINES_COPY,
    ENGINES_DECODER,
    ENGINES_ENCODER,
    ENGINES_JPEG,
    ENGINES_OFA,
)

RESOURCE_SUFFIXES = (
    PRODUCT,
    COUNT,
    REPLICAS,
    SHARING_STRATEGY,
    MEMORY,
    FAMILY,
    COMPUTE_MAJOR,
    COMPUTE_MINOR,
    *MIG_ATTRIBUTE_SUFFIXES,
)


def resource_key(resource: str, suffix: str) -> str:
    """``nvidia.com/gpu`` + ``product`` -> ``nvidia.com/gpu.product``."""
    return f"{resource}.{suffix}"
