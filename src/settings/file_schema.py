"""The v1 config file as pydantic models.

Field aliases are the keys users write (``migStrategy``, ``timeSlicing``);
field names are ours. Every leaf goes through one of the checks in
`settings.file_values`, so the only errors validation can produce are ones
whose text was written for users. Flag values (``flags.*``, ``imex.*``) are
only type-checked here: whether ``migStrategy: bogus`` is acceptable is
decided once, on the merged `Flags`, because a value on the command line
may override it.

``KEYS_CASE_SENSITIVE`` records a quirk users rely on: the reference matches
plain keys regardless of case (``deviceIdStrategy`` works) but the keys inside
sharing and resource entries exactly. The key normaliser in
`settings.file_reader` applies it before validation.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, model_validator
from pydantic_core import PydanticCustomError

from settings.file_values import (
    DevicesSpec,
    check_bool,
    check_devices,
    check_duration,
    check_int_list,
    check_pattern,
    check_replicas,
    check_resource_name,
    check_str,
    check_str_or_list,
    check_version,
)
from settings.health_section import (
    check_error_class,
    check_lists_disjoint,
    check_positive_seconds,
    check_seconds,
    check_xid_filter,
    check_xids,
)

__all__ = [
    "ConfigFileV1",
    "FileModel",
    "FlagsFile",
    "GfdFlagsFile",
    "HealthFile",
    "ImexFile",
    "PluginFlagsFile",
    "ReplicatedResourceFile",
    "ReplicatedResourcesFile",
    "ResourcePatternFile",
    "ResourcesFile",
    "SharingFile",
]

FileStr = Annotated[str | None, PlainValidator(check_str)]
FileBool = Annotated[bool | None, PlainValidator(check_bool)]


class FileModel(BaseModel):
    """Common settings: immutable, keyed by the file's spelling."""

    # Built on first use: a plugin run without a config file never pays for it.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    KEYS_CASE_SENSITIVE: ClassVar[bool] = False
    UNKNOWN_KEYS_ARE_ERRORS: ClassVar[bool] = False


class PluginFlagsFile(FileModel):
    pass_device_specs: FileBool = Field(None, alias="passDeviceSpecs")
    device_list_strategy: Annotated[
        str | tuple[str, ...] | None, PlainValidator(check_str_or_list)
    ] = Field(None, alias="deviceListStrategy")
    device_id_strategy: FileStr = Field(None, alias="deviceIDStrategy")
    cdi_annotation_prefix: FileStr = Field(None, alias="cdiAnnotationPrefix")
    nvidia_ctk_path: FileStr = Field(None, alias="nvidiaCTKPath")
    container_driver_root: FileStr = Field(None, alias="containerDriverRoot")
    shared_devices_allocation_policy: FileStr = Field(None, alias="sharedDevicesAllocationPolicy")


class GfdFlagsFile(FileModel):
    """Settings of the node labeller; kept for it, unused by the plugin."""

    oneshot: FileBool = Field(None, alias="oneshot")
    no_timestamp: FileBool = Field(None, alias="noTimestamp")
    sleep_interval: Annotated[float | None, PlainValidator(check_duration)] = Field(
        None, alias="sleepInterval"
    )
    output_file: FileStr = Field(None, alias="outputFile")
    machine_type_file: FileStr = Field(None, alias="machineTypeFile")


class FlagsFile(FileModel):
    mig_strategy: FileStr = Field(None, alias="migStrategy")
    fail_on_init_error: FileBool = Field(None, alias="failOnInitError")
    mps_root: FileStr = Field(None, alias="mpsRoot")
    nvidia_driver_root: FileStr = Field(None, alias="nvidiaDriverRoot")
    nvidia_dev_root: FileStr = Field(None, alias="nvidiaDevRoot")
    gdrcopy_enabled: FileBool = Field(None, alias="gdrcopyEnabled")
    gds_enabled: FileBool = Field(None, alias="gdsEnabled")
    mofed_enabled: FileBool = Field(None, alias="mofedEnabled")
    use_node_feature_api: FileBool = Field(None, alias="useNodeFeatureAPI")
    device_discovery_strategy: FileStr = Field(None, alias="deviceDiscoveryStrategy")
    plugin: PluginFlagsFile | None = Field(None, alias="plugin")
    gfd: GfdFlagsFile | None = Field(None, alias="gfd")


def _optional_name(value: Any) -> str | None:
    return None if value is None else check_resource_name(value, missing="")


def _need_resources(value: Any) -> Any:
    if value is None or value == []:
        raise PydanticCustomError("no_resources", "no resources specified")
    return value


