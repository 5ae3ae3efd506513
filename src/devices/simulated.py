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
        migDevices?: [{uuid: MIG-..., profile: "3g.20gb", memoryMiB, gi, ci, slot? (= position)}]
        nvlinks?: {peer index: lanes}  p2p?: {peer index: INTERNAL|SINGLE|MULTIPLE|
                                                HOSTBRIDGE|NODE|SYSTEM}

A link stated on one GPU only is mirrored onto the peer; stating it on both
with different values is an error.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from devices.errors import DiscoveryError, NvmlUnavailable, ProfileError
from devices.migcaps import standard_ci_minor, standard_gi_minor
from devices.migprofile import is_profile_name
from devices.model import Gpu, Inventory, MigDevice, P2PLevel
from devices.pci import sysfs_bus_id

PROFILES_DIR = Path(__file__).resolve().parents[2] / "config" / "nodes"

_VERSION = re.compile(r"^\d+\.\d+$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_MAX_REPORTED = 5

P2PName = Literal["INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM"]


def _dotted_version(value: Any, example: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f'must be a quoted string such as "{example}" (got {value!r})')
    if not _VERSION.fullmatch(value):
        raise ValueError(f'must look like "{example}" (got {value!r})')
    return value


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MigDeviceSpec(_Schema):
    uuid: str
    profile: str
    memory_mib: int = Field(alias="memoryMiB", gt=0)
    gi: int = Field(ge=0)
    ci: int = Field(ge=0)
    slot: int | None = Field(default=None, ge=0)

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
            )
        )
    return Inventory(
        driver_version=profile.driver_version,
        cuda_driver_version=profile.cuda_driver_version,
        gpus=tuple(gpus),
        machine_type=profile.machine_type,
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

    def _load(self) -> Inventory:
        if not self._path.exists() and "/" not in str(self._label) and not self._path.suffix:
            known = ", ".join(available_profiles()) or "none"
            raise ProfileError(
                f"{self._label}: no such node profile (shipped: {known}) and no such file"
            )
        profile = load_profile(self._path)
        if profile.init_error is not None:
            raise NvmlUnavailable(profile.init_error)
        return build_inventory(profile)
