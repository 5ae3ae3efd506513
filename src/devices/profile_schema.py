"""The node profile file of the simulated backend: its schema, and validation to one line.

A profile describes a whole node in YAML (see `simulated` for what it is used
for). It is validated strictly, because a silently ignored typo in a test
fixture makes a test pass for the wrong reason: unknown or duplicate keys are
errors, numbers must be numbers and versions must be quoted strings, and every
problem is reported as one line `<file>: <key path>: <problem>` (at most five
problems, then a count), so the operator sees all of it in one log line.

This module is the only one in `devices` that uses pydantic: the schema is a
tree of strict pydantic models, and rules that span several fields or GPUs
(unique UUIDs, bus ids, minors, slots; links to existing peers; the two ends
of a link agreeing) are checked afterwards by hand. Turning a valid profile
into an `Inventory` is `simulated.build_inventory`'s job, not this module's.

Schema (camelCase; `?` marks optional keys):

    driverVersion: "550.54.15"        cudaDriverVersion: "12.4"
    machineType?: str                 initError?: str  (init() fails with this text)
    gpus:                             (GPU index = position in the list)
      - uuid: GPU-...   name: str   memoryMiB: int
        pciBusID: "00000000:3B:00.0" | "0000:3b:00.0"   (NVML's or `lspci -D`'s form)
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
        computeMode?: DEFAULT | PROHIBITED | EXCLUSIVE_PROCESS   (= DEFAULT; the mode at start)
        computeModeError?: str   (setting the compute mode fails with this text)
        healthEvents?: bool   (= true; false: registering the GPU for health events
                               fails with Not Supported, as on GPUs too old for them)
        migPlacements?: [{profile: "1g.24gb", profileId: int, size: int (memory slices),
                          starts: [int, ...], memoryMiB: int, instances?: int (= len(starts)),
                          attributes?: {multiprocessors, copyEngines, decoders, encoders,
                                        jpegs, ofas}}]
                      (where each GPU-instance profile can be created, for DRA's dynamic
                       MIG; replaces the table built in for the part; attributes may be
                       left out only where they are built in for the part and profile)
        migFaults?: {gpuInstance?: [n, ...], computeInstance?: [n, ...], destroy?: [n, ...]}
                      (the n-th create_mig on this GPU fails at the GPU-instance step, or
                       at the compute-instance step, when the backend destroys the GPU
                       instance again; the n-th destroy_mig that finds its instance fails)

A link stated on one GPU only is mirrored onto the peer when the inventory is
built; stating it on both with different values is an error here. A bus id
copied from ``lspci -D`` (``0000:3b:00.0``) is accepted and stored in NVML's
form (``00000000:3B:00.0``), which is what the rest of the plugin sees on a
real node. The domain is required: without it two buses cannot be told apart.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from devices.errors import ProfileError
from devices.migprofile import is_profile_name
from devices.pci import sysfs_bus_id
from devices.simulated_parts import known_mig_attributes
from foundation.files import MIB, FileRejected, read_small_file

_VERSION = re.compile(r"^\d+\.\d+$")
_BUS_ID = re.compile(
    r"^(?P<domain>[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):"
    r"(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})\.(?P<function>[0-7])$"
)
_MAX_REPORTED = 5
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_COMPUTE_CLASS = 0x030200
_COMPUTE_PREFIX = re.compile(r"^[1-9]\d*c\.")
# Profiles of generated nodes with hundreds of GPUs and their links run to a
# few MiB; the cap only has to stop a wrong path from being read whole.
PROFILE_LIMIT = 32 * MIB


P2PName = Literal["INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM"]
ComputeModeName = Literal["DEFAULT", "PROHIBITED", "EXCLUSIVE_PROCESS"]


def nvml_bus_id(value: str) -> str | None:
    """A PCI bus id in NVML's form (``00000000:3B:00.0``), from NVML's or lspci's; or None."""
    match = _BUS_ID.fullmatch(value)
    if match is None:
        return None
    domain = int(match["domain"], 16)
    bus, device = int(match["bus"], 16), int(match["device"], 16)
    return f"{domain:08X}:{bus:02X}:{device:02X}.{match['function']}"


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
    profile_id: int | None = Field(default=None, alias="profileId", ge=0)
    placement_start: int | None = Field(default=None, alias="placementStart", ge=0)

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


class MigPlacementSpec(_Schema):
    """One GPU-instance profile of a part and every memory slice it may start at."""

    profile: str
    profile_id: int = Field(alias="profileId", ge=0)
    size: int = Field(gt=0)
    starts: list[int] = Field(min_length=1)
    memory_mib: int = Field(alias="memoryMiB", gt=0)
    instances: int | None = Field(default=None, gt=0)
    attributes: MigAttributesSpec | None = None

    @field_validator("profile")
    @classmethod
    def _profile(cls, value: str) -> str:
        if not is_profile_name(value) or _COMPUTE_PREFIX.match(value):
            raise ValueError(f"not a GPU-instance profile name such as '3g.20gb' (got {value!r})")
        return value

    @field_validator("starts")
    @classmethod
    def _starts(cls, value: list[int]) -> list[int]:
        if any(start < 0 for start in value):
            raise ValueError(f"memory slices are counted from 0 (got {value})")
        if len(set(value)) != len(value):
            raise ValueError(f"a start is given twice (got {value})")
        return sorted(value)


