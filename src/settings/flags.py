"""`Flags`: every flag's type, default and value check, on pydantic-settings.

Values arrive from the command line, the environment or the config file (see
`settings.sources`) already parsed into Python values; this model says which
of them are acceptable. The checks raise the reference plugin's messages, so
an invalid ``--mig-strategy`` reads ``unknown MIG strategy: bogus`` whether it
came from a flag, a variable or the file; the loader adds where it came from.

Fields that the reference validates at start-up are declared first and in the
reference's order: every problem is reported, one line each, and the first
line is the one the reference would have printed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import PlainValidator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from settings.choices import (
    AllocationPolicy,
    DeviceIdStrategy,
    DeviceListStrategy,
    DiscoveryStrategy,
    FallbackStrategy,
    LogFormat,
    MigStrategy,
    Readiness,
)
from settings.health_section import check_xid_words
from settings.sources import current_sources
from settings.values import show

__all__ = ["Flags"]

E = TypeVar("E", bound=StrEnum)


def _fail(message: str) -> PydanticCustomError:
    return PydanticCustomError("flag_value", "{message}", {"message": message})


def _choice(enum: type[E], template: str) -> PlainValidator:
    """Accept one member of ``enum``; ``template`` formats the rejection with ``{}``."""

    def check(value: Any) -> E:
        if isinstance(value, enum):
            return value
        if isinstance(value, str):
            try:
                return enum(value)
            except ValueError:
                pass
        raise _fail(template.format(value))

    return PlainValidator(check)


def _choices(enum: type[E], template: str, *, single_string: bool) -> PlainValidator:
    """A set of members, deduplicated and in canonical order (order carries no meaning)."""

    def check(value: Any) -> tuple[E, ...]:
        items = [value] if single_string and isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise _fail(f"expected a list; found {show(value)}")
        chosen: set[E] = set()
        for item in items:
            if isinstance(item, enum):
                chosen.add(item)
                continue
            try:
                chosen.add(enum(item))
            except ValueError:
                raise _fail(template.format(item)) from None
        return tuple(member for member in enum if member in chosen)

    return PlainValidator(check)


def _ordered_choices(enum: type[E], template: str) -> PlainValidator:
    """A list of members where order matters (fallbacks are tried in order)."""

    def check(value: Any) -> tuple[E, ...]:
        if not isinstance(value, list | tuple):
            raise _fail(f"expected a list; found {show(value)}")
        result: list[E] = []
        for item in value:
            try:
                result.append(item if isinstance(item, enum) else enum(item))
            except ValueError:
                raise _fail(template.format(item)) from None
        return tuple(result)

    return PlainValidator(check)


def _typed(kind: type, label: str) -> PlainValidator:
    def check(value: Any) -> Any:
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return value
        raise _fail(f"expected {label}; found {show(value)}")

    return PlainValidator(check)


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise _fail(f"expected a list of strings; found {show(value)}")
    # Free-form lists: an empty item (from ``A,,B`` or an empty variable) means nothing.
    return tuple(item for item in value if item)


def _go_list(values: tuple[int, ...]) -> str:
    return "[" + " ".join(str(value) for value in values) + "]"


def _imex_channels(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    ):
        raise _fail(f"expected a list of integers; found {show(value)}")
    channels = tuple(value)
    if channels not in ((), (0,)):
        raise _fail(
            "invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; "
            f"found {_go_list(channels)}"
        )
    return channels


def _address(value: Any) -> str:
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if sep and host and port.isdigit() and int(port) <= 65535:
            return value
    raise _fail(f"invalid address {show(value)}: expected HOST:PORT")


def _optional_address(value: Any) -> str:
    return "" if value == "" else _address(value)


def _seconds(value: Any) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and math.isfinite(value) and value >= 0:
        return float(value)
    raise _fail(f"expected a number of seconds >= 0; found {show(value)}")


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (``[prefix/]name``), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            "the prefix must be a DNS subdomain: lower case alphanumeric characters, "
            "'-' or '.', starting and ending with an alphanumeric character"
        )
    if not name or len(name) > 63:
        return "the name must be 1 to 63 characters"
    if not _LABEL_NAME.fullmatch(name):
        return (
            "the name must consist of alphanumeric characters, '-', '_' or '.', "
            "starting and ending with an alphanumeric character"
        )
    return None


def _label_key(flag: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise _fail(f"expected a string; found {show(value)}")
        if not value:
            raise _fail(f"invalid <{flag}>: must not be empty string")
        problem = _label_key_problem(value)
        if problem is not None:
            raise _fail(f"invalid <{flag}> {show(value)}: not a valid label key: {problem}")
        return value

    return check


def _xid_list(value: Any) -> str:
    """``all``, ``xids`` or XID numbers separated by commas (empty items are skipped)."""
    if not isinstance(value, str):
        raise _fail(f"expected a string; found {show(value)}")
    problem = check_xid_words(value)
    if problem is not None:
        raise _fail(problem)
    return value


Str = Annotated[str, _typed(str, "a string")]
Bool = Annotated[bool, _typed(bool, "a boolean (true or false)")]


class Flags(BaseSettings):
    """The value of every flag after command line > environment > file > default."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    # Checked at start-up by the reference, in this order.
    device_list_strategy: Annotated[
        tuple[DeviceListStrategy, ...],
        _choices(
            DeviceListStrategy,
            "invalid --device-list-strategy option: invalid strategy: {}",
            single_string=True,
        ),
    ] = (DeviceListStrategy.ENVVAR,)
    device_id_strategy: Annotated[
        DeviceIdStrategy, _choice(DeviceIdStrategy, "invalid --device-id-strategy option: {}")
    ] = DeviceIdStrategy.UUID
    shared_devices_allocation_policy: Annotated[
        AllocationPolicy,
        _choice(AllocationPolicy, "invalid --shared-devices-allocation-policy option: {}"),
    ] = AllocationPolicy.DISTRIBUTED
    device_discovery_strategy: Annotated[
        DiscoveryStrategy,
        _choice(DiscoveryStrategy, "invalid --device-discovery-strategy option: {}"),
    ] = DiscoveryStrategy.AUTO
    mig_strategy: Annotated[MigStrategy, _choice(MigStrategy, "unknown MIG strategy: {}")] = (
        MigStrategy.NONE
    )
    imex_channel_ids: Annotated[tuple[int, ...], PlainValidator(_imex_channels)] = ()

    fail_on_init_error: Bool = True
    driver_root: Str = "/"
    dev_root: Str = ""
    pass_device_specs: Bool = False
    gdrcopy_enabled: Bool = False
    gds_enabled: Bool = False
    mofed_enabled: Bool = False
    cdi_annotation_prefix: Str = "cdi.k8s.io/"
    nvidia_cdi_hook_path: Str = "/usr/bin/nvidia-ctk"
    driver_root_ctr_path: Str = "/driver-root"
    mps_root: Str = ""
    imex_required: Bool = False
    kubelet_socket: Str = "/var/lib/kubelet/device-plugins/kubelet.sock"
    config_file: Str = ""
    cdi_feature_flags: Annotated[tuple[str, ...], PlainValidator(_strings)] = ()
    cdi_disable_hooks: Annotated[tuple[str, ...], PlainValidator(_strings)] = ()

    mock_nvml: Str = ""
    mock_nvml_events: Str = ""
    state_address: Annotated[str, PlainValidator(_address)] = "127.0.0.1:9040"
    probe_address: Annotated[str, PlainValidator(_optional_address)] = ""
    log_format: Annotated[
        LogFormat, _choice(LogFormat, "invalid log format: {} (expected json or text)")
    ] = LogFormat.TEXT
    node_name: Str = ""
    config_directory: Str = ""
    default_config: Str = ""
    node_label: Annotated[str, PlainValidator(_label_key("node-label"))] = (
        "nvidia.com/device-plugin.config"
    )
    fallback_strategies: Annotated[
        tuple[FallbackStrategy, ...],
        _ordered_choices(FallbackStrategy, "unknown fallback strategy: {}"),
    ] = (FallbackStrategy.NAMED, FallbackStrategy.SINGLE)
    cdi_spec_dir: Str = "/var/run/cdi"
    health_quiet_period: Annotated[float, PlainValidator(_seconds)] = 60.0
    mps_container_root: Str = "/mps"
    events: Bool = True
    readiness: Annotated[
        Readiness, _choice(Readiness, "invalid readiness: {} (expected auto, serving or running)")
    ] = Readiness.AUTO
    disable_healthchecks: Annotated[str, PlainValidator(_xid_list)] = ""
    enable_healthchecks: Annotated[str, PlainValidator(_xid_list)] = ""

    @model_validator(mode="before")
    @classmethod
    def _dev_root_defaults_to_driver_root(cls, data: Any) -> Any:
        # The reference treats an absent *or empty* device root as "same as the
        # driver root"; resolving it here keeps every consumer from repeating it.
        if isinstance(data, dict) and not data.get("dev_root"):
            return {**data, "dev_root": data.get("driver_root", "/")}
        return data

    @property
    def state_host(self) -> str:
        """Host part of ``state_address`` (brackets of an IPv6 literal removed)."""
        return self.state_address.rpartition(":")[0].strip("[]")

    @property
    def state_port(self) -> int:
        return int(self.state_address.rpartition(":")[2])

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments (programmatic use, tests) first, then ours. The
        # built-in environment source is left out: it would read any variable
        # that happens to match a field name (NODE_NAME, ...) with its own
        # parsing rules. Dotenv and secret files are not inputs of the plugin.
        return (init_settings, *current_sources(settings_cls))
