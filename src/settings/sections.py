"""The config file's sections beside the flags: resources, health, the labeller's.

Each is a frozen pydantic model whose aliases are the keys users write
(``quietPeriod``, ``stickyXids``) and whose every leaf goes through a
check of its own, so the only errors validation can produce are ones whose
text was written for users; where the reference has a message for a case,
its wording is kept. They are validated once, as parts of the effective
config (`settings.effective`), and are its values. ``sharing`` is a section
too, with its own module (`settings.sharing`).

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

from settings.checks import Bool, Str, problem, seconds, wrong_type
from settings.choices import ErrorClass
from settings.errors import ConfigError
from settings.flag_spec import Flag, Kind
from settings.names import resource_name
from settings.values import parse_duration, show

__all__ = [
    "FileSection",
    "GfdSettings",
    "HealthSection",
    "ResourcePattern",
    "ResourceRules",
    "not_supported",
]


class FileSection(BaseModel):
    """Common settings: immutable, keyed by the file's spelling."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    KEYS_CASE_SENSITIVE: ClassVar[bool] = False
    UNKNOWN_KEYS_ARE_ERRORS: ClassVar[bool] = False


def not_supported(origin: str, path: str, what: str) -> str:
    """The reference's warning for a key it reads but does not apply, located."""
    return str(
        ConfigError(
            f"{what} is not yet supported in the config. Ignoring...", origin=origin, path=path
        )
    )


def _pattern(value: Any) -> str:
    if value is None:
        raise problem("resources must have a 'pattern' field set")
    if not isinstance(value, str):
        raise wrong_type("a pattern string", value)
    return value


# -- resources -----------------------------------------------------------------


class ResourcePattern(FileSection):
    """One ``resources.gpus[]``/``.mig[]`` entry: the devices matching ``pattern`` are ``name``."""

    KEYS_CASE_SENSITIVE = True

    pattern: Annotated[str, BeforeValidator(_pattern)] = Field(
        default=None, alias="pattern", validate_default=True
    )
    name: Annotated[
        str,
        BeforeValidator(partial(resource_name, missing="resources must have a 'name' field set")),
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
