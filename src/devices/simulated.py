"""A device library that reads the node from a YAML profile instead of a driver.

This is what the demo, the tests and local development run on: the rest of
the plugin cannot tell it from NVML. A profile is either a name
(`config/nodes/<name>.yaml`, e.g. `dgx-a100`) or a path to the user's own
file. The file is validated strictly, because a silently ignored typo in a
test fixture makes a test pass for the wrong reason: unknown or duplicate keys
are errors, numbers must be numbers and versions must be quoted strings, and
every problem is reported as one line `<file>: <key path>: <problem>`.

The file is re-read on every `inventory()` call, so a test can edit it to
simulate hardware changing under a running plugin (a MIG reconfiguration, a
GPU disappearing, the driver breaking via `initError`).

Schema (camelCase; `?` marks optional keys):

    driverVersion: "550.54.15"        cudaDriverVersion: "12.4"
    machineType?: str                 initError?: str  (init() fails with this text)
    gpus:                             (GPU index = position in the list)
      - uuid: GPU-...   name: str   memoryMiB: int   pciBusID: "00000000:07:00.0"
        numaNode: int | null          computeCapability: "8.0"
        minor?: int (= index)         migCapable?: bool (= migEnabled)   migEnabled?: false
        migDevices?: [{uuid: MIG-..., profile: "3g.20gb", memoryMiB, gi, ci, slot? (= position),
                       attributes?: {multiprocessors, copyEngines, decoders, encoders,
                                     jpegs, ofas}}]
        nvlinks?: {peer index: lanes}  p2p?: {peer index: INTERNAL|SINGLE|MULTIPLE|
                                                HOSTBRIDGE|NODE|SYSTEM}
        pciClass?: int (= 0x030200, a 3D controller; 0x030000 is a VGA controller)
        fabric?: {clusterUUID: str, cliqueID: int}   (an NVLink-fabric-attached GPU)
        vgpu?: {hostDriverVersion: str, hostDriverBranch: str}   (a vGPU of a VM guest)

MIG attributes default to what NVML reports for the profiles of an
A100-SXM4-40GB and an H100 80GB HBM3 (the parts the shipped profiles use);
other parts report none unless the profile states them. The slice counts come
from the profile name.

A link stated on one GPU only is mirrored onto the peer; stating it on both
with different values is an error.

Health faults are not part of the profile: they are injected while the plugin
runs (`simulated_events`) and only `probe` sees them, so a lost GPU never
makes discovery of the whole node fail.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from devices.errors import DiscoveryError, NvmlUnavailable, ProfileError
from devices.library import ProbeResult
from devices.migcaps import standard_ci_minor, standard_gi_minor
from devices.migprofile import is_profile_name, profile_slices
from devices.model import (
    Fabric,
    Gpu,
    Inventory,
    MigAttributes,
    MigDevice,
    P2PLevel,
    VgpuDevice,
)
from devices.pci import sysfs_bus_id
from devices.simulated_events import DeviceFaults

PROFILES_DIR = Path(__file__).resolve().parents[2] / "config" / "nodes"

_VERSION = re.compile(r"^\d+\.\d+$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_MAX_REPORTED = 5
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_COMPUTE_CLASS = 0x030200

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
}

P2PName = Literal["INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM"]


def _dotted_version(value: Any, example: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f'must be a quoted string such as "{example}" (got {value!r})')
    if not _VERSION.fullmatch(value):
        raise ValueError(f'must look like "{example}" (got {value!r})')
    return value


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MigAttributesSpec(_Schema):
    multiprocessors: int = Field(gt=0)
    copy_engines: int = Field(alias="copyEngines", ge=0)
    decoders: int = Field(ge=0)
    encoders: int = Field(ge=0)
    jpegs: int = Field(ge=0)
    ofas: int = Field(ge=0)


class FabricSpec(_Schema):
    cluster_uuid: str = Field(alias="clusterUUID")
    clique_id: int = Field(alias="cliqueID", ge=0, lt=1 << 32)

    @field_validator("cluster_uuid")
    @classmethod
    def _canonical(cls, value: str) -> str:
        if not _UUID.fullmatch(value) or value == "00000000-0000-0000-0000-000000000000":
            raise ValueError(f"must be a non-zero lowercase 8-4-4-4-12 UUID (got {value!r})")
        return value


class VgpuSpec(_Schema):
    host_driver_version: str = Field(alias="hostDriverVersion", min_length=1)
    host_driver_branch: str = Field(alias="hostDriverBranch", min_length=1)


class MigDeviceSpec(_Schema):
    uuid: str
    profile: str
    memory_mib: int = Field(alias="memoryMiB", gt=0)
    gi: int = Field(ge=0)
    ci: int = Field(ge=0)
    slot: int | None = Field(default=None, ge=0)
    attributes: MigAttributesSpec | None = None

    @field_validator("uuid")
    @classmethod
    def _mig_uuid(cls, value: str) -> str:
        if not value.startswith("MIG-") or len(value) <= len("MIG-"):
            raise ValueError(f"must start with 'MIG-' (got {value!r})")
        return value

    @field_validator("profile")
    @classmethod
    def _profile(cls, value: str) -> str:
        if not is_profile_name(value):
            raise ValueError(f"not a MIG profile name such as '3g.20gb' (got {value!r})")
        return value


class GpuSpec(_Schema):
    uuid: str
    name: str = Field(min_length=1)
    memory_mib: int = Field(alias="memoryMiB", gt=0)
    pci_bus_id: str = Field(alias="pciBusID")
    numa_node: int | None = Field(alias="numaNode", ge=0)
    compute_capability: str = Field(alias="computeCapability")
    minor: int | None = Field(default=None, ge=0)
    mig_capable: bool | None = Field(default=None, alias="migCapable")
    mig_enabled: bool = Field(default=False, alias="migEnabled")
    mig_devices: list[MigDeviceSpec] = Field(default_factory=list, alias="migDevices")
    nvlinks: dict[int, int] = Field(default_factory=dict)
    p2p: dict[int, P2PName] = Field(default_factory=dict)
    pci_class: int = Field(default=_COMPUTE_CLASS, alias="pciClass", ge=0, le=0xFFFFFF)
    fabric: FabricSpec | None = None
    vgpu: VgpuSpec | None = None

    @field_validator("uuid")
    @classmethod
    def _gpu_uuid(cls, value: str) -> str:
        if not value.startswith("GPU-") or len(value) <= len("GPU-"):
            raise ValueError(f"must start with 'GPU-' (got {value!r})")
        return value

    @field_validator("pci_bus_id")
    @classmethod
    def _bus_id(cls, value: str) -> str:
        if not _BUS_ID.fullmatch(value):
            raise ValueError(f"must look like '00000000:07:00.0' (got {value!r})")
        return value

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _cc(cls, value: Any) -> str:
        return _dotted_version(value, "8.0")

    @field_validator("nvlinks")
    @classmethod
    def _lanes(cls, value: dict[int, int]) -> dict[int, int]:
        for peer, lanes in value.items():
            if lanes <= 0:
                raise ValueError(f"lane count to GPU {peer} must be positive (got {lanes})")
        return value


class NodeProfile(_Schema):
    driver_version: str = Field(alias="driverVersion", min_length=1)
    cuda_driver_version: str = Field(alias="cudaDriverVersion")
    machine_type: str | None = Field(default=None, alias="machineType")
    init_error: str | None = Field(default=None, alias="initError", min_length=1)
    gpus: list[GpuSpec] = Field(default_factory=list)

    @field_validator("cuda_driver_version", mode="before")
    @classmethod
    def _cuda(cls, value: Any) -> str:
        return _dotted_version(value, "12.4")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (the last would win)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Hashable, Any]:
    loader.flatten_mapping(node)
    seen: set[Hashable] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _key_path(loc: Sequence[int | str]) -> str:
    """`gpus[0].nvlinks[x] (key)` from pydantic's ('gpus', 0, 'nvlinks', 'x', '[key]')."""
    path = ""
    for position, part in enumerate(loc):
        if part == "[key]":
            path += " (key)"
        elif isinstance(part, int) or loc[position + 1 : position + 2] == ("[key]",):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def _one_line(file: Path, problems: Sequence[tuple[str, str]]) -> ProfileError:
    shown = [f"{path}: {problem}" for path, problem in problems[:_MAX_REPORTED]]
    more = len(problems) - _MAX_REPORTED
    if more > 0:
        shown.append(f"and {more} more")
    return ProfileError(f"{file}: " + "; ".join(shown))


