"""Several sharing entries for one resource: device references and the checks between entries.

Entries of ``sharing.timeSlicing.resources`` (or ``sharing.mps.resources``)
may name the same resource, each over its own ``devices`` with its own
``replicas``, which gives replica counts per GPU (``devices: [0, 1],
replicas: 4`` beside ``devices: [2, 3, 4, 5, 6, 7], replicas: 2`` advertises
20 devices on an 8-GPU node). The reference validates ``devices`` and then
replicates every device of every entry anyway, so there the last entry per
name silently decides. Here the entries must not overlap: a device in two
entries would have two replica counts.

What the file alone shows is checked when the config is loaded: an entry
without ``devices`` (or ``devices: all``) overlaps any other entry of its
resource, two counts both start at the first device, and two lists naming
the same reference overlap. Whether ``0`` in one list is the GPU a UUID in
another names is only known on the node, so the resource logic checks the
devices themselves again and words its error with `overlap` too: the same
line, whichever found it.

``distinctDevices`` belongs to the resource: entries for one resource that
say it differently are an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from settings.errors import ConfigError
from settings.sections import DevicesSpec, SharedResource, Sharing

__all__ = ["DeviceRef", "check_sharing", "device_ref", "overlap"]

_INDEX = re.compile(r"[0-9]+")
_MIG_INDEX = re.compile(r"([0-9]+):([0-9]+)")
_MIG_LEGACY = re.compile(r"MIG-(GPU-.+)/([0-9]+)/([0-9]+)")


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
    """A validated ``devices`` item (see `settings.sections.is_device_reference`)."""
    text = str(item)
    if isinstance(item, int) or _INDEX.fullmatch(text):
        return DeviceRef(text, index=str(int(text)))
    found = _MIG_INDEX.fullmatch(text)
    if found:
        return DeviceRef(text, index=f"{int(found[1])}:{int(found[2])}")
    found = _MIG_LEGACY.fullmatch(text)
    if found:
        return DeviceRef(text, uuid=found[1], gi=int(found[2]), ci=int(found[3]))
    return DeviceRef(text, uuid=text)


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
                    path, problem = overlap(earlier.where, later.where, name, detail)
                    problems.append(ConfigError(problem, origin=origin, path=path))
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
