"""Every flag of the plugin as data: names, environment variables, file key.

The command-line parser, the environment reader, the config-file mapping, the
``--help`` text and the flags table in the documentation are all generated
from this one table (through `settings.command_line.FlagSet`), so a flag
cannot exist in one of them and be missing from another. Types, defaults and
value checks live on the `Flags` model; a test keeps the two in step. The
node labeller and the MPS daemon reuse these specs for the flags they share
with the plugin.
"""

from __future__ import annotations

from enum import StrEnum

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
from settings.command_line import FlagSet
from settings.flag_spec import FlagSpec, Kind

__all__ = ["FLAGS", "FLAGS_BY_FIELD", "PLUGIN_FLAGS", "PROGRAM", "FlagSpec", "Kind"]

PROGRAM = "nvidia-device-plugin"


def _values(enum: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


# One entry per line group reads as a table; keep the formatter from exploding it.
# fmt: off
FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec(
        "mig_strategy", ("mig-strategy",), ("MIG_STRATEGY",), Kind.STRING,
        "how MIG devices are exposed on GPUs that support MIG",
        "flags.migStrategy", _values(MigStrategy),
    ),
    FlagSpec(
        "fail_on_init_error", ("fail-on-init-error",), ("FAIL_ON_INIT_ERROR",), Kind.BOOL,
        "exit when initialisation fails; when false, stay up, report the reason and retry",
        "flags.failOnInitError",
    ),
    FlagSpec(
        "driver_root", ("driver-root", "nvidia-driver-root"), ("NVIDIA_DRIVER_ROOT",),
        Kind.STRING, "root of the NVIDIA driver installation on the host",
        "flags.nvidiaDriverRoot",
    ),
    FlagSpec(
        "dev_root", ("dev-root", "nvidia-dev-root"), ("NVIDIA_DEV_ROOT",), Kind.STRING,
        "root under which device nodes are found; empty means the driver root",
        "flags.nvidiaDevRoot",
    ),
    FlagSpec(
        "pass_device_specs", ("pass-device-specs",), ("PASS_DEVICE_SPECS",), Kind.BOOL,
        "also pass device nodes to the kubelet (needed for the static CPU manager policy)",
        "flags.plugin.passDeviceSpecs",
    ),
    FlagSpec(
        "device_list_strategy", ("device-list-strategy",), ("DEVICE_LIST_STRATEGY",),
        Kind.LIST, "how allocated devices are passed to the runtime (comma list)",
        "flags.plugin.deviceListStrategy", _values(DeviceListStrategy),
    ),
    FlagSpec(
        "device_id_strategy", ("device-id-strategy",), ("DEVICE_ID_STRATEGY",), Kind.STRING,
        "which identifier names an allocated device",
        "flags.plugin.deviceIDStrategy", _values(DeviceIdStrategy),
    ),
    FlagSpec(
        "gdrcopy_enabled", ("gdrcopy-enabled",), ("GDRCOPY_ENABLED",), Kind.BOOL,
        "make GDRCopy available to containers", "flags.gdrcopyEnabled",
    ),
    FlagSpec(
        "gds_enabled", ("gds-enabled",), ("GDS_ENABLED",), Kind.BOOL,
        "make GPUDirect Storage available to containers", "flags.gdsEnabled",
    ),
    FlagSpec(
        "mofed_enabled", ("mofed-enabled",), ("MOFED_ENABLED",), Kind.BOOL,
        "make MOFED devices available to containers", "flags.mofedEnabled",
    ),
    FlagSpec(
        "cdi_annotation_prefix", ("cdi-annotation-prefix",), ("CDI_ANNOTATION_PREFIX",),
        Kind.STRING, "prefix of the CDI annotation keys",
        "flags.plugin.cdiAnnotationPrefix",
    ),
    FlagSpec(
        "nvidia_cdi_hook_path", ("nvidia-cdi-hook-path", "nvidia-ctk-path"),
        ("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"), Kind.STRING,
        "path of the nvidia-cdi-hook (or nvidia-ctk) executable used in CDI specs",
        "flags.plugin.nvidiaCTKPath",
    ),
    FlagSpec(
        "driver_root_ctr_path", ("driver-root-ctr-path", "container-driver-root"),
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"), Kind.STRING,
        "where the driver root is mounted inside this container",
        "flags.plugin.containerDriverRoot",
    ),
    FlagSpec(
        "mps_root", ("mps-root",), ("MPS_ROOT",), Kind.STRING,
        "host directory for MPS pipes and logs; required when MPS sharing is configured",
        "flags.mpsRoot",
    ),
    FlagSpec(
        "shared_devices_allocation_policy", ("shared-devices-allocation-policy",),
        ("SHARED_DEVICES_ALLOCATION_POLICY",), Kind.STRING,
        "how replicas of shared devices are picked for a request",
        "flags.plugin.sharedDevicesAllocationPolicy", _values(AllocationPolicy),
    ),
    FlagSpec(
        "device_discovery_strategy", ("device-discovery-strategy",),
        ("DEVICE_DISCOVERY_STRATEGY",), Kind.STRING,
        "which backend discovers the devices (auto and nvml use NVML; tegra is accepted "
        "but has no backend here, so start-up fails saying so)",
        "flags.deviceDiscoveryStrategy", _values(DiscoveryStrategy),
    ),
    FlagSpec(
        "imex_channel_ids", ("imex-channel-ids",), ("IMEX_CHANNEL_IDS",), Kind.INT_LIST,
        "IMEX channels to add to every allocation (comma list; only 0 is supported)",
        "imex.channelIDs",
    ),
    FlagSpec(
        "imex_required", ("imex-required",), ("IMEX_REQUIRED",), Kind.BOOL,
        "fail when a requested IMEX channel does not exist", "imex.required",
    ),
    FlagSpec(
        "kubelet_socket", ("kubelet-socket",), ("KUBELET_SOCKET",), Kind.STRING,
        "kubelet registration socket; empty skips registration",
    ),
    FlagSpec(
        "config_file", ("config-file",), ("CONFIG_FILE",), Kind.STRING,
        "v1 config file (YAML or JSON); empty means none",
    ),
    FlagSpec(
        "cdi_feature_flags", ("cdi-feature-flags",), ("CDI_FEATURE_FLAGS",), Kind.LIST,
        "feature flags for CDI spec generation (comma list)",
    ),
    FlagSpec(
        "cdi_disable_hooks", ("cdi-disable-hooks",), ("CDI_DISABLE_HOOKS",), Kind.LIST,
        "CDI hooks to leave out of generated specs; 'all' drops every hook (comma list)",
    ),
    FlagSpec(
        "mock_nvml", ("mock-nvml",), ("MOCK_NVML",), Kind.STRING,
        "use the simulated GPU backend: a node profile name or a node description file",
        reference=False,
    ),
    FlagSpec(
        "mock_nvml_events", ("mock-nvml-events",), ("MOCK_NVML_EVENTS",), Kind.STRING,
        "where the simulated backend accepts injected health events",
        reference=False,
    ),
    FlagSpec(
        "state_address", ("state-address",), ("STATE_ADDRESS",), Kind.STRING,
        "HOST:PORT of the inspection endpoint (/healthz, /readyz, /state, /metrics)",
        reference=False,
    ),
    FlagSpec(
        "probe_address", ("probe-address",), ("PROBE_ADDRESS",), Kind.STRING,
        "HOST:PORT of a listener for /healthz and /readyz alone, which readers of "
        "/state and /metrics cannot delay (empty: probes on --state-address only)",
        reference=False,
    ),
    FlagSpec(
        "log_format", ("log-format",), ("LOG_FORMAT",), Kind.STRING,
        "log record format", choices=_values(LogFormat), reference=False,
    ),
    FlagSpec(
        "node_name", ("node-name",), ("NODE_NAME",), Kind.STRING,
        "name of this node (for the per-node config label)", reference=False,
    ),
    FlagSpec(
        "config_directory", ("config-directory",), ("CONFIG_DIRECTORY",), Kind.STRING,
        "directory of named configs (a mounted ConfigMap) chosen by the node label",
        reference=False,
    ),
    FlagSpec(
        "default_config", ("default-config",), ("DEFAULT_CONFIG",), Kind.STRING,
        "config in --config-directory used when the node label is unset",
        reference=False,
    ),
    FlagSpec(
        "node_label", ("node-label",), ("NODE_LABEL",), Kind.STRING,
        "node label whose value names the config to use", reference=False,
    ),
    FlagSpec(
        "fallback_strategies", ("fallback-strategies",), ("FALLBACK_STRATEGIES",), Kind.LIST,
        "what to use when neither the label nor --default-config names a config (comma list)",
        choices=_values(FallbackStrategy), reference=False,
    ),
    FlagSpec(
        "cdi_spec_dir", ("cdi-spec-dir",), ("CDI_SPEC_DIR",), Kind.STRING,
        "directory the generated CDI specs are written to", reference=False,
    ),
    FlagSpec(
        "health_quiet_period", ("health-quiet-period",), ("HEALTH_QUIET_PERIOD",),
        Kind.SECONDS, "seconds without new errors before an unhealthy device is re-probed",
        reference=False,
    ),
    FlagSpec(
        "mps_container_root", ("mps-container-root",), ("MPS_CONTAINER_ROOT",), Kind.STRING,
        "where --mps-root is mounted inside this container (for the MPS readiness probe)",
        reference=False,
    ),
    FlagSpec(
        "events", ("events",), ("EVENTS",), Kind.BOOL,
        "post Kubernetes Events about this node (needs --node-name and API access)",
        reference=False,
    ),
    FlagSpec(
        "readiness", ("readiness",), ("READINESS",), Kind.STRING,
        "when /readyz answers 200: serving (every resource registered) or running (start-up "
        "tried, loop alive); auto: serving if --fail-on-init-error, else running",
        choices=_values(Readiness), reference=False,
    ),
    FlagSpec(
        "disable_healthchecks", (), ("DP_DISABLE_HEALTHCHECKS",), Kind.STRING,
        "XIDs that do not mark a device unhealthy: 'all', 'xids' or XID numbers (comma list)",
    ),
    FlagSpec(
        "enable_healthchecks", (), ("DP_ENABLE_HEALTHCHECKS",), Kind.STRING,
        "XIDs that count even if disabled by default: 'all', 'xids' or XID numbers (comma list)",
    ),
)
# fmt: on

FLAGS_BY_FIELD: dict[str, FlagSpec] = {spec.field: spec for spec in FLAGS}

PLUGIN_FLAGS = FlagSet(PROGRAM, FLAGS, summary="NVIDIA device plugin for Kubernetes.")
