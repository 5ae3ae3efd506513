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
Edition (the parts the shipped profiles use, `simulated_parts`);
other parts report none unless the profile states them. The slice counts come
from the profile name.

DRA's dynamic MIG (`create_mig`, `destroy_mig`) is played by
`simulated_mig`: a GPU in MIG mode lists the placements of its part's
GPU-instance profiles (built in for the A100-SXM4-40GB and the H100 80GB
HBM3, or the profile's `migPlacements`), and the instances created on it are
reported like the MIG devices the profile declares. They are kept in the
state file the library is given (`MOCK_NVML_STATE`, read by
`backends.open_library`), so they survive a restart as on a real GPU, or in
memory without one. A GPU's `migFaults` make chosen creations fail at the
GPU-instance or the compute-instance step (the backend then destroys the GPU
instance it made) and chosen destructions fail, for the callers' rollback
paths.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from devices.compute_mode import ComputeMode, ComputeModeError
from devices.errors import DiscoveryError, MigError, NvmlUnavailable, ProfileError
from devices.library import ProbeResult
from devices.migcaps import standard_ci_minor, standard_gi_minor
from devices.model import (
    Fabric,
    Gpu,
    Inventory,
    MigAttributes,
    MigDevice,
    MigPlacement,
    P2PLevel,
    VgpuDevice,
)
from devices.profile_schema import MigDeviceSpec, NodeProfile, load_profile
from devices.simulated_faults import DeviceFaults
from devices.simulated_mig import (
    GpuRecord,
    Instance,
    MigStateStore,
    State,
    created_devices,
    gi_profiles_of,
    mig_attributes,
    placements_of,
    plan_create,
    prune,
    stated_numbers,
)
from devices.simulated_parts import known_brand, known_gi_profile_id, known_mig_attributes

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


def _mirrored(tables: list[dict[int, Any]]) -> list[dict[int, Any]]:
    """Fill in the reverse direction where a profile states a link only once."""
    result = [dict(table) for table in tables]
    for i, table in enumerate(tables):
        for peer, value in table.items():
            result[peer].setdefault(i, value)
    return [dict(sorted(table.items())) for table in result]


def _mig_attributes(parent: str, spec: MigDeviceSpec) -> MigAttributes | None:
    stated = spec.attributes
    numbers = (
        stated_numbers(stated) if stated is not None else known_mig_attributes(parent, spec.profile)
    )
    return None if numbers is None else mig_attributes(spec.profile, numbers)


def build_inventory(
    profile: NodeProfile, *, mig_instances: Mapping[str, Sequence[Instance]] | None = None
) -> Inventory:
    """The Inventory a real node matching the profile would report.

    `mig_instances` are the MIG instances `create_mig` made, by GPU UUID
    (`simulated_mig`); a GPU in MIG mode reports them after its declared MIG
    devices, and its placements.
    """
    nvlinks = _mirrored([dict(g.nvlinks) for g in profile.gpus])
    p2p = _mirrored([dict(g.p2p) for g in profile.gpus])
    created = mig_instances or {}
    gpus: list[Gpu] = []
    for i, spec in enumerate(profile.gpus):
        minor = i if spec.minor is None else spec.minor
        migs: tuple[MigDevice, ...] = tuple(
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
        placements: tuple[MigPlacement, ...] = ()
        if spec.mig_enabled:
            placements = placements_of(gi_profiles_of(spec))
            migs += created_devices(
                i, minor, spec.uuid, placements, migs, created.get(spec.uuid, ())
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
                mig_placements=placements,
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
    """DeviceLibrary backed by a node profile file.

    `state` is where the MIG instances `create_mig` makes are kept across
    restarts (`simulated_mig.MigStateStore`); None keeps them in memory.
    """

    def __init__(self, path: Path, *, label: str | None = None, state: Path | None = None) -> None:
        self._path = path
        self._label = label if label is not None else str(path)
        self._initialized = False
        self.faults = DeviceFaults()
        self._modes_lock = threading.Lock()
        self._compute_modes: dict[str, ComputeMode] = {}
        self._compute_mode_errors: dict[str, str | None] = {}
        self._mig_lock = threading.Lock()
        self._mig_state = MigStateStore(state)

    @classmethod
    def from_argument(cls, mock: str, *, state: Path | None = None) -> SimulatedLibrary:
        """A shipped profile when `mock` names one, otherwise `mock` is a file path."""
        shipped = PROFILES_DIR / f"{mock}.yaml"
        if "/" not in mock and shipped.is_file():
            return cls(shipped, label=mock, state=state)
        return cls(Path(mock), state=state)

    @property
    def state_path(self) -> Path | None:
        """The file the created MIG instances are kept in; None: in memory."""
        return self._mig_state.path

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
        state = self._mig_state.load()
        inventory = build_inventory(profile, mig_instances=_instances(state))
        self.faults.bind(inventory)
        self.faults.set_unwatchable(frozenset(g.uuid for g in profile.gpus if not g.health_events))
        self._record_modes(profile)
        return inventory

    # -- dynamic MIG -------------------------------------------------------------------

    def create_mig(self, gpu_uuid: str, profile_id: int, start: int) -> MigDevice:
        with self._mig_lock:
            profile, state, inventory = self._mig_inputs(gpu_uuid, "create")
            index = _gpu_position(profile, gpu_uuid)
            if index is None:
                raise MigError(f"GPU {gpu_uuid}: no such GPU on {self.name}")
            spec = profile.gpus[index]
            instance, placement = plan_create(
                inventory.gpus[index], gi_profiles_of(spec), profile_id, start
            )
            state = prune(state, {gpu.uuid: gpu for gpu in inventory.gpus})
            record = state.setdefault(gpu_uuid, GpuRecord())
            record.creates += 1
            attempt = record.creates
            what = f"{placement.profile} (profile id {profile_id}) at memory slice {start}"
            faults = spec.mig_faults
            if faults is not None and attempt in faults.gpu_instance:
                self._mig_state.save(state)
                raise MigError(
                    f"GPU {gpu_uuid}: cannot create a GPU instance of {what}: injected fault "
                    f"(create {attempt}): Insufficient Resources"
                )
            if faults is not None and attempt in faults.compute_instance:
                # The GPU instance was made; its compute instance is refused, so it is
                # destroyed again before the error is raised: nothing is left half made.
                logger.info(
                    "simulated GPU {}: GPU instance {} ({}) made, its compute instance refused "
                    "(injected fault, create {}): GPU instance destroyed again",
                    gpu_uuid,
                    instance.gi,
                    what,
                    attempt,
                )
                self._mig_state.save(state)
                raise MigError(
                    f"GPU {gpu_uuid}: created GPU instance {instance.gi} ({what}) but not its "
                    f"compute instance: injected fault (create {attempt}); the GPU instance "
                    "was destroyed again"
                )
            record.instances.append(instance)
            self._mig_state.save(state)
            inventory = build_inventory(profile, mig_instances=_instances(state))
            self.faults.bind(inventory)
            logger.info(
                "simulated GPU {}: created MIG device {} (GPU instance {}, compute instance {})",
                gpu_uuid,
                placement.profile,
                instance.gi,
                instance.ci,
            )
            for mig in inventory.gpus[index].mig_devices:
                if (mig.gi, mig.ci) == (instance.gi, instance.ci):
                    return mig
            raise AssertionError(f"created instance {instance} is not reported")  # pragma: no cover

    def destroy_mig(self, gpu_uuid: str, gi: int, ci: int) -> None:
        with self._mig_lock:
            profile, state, inventory = self._mig_inputs(gpu_uuid, "destroy")
            state = prune(state, {gpu.uuid: gpu for gpu in inventory.gpus})
            record = state.get(gpu_uuid)
            index = _gpu_position(profile, gpu_uuid)
            found = (
                None if record is None else next((i for i in record.instances if i.gi == gi), None)
            )
            if record is None or found is None or index is None:
                declared = index is not None and any(
                    (m.gi, m.ci) == (gi, ci) for m in profile.gpus[index].mig_devices
                )
                if declared:
                    raise MigError(
                        f"GPU {gpu_uuid}: GPU instance {gi} / compute instance {ci} is declared "
                        f"by the node profile {self._path}; remove it there"
                    )
                logger.info(
                    "simulated GPU {}: GPU instance {} / compute instance {} is already gone",
                    gpu_uuid,
                    gi,
                    ci,
                )
                return
            if found.ci != ci:
                raise MigError(
                    f"GPU {gpu_uuid}: cannot destroy GPU instance {gi}: its compute instance "
                    f"{found.ci} is still in it (In use by another client)"
                )
            record.destroys += 1
            faults = profile.gpus[index].mig_faults
            if faults is not None and record.destroys in faults.destroy:
                self._mig_state.save(state)
                raise MigError(
                    f"GPU {gpu_uuid}: cannot destroy compute instance {ci} of GPU instance {gi}: "
                    f"injected fault (destroy {record.destroys}): In use by another client"
                )
            record.instances.remove(found)
            self._mig_state.save(state)
            self.faults.bind(build_inventory(profile, mig_instances=_instances(state)))
            logger.info(
                "simulated GPU {}: destroyed GPU instance {} / compute instance {}",
                gpu_uuid,
                gi,
                ci,
            )

    def _mig_inputs(self, gpu_uuid: str, verb: str) -> tuple[NodeProfile, State, Inventory]:
        """The profile, the MIG state and the inventory they make, read afresh.

        Raises:
            MigError: not initialised, or the profile or the state cannot be read.
        """
        if not self._initialized:
            raise MigError(
                f"GPU {gpu_uuid}: cannot {verb} a MIG device: {self.name} is not initialised"
            )
        try:
            profile = load_profile(self._path)
            if profile.init_error is not None:
                raise NvmlUnavailable(profile.init_error)
            state = self._mig_state.load()
        except (ProfileError, NvmlUnavailable) as exc:
            raise MigError(f"GPU {gpu_uuid}: cannot {verb} a MIG device: {exc}") from exc
        return profile, state, build_inventory(profile, mig_instances=_instances(state))


def _instances(state: State) -> dict[str, list[Instance]]:
    return {gpu_uuid: record.instances for gpu_uuid, record in state.items()}


def _gpu_position(profile: NodeProfile, gpu_uuid: str) -> int | None:
    return next((i for i, gpu in enumerate(profile.gpus) if gpu.uuid == gpu_uuid), None)
