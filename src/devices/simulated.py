"""A device library that reads the node from a YAML profile instead of a driver.

This is what the demo, the tests and local development run on: the rest of
the plugin cannot tell it from NVML. A profile is either a name
(`config/nodes/<name>.yaml`, e.g. `dgx-a100`) or a path to the user's own
file. Its schema and strict validation live in `profile_schema`; this module
turns a valid profile into the `Inventory` a real node would report, and
implements `DeviceLibrary` on top.

The file is re-read on every `inventory()` call, so a test can edit it to
simulate hardware changing under a running plugin (a MIG reconfiguration, a
GPU disappearing, the driver breaking via `initError`).

MIG attributes default to what NVML reports for the profiles of an
A100-SXM4-40GB, an H100 80GB HBM3 and an RTX PRO 6000 Blackwell Server
Edition (the parts the shipped profiles use);
other parts report none unless the profile states them. The slice counts come
from the profile name.

A link stated on one GPU only is mirrored onto the peer.

Health faults are not part of the profile: they are injected while the plugin
runs (`simulated_events`, into `simulated_faults.DeviceFaults`) and only
`probe` sees them, so a lost GPU never makes discovery of the whole node fail.

The compute mode (`devices.compute_mode`, set by the MPS daemon) is recorded
per simulated GPU, starting from the profile's ``computeMode``, and each
change is logged; a GPU with ``computeModeError`` refuses changes with that
text, as a driver refuses an unprivileged caller.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from loguru import logger

from devices.compute_mode import ComputeMode, ComputeModeError
from devices.errors import DiscoveryError, NvmlUnavailable, ProfileError
from devices.library import ProbeResult
from devices.migcaps import standard_ci_minor, standard_gi_minor
from devices.migprofile import profile_slices
from devices.model import (
    Fabric,
    Gpu,
    Inventory,
    MigAttributes,
    MigDevice,
    P2PLevel,
    VgpuDevice,
)
from devices.profile_schema import MigDeviceSpec, NodeProfile, load_profile
from devices.simulated_faults import DeviceFaults
from devices.simulated_parts import known_brand, known_gi_profile_id

# Imported from here by the CLI, the health watcher, tests and benchmarks.
__all__ = [
    "PROFILES_DIR",
    "NodeProfile",
    "SimulatedLibrary",
    "available_profiles",
    "build_inventory",
    "load_profile",
]

PROFILES_DIR = Path(__file__).resolve().parents[2] / "config" / "nodes"

# (multiprocessors, copy engines, decoders, encoders, jpegs, ofas) by parent and profile,
# as `nvidia-smi mig -lgip` lists them.
_KNOWN_MIG_ATTRIBUTES: dict[str, dict[str, tuple[int, int, int, int, int, int]]] = {
    "NVIDIA A100-SXM4-40GB": {
        "1g.5gb": (14, 1, 0, 0, 0, 0),
        "1g.5gb+me": (14, 1, 1, 0, 1, 1),
        "1g.10gb": (14, 1, 1, 0, 0, 0),
        "2g.10gb": (28, 2, 1, 0, 0, 0),
        "3g.20gb": (42, 3, 2, 0, 0, 0),
        "4g.20gb": (56, 4, 2, 0, 0, 0),
        "7g.40gb": (98, 7, 5, 0, 1, 1),
    },
    "NVIDIA H100 80GB HBM3": {
        "1g.10gb": (16, 1, 1, 0, 1, 0),
        "1g.10gb+me": (16, 1, 1, 0, 1, 1),
        "1g.20gb": (26, 1, 1, 0, 1, 0),
        "2g.20gb": (32, 2, 2, 0, 2, 0),
        "3g.40gb": (60, 3, 3, 0, 3, 0),
        "4g.40gb": (64, 4, 4, 0, 4, 0),
        "7g.80gb": (132, 8, 7, 0, 7, 1),
    },
    # Four slices; `+me.all` takes every media engine, `-me` none, `+gfx` adds graphics.
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": {
        "1g.24gb": (46, 1, 1, 1, 1, 0),
        "1g.24gb+me": (46, 1, 1, 1, 1, 1),
        "1g.24gb+gfx": (46, 1, 1, 1, 1, 0),
        "1g.24gb+me.all": (46, 1, 4, 4, 4, 1),
        "1g.24gb-me": (46, 1, 0, 0, 0, 0),
        "2g.48gb": (94, 2, 2, 2, 2, 0),
        "2g.48gb+gfx": (94, 2, 2, 2, 2, 0),
        "2g.48gb+me.all": (94, 2, 4, 4, 4, 1),
        "2g.48gb-me": (94, 2, 0, 0, 0, 0),
        "4g.96gb": (188, 4, 4, 4, 4, 1),
        "4g.96gb+gfx": (188, 4, 4, 4, 4, 1),
    },
}


def _mirrored(tables: list[dict[int, Any]]) -> list[dict[int, Any]]:
    """Fill in the reverse direction where a profile states a link only once."""
    result = [dict(table) for table in tables]
    for i, table in enumerate(tables):
        for peer, value in table.items():
            result[peer].setdefault(i, value)
    return [dict(sorted(table.items())) for table in result]


def _mig_attributes(parent: str, spec: MigDeviceSpec) -> MigAttributes | None:
    stated = spec.attributes
    if stated is not None:
        numbers = (
            stated.multiprocessors,
            stated.copy_engines,
            stated.decoders,
            stated.encoders,
            stated.jpegs,
            stated.ofas,
        )
    else:
        known = _KNOWN_MIG_ATTRIBUTES.get(parent, {}).get(spec.profile)
        if known is None:
            return None
        numbers = known
    ci_slices, gi_slices = profile_slices(spec.profile)
    sms, copy_engines, decoders, encoders, jpegs, ofas = numbers
    return MigAttributes(
        multiprocessors=sms,
        gi_slices=gi_slices,
        ci_slices=ci_slices,
        copy_engines=copy_engines,
        decoders=decoders,
        encoders=encoders,
        jpegs=jpegs,
        ofas=ofas,
    )


def build_inventory(profile: NodeProfile) -> Inventory:
    """The Inventory a real node matching the profile would report."""
    nvlinks = _mirrored([dict(g.nvlinks) for g in profile.gpus])
    p2p = _mirrored([dict(g.p2p) for g in profile.gpus])
    gpus: list[Gpu] = []
    for i, spec in enumerate(profile.gpus):
        minor = i if spec.minor is None else spec.minor
        migs = tuple(
            MigDevice(
                uuid=mig.uuid,
                parent_index=i,
                slot=j if mig.slot is None else mig.slot,
                gi=mig.gi,
                ci=mig.ci,
                profile=mig.profile,
                memory_mib=mig.memory_mib,
                gi_cap_minor=standard_gi_minor(minor, mig.gi),
                ci_cap_minor=standard_ci_minor(minor, mig.gi, mig.ci),
                attributes=_mig_attributes(spec.name, mig),
                profile_id=(
                    known_gi_profile_id(spec.name, mig.profile)
                    if mig.profile_id is None
                    else mig.profile_id
                ),
                placement_start=mig.placement_start,
            )
            for j, mig in enumerate(spec.mig_devices)
        )
        gpus.append(
            Gpu(
                index=i,
                minor=minor,
                uuid=spec.uuid,
                name=spec.name,
                memory_mib=spec.memory_mib,
                pci_bus_id=spec.pci_bus_id,
                numa_node=spec.numa_node,
                compute_capability=spec.compute_capability,
                mig_capable=spec.mig_enabled if spec.mig_capable is None else spec.mig_capable,
                mig_enabled=spec.mig_enabled,
                mig_devices=migs,
                nvlinks=nvlinks[i],
                p2p={peer: P2PLevel(level) for peer, level in p2p[i].items()},
                pci_class=spec.pci_class,
                fabric=(
                    Fabric(cluster_uuid=spec.fabric.cluster_uuid, clique_id=spec.fabric.clique_id)
                    if spec.fabric is not None
                    else None
                ),
                brand=known_brand(spec.name) if spec.brand is None else spec.brand,
            )
        )
    # The simulated node is the whole node: its PCI bus holds exactly the GPUs listed.
    vgpus = tuple(
        VgpuDevice(
            pci_bus_id=spec.pci_bus_id,
            host_driver_version=spec.vgpu.host_driver_version,
            host_driver_branch=spec.vgpu.host_driver_branch,
        )
        for spec in profile.gpus
        if spec.vgpu is not None
    )
    return Inventory(
        driver_version=profile.driver_version,
        cuda_driver_version=profile.cuda_driver_version,
        gpus=tuple(gpus),
        machine_type=profile.machine_type,
        vgpu_devices=vgpus,
    )


def available_profiles() -> list[str]:
    """Names of the profiles shipped in `config/nodes/`."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


