"""The command line and environment of ``gpu-feature-discovery``, as data.

The labeller has flags of its own (``--oneshot``, ``--sleep-interval``, ...)
besides the ones it shares with the plugin (``--mig-strategy``,
``--fail-on-init-error``, ...). A shared flag is the plugin's own spec
(`settings.flags`), at most with the labeller's variables in front
(``GFD_MIG_STRATEGY`` before ``MIG_STRATEGY``) and its own help, so the two
binaries cannot parse or name it differently. The flags that are keys of
the shared config file (``flags.gfd.*``) are declared with the file, on
`settings.GfdSettings`; those and the shared ones are resolved by the
settings loader (`labels.options` hands them over). Parsing, the environment
rules, ``--help`` and ``--version`` all come from the one `settings.FlagSet`
mechanism.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from settings.command_line import FlagSet, SetValue
from settings.flag_spec import FlagSpec, Kind, flag_specs
from settings.flags import FLAGS_BY_FIELD
from settings.sections import GfdSettings

__all__ = [
    "GFD_FLAGS",
    "GFD_FLAG_SET",
    "PROGRAM",
    "SHARED_FIELDS",
    "FlagSpec",
    "SetValue",
    "help_text",
    "parse_arguments",
]

PROGRAM = "gpu-feature-discovery"


def _shared(field: str, *, env: tuple[str, ...] | None = None, help: str | None = None) -> FlagSpec:
    """The plugin's spec of ``field``, with the labeller's variables and help if given."""
    spec = FLAGS_BY_FIELD[field]
    return dataclasses.replace(spec, env=env or spec.env, help=help or spec.help)


# fmt: off
GFD_FLAGS: tuple[FlagSpec, ...] = (
    _shared("mig_strategy", env=("GFD_MIG_STRATEGY", "MIG_STRATEGY"),
            help="MIG strategy: none, single or mixed"),
    _shared("fail_on_init_error", env=("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"),
            help="exit when the device library cannot start; when false, label a node "
                 "without GPUs"),
    *flag_specs(GfdSettings, "gfd"),
    FlagSpec("config_file", ("config-file",), ("GFD_CONFIG_FILE", "CONFIG_FILE"), Kind.STRING,
             "v1 config file (YAML or JSON); empty means none", default=""),
    _shared("device_discovery_strategy"),
    _shared("driver_root_ctr_path"),
    _shared("include_devices"),
    _shared("exclude_devices"),
    FlagSpec("kubeconfig", ("kubeconfig",), ("KUBECONFIG",), Kind.STRING,
             "kubeconfig file; empty means the in-cluster configuration", default=""),
    FlagSpec("kube_api_qps", ("kube-api-qps",), ("KUBE_API_QPS",), Kind.FLOAT,
             "queries per second to the Kubernetes API", default=5.0),
    FlagSpec("kube_api_burst", ("kube-api-burst",), ("KUBE_API_BURST",), Kind.INT,
             "burst of queries to the Kubernetes API", default=10),
    FlagSpec("namespace", ("namespace",), ("NAMESPACE",), Kind.STRING,
             "namespace of the NodeFeature object", default="default"),
    FlagSpec("node_name", ("node-name",), ("NODE_NAME",), Kind.STRING,
             "name of this node", default=""),
    FlagSpec("pod_name", ("pod-name",), ("POD_NAME",), Kind.STRING,
             "name of this pod (owner of the NodeFeature object)", default=""),
    FlagSpec("write_node_labels", ("write-node-labels",), ("GFD_WRITE_NODE_LABELS",),
             Kind.BOOL, "also set the labels on this node through the Kubernetes API",
             reference=False, default=False),
    _shared("mock_nvml"),
    _shared("log_format"),
    FlagSpec("sysfs_root", ("sysfs-root",), ("GFD_SYSFS_ROOT",), Kind.STRING,
             "where the host's sysfs is mounted (PCI classes, vGPU detection)",
             reference=False, default="/sys"),
    _shared("config_directory"),
    _shared("default_config"),
    _shared("fallback_strategies"),
    _shared("node_label"),
    FlagSpec("metrics_address", ("metrics-address",), ("GFD_METRICS_ADDRESS",), Kind.STRING,
             "HOST:PORT of /healthz, /readyz and /metrics; empty serves none",
             reference=False, default=""),
)
# fmt: on

# Flags resolved by the settings loader (into `EffectiveConfig.flags` and `.gfd`): the
# ones declared on the settings models.
SHARED_FIELDS = frozenset(spec.field for spec in GFD_FLAGS if spec.path)

GFD_FLAG_SET = FlagSet(
    PROGRAM, GFD_FLAGS, summary="Label the node's GPUs for Node Feature Discovery."
)


def parse_arguments(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, SetValue]:
    """The flags set explicitly, command line over environment, by field name.

    Raises:
        ConfigError: an unknown flag, two spellings of one flag, or a malformed value.
    """
    return GFD_FLAG_SET.explicit(argv, env)


def help_text() -> str:
    return GFD_FLAG_SET.help_text()