class ReplicatedResourceFile(FileModel):
    """One ``sharing.*.resources[]`` entry; fields in the order they are checked."""

    KEYS_CASE_SENSITIVE = True

    name: Annotated[
        str, PlainValidator(partial(check_resource_name, missing="no resource name specified"))
    ] = Field(None, alias="name", validate_default=True)
    devices: Annotated[DevicesSpec, PlainValidator(check_devices)] = Field("all", alias="devices")
    replicas: Annotated[int, PlainValidator(check_replicas)] = Field(
        None, alias="replicas", validate_default=True
    )
    rename: Annotated[str | None, PlainValidator(_optional_name)] = Field(None, alias="rename")


class ReplicatedResourcesFile(FileModel):
    """``sharing.timeSlicing`` or ``sharing.mps``."""

    KEYS_CASE_SENSITIVE = True

    rename_by_default: FileBool = Field(None, alias="renameByDefault")
    fail_requests_greater_than_one: FileBool = Field(None, alias="failRequestsGreaterThanOne")
    resources: Annotated[tuple[ReplicatedResourceFile, ...], BeforeValidator(_need_resources)] = (
        Field(None, alias="resources", validate_default=True)
    )


class SharingFile(FileModel):
    time_slicing: ReplicatedResourcesFile | None = Field(None, alias="timeSlicing")
    mps: ReplicatedResourcesFile | None = Field(None, alias="mps")

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
            raise PydanticCustomError(
                "two_strategies",
                "timeSlicing and mps are mutually exclusive; configure only one of them",
            )
        return self


class ResourcePatternFile(FileModel):
    KEYS_CASE_SENSITIVE = True

    pattern: Annotated[str, PlainValidator(check_pattern)] = Field(
        None, alias="pattern", validate_default=True
    )
    name: Annotated[
        str,
        PlainValidator(
            partial(check_resource_name, missing="resources must have a 'name' field set")
        ),
    ] = Field(None, alias="name", validate_default=True)


class ResourcesFile(FileModel):
    gpus: tuple[ResourcePatternFile, ...] | None = Field(None, alias="gpus")
    mig: tuple[ResourcePatternFile, ...] | None = Field(None, alias="mig")


class ImexFile(FileModel):
    channel_ids: Annotated[tuple[int, ...] | None, PlainValidator(check_int_list)] = Field(
        None, alias="channelIDs"
    )
    required: FileBool = Field(None, alias="required")


class HealthFile(FileModel):
    """``health``: every key optional, kept as written; unknown keys are errors.

    The device health policy reads the section; the checks (and why an
    unknown key is an error here) are in `settings.health_section`.
    """

    KEYS_CASE_SENSITIVE = True
    UNKNOWN_KEYS_ARE_ERRORS = True

    quiet_period: Annotated[Any, PlainValidator(check_seconds)] = Field(None, alias="quietPeriod")
    probe_interval: Annotated[Any, PlainValidator(check_positive_seconds)] = Field(
        None, alias="probeInterval"
    )
    disable_healthchecks: Annotated[Any, PlainValidator(check_xid_filter)] = Field(
        None, alias="disableHealthchecks"
    )
    enable_healthchecks: Annotated[Any, PlainValidator(check_xid_filter)] = Field(
        None, alias="enableHealthchecks"
    )
    ignored_xids: Annotated[Any, PlainValidator(check_xids)] = Field(None, alias="ignoredXids")
    transient_xids: Annotated[Any, PlainValidator(check_xids)] = Field(None, alias="transientXids")
    sticky_xids: Annotated[Any, PlainValidator(check_xids)] = Field(None, alias="stickyXids")
    other_xids: Annotated[Any, PlainValidator(check_error_class)] = Field(None, alias="otherXids")
    double_bit_ecc: Annotated[Any, PlainValidator(check_error_class)] = Field(
        None, alias="doubleBitEcc"
    )

    @model_validator(mode="after")
    def _each_xid_in_one_list(self) -> HealthFile:
        check_lists_disjoint(self.as_written())
        return self

    def as_written(self) -> dict[str, Any]:
        """The keys the file gave, with their values as written."""
        return dict(self.model_dump(by_alias=True, exclude_unset=True))


class ConfigFileV1(FileModel):
    """The whole file. ``version`` comes first so a wrong version is reported first."""

    version: Annotated[str, PlainValidator(check_version)] = Field("v1", alias="version")
    flags: FlagsFile | None = Field(None, alias="flags")
    resources: ResourcesFile | None = Field(None, alias="resources")
    sharing: SharingFile | None = Field(None, alias="sharing")
    imex: ImexFile | None = Field(None, alias="imex")
    health: HealthFile | None = Field(None, alias="health")
