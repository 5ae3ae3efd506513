"""Dynamic MIG on a simulated node: where instances can go, and the ones `create_mig` made.

DRA's dynamic MIG publishes every placement of every GPU-instance profile of a
GPU in MIG mode and creates the instance when a claim is prepared. Here that
is played without a driver:

- the placements of a GPU come from its profile's `migPlacements`, or from
  the table built in for its part (`simulated_parts.known_gi_profiles`), and
  are listed only while the GPU is in MIG mode;
- `plan_create` checks a requested placement the way the driver does (MIG
  mode, a known profile id and start, the profile's instance limit, memory
  slices not taken by another GPU instance, declared or created) and picks
  the new instance's ids: the lowest GPU-instance id not in use (counting
  from 1), compute instance 0 spanning it, the lowest free MIG device slot;
- `instance_device` turns an instance into the `MigDevice` discovery reports,
  the same fields a MIG device declared in the profile gets, with a UUID
  derived from the GPU's UUID and the instance ids (`MIG-` + a version-5
  UUID, the form the profiles' UUIDs have);
- `MigStateStore` keeps the instances, and per GPU how many creations and
  destructions were attempted (what the profile's `migFaults` count), in a
  small JSON file when the node has a state path, so they survive a plugin
  restart as instances on a real GPU do, or in this process's memory when it
  has none. The file is replaced atomically; one that cannot be read as a
  state file is one error naming it, never a silently empty node.

The file (`version` 1):

    {"version": 1,
     "gpus": {"GPU-...": {"creates": 2, "destroys": 1,
                          "instances": [{"gi": 1, "ci": 0, "profileId": 19,
                                         "start": 0, "slot": 0}]}}}

Instances of a GPU the profile no longer has, no longer in MIG mode, or whose
placement the GPU no longer offers are not reported, and are dropped at the
next change: leaving MIG mode destroys a real GPU's instances too.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import tempfile
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devices.errors import MigError, ProfileError
from devices.migcaps import standard_ci_minor, standard_gi_minor
from devices.migprofile import profile_slices
from devices.model import Gpu, MigAttributes, MigDevice, MigPlacement
from devices.profile_schema import GpuSpec, MigAttributesSpec
from devices.simulated_parts import GiProfileFacts, known_gi_profiles, known_mig_attributes
from foundation.files import MIB, FileRejected, read_small_file

__all__ = [
    "GiProfile",
    "GpuRecord",
    "Instance",
    "MigStateStore",
    "State",
    "created_devices",
    "gi_profiles_of",
    "instance_device",
    "placements_of",
    "plan_create",
    "prune",
    "simulated_mig_uuid",
]

STATE_VERSION = 1
STATE_LIMIT = MIB
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "simulated-mig.nvidia-device-plugin.invalid")


@dataclass(frozen=True)
class GiProfile:
    """A GPU-instance profile a simulated GPU offers: where it goes, what an instance holds."""

    facts: GiProfileFacts
    attributes: MigAttributes

    def placements(self) -> tuple[MigPlacement, ...]:
        return tuple(
            MigPlacement(
                profile=self.facts.profile,
                profile_id=self.facts.profile_id,
                start=start,
                size=self.facts.size,
                memory_mib=self.facts.memory_mib,
                attributes=self.attributes,
            )
            for start in self.facts.starts
        )


@dataclass(frozen=True)
class Instance:
    """A GPU instance `create_mig` made, with its one compute instance."""

    gi: int
    ci: int
    profile_id: int
    start: int
    slot: int


@dataclass
class GpuRecord:
    """What the state holds for one GPU."""

    instances: list[Instance] = field(default_factory=list)
    creates: int = 0  # create_mig calls that got past the checks
    destroys: int = 0  # destroy_mig calls that found their instance


State = dict[str, GpuRecord]  # by GPU UUID


def mig_attributes(profile: str, numbers: Sequence[int]) -> MigAttributes:
    """MigAttributes from (SMs, copy engines, decoders, encoders, JPEG, OFA) of `profile`."""
    ci_slices, gi_slices = profile_slices(profile)
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


def stated_numbers(spec: MigAttributesSpec) -> tuple[int, int, int, int, int, int]:
    """The numbers a profile states, in `mig_attributes` order."""
    return (
        spec.multiprocessors,
        spec.copy_engines,
        spec.decoders,
        spec.encoders,
        spec.jpegs,
        spec.ofas,
    )


def gi_profiles_of(spec: GpuSpec) -> tuple[GiProfile, ...]:
    """The GPU-instance profiles the GPU offers: the profile's own, else its part's built in.

    The schema has checked that a stated profile without attributes has them built in.
    """
    if spec.mig_placements is None:
        found: list[GiProfile] = []
        for facts in known_gi_profiles(spec.name):
            numbers = known_mig_attributes(spec.name, facts.profile)
            if numbers is not None:
                found.append(GiProfile(facts, mig_attributes(facts.profile, numbers)))
        return tuple(found)
    profiles: list[GiProfile] = []
    for stated in spec.mig_placements:
        numbers = (
            stated_numbers(stated.attributes)
            if stated.attributes is not None
            else known_mig_attributes(spec.name, stated.profile)
        )
        if numbers is None:  # refused by the schema; kept out rather than guessed
            continue
        facts = GiProfileFacts(
            profile=stated.profile,
            profile_id=stated.profile_id,
            size=stated.size,
            starts=tuple(stated.starts),
            memory_mib=stated.memory_mib,
            instances=len(stated.starts) if stated.instances is None else stated.instances,
        )
        profiles.append(GiProfile(facts, mig_attributes(stated.profile, numbers)))
    return tuple(profiles)


def placements_of(profiles: Iterable[GiProfile]) -> tuple[MigPlacement, ...]:
    """Every placement of every profile, by profile id, then start (as the NVML backend sorts)."""
    placements = [p for profile in profiles for p in profile.placements()]
    return tuple(sorted(placements, key=lambda p: (p.profile_id, p.start)))


def simulated_mig_uuid(gpu_uuid: str, gi: int, ci: int) -> str:
    """The UUID of the MIG device `create_mig` makes: the same for the same GPU and ids."""
    return f"MIG-{uuid.uuid5(_NAMESPACE, f'{gpu_uuid}/gi{gi}/ci{ci}')}"


def instance_device(
    gpu_index: int, gpu_minor: int, gpu_uuid: str, placement: MigPlacement, instance: Instance
) -> MigDevice:
    """The MIG device discovery reports for a created instance."""
    return MigDevice(
        uuid=simulated_mig_uuid(gpu_uuid, instance.gi, instance.ci),
        parent_index=gpu_index,
        slot=instance.slot,
        gi=instance.gi,
        ci=instance.ci,
        profile=placement.profile,
        memory_mib=placement.memory_mib,
        gi_cap_minor=standard_gi_minor(gpu_minor, instance.gi),
        ci_cap_minor=standard_ci_minor(gpu_minor, instance.gi, instance.ci),
        attributes=placement.attributes,
        profile_id=placement.profile_id,
        placement_start=placement.start,
    )


def created_devices(
    gpu_index: int,
    gpu_minor: int,
    gpu_uuid: str,
    placements: Sequence[MigPlacement],
    declared: Sequence[MigDevice],
    instances: Sequence[Instance],
) -> tuple[MigDevice, ...]:
    """The created instances a GPU reports: those whose placement it offers, by slot.

    One whose GPU-instance id or slot a declared MIG device has (the profile
    was edited under it) is left out.
    """
    by_key = {(p.profile_id, p.start): p for p in placements}
    taken_gis = {m.gi for m in declared}
    taken_slots = {m.slot for m in declared}
    devices: list[MigDevice] = []
    for instance in sorted(instances, key=lambda i: i.slot):
        placement = by_key.get((instance.profile_id, instance.start))
        if placement is None or instance.gi in taken_gis or instance.slot in taken_slots:
            continue
        taken_gis.add(instance.gi)
        taken_slots.add(instance.slot)
        devices.append(instance_device(gpu_index, gpu_minor, gpu_uuid, placement, instance))
    return tuple(devices)


def _slices(start: int, size: int) -> str:
    return f"memory slice {start}" if size == 1 else f"memory slices {start}-{start + size - 1}"


def plan_create(
    gpu: Gpu, profiles: Sequence[GiProfile], profile_id: int, start: int
) -> tuple[Instance, MigPlacement]:
    """The instance creating `profile_id` at `start` on `gpu` makes, once the driver's checks pass.

    `gpu` is as discovery reports it, declared and created MIG devices included.

    Raises:
        MigError: MIG mode is off, the profile id or start is not offered, the
            profile's instance limit is reached or the slices are taken (one line).
    """
    where = f"GPU {gpu.uuid}"
    if not gpu.mig_enabled:
        raise MigError(f"{where}: MIG mode is off")
    by_id = {p.facts.profile_id: p for p in profiles}
    chosen = by_id.get(profile_id)
    if chosen is None:
        offered = ", ".join(str(i) for i in sorted(by_id)) or "none"
        raise MigError(f"{where}: no GPU-instance profile id {profile_id} (offered: {offered})")
    facts = chosen.facts
    if start not in facts.starts:
        starts = ", ".join(str(s) for s in facts.starts)
        raise MigError(
            f"{where}: {facts.profile} (profile id {profile_id}) cannot start at memory slice "
            f"{start} (possible starts: {starts})"
        )
    sizes = {p.facts.profile_id: p.facts.size for p in profiles}
    names = {p.facts.profile: p.facts.size for p in profiles}
    instances: dict[int, MigDevice] = {}
    for mig in gpu.mig_devices:
        instances.setdefault(mig.gi, mig)  # compute instances of one GPU instance share it
    same = [m for m in instances.values() if m.profile_id == profile_id]
    if len(same) >= facts.instances:
        raise MigError(
            f"{where}: {facts.profile} (profile id {profile_id}) allows {facts.instances} "
            f"instance{'s' if facts.instances != 1 else ''} at once and has {len(same)}"
        )
    wanted = set(range(start, start + facts.size))
    for gi, mig in sorted(instances.items()):
        if mig.placement_start is None:
            continue  # a declared device without a placement: its slices are unknown
        size = sizes.get(mig.profile_id) if mig.profile_id is not None else None
        if size is None:
            size = names.get(mig.profile)
        if size is None:
            continue
        if wanted & set(range(mig.placement_start, mig.placement_start + size)):
            raise MigError(
                f"{where}: {facts.profile} at {_slices(start, facts.size)} overlaps GPU "
                f"instance {gi} ({mig.profile} at {_slices(mig.placement_start, size)})"
            )
    used_gis = set(instances)
    gi = next(n for n in range(1, len(used_gis) + 2) if n not in used_gis)
    used_slots = {m.slot for m in gpu.mig_devices}
    slot = next(n for n in range(len(used_slots) + 1) if n not in used_slots)
    placement = next(p for p in chosen.placements() if p.start == start)
    return Instance(gi=gi, ci=0, profile_id=profile_id, start=start, slot=slot), placement


# -- the state -------------------------------------------------------------------------


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a whole number of at least 0 (got {value!r})")
    return value


def _mapping(
    value: Any, what: str, keys: frozenset[str], required: frozenset[str]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object (got {type(value).__name__})")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise ValueError(f"{what}: unknown key {unknown[0]!r}")
    missing = sorted(required - set(value))
    if missing:
        raise ValueError(f"{what}: missing key {missing[0]!r}")
    return value


_INSTANCE_KEYS = frozenset({"gi", "ci", "profileId", "start", "slot"})
_GPU_KEYS = frozenset({"creates", "destroys", "instances"})
_TOP_KEYS = frozenset({"version", "gpus"})


def _parse(data: Any) -> State:
    top = _mapping(data, "the file", _TOP_KEYS, _TOP_KEYS)
    if top["version"] != STATE_VERSION:
        raise ValueError(f"version {top['version']!r} (this plugin reads {STATE_VERSION})")
    gpus = top["gpus"]
    if not isinstance(gpus, dict):
        raise ValueError(f"gpus must be an object (got {type(gpus).__name__})")
    state: State = {}
    for gpu_uuid, raw in gpus.items():
        at = f"gpus[{gpu_uuid}]"
        entry = _mapping(raw, at, _GPU_KEYS, frozenset())
        instances_raw = entry.get("instances", [])
        if not isinstance(instances_raw, list):
            raise ValueError(f"{at}.instances must be a list")
        instances: list[Instance] = []
        gis: set[int] = set()
        for n, item in enumerate(instances_raw):
            iat = f"{at}.instances[{n}]"
            fields = _mapping(item, iat, _INSTANCE_KEYS, _INSTANCE_KEYS)
            instance = Instance(
                gi=_count(fields["gi"], f"{iat}.gi"),
                ci=_count(fields["ci"], f"{iat}.ci"),
                profile_id=_count(fields["profileId"], f"{iat}.profileId"),
                start=_count(fields["start"], f"{iat}.start"),
                slot=_count(fields["slot"], f"{iat}.slot"),
            )
            if instance.gi in gis:
                raise ValueError(f"{iat}: GPU instance {instance.gi} is listed twice")
            gis.add(instance.gi)
            instances.append(instance)
        state[gpu_uuid] = GpuRecord(
            instances=instances,
            creates=_count(entry.get("creates", 0), f"{at}.creates"),
            destroys=_count(entry.get("destroys", 0), f"{at}.destroys"),
        )
    return state


def _document(state: State) -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "gpus": {
            gpu_uuid: {
                "creates": record.creates,
                "destroys": record.destroys,
                "instances": [
                    {
                        "gi": i.gi,
                        "ci": i.ci,
                        "profileId": i.profile_id,
                        "start": i.start,
                        "slot": i.slot,
                    }
                    for i in sorted(record.instances, key=lambda i: i.gi)
                ],
            }
            for gpu_uuid, record in sorted(state.items())
        },
    }


class MigStateStore:
    """The instances `create_mig` made: in a JSON file at `path`, or in memory without one."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._memory: State = {}

    @property
    def path(self) -> Path | None:
        return self._path

    def load(self) -> State:
        """The current state (a copy the caller may change and `save`).

        A missing file is a node without created instances.

        Raises:
            ProfileError: the file cannot be read or is not a state file (one line).
        """
        if self._path is None:
            with self._lock:
                return copy.deepcopy(self._memory)
        path = self._path
        try:
            raw = read_small_file(path, limit=STATE_LIMIT)
        except FileRejected as exc:
            if not os.path.lexists(path):
                return {}
            raise ProfileError(
                f"{path}: cannot read the simulated MIG state: {exc.reason}"
            ) from None
        try:
            text = raw.decode("utf-8")
            if not text.strip():
                return {}
            return _parse(json.loads(text))
        except (UnicodeDecodeError, ValueError) as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ProfileError(
                f"{path}: not a simulated MIG state file: {problem} "
                "(remove it to start without MIG instances)"
            ) from None

    def save(self, state: State) -> None:
        """Replace the state, atomically (temp file, fsync, rename).

        Raises:
            MigError: the file cannot be written (one line naming it).
        """
        if self._path is None:
            with self._lock:
                self._memory = copy.deepcopy(state)
            return
        path = self._path
        data = json.dumps(_document(state), indent=1).encode() + b"\n"
        temp = ""
        try:
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
            temp = ""
        except OSError as exc:
            where = exc.filename or path
            raise MigError(
                f"cannot write the simulated MIG state {where}: {exc.strerror or exc}"
            ) from None
        finally:
            if temp:
                with contextlib.suppress(OSError):
                    os.unlink(temp)


def prune(state: State, gpus: Mapping[str, Gpu]) -> State:
    """The state without instances its GPU no longer reports (gone, MIG off, placement gone).

    `gpus` are the GPUs as discovery reports them, by UUID.
    """
    kept: State = {}
    for gpu_uuid, record in state.items():
        gpu = gpus.get(gpu_uuid)
        if gpu is None:
            continue
        reported = {m.uuid for m in gpu.mig_devices}
        kept[gpu_uuid] = GpuRecord(
            instances=[
                i for i in record.instances if simulated_mig_uuid(gpu_uuid, i.gi, i.ci) in reported
            ],
            creates=record.creates,
            destroys=record.destroys,
        )
    return kept