def _validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for error in exc.errors():
        if error["type"] == "extra_forbidden":
            problem = "unknown key"
        elif error["type"] == "missing":
            problem = "required key is missing"
        else:
            problem = error["msg"].removeprefix("Value error, ")
        problems.append((_key_path(error["loc"]), problem.replace("\n", " ")))
    return problems


def _cross_check(profile: NodeProfile) -> list[tuple[str, str]]:
    """Rules that span several fields or GPUs, which the schema cannot express."""
    problems: list[tuple[str, str]] = []
    count = len(profile.gpus)
    uuids: dict[str, str] = {}
    bus_ids: dict[str, str] = {}
    minors: dict[int, str] = {}

    def unique(table: dict[Any, str], key: Any, path: str, what: str) -> None:
        if key in table:
            problems.append((path, f"duplicate {what} {key} (also at {table[key]})"))
        else:
            table[key] = path

    for i, gpu in enumerate(profile.gpus):
        at = f"gpus[{i}]"
        unique(uuids, gpu.uuid, f"{at}.uuid", "UUID")
        unique(bus_ids, sysfs_bus_id(gpu.pci_bus_id), f"{at}.pciBusID", "PCI bus id")
        unique(minors, i if gpu.minor is None else gpu.minor, f"{at}.minor", "minor number")
        if gpu.mig_enabled and gpu.mig_capable is False:
            problems.append((f"{at}.migEnabled", "true on a GPU with migCapable false"))
        if gpu.mig_devices and not gpu.mig_enabled:
            problems.append((f"{at}.migDevices", "MIG devices on a GPU with migEnabled false"))
        slots: dict[int, str] = {}
        instances: dict[tuple[int, int], str] = {}
        for j, mig in enumerate(gpu.mig_devices):
            mat = f"{at}.migDevices[{j}]"
            unique(uuids, mig.uuid, f"{mat}.uuid", "UUID")
            unique(slots, j if mig.slot is None else mig.slot, f"{mat}.slot", "slot")
            unique(instances, (mig.gi, mig.ci), f"{mat}.gi", "(gi, ci)")
        for field, peers in (("nvlinks", gpu.nvlinks), ("p2p", gpu.p2p)):
            for peer in peers:
                if peer == i:
                    problems.append((f"{at}.{field}[{peer}]", "a GPU cannot link to itself"))
                elif not 0 <= peer < count:
                    problems.append(
                        (f"{at}.{field}[{peer}]", f"no GPU {peer}: the profile has {count} GPUs")
                    )
    problems.extend(_asymmetries("nvlinks", [dict(g.nvlinks) for g in profile.gpus], count))
    problems.extend(_asymmetries("p2p", [dict(g.p2p) for g in profile.gpus], count))
    return problems