class MigFaultsSpec(_Schema):
    """Which create_mig and destroy_mig calls on the GPU fail (1 is the first)."""

    gpu_instance: list[int] = Field(default_factory=list, alias="gpuInstance")
    compute_instance: list[int] = Field(default_factory=list, alias="computeInstance")
    destroy: list[int] = Field(default_factory=list)

    @field_validator("gpu_instance", "compute_instance", "destroy")
    @classmethod
    def _counts(cls, value: list[int]) -> list[int]:
        if any(n <= 0 for n in value):
            raise ValueError(f"calls are counted from 1 (got {value})")
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
    compute_mode: ComputeModeName = Field(default="DEFAULT", alias="computeMode")
    compute_mode_error: str | None = Field(default=None, alias="computeModeError", min_length=1)
    brand: str | None = Field(default=None, min_length=1)
    health_events: bool = Field(default=True, alias="healthEvents")
    mig_placements: list[MigPlacementSpec] | None = Field(default=None, alias="migPlacements")
    mig_faults: MigFaultsSpec | None = Field(default=None, alias="migFaults")

    @field_validator("uuid")
    @classmethod
    def _gpu_uuid(cls, value: str) -> str:
        if not value.startswith("GPU-") or len(value) <= len("GPU-"):
            raise ValueError(f"must start with 'GPU-' (got {value!r})")
        return value

    @field_validator("pci_bus_id")
    @classmethod
    def _bus_id(cls, value: str) -> str:
        normal = nvml_bus_id(value)
        if normal is None:
            raise ValueError(
                f"must look like '00000000:3B:00.0' (NVML) or '0000:3b:00.0' (lspci) "
                f"(got {value!r})"
            )
        return normal

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _cc(cls, value: Any) -> str:
        return _dotted_version(value, "8.0")

    @field_validator("mig_devices")
    @classmethod
    def _placements(cls, value: list[MigDeviceSpec]) -> list[MigDeviceSpec]:
        # GPU instances never share memory slices; compute instances of one GPU
        # instance share its placement.
        owners: dict[int, int] = {}
        for mig in value:
            if mig.placement_start is None:
                continue
            owner = owners.setdefault(mig.placement_start, mig.gi)
            if owner != mig.gi:
                raise ValueError(
                    f"GPU instances {owner} and {mig.gi} both start at memory slice "
                    f"{mig.placement_start}"
                )
        return value

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


# A safe loader that refuses a key given twice in one mapping (the last would win).
# The fast one is built on libyaml's parser where PyYAML has it: a profile is
# parsed at every start of the simulated node, and the pure-Python parser is
# several times slower. A file that does not parse is parsed again by the
# pure-Python one, whose messages are the ones users see (and tests pin).
_UniqueKeyLoader: Any = type("_UniqueKeyLoader", (yaml.SafeLoader,), {})
_FastUniqueKeyLoader: Any = type(
    "_FastUniqueKeyLoader", (getattr(yaml, "CSafeLoader", yaml.SafeLoader),), {}
)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Hashable, Any]:
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


for _loader in (_UniqueKeyLoader, _FastUniqueKeyLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


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
        problems.extend(_placement_problems(at, gpu))
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


def _placement_problems(at: str, gpu: GpuSpec) -> Iterable[tuple[str, str]]:
    if gpu.mig_placements is None:
        return
    if gpu.mig_capable is False:
        yield (f"{at}.migPlacements", "placements on a GPU with migCapable false")
    ids: dict[int, str] = {}
    for j, placement in enumerate(gpu.mig_placements):
        pat = f"{at}.migPlacements[{j}]"
        if placement.profile_id in ids:
            also = ids[placement.profile_id]
            yield (
                f"{pat}.profileId",
                f"duplicate profile id {placement.profile_id} (also at {also})",
            )
        ids.setdefault(placement.profile_id, pat)
        if placement.instances is not None and placement.instances > len(placement.starts):
            yield (f"{pat}.instances", "more instances than starts")
        known = known_mig_attributes(gpu.name, placement.profile)
        if placement.attributes is None and known is None:
            yield (
                f"{pat}.attributes",
                f"required: the attributes of {placement.profile} on {gpu.name} are not built in",
            )


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


def load_profile(path: Path) -> NodeProfile:
    """Read and validate a node profile file.

    Raises:
        ProfileError: unreadable file, invalid YAML, or a schema or consistency problem.
    """
    try:
        data_bytes = read_small_file(path, limit=PROFILE_LIMIT)
    except FileRejected as exc:
        raise ProfileError(f"{path}: cannot read node profile: {exc.reason}") from None
    try:
        text = data_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text ({exc.reason})"
        raise ProfileError(f"{path}: cannot read node profile: {problem}") from None
    try:
        try:
            data = yaml.load(text, Loader=_FastUniqueKeyLoader)  # safe loaders: no tags run code
        except yaml.YAMLError:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
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
