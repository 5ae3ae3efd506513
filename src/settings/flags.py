"""`Flags`: every flag of the plugin, declared once.

Each field is one flag: its type, default and value check, and (in its `Flag`
marker, see `settings.flag_spec`) everything else about it; `PLUGIN_FLAGS`
is made from these fields, and the node labeller and the MPS daemon take the
specs of the flags they share from here too. Three flags tune the device
health machine and live in the file's ``health`` section, so they are
declared on `settings.sections.HealthSection`.

A value reaches a field from the command line or the environment already
parsed (`settings.command_line`), or from the config file as YAML wrote it,
and is checked here, once, with the reference plugin's messages: an invalid
``--mig-strategy`` reads ``unknown MIG strategy: bogus`` whether it came from
a flag, a variable or the file. Fields that the reference validates at
start-up are declared first and in its order, so the first problem listed is
the one the reference would have printed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

from settings.checks import Bool, Str, problem, value_problem, wrong_type
from settings.choices import (
    AllocationPolicy,
    DeviceIdStrategy,
    DeviceListStrategy,
    DiscoveryStrategy,
    FallbackStrategy,
    KubeletApi,
    LogFormat,
    MigStrategy,
    Readiness,
)
from settings.command_line import FlagSet
from settings.flag_spec import Flag, FlagSpec, flag_specs
from settings.gpu_refs import gpu_list
from settings.names import dns_subdomain, label_key
from settings.sections import GfdSettings, HealthSection
from settings.values import integral, show

__all__ = [
    "FLAGS",
    "FLAGS_BY_FIELD",
    "PLUGIN_FLAGS",
    "PROGRAM",
    "SETTINGS_SPECS",
    "Flags",
]

PROGRAM = "nvidia-device-plugin"

E = TypeVar("E", bound=StrEnum)


def _choice(enum: type[E], template: str) -> BeforeValidator:
    """Accept one member of ``enum``; ``template`` formats the rejection with ``{}``."""

    def check(value: Any) -> E:
        if isinstance(value, enum):
            return value
        if not isinstance(value, str):
            raise wrong_type("a string", value)
        try:
            return enum(value)
        except ValueError:
            raise value_problem(template.format(value)) from None

    return BeforeValidator(check)


def _list_strategies(value: Any) -> tuple[DeviceListStrategy, ...]:
    """A set of strategies in canonical order: a list, or (from the file) one string, not split."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise problem(f"invalid deviceListStrategy: {show(value)}")
    chosen: set[DeviceListStrategy] = set()
    for item in items:
        try:
            chosen.add(DeviceListStrategy(item))
        except ValueError:
            raise value_problem(
                f"invalid --device-list-strategy option: invalid strategy: {item}"
            ) from None
    return tuple(member for member in DeviceListStrategy if member in chosen)


def _fallbacks(value: Any) -> tuple[FallbackStrategy, ...]:
    """Fallback strategies in the order given (they are tried in order)."""
    if not isinstance(value, list | tuple):
        raise wrong_type("a list", value)
    strategies = []
    for item in value:
        try:
            strategies.append(FallbackStrategy(item))
        except ValueError:
            raise value_problem(f"unknown fallback strategy: {item}") from None
    return tuple(strategies)


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise wrong_type("a list of strings", value)
    # Free-form lists: an empty item (from ``A,,B`` or an empty variable) means nothing.
    return tuple(item for item in value if item)


def _imex_channels(value: Any) -> tuple[int, ...]:
    items = [integral(item) for item in value] if isinstance(value, list | tuple) else [None]
    if None in items:
        raise wrong_type("a list of integers", value)
    channels = tuple(item for item in items if item is not None)
    if channels not in ((), (0,)):
        found = "[" + " ".join(str(channel) for channel in channels) + "]"  # as Go prints []int
        raise value_problem(
            f"invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; "
            f"found {found}"
        )
    return channels


def _address(value: Any) -> str:
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if sep and host and port.isdigit() and int(port) <= 65535:
            return value
    raise value_problem(f"invalid address {show(value)}: expected HOST:PORT")


def _optional_address(value: Any) -> str:
    return "" if value == "" else _address(value)


