"""The real device library: everything the plugin learns about GPUs, read through pynvml.

This module and its helpers (`nvml_mig_attributes`, `nvml_mig_placements`,
`nvml_fabric`, which are handed this module's `pynvml`) are the only code that
calls NVML for discovery. They read and never write: no discovery call changes
a GPU setting, so running the plugin cannot disturb workloads. (The writes are
delegated: the compute mode the MPS daemon sets to `nvml_compute_mode`, the
MIG instances DRA's dynamic MIG creates and destroys for its claims to
`nvml_mig_create`.)
Discovery is one pass producing a frozen `Inventory`; no handle escapes.
Errors are sorted at this boundary: NVML failing to start is
`NvmlUnavailable`, any other failing call is a `DiscoveryError` whose
one-line message names the device and the call, except GPU_IS_LOST, which
costs only the lost GPU (`nvml_lost`). Where
the reference plugin tolerates a missing symbol or NOT_SUPPORTED (MIG mode on
pre-Ampere parts, NVLink on PCIe cards, memory info) the field degrades
instead of failing the node. So do the facts only node labels use: MIG device
attributes (SM and engine counts) and NVLink fabric membership are None where
the driver does not offer them.

`init`/`shutdown` are reference counted so several users (discovery, the
health watcher) can share one instance and NVML stays up until the last one
lets go.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
from loguru import logger

from devices.compute_mode import ComputeMode
from devices.errors import DiscoveryError, MigError, NvmlUnavailable
from devices.library import ProbeResult
from devices.migcaps import MIG_MINORS_FILE, MigMinors, read_mig_minors
from devices.migprofile import mig_profile_name
from devices.model import Gpu, Inventory, MigDevice, MigPlacement, P2PLevel
from devices.nvml_compute_mode import get_compute_mode, set_compute_mode
from devices.nvml_fabric import read_fabric
from devices.nvml_lost import fell_off_the_bus, keep_lost, with_lost
from devices.nvml_mig_attributes import read_mig_attributes
from devices.nvml_mig_create import CreatedInstance, create_instance, destroy_instance
from devices.nvml_mig_placements import read_placements
from devices.nvml_naming import brand_name, placement_start
from devices.nvml_probe import NvmlProber
from devices.nvmlload import explain_start_failure, preload_nvml
from devices.pci import SYSFS_ROOT, read_numa_node, sysfs_bus_id
from devices.topology import combine_nvlinks, p2p_level

SKIPPED_PRODUCTS = frozenset({"DGX Display", "NVIDIA DGX Display"})
_MIB = 1 << 20


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fn_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", fn))


def _code(exc: Exception) -> Any:
    return getattr(exc, "value", None)


@dataclasses.dataclass
class _Pass:
    """State of one discovery pass (caches that must not outlive it)."""

    mig_minors: MigMinors | None = None
    gi_profiles: dict[int, dict[int, int]] = dataclasses.field(default_factory=dict)
    ci_profiles: dict[tuple[int, int], dict[int, int]] = dataclasses.field(default_factory=dict)


class NvmlLibrary:
    """DeviceLibrary over the NVIDIA driver via pynvml."""

    def __init__(
        self,
        *,
        driver_root: str = "/",
        sysfs_root: Path = SYSFS_ROOT,
        mig_minors_path: Path = MIG_MINORS_FILE,
    ) -> None:
        self._driver_root = Path(driver_root)
        self._sysfs_root = sysfs_root
        self._mig_minors_path = mig_minors_path
        self._lock = threading.Lock()
        self._refcount = 0
        self._preloaded: ctypes.CDLL | None = None
        self._last: dict[int, Gpu] = {}  # the GPUs of the last inventory, by index
        self._mig_lock = threading.Lock()  # one MIG creation or destruction at a time
        # Looks the module up per call, so a test that swaps `pynvml` here swaps it there too.
        self._prober = NvmlProber(lambda: pynvml)

    @property
    def name(self) -> str:
        return "nvml"

    # -- lifecycle ---------------------------------------------------------

    def init(self) -> None:
        with self._lock:
            if self._refcount == 0:
                if self._preloaded is None:
                    self._preloaded = preload_nvml(self._driver_root)
                try:
                    pynvml.nvmlInit()
                except pynvml.NVMLError as exc:
                    explain_start_failure(exc)
                    raise NvmlUnavailable(f"NVML could not start: {exc}") from exc
            self._refcount += 1

    def shutdown(self) -> None:
        with self._lock:
            if self._refcount == 0:
                return
            self._refcount -= 1
            if self._refcount == 0:
                try:
                    pynvml.nvmlShutdown()
                except pynvml.NVMLError as exc:
                    logger.warning("NVML shutdown failed: {}", exc)

    def probe(self, uuid: str) -> ProbeResult:
        return self._prober.probe(uuid)

    # -- the one write: compute mode, for the MPS daemon (`devices.compute_mode`) --

    def compute_mode(self, uuid: str) -> ComputeMode:
        return get_compute_mode(pynvml, uuid)

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> None:
        set_compute_mode(pynvml, uuid, mode)

    # -- the writes of DRA's dynamic MIG (`nvml_mig_create`) ----------------------

    def create_mig(self, gpu_uuid: str, profile_id: int, start: int) -> MigDevice:
        self._require_init(gpu_uuid, "create")
        with self._mig_lock:
            created = create_instance(pynvml, gpu_uuid, profile_id, start)
            try:
                return self._created_device(gpu_uuid, created)
            except (DiscoveryError, MigError) as exc:
                problem = str(exc)
                if not isinstance(exc, MigError):
                    problem = f"GPU {gpu_uuid}: reading the new MIG device: {exc}"
                try:
                    destroy_instance(pynvml, gpu_uuid, created.gi, created.ci)
                except MigError as undo:
                    raise MigError(f"{problem}; and destroying it again failed: {undo}") from exc
                raise MigError(f"{problem}; the new instance was destroyed again") from exc

    def destroy_mig(self, gpu_uuid: str, gi: int, ci: int) -> None:
        self._require_init(gpu_uuid, "destroy")
        with self._mig_lock:
            destroy_instance(pynvml, gpu_uuid, gi, ci)

    def _require_init(self, gpu_uuid: str, verb: str) -> None:
        with self._lock:
            if self._refcount == 0:
                raise MigError(f"GPU {gpu_uuid}: cannot {verb} a MIG device: nvml not initialised")

    def _created_device(self, gpu_uuid: str, created: CreatedInstance) -> MigDevice:
        """The new instance's MIG device, read the way discovery reads it."""
        where = f"GPU {gpu_uuid}"
        handle = created.gpu
        index = self._call(where, pynvml.nvmlDeviceGetIndex, handle)
        minor = self._call(where, pynvml.nvmlDeviceGetMinorNumber, handle)
        total_bytes = int(self._call(where, pynvml.nvmlDeviceGetMemoryInfo, handle).total)
        for mig in self._mig_devices(index, handle, minor, total_bytes, _Pass()):
            if (mig.gi, mig.ci) == (created.gi, created.ci):
                return mig
        raise MigError(
            f"{where}: GPU instance {created.gi} / compute instance {created.ci} was created "
            "but is not listed as a MIG device"
        )

    # -- call wrappers -------------------------------------------------------

    def _call(self, where: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; any failure becomes a DiscoveryError naming the device and the call."""
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise DiscoveryError(f"{where}: {_fn_name(fn)} failed: {exc}") from exc

    def _optional(
        self, where: str, fn: Callable[..., Any], *args: Any, absent: frozenset[int] | None = None
    ) -> Any:
        """Like `_call`, but None when the driver says the feature does not exist here."""
        if absent is None:
            absent = frozenset(
                {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
            )
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if _code(exc) in absent:
                return None
            raise DiscoveryError(f"{where}: {_fn_name(fn)} failed: {exc}") from exc

    def _link_absent(self) -> frozenset[int]:
        return frozenset(
            {
                pynvml.NVML_ERROR_NOT_SUPPORTED,
                pynvml.NVML_ERROR_INVALID_ARGUMENT,
                pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            }
        )

    # -- discovery -------------------------------------------------------------

    def inventory(self) -> Inventory:
        with self._lock:
            if self._refcount == 0:
                raise DiscoveryError("nvml: inventory requested before init")
        driver = _text(self._call("node", pynvml.nvmlSystemGetDriverVersion))
        cuda = self._cuda_version()
        count = self._call("node", pynvml.nvmlDeviceGetCount)
        state = _Pass()
        handles: list[Any] = []
        gpus: list[Gpu] = []
        lost: dict[int, Gpu] = {}
        for index in range(count):
            try:
                handle = self._call(f"GPU {index}", pynvml.nvmlDeviceGetHandleByIndex, index)
                name = _text(self._call(f"GPU {index}", pynvml.nvmlDeviceGetName, handle))
                if name in SKIPPED_PRODUCTS:
                    continue
                gpu = self._gpu(index, handle, name, state)
            except DiscoveryError as exc:
                if not fell_off_the_bus(exc, pynvml.NVML_ERROR_GPU_IS_LOST):
                    raise
                if (kept := keep_lost(index, exc, self._last)) is not None:
                    lost[index] = kept
                continue
            handles.append(handle)
            gpus.append(gpu)
        found = with_lost(self._with_topology(gpus, handles), lost, self._last)
        self._last = {gpu.index: gpu for gpu in found}
        return Inventory(driver_version=driver, cuda_driver_version=cuda, gpus=found)

    def _cuda_version(self) -> str:
        version = self._optional("node", pynvml.nvmlSystemGetCudaDriverVersion_v2)
        if version is None:
            version = self._call("node", pynvml.nvmlSystemGetCudaDriverVersion)
        return f"{version // 1000}.{version % 1000 // 10}"

    def _gpu(self, index: int, handle: Any, name: str, state: _Pass) -> Gpu:
        where = f"GPU {index}"
        pci = _text(self._call(where, pynvml.nvmlDeviceGetPciInfo, handle).busId)
        where = f"GPU {index} ({pci})"
        uuid = _text(self._call(where, pynvml.nvmlDeviceGetUUID, handle))
        minor = self._call(where, pynvml.nvmlDeviceGetMinorNumber, handle)
        try:
            total_bytes = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        except pynvml.NVMLError as exc:
            logger.warning("{}: ignoring error getting device memory: {}", where, exc)
            total_bytes = 0
        major, cc_minor = self._call(where, pynvml.nvmlDeviceGetCudaComputeCapability, handle)
        try:
            numa = read_numa_node(pci, sysfs_root=self._sysfs_root)
        except DiscoveryError as exc:
            raise DiscoveryError(f"{where}: {exc}") from exc
        mode = self._optional(where, pynvml.nvmlDeviceGetMigMode, handle)
        enabled = mode is not None and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        migs: tuple[MigDevice, ...] = ()
        placements: tuple[MigPlacement, ...] = ()
        if enabled:
            migs = self._mig_devices(index, handle, minor, total_bytes, state)
            placements = read_placements(pynvml, handle, where=where, parent_bytes=total_bytes)
        fabric = read_fabric(pynvml, handle, where=where)
        brand = self._optional(where, pynvml.nvmlDeviceGetBrand, handle)
        return Gpu(
            index=index,
            minor=minor,
            uuid=uuid,
            name=name,
            memory_mib=total_bytes // _MIB,
            pci_bus_id=pci,
            numa_node=numa,
            compute_capability=f"{major}.{cc_minor}",
            mig_capable=mode is not None,
            mig_enabled=enabled,
            mig_devices=migs,
            fabric=fabric,
            brand=None if brand is None else brand_name(int(brand)),
            mig_placements=placements,
        )

    # -- MIG ---------------------------------------------------------------------

    def _mig_devices(
        self, index: int, parent: Any, parent_minor: int, parent_bytes: int, state: _Pass
    ) -> tuple[MigDevice, ...]:
        if state.mig_minors is None:
            try:
                state.mig_minors = read_mig_minors(self._mig_minors_path)
            except OSError as exc:
                raise DiscoveryError(
                    f"error opening MIG minors file {self._mig_minors_path}: {exc}"
                ) from exc
        minors = state.mig_minors
        slots = self._call(f"GPU {index}", pynvml.nvmlDeviceGetMaxMigDeviceCount, parent)
        missing = frozenset({pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT})
        found: list[MigDevice] = []
        for slot in range(slots):
            where = f"MIG device ({index}, {slot})"
            handle = self._optional(
                where, pynvml.nvmlDeviceGetMigDeviceHandleByIndex, parent, slot, absent=missing
            )
            if handle is None:
                continue
            uuid = _text(self._call(where, pynvml.nvmlDeviceGetUUID, handle))
            gi = self._call(where, pynvml.nvmlDeviceGetGpuInstanceId, handle)
            ci = self._call(where, pynvml.nvmlDeviceGetComputeInstanceId, handle)
            attributes, memory_mib = read_mig_attributes(pynvml, handle, where=where)
            profile, instance = self._mig_profile(
                where, index, parent, gi, ci, memory_mib, parent_bytes, state
            )
            found.append(
                MigDevice(
                    uuid=uuid,
                    parent_index=index,
                    slot=slot,
                    gi=gi,
                    ci=ci,
                    profile=profile,
                    memory_mib=memory_mib,
                    gi_cap_minor=minors.gi_minor(parent_minor, gi),
                    ci_cap_minor=minors.ci_minor(parent_minor, gi, ci),
                    attributes=attributes,
                    profile_id=int(instance.profileId),
                    placement_start=placement_start(instance),
                )
            )
        return tuple(found)

    def _mig_profile(
        self,
        where: str,
        index: int,
        parent: Any,
        gi: int,
        ci: int,
        memory_mib: int,
        parent_bytes: int,
        state: _Pass,
    ) -> tuple[str, Any]:
        """Profile name the way the reference derives it (GI and CI profile constants +
        memory), and the GPU instance's info (profile id, placement)."""
        gi_handle = self._call(where, pynvml.nvmlDeviceGetGpuInstanceById, parent, gi)
        instance = self._call(where, pynvml.nvmlGpuInstanceGetInfo, gi_handle)
        gi_profile_id = instance.profileId
        ci_handle = self._call(where, pynvml.nvmlGpuInstanceGetComputeInstanceById, gi_handle, ci)
        ci_profile_id = self._call(where, pynvml.nvmlComputeInstanceGetInfo, ci_handle).profileId
        if index not in state.gi_profiles:
            state.gi_profiles[index] = self._profile_table(
                where,
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                parent,
                [(p,) for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)],
            )
        key = (index, gi_profile_id)
        if key not in state.ci_profiles:
            state.ci_profiles[key] = self._profile_table(
                where,
                pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                gi_handle,
                [
                    (p, e)
                    for p in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
                    for e in range(pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
                ],
            )
        gi_profile = state.gi_profiles[index].get(gi_profile_id)
        ci_profile = state.ci_profiles[key].get(ci_profile_id)
        if gi_profile is None or ci_profile is None:
            raise DiscoveryError(
                f"{where}: error getting MIG profile: GPU instance profile id {gi_profile_id} / "
                f"compute instance profile id {ci_profile_id} not offered by the GPU"
            )
        if parent_bytes <= 0:
            raise DiscoveryError(f"{where}: error getting MIG profile: parent memory unknown")
        try:
            name = mig_profile_name(
                gi_profile=gi_profile,
                ci_profile=ci_profile,
                memory_mib=memory_mib,
                parent_total_bytes=parent_bytes,
            )
            return name, instance
        except DiscoveryError as exc:
            raise DiscoveryError(f"{where}: error getting MIG profile: {exc}") from exc

    def _profile_table(
        self, where: str, query: Callable[..., Any], owner: Any, arguments: list[tuple[int, ...]]
    ) -> dict[int, int]:
        """Profile id -> NVML profile constant, over the constants `owner` offers.

        The first constant reporting an id wins, as in the reference's nested loops.
        """
        table: dict[int, int] = {}
        for args in arguments:
            info = self._optional(where, query, owner, *args, absent=self._link_absent())
            if info is not None:
                table.setdefault(int(info.id), args[0])
        return table

    # -- topology --------------------------------------------------------------

    def _with_topology(self, gpus: list[Gpu], handles: list[Any]) -> list[Gpu]:
        position = {sysfs_bus_id(gpu.pci_bus_id): pos for pos, gpu in enumerate(gpus)}
        direct: list[dict[int, int]] = []
        switched: list[dict[str, int]] = []
        for pos, (gpu, handle) in enumerate(zip(gpus, handles, strict=True)):
            to_gpus, to_switches = self._nvlink_lanes(gpu, handle, position, pos)
            direct.append(to_gpus)
            switched.append(to_switches)
        lanes = combine_nvlinks(direct, switched)
        levels: list[dict[int, P2PLevel]] = [{} for _ in gpus]
        for a in range(len(gpus)):
            for b in range(a + 1, len(gpus)):
                where = f"GPU {gpus[a].index} and GPU {gpus[b].index}"
                value = self._optional(
                    where, pynvml.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b]
                )
                if value is None:
                    continue
                try:
                    level = p2p_level(int(value))
                except ValueError as exc:
                    raise DiscoveryError(f"{where}: {exc}") from exc
                levels[a][gpus[b].index] = level
                levels[b][gpus[a].index] = level
        return [
            dataclasses.replace(
                gpu,
                nvlinks={gpus[peer].index: n for peer, n in lanes[pos].items()},
                p2p=levels[pos],
            )
            for pos, gpu in enumerate(gpus)
        ]

    def _nvlink_lanes(
        self, gpu: Gpu, handle: Any, position: dict[str, int], me: int
    ) -> tuple[dict[int, int], dict[str, int]]:
        """Active lanes of one GPU: to other GPUs by position, to NVSwitches by bus id."""
        where = f"GPU {gpu.index} ({gpu.pci_bus_id})"
        absent = self._link_absent()
        to_gpus: dict[int, int] = {}
        to_switches: dict[str, int] = {}
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            active = self._optional(
                where, pynvml.nvmlDeviceGetNvLinkState, handle, link, absent=absent
            )
            if not active:
                continue
            remote = self._optional(
                where, pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link, absent=absent
            )
            if remote is None:
                continue
            bus = sysfs_bus_id(_text(remote.busId))
            peer = position.get(bus)
            if peer is not None:
                if peer != me:
                    to_gpus[peer] = to_gpus.get(peer, 0) + 1
                continue
            kind = self._optional(
                where, pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link, absent=absent
            )
            if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                to_switches[bus] = to_switches.get(bus, 0) + 1
        return to_gpus, to_switches
