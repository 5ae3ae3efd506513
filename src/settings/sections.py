"""The config file's sections beside the flags: sharing, resources, health, the labeller's.

Each is a frozen pydantic model whose aliases are the keys users write
(``timeSlicing``, ``renameByDefault``) and whose every leaf goes through a
check of its own, so the only errors validation can produce are ones whose
text was written for users; where the reference has a message for a case,
its wording is kept. They are validated once, as parts of the effective
config (`settings.effective`), and are its values; only ``sharing`` is
worked out further, into the `Sharing` the plugin applies.

``KEYS_CASE_SENSITIVE`` records a quirk users rely on: the reference matches
plain keys regardless of case (``timeslicing`` works) but the keys inside
sharing and resource entries exactly. ``UNKNOWN_KEYS_ARE_ERRORS`` marks the
``health`` section, where a misspelt ``quietPeriod`` would otherwise keep
the default while the operator believes it changed. The key normaliser in
`settings.file_reader` applies both before validation.

Two sections hold flags: three keys of ``health`` can also be set by flags
and variables, and ``flags.gfd.*`` with ``flags.useNodeFeatureAPI`` are the
node labeller's flags; both are declared here, with their `Flag` markers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from settings.checks import Bool, Str, problem, seconds, wrong_type
from settings.choices import ErrorClass, SharingStrategy
from settings.errors import ConfigError
from settings.flag_spec import Flag, Kind
from settings.values import integral, parse_duration, show

__all__ = [
    "DevicesSpec",
    "FileSection",
    "GfdSettings",
    "HealthSection",
    "ResourcePattern",
    "ResourceRules",
    "SharedResource",
    "Sharing",
    "SharingFile",
    "is_device_reference",
]


class FileSection(BaseModel):
    """Common settings: immutable, keyed by the file's spelling."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    KEYS_CASE_SENSITIVE: ClassVar[bool] = False
    UNKNOWN_KEYS_ARE_ERRORS: ClassVar[bool] = False


# -- resource names and device references -------------------------------------

_RESOURCE_PREFIX = "nvidia.com/"
_MAX_RESOURCE_NAME = 63
_RFC1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RFC1123_HINT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _resource_name(value: Any, *, missing: str) -> str:
    """A resource name, returned fully qualified (``gpu`` -> ``nvidia.com/gpu``)."""
    if value is None:
        raise problem(missing)
    if not isinstance(value, str):
        raise wrong_type("a resource name", value)
    full = value if value.startswith(_RESOURCE_PREFIX) else _RESOURCE_PREFIX + value
    if len(full) > _MAX_RESOURCE_NAME:
        limit = _MAX_RESOURCE_NAME
        raise problem(f"fully-qualified resource name must be {limit} characters or less: {full}")
    _, _, local = full.partition("/")
    if not _RFC1123_SUBDOMAIN.fullmatch(local):
        raise problem(f"incorrect format for resource name '{full}': {_RFC1123_HINT}")
    return full


def _optional_name(value: Any) -> str | None:
    return None if value is None else _resource_name(value, missing="")


def _pattern(value: Any) -> str:
    if value is None:
        raise problem("resources must have a 'pattern' field set")
    if not isinstance(value, str):
        raise wrong_type("a pattern string", value)
    return value


def _replicas(value: Any) -> int:
    if value is None:
        raise problem("no replicas specified")
    replicas = integral(value)
    if replicas is None:
        raise problem(f"number of replicas must be an integer; found {show(value)}")
    if replicas < 2:
        raise problem(f"number of replicas must be >= 2; found {replicas}")
    return replicas


# The reference's rules (Go's ParseUint and google/uuid's Parse): an index is
# ASCII digits that fit in 64 bits, a MIG index is two of them joined by ":",
# and a UUID is one of the four spellings that library reads.
_UINT = r"[0-9]+"
_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID = rf"(?:{_HEX_UUID}|\{{{_HEX_UUID}\}}|(?i:urn:uuid:){_HEX_UUID}|[0-9a-fA-F]{{32}})"
_INDEX = re.compile(_UINT)
_MIG_INDEX = re.compile(rf"({_UINT}):({_UINT})")
_GPU_UUID = re.compile(rf"GPU-{_UUID}")
_MIG_UUID = re.compile(rf"MIG-{_UUID}")
_MIG_LEGACY_UUID = re.compile(rf"MIG-GPU-{_UUID}/({_UINT})/({_UINT})")
_UINT_MAX = 2**64 - 1


def _fits(*numbers: str) -> bool:
    # The length check first: int() refuses text of thousands of digits.
    return all(len(number) <= 20 and int(number) <= _UINT_MAX for number in numbers)


