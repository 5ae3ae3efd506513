"""A pynvml-shaped fake, so the NVML backend's mapping logic runs without a GPU.

The fake exposes the functions the backend calls under their pynvml names,
returns canned values for a small node described by `FakeGpu` records, and
raises the real `pynvml.NVMLError` (with real error codes) where a test asks
for a failure. Constants, error classes and the ctypes records that NVML
fills in (device attributes, fabric info) are taken from the installed
pynvml, so the backend is exercised against the values and field names it
will see on a node. A function missing from an older driver or pynvml is
simulated by failing it with FUNCTION_NOT_FOUND (the driver lacks the symbol)
or by deleting it from `FakeNvml` with monkeypatch (pynvml lacks it).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1 << 20

# A100 GPU-instance profile constant -> profile id as `nvidia-smi mig -lgip` shows them.
A100_GI_PROFILE_IDS = {0: 19, 7: 20, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}
GI_SLICES = {0: 1, 7: 1, 9: 1, 1: 2, 2: 3, 3: 4, 4: 7, 17: 3}
# A100-40GB GPU-instance profile constant -> (MiB, SMs, copy engines, decoders, encoders,
# jpegs, ofas, instances) as `nvidia-smi mig -lgip` lists them.
A100_GI_PROFILES = {
    0: (4864, 14, 1, 0, 0, 0, 0, 7),
    7: (4864, 14, 1, 1, 0, 1, 1, 1),
    9: (9984, 14, 1, 1, 0, 0, 0, 4),
    1: (9984, 28, 2, 1, 0, 0, 0, 3),
    2: (19968, 42, 3, 2, 0, 0, 0, 2),
    3: (19968, 56, 4, 2, 0, 0, 0, 1),
    4: (40192, 98, 7, 5, 0, 1, 1, 1),
}
# A100-40GB profile id -> (start, memory slices) of each possible placement (`-lgipp`).
A100_PLACEMENTS = {
    19: [(s, 1) for s in range(7)],
    20: [(s, 1) for s in range(7)],
    15: [(s, 2) for s in (0, 2, 4, 6)],
    14: [(s, 2) for s in (0, 2, 4)],
    9: [(0, 4), (4, 4)],
    5: [(0, 4)],
    0: [(0, 8)],
}
# Compute-instance profile constant -> compute slices (ids equal the constants, as on A100).
CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}
ZERO_UUID = bytes(16)


@dataclass
class FakeMig:
    uuid: str
    gi: int
    ci: int
    gi_constant: int
    ci_constant: int
    memory_mb: int
    # (multiprocessors, copy engines, decoders, encoders, jpegs, ofas) of the attributes
    engines: tuple[int, int, int, int, int, int] = (14, 1, 0, 0, 0, 0)
    start: int = 0  # the GPU instance's first memory slice


@dataclass
class FakeFabric:
    """What nvmlDeviceGetGpuFabricInfo(V) reports for a GPU that supports a fabric."""

    cluster_uuid: bytes = ZERO_UUID
    clique_id: int = 0
    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = pynvml.NVML_SUCCESS


@dataclass
class FakeLink:
    active: bool
    remote_bus: str
    remote_type: int = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU


@dataclass
class FakeGpu:
    name: str
    uuid: str
    minor: int
    bus_id: str
    memory_mib: int
    cc: tuple[int, int]
    mig_mode: tuple[int, int] | None = None  # None: NOT_SUPPORTED
    migs: dict[int, FakeMig] = field(default_factory=dict)  # slot -> device
    max_migs: int = 7
    links: dict[int, FakeLink] = field(default_factory=dict)  # absent links: NOT_SUPPORTED
    fabric: FakeFabric | None = None  # None: NOT_SUPPORTED
    brand: int = pynvml.NVML_BRAND_NVIDIA
    # profile id -> possible placements; a profile id absent here answers NOT_SUPPORTED
    placements: dict[int, list[tuple[int, int]]] = field(
        default_factory=lambda: {k: list(v) for k, v in A100_PLACEMENTS.items()}
    )
    # GPU instances without a compute instance (made, or left by a destroyed one), by id
    bare_gis: dict[int, FakeMig] = field(default_factory=dict)


class FakeNvml:
    """Stands in for the `pynvml` module inside `devices.nvml`."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "c_nvml")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.driver = "550.54.15"
        self.cuda = 12040
        self.gi_profile_ids = dict(A100_GI_PROFILE_IDS)
        self.topology: dict[frozenset[int], int] = {}
        self.failures: dict[str, tuple[int, Callable[..., bool]]] = {}
        self.calls: list[str] = []
        self.writes: list[tuple[Any, ...]] = []  # (function, arguments) of every MIG change
        self.inits = 0
        self.shutdowns = 0

    # -- test controls --------------------------------------------------------

    def fail(self, function: str, code: int, when: Callable[..., bool] = lambda *a: True) -> None:
        """Make `function` raise NVMLError(code) for arguments matching `when`."""
        self.failures[function] = (code, when)

    def _enter(self, function: str, *args: Any) -> None:
        self.calls.append(function)
        if function in self.failures:
            code, when = self.failures[function]
            if when(*args):
                raise pynvml.NVMLError(code)

    def _gpu(self, handle: tuple[Any, ...]) -> FakeGpu:
        return self.gpus[int(handle[1])]

    def _mig(self, handle: tuple[Any, ...]) -> FakeMig:
        return self.gpus[int(handle[1])].migs[int(handle[2])]

    # -- library ---------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[Any, ...]:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        return ("gpu", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> tuple[Any, ...]:
        self._enter("nvmlDeviceGetHandleByUUID", uuid)
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return ("gpu", index)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetIndex", handle)
        return int(handle[1])

    # -- devices ---------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: tuple[Any, ...]) -> str:
        self._enter("nvmlDeviceGetName", handle)
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: tuple[Any, ...]) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        return self._mig(handle).uuid if handle[0] == "mig" else self._gpu(handle).uuid

    def nvmlDeviceGetMinorNumber(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetMinorNumber", handle)
        return self._gpu(handle).minor

    def nvmlDeviceGetMemoryInfo(self, handle: tuple[Any, ...]) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        if handle[0] == "mig":
            return SimpleNamespace(total=self._mig(handle).memory_mb * MIB)
        return SimpleNamespace(total=self._gpu(handle).memory_mib * MIB)

    def nvmlDeviceGetPciInfo(self, handle: tuple[Any, ...]) -> SimpleNamespace:
        self._enter("nvmlDeviceGetPciInfo", handle)
        # pynvml hands back str; older releases gave bytes, which the backend also accepts.
        return SimpleNamespace(busId=self._gpu(handle).bus_id.encode())

    def nvmlDeviceGetCudaComputeCapability(self, handle: tuple[Any, ...]) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        return self._gpu(handle).cc

    def nvmlDeviceGetBrand(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetBrand", handle)
        return self._gpu(handle).brand

    def nvmlDeviceGetMigMode(self, handle: tuple[Any, ...]) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        mode = self._gpu(handle).mig_mode
        if mode is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(mode)

    # -- MIG -------------------------------------------------------------------

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return self._gpu(handle).max_migs

    def nvmlDeviceGetMigDeviceHandleByIndex(
        self, handle: tuple[Any, ...], slot: int
    ) -> tuple[Any, ...]:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if slot not in self._gpu(handle).migs:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        return self._mig(handle).gi

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        return self._mig(handle).ci

    def nvmlDeviceGetAttributes(self, handle: tuple[Any, ...]) -> Any:
        self._enter("nvmlDeviceGetAttributes", handle)
        mig = self._mig(handle)
        sms, copy_engines, decoders, encoders, jpegs, ofas = mig.engines
        return pynvml.c_nvmlDeviceAttributes(
            multiprocessorCount=sms,
            sharedCopyEngineCount=copy_engines,
            sharedDecoderCount=decoders,
            sharedEncoderCount=encoders,
            sharedJpegCount=jpegs,
            sharedOfaCount=ofas,
            gpuInstanceSliceCount=GI_SLICES[mig.gi_constant],
            computeInstanceSliceCount=CI_SLICES[mig.ci_constant],
            memorySizeMB=mig.memory_mb,
        )

    def _instance(self, gpu_index: int, gi: int) -> FakeMig:
        for mig in self.gpus[gpu_index].migs.values():
            if mig.gi == gi:
                return mig
        if gi in self.gpus[gpu_index].bare_gis:
            return self.gpus[gpu_index].bare_gis[gi]
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstanceById(self, handle: tuple[Any, ...], gi: int) -> tuple[Any, ...]:
        self._enter("nvmlDeviceGetGpuInstanceById", handle, gi)
        self._instance(handle[1], gi)
        return ("gi", handle[1], gi)

    def nvmlGpuInstanceGetInfo(self, gi_handle: tuple[Any, ...]) -> SimpleNamespace:
        self._enter("nvmlGpuInstanceGetInfo", gi_handle)
        mig = self._instance(gi_handle[1], gi_handle[2])
        placement = SimpleNamespace(start=mig.start, size=GI_SLICES[mig.gi_constant])
        return SimpleNamespace(
            id=mig.gi, profileId=self.gi_profile_ids[mig.gi_constant], placement=placement
        )

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gi_handle: tuple[Any, ...], ci: int
    ) -> tuple[Any, ...]:
        self._enter("nvmlGpuInstanceGetComputeInstanceById", gi_handle, ci)
        gpu = self.gpus[gi_handle[1]]
        if not any(m.gi == gi_handle[2] and m.ci == ci for m in gpu.migs.values()):
            self._instance(gi_handle[1], gi_handle[2])  # NOT_FOUND for a GPU instance gone
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("ci", gi_handle[1], gi_handle[2], ci)

    def nvmlComputeInstanceGetInfo(self, ci_handle: tuple[Any, ...]) -> SimpleNamespace:
        self._enter("nvmlComputeInstanceGetInfo", ci_handle)
        mig = self._instance(ci_handle[1], ci_handle[2])
        return SimpleNamespace(id=mig.ci, profileId=mig.ci_constant)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: tuple[Any, ...], constant: int
    ) -> SimpleNamespace:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo", handle, constant)
        if constant >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if constant not in self.gi_profile_ids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        memory, sms, copy_engines, decoders, encoders, jpegs, ofas, instances = (
            A100_GI_PROFILES.get(constant, (0, 0, 0, 0, 0, 0, 0, 1))
        )
        return SimpleNamespace(
            id=self.gi_profile_ids[constant],
            sliceCount=GI_SLICES[constant],
            instanceCount=instances,
            memorySizeMB=memory,
            multiprocessorCount=sms,
            copyEngineCount=copy_engines,
            decoderCount=decoders,
            encoderCount=encoders,
            jpegCount=jpegs,
            ofaCount=ofas,
        )

    # -- dynamic MIG: placements, creating and destroying instances -------------------

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: tuple[Any, ...], profile_id: int, placements: Any, count: Any
    ) -> int:
        """As the C API: a NULL array asks for the count, else the array is filled."""
        self._enter("nvmlDeviceGetGpuInstancePossiblePlacements", handle, profile_id)
        found = self._gpu(handle).placements.get(profile_id)
        if found is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if placements is not None:
            if len(placements) < len(found):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
            for n, (start, size) in enumerate(found):
                placements[n].start = start
                placements[n].size = size
        count.contents.value = len(found)
        return int(pynvml.NVML_SUCCESS)

    def _constant_of(self, profile_id: int) -> int:
        for constant, known in self.gi_profile_ids.items():
            if known == profile_id:
                return constant
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _gpu_instances(self, gpu: FakeGpu) -> dict[int, FakeMig]:
        instances = {mig.gi: mig for mig in gpu.migs.values()}
        instances.update(gpu.bare_gis)
        return instances

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: tuple[Any, ...], profile_id: int, placement: Any
    ) -> tuple[Any, ...]:
        start, size = int(placement.contents.start), int(placement.contents.size)
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement", handle, profile_id, start, size)
        gpu = self._gpu(handle)
        constant = self._constant_of(profile_id)
        if (start, size) not in gpu.placements.get(profile_id, []):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        wanted = set(range(start, start + size))
        for other in self._gpu_instances(gpu).values():
            other_id = self.gi_profile_ids[other.gi_constant]
            other_size = dict(gpu.placements.get(other_id, [])).get(other.start, 1)
            if wanted & set(range(other.start, other.start + other_size)):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        used = set(self._gpu_instances(gpu))
        gi = next(n for n in range(1, 15) if n not in used)
        memory = A100_GI_PROFILES.get(constant, (0,))[0]
        engines = A100_GI_PROFILES.get(constant, (0, 14, 1, 0, 0, 0, 0))[1:7]
        gpu.bare_gis[gi] = FakeMig(
            f"MIG-fake-{handle[1]}-{gi}-0", gi, -1, constant, -1, memory, engines, start
        )
        self.writes.append(("create gi", handle[1], gi))
        return ("gi", handle[1], gi)

    def nvmlGpuInstanceCreateComputeInstance(
        self, gi_handle: tuple[Any, ...], ci_profile_id: int
    ) -> tuple[Any, ...]:
        self._enter("nvmlGpuInstanceCreateComputeInstance", gi_handle, ci_profile_id)
        gpu = self.gpus[gi_handle[1]]
        mig = gpu.bare_gis.pop(gi_handle[2], None)
        if mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        mig.ci, mig.ci_constant = 0, ci_profile_id  # CI profile ids equal their constants
        slot = next(n for n in range(gpu.max_migs) if n not in gpu.migs)
        gpu.migs[slot] = mig
        self.writes.append(("create ci", gi_handle[1], gi_handle[2], 0))
        return ("ci", gi_handle[1], gi_handle[2], 0)

    def nvmlComputeInstanceDestroy(self, ci_handle: tuple[Any, ...]) -> int:
        self._enter("nvmlComputeInstanceDestroy", ci_handle)
        gpu = self.gpus[ci_handle[1]]
        for slot, mig in list(gpu.migs.items()):
            if (mig.gi, mig.ci) == (ci_handle[2], ci_handle[3]):
                del gpu.migs[slot]
                gpu.bare_gis[mig.gi] = mig
                self.writes.append(("destroy ci", ci_handle[1], ci_handle[2], ci_handle[3]))
                return int(pynvml.NVML_SUCCESS)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceDestroy(self, gi_handle: tuple[Any, ...]) -> int:
        self._enter("nvmlGpuInstanceDestroy", gi_handle)
        gpu = self.gpus[gi_handle[1]]
        if any(m.gi == gi_handle[2] for m in gpu.migs.values()):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        if gpu.bare_gis.pop(gi_handle[2], None) is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        self.writes.append(("destroy gi", gi_handle[1], gi_handle[2]))
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi_handle: tuple[Any, ...], constant: int, engine: int
    ) -> SimpleNamespace:
        self._enter("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi_handle, constant, engine)
        mig = self._instance(gi_handle[1], gi_handle[2])
        if constant not in CI_SLICES or CI_SLICES[constant] > GI_SLICES[mig.gi_constant]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=constant, sliceCount=CI_SLICES[constant])

    # -- fabric ------------------------------------------------------------------

    def _fill_fabric(self, function: str, handle: tuple[Any, ...], info: Any) -> int:
        self._enter(function, handle)
        fabric = self._gpu(handle).fabric
        if fabric is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        record = info.contents  # the caller's record, passed by pointer as the C API takes it
        ctypes.memmove(record.clusterUuid, fabric.cluster_uuid, len(fabric.cluster_uuid))
        record.cliqueId = fabric.clique_id
        record.state = fabric.state
        record.status = fabric.status
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuFabricInfoV(self, handle: tuple[Any, ...], info: Any) -> int:
        return self._fill_fabric("nvmlDeviceGetGpuFabricInfoV", handle, info)

    def nvmlDeviceGetGpuFabricInfo(self, handle: tuple[Any, ...], info: Any) -> int:
        return self._fill_fabric("nvmlDeviceGetGpuFabricInfo", handle, info)

    # -- topology ----------------------------------------------------------------

    def _link(self, handle: tuple[Any, ...], link: int) -> FakeLink:
        links = self._gpu(handle).links
        if link not in links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: tuple[Any, ...], link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", handle, link)
        return int(self._link(handle, link).active)

    def nvmlDeviceGetNvLinkRemotePciInfo(
        self, handle: tuple[Any, ...], link: int
    ) -> SimpleNamespace:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        return SimpleNamespace(busId=self._link(handle, link).remote_bus)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: tuple[Any, ...], link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        return self._link(handle, link).remote_type

    def nvmlDeviceGetTopologyCommonAncestor(
        self, first: tuple[Any, ...], second: tuple[Any, ...]
    ) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor", first, second)
        key = frozenset({first[1], second[1]})
        if key not in self.topology:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.topology[key]