class SimulatedLibrary:
    """DeviceLibrary backed by a node profile file."""

    def __init__(self, path: Path, *, label: str | None = None) -> None:
        self._path = path
        self._label = label if label is not None else str(path)
        self._initialized = False
        self.faults = DeviceFaults()
        self._modes_lock = threading.Lock()
        self._compute_modes: dict[str, ComputeMode] = {}
        self._compute_mode_errors: dict[str, str | None] = {}

    @classmethod
    def from_argument(cls, mock: str) -> SimulatedLibrary:
        """A shipped profile when `mock` names one, otherwise `mock` is a file path."""
        shipped = PROFILES_DIR / f"{mock}.yaml"
        if "/" not in mock and shipped.is_file():
            return cls(shipped, label=mock)
        return cls(Path(mock))

    @property
    def name(self) -> str:
        return f"simulated:{self._label}"

    @property
    def path(self) -> Path:
        return self._path

    def init(self) -> None:
        self._load()
        self._initialized = True

    def shutdown(self) -> None:
        self._initialized = False

    def inventory(self) -> Inventory:
        if not self._initialized:
            raise DiscoveryError(f"{self.name}: inventory requested before init")
        return self._load()

    def probe(self, uuid: str) -> ProbeResult:
        if not self._initialized:
            return ProbeResult(ok=False, detail=f"{self.name}: not initialised")
        return self.faults.probe(uuid)

    @property
    def compute_modes(self) -> dict[str, ComputeMode]:
        """The compute mode of every simulated GPU, by UUID."""
        with self._modes_lock:
            return dict(self._compute_modes)

    def compute_mode(self, uuid: str) -> ComputeMode:
        with self._modes_lock:
            if uuid not in self._compute_modes:
                raise ComputeModeError(f"{uuid}: no such GPU on {self.name}")
            return self._compute_modes[uuid]

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> None:
        with self._modes_lock:
            if not self._initialized or uuid not in self._compute_modes:
                raise ComputeModeError(f"{uuid}: no such GPU on {self.name}")
            refused = self._compute_mode_errors.get(uuid)
            if refused is not None:
                raise ComputeModeError(f"{uuid}: cannot set compute mode {mode}: {refused}")
            before, self._compute_modes[uuid] = self._compute_modes[uuid], mode
        if before is not mode:
            logger.info("simulated GPU {}: compute mode {} -> {}", uuid, before, mode)

    def _record_modes(self, profile: NodeProfile) -> None:
        with self._modes_lock:
            # A mode set while running survives a re-read, like on a real GPU.
            self._compute_modes = {
                gpu.uuid: self._compute_modes.get(gpu.uuid, ComputeMode(gpu.compute_mode))
                for gpu in profile.gpus
            }
            self._compute_mode_errors = {gpu.uuid: gpu.compute_mode_error for gpu in profile.gpus}

    def _load(self) -> Inventory:
        if not self._path.exists() and "/" not in str(self._label) and not self._path.suffix:
            known = ", ".join(available_profiles()) or "none"
            raise ProfileError(
                f"{self._label}: no such node profile (shipped: {known}) and no such file"
            )
        profile = load_profile(self._path)
        if profile.init_error is not None:
            raise NvmlUnavailable(profile.init_error)
        inventory = build_inventory(profile)
        self.faults.bind(inventory)
        self.faults.set_unwatchable(frozenset(g.uuid for g in profile.gpus if not g.health_events))
        self._record_modes(profile)
        return inventory
