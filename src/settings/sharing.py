"""The config file's ``sharing`` section: time-slicing or MPS, and what the plugin applies.

``sharing.timeSlicing`` (or ``sharing.mps``) lists resources whose devices
are each advertised ``replicas`` times. Entries may name the same resource,
each over its own ``devices`` with its own ``replicas``, which gives replica
counts per GPU (``devices: [0, 1], replicas: 4`` beside ``devices: [2, 3, 4,
5, 6, 7], replicas: 2`` advertises 20 devices on an 8-GPU node). The
reference validates ``devices`` and then replicates every device of every
entry anyway, so there the last entry per name silently decides. Here the
entries must not overlap: a device in two entries would have two replica
counts.

What the file alone shows is checked when the config is loaded
(`check_sharing`): an entry without ``devices`` (or ``devices: all``)
overlaps any other entry of its resource, two counts both start at the first
device, and two lists naming the same reference overlap. Whether ``0`` in
one list is the GPU a UUID in another names is only known on the node, so
the resource logic checks the devices themselves again and words its error
with `overlap` too: the same line, whichever found it. ``distinctDevices``
belongs to the resource: entries for one resource that say it differently
are an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from settings.checks import Bool, problem
from settings.choices import SharingStrategy
from settings.errors import ConfigError
from settings.names import resource_name
from settings.sections import FileSection, not_supported
from settings.values import integral, show

__all__ = [
    "DeviceRef",
    "DevicesSpec",
    "SharedResource",
    "Sharing",
    "SharingFile",
    "check_sharing",
    "device_ref",
    "overlap",
]

# The reference's rules (Go's ParseUint and google/uuid's Parse): an index is
# ASCII digits that fit in 64 bits, a MIG index is two of them joined by ":",
# and a UUID is one of the four spellings that library reads.
_UINT = r"[0-9]+"
_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID = rf"(?:{_HEX_UUID}|\{{{_HEX_UUID}\}}|(?i:urn:uuid:){_HEX_UUID}|[0-9a-fA-F]{{32}})"
_INDEX = re.compile(rf"({_UINT})(?::({_UINT}))?")
_UUID_REF = re.compile(rf"(?:GPU|MIG)-{_UUID}")
_MIG_LEGACY = re.compile(rf"MIG-(GPU-{_UUID})/({_UINT})/({_UINT})")
_UINT_MAX = 2**64 - 1


@dataclass(frozen=True)
class DeviceRef:
    """One item of a ``devices`` list, as the devices are looked up by it.

    ``index`` is set for a GPU index (``"3"``) or a MIG index (``"0:1"``),
    written without leading zeros; ``uuid`` for a GPU or MIG UUID; a MIG
    device named ``MIG-GPU-<uuid>/<gi>/<ci>`` has its GPU's UUID in ``uuid``
    and the instance ids in ``gi`` and ``ci``. ``text`` is the item as written.
    """

    text: str
    index: str | None = None
    uuid: str | None = None
    gi: int | None = None
    ci: int | None = None

    @property
    def key(self) -> tuple[object, ...]:
        """Equal for two references that name the same device by the same kind of name."""
        return (self.index, self.uuid, self.gi, self.ci)

    def __str__(self) -> str:
        return self.text


def device_ref(item: str | int) -> DeviceRef:
    """A GPU index (``0``), MIG index (``0:1``), GPU UUID or MIG UUID (either form).

    Raises:
        ValueError: the item is none of them.
    """
    text = str(item)
    numbers: tuple[str, ...] = ()
    ref = None
    if found := _INDEX.fullmatch(text):
        numbers = tuple(number for number in found.groups() if number is not None)
        ref = DeviceRef(text, index=":".join(str(int(number)) for number in numbers))
    elif found := _MIG_LEGACY.fullmatch(text):
        numbers = (found[2], found[3])
        ref = DeviceRef(text, uuid=found[1], gi=int(found[2]), ci=int(found[3]))
    elif _UUID_REF.fullmatch(text):
        ref = DeviceRef(text, uuid=text)
    # The length check first: int() refuses text of thousands of digits.
    if ref is None or not all(len(n) <= 20 and int(n) <= _UINT_MAX for n in numbers):
        raise ValueError(f"not a device reference: {text}")
    return ref


DevicesSpec = str | int | tuple[str | int, ...]


def _devices(value: Any) -> DevicesSpec:
    """``all``, a positive count, or a list of GPU/MIG indices and UUIDs."""
    if value is None or value == "all":
        return "all"
    if isinstance(value, str):
        raise problem(f"devices set as '{value}' but the only valid string input is 'all'")
    count = integral(value)
    if count is not None:
        if count <= 0:
            raise problem(f"devices set as '{count}' but a count of devices must be > 0")
        return count
    if not isinstance(value, list):
        raise problem(f"unrecognized type for devices spec: {show(value)}")
    if not value:
        # The reference reads [] and then replicates every device; here a list is applied.
        raise problem("devices list is empty; leave devices out (or write all) for every device")
    references: list[str | int] = []
    for item in value:
        whole = integral(item)
        reference = item if whole is None else whole
        try:
            if isinstance(reference, bool) or not isinstance(reference, str | int):
                raise ValueError(reference)
            device_ref(reference)
        except ValueError:
            raise problem(
                f"unsupported type for device in devices list: {show(item)} (expected a GPU "
                "index, a 'gpu:mig' index, a GPU UUID or a MIG UUID)"
            ) from None
        references.append(reference)
    return tuple(references)


def _replicas(value: Any) -> int:
    if value is None:
        raise problem("no replicas specified")
    replicas = integral(value)
    if replicas is None:
        raise problem(f"number of replicas must be an integer; found {show(value)}")
    if replicas < 2:
        raise problem(f"number of replicas must be >= 2; found {replicas}")
    return replicas


def _optional_name(value: Any) -> str | None:
    return None if value is None else resource_name(value, missing="")


def _need_resources(value: Any) -> Any:
    if value is None or value == []:
        raise PydanticCustomError("no_resources", "no resources specified")
    return value


@dataclass(frozen=True)
class SharedResource:
    """One sharing entry: the devices of ``name`` it selects are each advertised ``replicas`` times.

    ``devices`` is ``"all"``, a count or a list of references, as written;
    ``distinct_devices`` is None when the entry does not say; ``where`` is
    the entry's path in the file (``sharing.mps.resources[1]``), for messages.
    """

    name: str
    replicas: int
    rename: str | None = None
    devices: DevicesSpec = "all"
    distinct_devices: bool | None = None
    where: str = field(default="", compare=False)

    @property
    def advertised_name(self) -> str:
        """The name the replicas are advertised under."""
        return self.rename or self.name


@dataclass(frozen=True)
class Sharing:
    """The active sharing strategy and its resources, as the plugin applies them."""

    strategy: SharingStrategy = SharingStrategy.NONE
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[SharedResource, ...] = ()


class SharedEntry(FileSection):
    """One ``sharing.*.resources[]`` entry; fields in the order they are checked."""

    KEYS_CASE_SENSITIVE = True

    name: Annotated[
        str, BeforeValidator(partial(resource_name, missing="no resource name specified"))
    ] = Field(default=None, alias="name", validate_default=True)
    devices: Annotated[DevicesSpec, BeforeValidator(_devices)] = Field(
        default="all", alias="devices"
    )
    replicas: Annotated[int, BeforeValidator(_replicas)] = Field(
        default=None, alias="replicas", validate_default=True
    )
    rename: Annotated[str | None, BeforeValidator(_optional_name)] = Field(
        default=None, alias="rename"
    )
    distinct_devices: Bool | None = Field(default=None, alias="distinctDevices")


class SharingSection(FileSection):
    """``sharing.timeSlicing`` or ``sharing.mps``."""

    KEYS_CASE_SENSITIVE = True

    rename_by_default: Bool | None = Field(default=None, alias="renameByDefault")
    fail_requests_greater_than_one: Bool | None = Field(
        default=None, alias="failRequestsGreaterThanOne"
    )
    resources: Annotated[tuple[SharedEntry, ...], BeforeValidator(_need_resources)] = Field(
        default=None, alias="resources", validate_default=True
    )

    def resolve(self, key: str, origin: str, warnings: list[str]) -> Sharing:
        """What the plugin applies: ``rename`` is validated but not applied (with
        the reference's warning), ``renameByDefault`` advertises ``<name>.shared``,
        MPS fails requests for more than one replica unless told otherwise, and
        ``devices`` selects what each entry replicates."""
        strategy = SharingStrategy.MPS if key == "mps" else SharingStrategy.TIME_SLICING
        rename_by_default = bool(self.rename_by_default)
        resources: list[SharedResource] = []
        for index, entry in enumerate(self.resources):
            where = f"sharing.{key}.resources[{index}]"
            shared_name = f"{entry.name}.shared"
            if entry.rename is not None and (not rename_by_default or entry.rename != shared_name):
                what = f"Setting the 'rename' field in sharing.{key}.resources"
                warnings.append(not_supported(origin, f"{where}.rename", what))
            resources.append(
                SharedResource(
                    entry.name,
                    entry.replicas,
                    shared_name if rename_by_default else None,
                    devices=entry.devices,
                    distinct_devices=entry.distinct_devices,
                    where=where,
                )
            )
        fail = self.fail_requests_greater_than_one
        return Sharing(
            strategy=strategy,
            rename_by_default=rename_by_default,
            fail_requests_greater_than_one=strategy is SharingStrategy.MPS
            if fail is None
            else fail,
            resources=tuple(resources),
        )


class SharingFile(FileSection):
    """``sharing``: time-slicing or MPS, not both."""

    time_slicing: SharingSection | None = Field(default=None, alias="timeSlicing")
    mps: SharingSection | None = Field(default=None, alias="mps")

    @model_validator(mode="before")
    @classmethod
    def _empty_time_slicing_is_a_mistake(cls, data: Any) -> Any:
        # ``timeSlicing:`` with nothing under it is an error in the reference
        # (the section exists but names no resources); ``mps:`` null is not.
        if isinstance(data, dict) and "timeSlicing" in data and data["timeSlicing"] is None:
            return {**data, "timeSlicing": {}}
        return data

    @model_validator(mode="after")
    def _one_strategy(self) -> SharingFile:
        if self.time_slicing is not None and self.mps is not None:
            raise problem("timeSlicing and mps are mutually exclusive; configure only one of them")
        return self

    def resolve(self, origin: str, warnings: list[str]) -> Sharing:
        if self.mps is not None:
            return self.mps.resolve("mps", origin, warnings)
        if self.time_slicing is not None:
            return self.time_slicing.resolve("timeSlicing", origin, warnings)
        return Sharing()


def overlap(first: str, second: str, resource: str, detail: str) -> tuple[str, str]:
    """Path and problem of two entries of one resource that select the same device.

    ``first`` and ``second`` are the entries' paths
    (``sharing.timeSlicing.resources[0]``), the earlier one first.
    """
    return f"{second}.devices", f"overlaps {first}.devices for {resource}: {detail}"


def _file_overlap(one: DevicesSpec, other: DevicesSpec) -> str | None:
    """Why two ``devices`` values surely overlap on any node, or None when only the node can say."""
    if one == "all" or other == "all":
        return "an entry without a devices list (or with devices: all) selects every device"
    if isinstance(one, int) and isinstance(other, int):
        return "both counts start at the first device"
    if isinstance(one, tuple) and isinstance(other, tuple):
        keys = {device_ref(item).key: item for item in one}
        same = next((item for item in other if device_ref(item).key in keys), None)
        if same is not None:
            return f"both select device {same}"
    return None


def _entries_by_resource(entries: Iterable[SharedResource]) -> dict[str, list[SharedResource]]:
    grouped: dict[str, list[SharedResource]] = {}
    for entry in entries:
        grouped.setdefault(entry.name, []).append(entry)
    return grouped


def check_sharing(sharing: Sharing, origin: str) -> None:
    """Refuse entries of one resource that overlap, or disagree on ``distinctDevices``.

    Raises:
        ConfigError: one problem per pair, naming both entries.
    """
    problems: list[ConfigError] = []
    for name, entries in _entries_by_resource(sharing.resources).items():
        for position, later in enumerate(entries):
            for earlier in entries[:position]:
                detail = _file_overlap(earlier.devices, later.devices)
                if detail is not None:
                    path, why = overlap(earlier.where, later.where, name, detail)
                    problems.append(ConfigError(why, origin=origin, path=path))
                    break
        said = [entry for entry in entries if entry.distinct_devices is not None]
        differing = next((e for e in said if e.distinct_devices != said[0].distinct_devices), None)
        if differing is not None:
            problems.append(
                ConfigError(
                    f"differs from {said[0].where}.distinctDevices for the same resource {name}",
                    origin=origin,
                    path=f"{differing.where}.distinctDevices",
                )
            )
    if problems:
        raise ConfigError.combine(problems)
