"""What NVML's device attributes say about one MIG device: SM, engine and slice counts, memory.

`nvmlDeviceGetAttributes` on a MIG device handle answers two needs at once:
the memory size that names the device's profile (`3g.20gb`), and the counts
that the MIG node labels publish (`<resource>.multiprocessors`,
`.engines.*`, `.slices.*`). The counts are a nicety: where the driver does
not offer the call (NOT_SUPPORTED, or the symbol missing from the driver or
from pynvml) the attributes are None and the labels carry only what the
profile name tells. The memory size is not: it is then read from the MIG
device's memory info, which reports the same size. Any other failure is a
`DiscoveryError`, as for the rest of discovery.

The NVML module is passed in, as for `nvml_probe`, so discovery and its tests
share one (possibly fake) module. Only reads: nothing here changes the GPU.
"""

from __future__ import annotations

from typing import Any

from devices.errors import DiscoveryError
from devices.model import MigAttributes

_MIB = 1 << 20


def mig_attributes_of(raw: Any) -> MigAttributes:
    """The counts in an NVML device-attributes record."""
    return MigAttributes(
        multiprocessors=int(raw.multiprocessorCount),
        gi_slices=int(raw.gpuInstanceSliceCount),
        ci_slices=int(raw.computeInstanceSliceCount),
        copy_engines=int(raw.sharedCopyEngineCount),
        decoders=int(raw.sharedDecoderCount),
        encoders=int(raw.sharedEncoderCount),
        jpegs=int(raw.sharedJpegCount),
        ofas=int(raw.sharedOfaCount),
    )


def read_mig_attributes(nvml: Any, handle: Any, *, where: str) -> tuple[MigAttributes | None, int]:
    """The attributes of the MIG device behind `handle` (None where not offered), and its MiB.

    Raises:
        DiscoveryError: a call failed for another reason than not being
            offered; the message names `where` and the call.
    """
    query = getattr(nvml, "nvmlDeviceGetAttributes", None)
    if query is not None:
        try:
            raw = query(handle)
        except nvml.NVMLError as exc:
            absent = {nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND}
            if getattr(exc, "value", None) not in absent:
                raise DiscoveryError(f"{where}: nvmlDeviceGetAttributes failed: {exc}") from exc
        else:
            return mig_attributes_of(raw), int(raw.memorySizeMB)
    try:
        total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    except nvml.NVMLError as exc:
        raise DiscoveryError(f"{where}: nvmlDeviceGetMemoryInfo failed: {exc}") from exc
    return None, total // _MIB