# One flag per field, each with its marker: kept compact so they read as a table.
# fmt: off
class Flags(BaseModel):
    """The value of every flag after command line > environment > file > default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Checked at start-up by the reference, in this order.
    device_list_strategy: Annotated[
        tuple[DeviceListStrategy, ...],
        Flag(("device-list-strategy",), ("DEVICE_LIST_STRATEGY",),
             "how allocated devices are passed to the runtime (comma list)",
             "flags.plugin.deviceListStrategy"),
        BeforeValidator(_list_strategies),
    ] = (DeviceListStrategy.ENVVAR,)
    device_id_strategy: Annotated[
        DeviceIdStrategy,
        Flag(("device-id-strategy",), ("DEVICE_ID_STRATEGY",),
             "which identifier names an allocated device", "flags.plugin.deviceIDStrategy"),
        _choice(DeviceIdStrategy, "invalid --device-id-strategy option: {}"),
    ] = DeviceIdStrategy.UUID
    shared_devices_allocation_policy: Annotated[
        AllocationPolicy,
        Flag(("shared-devices-allocation-policy",), ("SHARED_DEVICES_ALLOCATION_POLICY",),
             "how replicas of shared devices are picked for a request",
             "flags.plugin.sharedDevicesAllocationPolicy"),
        _choice(AllocationPolicy, "invalid --shared-devices-allocation-policy option: {}"),
    ] = AllocationPolicy.DISTRIBUTED
    device_discovery_strategy: Annotated[
        DiscoveryStrategy,
        Flag(("device-discovery-strategy",), ("DEVICE_DISCOVERY_STRATEGY",),
             "which backend discovers the devices (auto and nvml use NVML; tegra is accepted "
             "but has no backend here, so start-up fails saying so)",
             "flags.deviceDiscoveryStrategy"),
        _choice(DiscoveryStrategy, "invalid --device-discovery-strategy option: {}"),
    ] = DiscoveryStrategy.AUTO
    mig_strategy: Annotated[
        MigStrategy,
        Flag(("mig-strategy",), ("MIG_STRATEGY",),
             "how MIG devices are exposed on GPUs that support MIG", "flags.migStrategy"),
        _choice(MigStrategy, "unknown MIG strategy: {}"),
    ] = MigStrategy.NONE
    imex_channel_ids: Annotated[
        tuple[int, ...],
        Flag(("imex-channel-ids",), ("IMEX_CHANNEL_IDS",),
             "IMEX channels to add to every allocation (comma list; only 0 is supported)",
             "imex.channelIDs"),
        BeforeValidator(_imex_channels),
    ] = ()

    fail_on_init_error: Annotated[Bool, Flag(
        ("fail-on-init-error",), ("FAIL_ON_INIT_ERROR",),
        "exit when initialisation fails; when false, stay up, report the reason and retry",
        "flags.failOnInitError")] = True
    driver_root: Annotated[Str, Flag(
        ("driver-root", "nvidia-driver-root"), ("NVIDIA_DRIVER_ROOT",),
        "root of the NVIDIA driver installation on the host", "flags.nvidiaDriverRoot")] = "/"
    dev_root: Annotated[Str, Flag(
        ("dev-root", "nvidia-dev-root"), ("NVIDIA_DEV_ROOT",),
        "root under which device nodes are found; empty means the driver root",
        "flags.nvidiaDevRoot", shown_default="(the driver root)")] = ""
    pass_device_specs: Annotated[Bool, Flag(
        ("pass-device-specs",), ("PASS_DEVICE_SPECS",),
        "also pass device nodes to the kubelet (needed for the static CPU manager policy)",
        "flags.plugin.passDeviceSpecs")] = False
    gdrcopy_enabled: Annotated[Bool, Flag(
        ("gdrcopy-enabled",), ("GDRCOPY_ENABLED",), "make GDRCopy available to containers",
        "flags.gdrcopyEnabled")] = False
    gds_enabled: Annotated[Bool, Flag(
        ("gds-enabled",), ("GDS_ENABLED",), "make GPUDirect Storage available to containers",
        "flags.gdsEnabled")] = False
    mofed_enabled: Annotated[Bool, Flag(
        ("mofed-enabled",), ("MOFED_ENABLED",), "make MOFED devices available to containers",
        "flags.mofedEnabled")] = False
    cdi_annotation_prefix: Annotated[Str, Flag(
        ("cdi-annotation-prefix",), ("CDI_ANNOTATION_PREFIX",), "prefix of the CDI annotation keys",
        "flags.plugin.cdiAnnotationPrefix")] = "cdi.k8s.io/"
    nvidia_cdi_hook_path: Annotated[Str, Flag(
        ("nvidia-cdi-hook-path", "nvidia-ctk-path"), ("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"),
        "path of the nvidia-cdi-hook (or nvidia-ctk) executable used in CDI specs",
        "flags.plugin.nvidiaCTKPath")] = "/usr/bin/nvidia-ctk"
    driver_root_ctr_path: Annotated[Str, Flag(
        ("driver-root-ctr-path", "container-driver-root"),
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        "where the driver root is mounted inside this container",
        "flags.plugin.containerDriverRoot")] = "/driver-root"
    mps_root: Annotated[Str, Flag(
        ("mps-root",), ("MPS_ROOT",),
        "host directory for MPS pipes and logs; required when MPS sharing is configured",
        "flags.mpsRoot")] = ""
    imex_required: Annotated[Bool, Flag(
        ("imex-required",), ("IMEX_REQUIRED",),
        "fail when a requested IMEX channel does not exist", "imex.required")] = False
    kubelet_socket: Annotated[Str, Flag(
        ("kubelet-socket",), ("KUBELET_SOCKET",),
        "kubelet registration socket; empty skips registration",
    )] = "/var/lib/kubelet/device-plugins/kubelet.sock"
    config_file: Annotated[Str, Flag(
        ("config-file",), ("CONFIG_FILE",), "v1 config file (YAML or JSON); empty means none")] = ""
    cdi_feature_flags: Annotated[tuple[str, ...], Flag(
        ("cdi-feature-flags",), ("CDI_FEATURE_FLAGS",),
        "feature flags for CDI spec generation (comma list)"), BeforeValidator(_strings)] = ()
    cdi_disable_hooks: Annotated[tuple[str, ...], Flag(
        ("cdi-disable-hooks",), ("CDI_DISABLE_HOOKS",),
        "CDI hooks to leave out of generated specs; 'all' drops every hook (comma list)"),
        BeforeValidator(_strings)] = ()
    include_devices: Annotated[tuple[str, ...], Flag(
        ("include-devices",), ("INCLUDE_DEVICES",),
        "GPUs to use, by index, UUID or PCI bus ID; empty uses all (comma list)",
        "flags.plugin.includeDevices", reference=False), BeforeValidator(gpu_list)] = ()
    exclude_devices: Annotated[tuple[str, ...], Flag(
        ("exclude-devices",), ("EXCLUDE_DEVICES",),
        "GPUs never to use (not advertised, health-checked, labelled or in CDI specs), by "
        "index, UUID or PCI bus ID; wins over --include-devices (comma list)",
        "flags.plugin.excludeDevices", reference=False), BeforeValidator(gpu_list)] = ()

    mock_nvml: Annotated[Str, Flag(
        ("mock-nvml",), ("MOCK_NVML",),
        "use the simulated GPU backend: a node profile name or a node description file",
        reference=False)] = ""
    mock_nvml_events: Annotated[Str, Flag(
        ("mock-nvml-events",), ("MOCK_NVML_EVENTS",),
        "where the simulated backend accepts injected health events", reference=False)] = ""
    state_address: Annotated[str, Flag(
        ("state-address",), ("STATE_ADDRESS",),
        "HOST:PORT of the inspection endpoint (/healthz, /readyz, /state, /metrics)",
        reference=False), BeforeValidator(_address)] = "127.0.0.1:9040"
    probe_address: Annotated[str, Flag(
        ("probe-address",), ("PROBE_ADDRESS",),
        "HOST:PORT of a listener for /healthz and /readyz alone, which readers of /state and "
        "/metrics cannot delay (empty: probes on --state-address only)", reference=False),
        BeforeValidator(_optional_address)] = ""
    log_format: Annotated[LogFormat, Flag(
        ("log-format",), ("LOG_FORMAT",), "log record format", reference=False),
        _choice(LogFormat, "invalid log format: {} (expected json or text)")] = LogFormat.TEXT
    node_name: Annotated[Str, Flag(
        ("node-name",), ("NODE_NAME",),
        "name of this node (its config label, GPU cordon annotation and Events)",
        reference=False)] = ""
    config_directory: Annotated[Str, Flag(
        ("config-directory",), ("CONFIG_DIRECTORY",),
        "directory of named configs (a mounted ConfigMap) chosen by the node label",
        reference=False)] = ""
    default_config: Annotated[Str, Flag(
        ("default-config",), ("DEFAULT_CONFIG",),
        "config in --config-directory used when the node label is unset", reference=False)] = ""
    node_label: Annotated[str, Flag(
        ("node-label",), ("NODE_LABEL",), "node label whose value names the config to use",
        reference=False), BeforeValidator(label_key("node-label"))] = (
        "nvidia.com/device-plugin.config"
    )
    fallback_strategies: Annotated[tuple[FallbackStrategy, ...], Flag(
        ("fallback-strategies",), ("FALLBACK_STRATEGIES",),
        "what to use when neither the label nor --default-config names a config (comma list)",
        reference=False), BeforeValidator(_fallbacks)] = (
        FallbackStrategy.NAMED, FallbackStrategy.SINGLE
    )
    cdi_spec_dir: Annotated[Str, Flag(
        ("cdi-spec-dir",), ("CDI_SPEC_DIR",), "directory the generated CDI specs are written to",
        reference=False)] = "/var/run/cdi"
    mps_container_root: Annotated[Str, Flag(
        ("mps-container-root",), ("MPS_CONTAINER_ROOT",),
        "where --mps-root is mounted inside this container (for the MPS readiness probe)",
        reference=False)] = "/mps"
    events: Annotated[Bool, Flag(
        ("events",), ("EVENTS",),
        "post Kubernetes Events about this node (needs --node-name and API access)",
        reference=False)] = True
    readiness: Annotated[Readiness, Flag(
        ("readiness",), ("READINESS",),
        "when /readyz answers 200: serving (every resource, or the DRA driver, registered) or "
        "running (start-up tried, loop alive); auto: serving if --fail-on-init-error, else running",
        reference=False),
        _choice(Readiness, "invalid readiness: {} (expected auto, serving or running)")] = (
        Readiness.AUTO
    )
    kubelet_api: Annotated[KubeletApi, Flag(
        ("kubelet-api",), ("KUBELET_API",),
        "which kubelet API serves the GPUs: device-plugin, or dra (Dynamic Resource "
        "Allocation: ResourceSlices and a DRA kubelet plugin)", "flags.plugin.kubeletApi",
        reference=False),
        _choice(KubeletApi, "unknown kubelet API: {} (expected device-plugin or dra)")] = (
        KubeletApi.DEVICE_PLUGIN
    )
    dra_driver_name: Annotated[str, Flag(
        ("dra-driver-name",), ("DRA_DRIVER_NAME",),
        "DRA driver name: of the ResourceSlices, the kubelet plugin and its DeviceClass",
        reference=False), BeforeValidator(dns_subdomain("dra-driver-name"))] = "gpu.nvidia.com"
    kubelet_registrar_directory_path: Annotated[Str, Flag(
        ("kubelet-registrar-directory-path",), ("KUBELET_REGISTRAR_DIRECTORY_PATH",),
        "where the kubelet looks for plugin registration sockets (DRA mode)",
        reference=False)] = "/var/lib/kubelet/plugins_registry"
    kubelet_plugins_directory_path: Annotated[Str, Flag(
        ("kubelet-plugins-directory-path",), ("KUBELET_PLUGINS_DIRECTORY_PATH",),
        "where DRA kubelet plugins keep their sockets, one directory per driver (DRA mode)",
        reference=False)] = "/var/lib/kubelet/plugins"
    dra_dynamic_mig: Annotated[Bool, Flag(
        ("dra-dynamic-mig",), ("DRA_DYNAMIC_MIG",),
        "DRA mode: publish GPUs with MIG mode on and no MIG instances (but the plugin's own) "
        "as dynamic MIG: a device per MIG placement, consuming a counter set per GPU",
        "flags.plugin.draDynamicMig", reference=False)] = False

    @model_validator(mode="before")
    @classmethod
    def _dev_root_defaults_to_driver_root(cls, data: Any) -> Any:
        # The reference treats an absent *or empty* device root as "same as the
        # driver root"; resolving it here keeps every consumer from repeating it.
        if isinstance(data, dict) and not data.get("dev_root"):
            driver_root = data.get("driver_root", "/")
            if isinstance(driver_root, str):  # (a wrong one is reported once, as itself)
                return {**data, "dev_root": driver_root}
        return data

    @property
    def state_host(self) -> str:
        """Host part of ``state_address`` (brackets of an IPv6 literal removed)."""
        return self.state_address.rpartition(":")[0].strip("[]")

    @property
    def state_port(self) -> int:
        return int(self.state_address.rpartition(":")[2])
# fmt: on


PLUGIN_FLAGS = FlagSet(
    PROGRAM,
    (*flag_specs(Flags, "flags"), *flag_specs(HealthSection, "health")),
    summary="NVIDIA device plugin for Kubernetes.",
)
FLAGS: tuple[FlagSpec, ...] = PLUGIN_FLAGS.specs
FLAGS_BY_FIELD: dict[str, FlagSpec] = PLUGIN_FLAGS.by_field

# Every setting a flag can give, the plugin's and the labeller's (``flags.gfd.*``):
# what the loader accepts from the command line, the environment or another binary.
SETTINGS_SPECS: tuple[FlagSpec, ...] = (*FLAGS, *flag_specs(GfdSettings, "gfd"))