def two_gpu_node() -> FakeNvml:
    """NVML index 0: A100 with MIG on; 1: a DGX Display; 2: A100 with MIG off.

    GPU 0's MIG devices sit in slots 0 and 2 (slot 1 is empty) and GPU 0 and
    GPU 2 are joined by four active NVLink lanes (a fifth lane is down).
    """
    mig0 = FakeMig(
        "MIG-11111111-0000-4000-8000-000000000001", 1, 0, 2, 2, 19968, (42, 3, 2, 0, 0, 0)
    )
    mig2 = FakeMig(
        "MIG-11111111-0000-4000-8000-000000000002", 13, 0, 7, 0, 4864, (14, 1, 1, 0, 1, 1), 6
    )
    gpu0 = FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-00000000-0000-4000-8000-000000000000",
        minor=0,
        bus_id="00000000:07:00.0",
        memory_mib=40960,
        cc=(8, 0),
        mig_mode=(1, 1),
        migs={0: mig0, 2: mig2},
        links={n: FakeLink(True, "00000000:4E:00.0") for n in range(4)}
        | {4: FakeLink(False, "00000000:4E:00.0")},
    )
    display = FakeGpu(
        name="DGX Display",
        uuid="GPU-dddddddd-0000-4000-8000-000000000000",
        minor=9,
        bus_id="00000000:C2:00.0",
        memory_mib=4096,
        cc=(7, 5),
    )
    gpu2 = FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-22222222-0000-4000-8000-000000000000",
        minor=3,
        bus_id="00000000:4E:00.0",
        memory_mib=40960,
        cc=(8, 0),
        mig_mode=(0, 0),
        links={n: FakeLink(True, "00000000:07:00.0") for n in range(4)},
    )
    fake = FakeNvml([gpu0, display, gpu2])
    fake.topology[frozenset({0, 2})] = pynvml.NVML_TOPOLOGY_NODE
    fake.topology[frozenset({0, 1})] = pynvml.NVML_TOPOLOGY_SYSTEM
    fake.topology[frozenset({1, 2})] = pynvml.NVML_TOPOLOGY_SYSTEM
    return fake