def is_device_reference(text: str) -> bool:
    """A GPU index (``0``), MIG index (``0:1``), GPU UUID or MIG UUID (either form)."""
    if _INDEX.fullmatch(text):
        return _fits(text)
    for pattern in (_MIG_INDEX, _MIG_LEGACY_UUID):
        found = pattern.fullmatch(text)
        if found:
            return _fits(*found.groups())
    return bool(_GPU_UUID.fullmatch(text) or _MIG_UUID.fullmatch(text))


def _device_reference(item: Any) -> str | int | None:
    whole = integral(item)
    if whole is not None:
        return whole if 0 <= whole <= _UINT_MAX else None
    if isinstance(item, str) and is_device_reference(item):
        return item
    return None


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
        reference = _device_reference(item)
        if reference is None:
            raise problem(
                f"unsupported type for device in devices list: {show(item)} (expected a GPU "
                "index, a 'gpu:mig' index, a GPU UUID or a MIG UUID)"
            )
        references.append(reference)
    return tuple(references)


# -- sharing -------------------------------------------------------------------


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
        str, BeforeValidator(partial(_resource_name, missing="no resource name specified"))
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


def _need_resources(value: Any) -> Any:
    if value is None or value == []:
        raise PydanticCustomError("no_resources", "no resources specified")
    return value


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
        ``devices`` selects what each entry replicates (the reference warns and
        replicates every device instead; see `settings.sharing`)."""
        strategy = SharingStrategy.MPS if key == "mps" else SharingStrategy.TIME_SLICING
        rename_by_default = bool(self.rename_by_default)
        resources: list[SharedResource] = []
        for index, entry in enumerate(self.resources):
            where = f"sharing.{key}.resources[{index}]"
            shared_name = f"{entry.name}.shared"
            if entry.rename is not None and (not rename_by_default or entry.rename != shared_name):
                warnings.append(
                    _not_supported(
                        origin,
                        f"{where}.rename",
                        f"Setting the 'rename' field in sharing.{key}.resources",
                    )
                )
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


def _not_supported(origin: str, path: str, what: str) -> str:
    # The reference's warning texts, located.
    return str(
        ConfigError(
            f"{what} is not yet supported in the config. Ignoring...", origin=origin, path=path
        )
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


# -- resources -----------------------------------------------------------------


class ResourcePattern(FileSection):
    """One ``resources.gpus[]``/``.mig[]`` entry: the devices matching ``pattern`` are ``name``."""

    KEYS_CASE_SENSITIVE = True

    pattern: Annotated[str, BeforeValidator(_pattern)] = Field(
        default=None, alias="pattern", validate_default=True
    )
    name: Annotated[
        str,
        BeforeValidator(partial(_resource_name, missing="resources must have a 'name' field set")),
    ] = Field(default=None, alias="name", validate_default=True)


def _absent_is_empty(value: Any) -> Any:
    return () if value is None else value


class ResourceRules(FileSection):
    """``resources``: parsed and checked, then not applied (with the reference's warning)."""

    gpus: Annotated[tuple[ResourcePattern, ...], BeforeValidator(_absent_is_empty)] = Field(
        default=(), alias="gpus"
    )
    mig: Annotated[tuple[ResourcePattern, ...], BeforeValidator(_absent_is_empty)] = Field(
        default=(), alias="mig"
    )


# -- health --------------------------------------------------------------------

_XID_WORDS = frozenset({"all", "xids"})
_UINT64_MAX = (1 << 64) - 1
_XID_LISTS = ("ignoredXids", "transientXids", "stickyXids")


def xid_words_problem(text: str) -> str | None:
    """Why a comma list of XIDs (``all``, ``xids`` or numbers) is invalid, or None."""
    for raw in text.split(","):
        token = raw.strip().lower()
        if not token or token in _XID_WORDS:
            continue
        if not (token.isascii() and token.isdigit() and int(token) <= _UINT64_MAX):
            return (
                f"invalid XID {show(raw.strip())}: expected all, xids or XID numbers "
                "separated by commas"
            )
    return None


def _xid_filter(value: Any) -> str:
    """``all``, ``xids`` or XIDs, as a comma string (the variable's form) or a list."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(
        isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in items
    ):
        raise problem(
            f"expected 'all', 'xids', or XIDs (a list or comma string); found {show(value)}"
        )
    text = value if isinstance(value, str) else ",".join(str(item) for item in items)
    found = xid_words_problem(text)
    if found is not None:
        raise problem(found)
    return text


def _xids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise problem(f"expected a list of XIDs; found {show(value)}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise problem(f"XIDs are whole numbers >= 0; found {show(item)}")
    return tuple(sorted(set(value)))


def _error_class(value: Any) -> ErrorClass:
    try:
        return ErrorClass(value)
    except ValueError:
        classes = ", ".join(member.value for member in ErrorClass)
        raise problem(f"expected one of {classes}; found {show(value)}") from None


Xids = Annotated[tuple[int, ...] | None, BeforeValidator(_xids)]
Class = Annotated[ErrorClass, BeforeValidator(_error_class)]


# fmt: off
class HealthSection(FileSection):
    """``health``: how the device health machine treats errors (`states.health_policy`).

    Every key is optional. ``quietPeriod``, ``disableHealthchecks`` and
    ``enableHealthchecks`` are also flags or variables, which win over the
    file like every flag. An XID may be in at most one of the three lists.
    """

    KEYS_CASE_SENSITIVE = True
    UNKNOWN_KEYS_ARE_ERRORS = True

    quiet_period: Annotated[float, Flag(
        ("health-quiet-period",), ("HEALTH_QUIET_PERIOD",),
        "seconds without new errors before an unhealthy device is re-probed",
        "health.quietPeriod", reference=False, field="health_quiet_period"),
        BeforeValidator(seconds)] = Field(default=60.0, alias="quietPeriod")
    probe_interval: Annotated[float, BeforeValidator(partial(seconds, positive=True))] = Field(
        default=10.0, alias="probeInterval")
    disable_healthchecks: Annotated[str, Flag(
        (), ("DP_DISABLE_HEALTHCHECKS",),
        "XIDs that do not mark a device unhealthy: 'all', 'xids' or XID numbers (comma list)",
        "health.disableHealthchecks"), BeforeValidator(_xid_filter)] = Field(
        default="", alias="disableHealthchecks")
    enable_healthchecks: Annotated[str, Flag(
        (), ("DP_ENABLE_HEALTHCHECKS",),
        "XIDs that count even if disabled by default: 'all', 'xids' or XID numbers (comma list)",
        "health.enableHealthchecks"), BeforeValidator(_xid_filter)] = Field(
        default="", alias="enableHealthchecks")
    ignored_xids: Xids = Field(default=None, alias="ignoredXids")
    transient_xids: Xids = Field(default=None, alias="transientXids")
    sticky_xids: Xids = Field(default=None, alias="stickyXids")
    other_xids: Class = Field(default=ErrorClass.TRANSIENT, alias="otherXids")
    double_bit_ecc: Class = Field(default=ErrorClass.STICKY, alias="doubleBitEcc")
# fmt: on

    @model_validator(mode="after")
    def _each_xid_in_one_list(self) -> HealthSection:
        given = [(key, getattr(self, _field(key))) for key in _XID_LISTS]
        lists = [(key, set(xids)) for key, xids in given if xids is not None]
        for index, (first, first_set) in enumerate(lists):
            for second, second_set in lists[index + 1 :]:
                both = sorted(first_set & second_set)
                if both:
                    raise problem(f"{second}: XID {both[0]} is also in health.{first}")
        return self


def _field(alias: str) -> str:
    return next(name for name, info in HealthSection.model_fields.items() if info.alias == alias)


# -- the labeller's flags --------------------------------------------------------


def _duration(value: Any) -> float:
    """Seconds, or ``infinite``; in the file a bare number has been read as nanoseconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as error:
            raise problem(str(error)) from None
    raise problem(f"invalid duration; found {show(value)}")


# fmt: off
class GfdSettings(BaseModel):
    """``flags.gfd`` and ``flags.useNodeFeatureAPI``: the node labeller's flags in the shared file.

    The plugin checks them with the rest of the file (a bad value is a bad
    file for every binary that reads it) but uses none of them.
    ``sleep_interval`` is in seconds; ``math.inf`` means infinite.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    oneshot: Annotated[Bool, Flag(
        ("oneshot",), ("GFD_ONESHOT",), "label once and exit", "flags.gfd.oneshot")] = False
    no_timestamp: Annotated[Bool, Flag(
        ("no-timestamp",), ("GFD_NO_TIMESTAMP",),
        "do not write the nvidia.com/gfd.timestamp label", "flags.gfd.noTimestamp")] = False
    sleep_interval: Annotated[float, Flag(
        ("sleep-interval",), ("GFD_SLEEP_INTERVAL",),
        "time between labelling passes (Go duration such as 60s, or infinite)",
        "flags.gfd.sleepInterval", kind=Kind.DURATION), BeforeValidator(_duration)] = 60.0
    output_file: Annotated[Str, Flag(
        ("output-file", "output", "o"), ("GFD_OUTPUT_FILE",),
        "features file to write; empty writes the labels to stdout", "flags.gfd.outputFile",
    )] = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
    machine_type_file: Annotated[Str, Flag(
        ("machine-type-file",), ("GFD_MACHINE_TYPE_FILE",), "file holding the machine type",
        "flags.gfd.machineTypeFile")] = "/sys/class/dmi/id/product_name"
    use_node_feature_api: Annotated[Bool, Flag(
        ("use-node-feature-api",), ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"),
        "publish a NodeFeature object instead of writing the features file",
        "flags.useNodeFeatureAPI")] = False

    @field_serializer("sleep_interval", when_used="json")
    def _infinite(self, value: float) -> float | str:
        return "infinite" if value == math.inf else value
# fmt: on