def _asymmetries(field: str, tables: list[dict[int, Any]], count: int) -> Iterable[tuple[str, str]]:
    for i, table in enumerate(tables):
        for peer, value in table.items():
            if 0 <= peer < count and peer != i:
                other = tables[peer].get(i)
                if other is not None and other != value and i < peer:
                    yield (
                        f"gpus[{i}].{field}[{peer}]",
                        f"{value} here but gpus[{peer}].{field}[{i}] is {other}",
                    )


def _mirrored(tables: list[dict[int, Any]]) -> list[dict[int, Any]]:
    """Fill in the reverse direction where a profile states a link only once."""
    result = [dict(table) for table in tables]
    for i, table in enumerate(tables):
        for peer, value in table.items():
            result[peer].setdefault(i, value)
    return [dict(sorted(table.items())) for table in result]


def load_profile(path: Path) -> NodeProfile:
    """Read and validate a node profile file.

    Raises:
        ProfileError: unreadable file, invalid YAML, or a schema or consistency problem.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read node profile: {exc.strerror or exc}") from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no tags run code
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProfileError(f"{path}: not valid YAML{where}: {problem}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: (top level): must be a mapping of keys")
    try:
        profile = NodeProfile.model_validate(data)
    except ValidationError as exc:
        raise _one_line(path, _validation_problems(exc)) from exc
    problems = _cross_check(profile)
    if problems:
        raise _one_line(path, problems)
    return profile


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
        return inventory
