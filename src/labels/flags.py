"""The command line and environment of ``gpu-feature-discovery``, as data.

The labeller has flags of its own (``--oneshot``, ``--sleep-interval``, ...)
besides the ones it shares with the plugin (``--mig-strategy``,
``--fail-on-init-error``, ...), often under two environment variables
(``GFD_MIG_STRATEGY`` before ``MIG_STRATEGY``). This module only turns
arguments and environment text into values and remembers where each came
from; `labels.options` applies the precedence (flag > environment > config
file > default) and hands the shared flags to the settings loader.

Spelling rules are the reference's flag library's, as in the plugin:
``--name=value``, ``--name value`` and ``-name value``; a bare boolean flag
means true; aliases are synonyms but two spellings together are an error; an
environment variable that exists counts as set, and an empty boolean one
means false, while an empty number or duration is ignored.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from settings import ConfigError
from settings.command_line import FlagParser, RecordAction
from settings.values import parse_bool, parse_duration, split_list

__all__ = [
    "GFD_FLAGS",
    "GfdFlag",
    "Kind",
    "SetValue",
    "help_text",
    "parse_arguments",
    "wants_help",
]

DEFAULT_OUTPUT_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"


class Kind(StrEnum):
    STRING = "string"
    BOOL = "bool"
    DURATION = "duration"  # Go duration text or "infinite", in seconds
    FLOAT = "float"
    INT = "int"
    LIST = "list"  # comma-separated


@dataclass(frozen=True)
class GfdFlag:
    """One flag: names, environment variables, default, and where it also lives."""

    field: str
    names: tuple[str, ...]
    env: tuple[str, ...]
    kind: Kind
    default: Any
    help: str
    settings_flag: str | None = None  # shared with the plugin: forwarded to `settings`
    file_field: str | None = None  # attribute of `settings.GfdSettings` (flags.gfd.*)
    reference: bool = True  # False: an addition of this project

    @property
    def primary(self) -> str:
        return f"--{self.names[0]}"


# fmt: off
GFD_FLAGS: tuple[GfdFlag, ...] = (
    GfdFlag("mig_strategy", ("mig-strategy",), ("GFD_MIG_STRATEGY", "MIG_STRATEGY"),
            Kind.STRING, "none", "MIG strategy: none, single or mixed",
            settings_flag="mig-strategy"),
    GfdFlag("fail_on_init_error", ("fail-on-init-error",),
            ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"), Kind.BOOL, True,
            "exit when the device library cannot start; when false, label a node without GPUs",
            settings_flag="fail-on-init-error"),
    GfdFlag("oneshot", ("oneshot",), ("GFD_ONESHOT",), Kind.BOOL, False,
            "label once and exit", file_field="oneshot"),
    GfdFlag("no_timestamp", ("no-timestamp",), ("GFD_NO_TIMESTAMP",), Kind.BOOL, False,
            "do not write the nvidia.com/gfd.timestamp label", file_field="no_timestamp"),
    GfdFlag("sleep_interval", ("sleep-interval",), ("GFD_SLEEP_INTERVAL",), Kind.DURATION, 60.0,
            "time between labelling passes (Go duration such as 60s, or infinite)",
            file_field="sleep_interval"),
    GfdFlag("output_file", ("output-file", "output", "o"), ("GFD_OUTPUT_FILE",), Kind.STRING,
            DEFAULT_OUTPUT_FILE, "features file to write; empty writes the labels to stdout",
            file_field="output_file"),
    GfdFlag("machine_type_file", ("machine-type-file",), ("GFD_MACHINE_TYPE_FILE",),
            Kind.STRING, DEFAULT_MACHINE_TYPE_FILE, "file holding the machine type",
            file_field="machine_type_file"),
    GfdFlag("config_file", ("config-file",), ("GFD_CONFIG_FILE", "CONFIG_FILE"), Kind.STRING,
            "", "v1 config file (YAML or JSON); empty means none"),
    GfdFlag("use_node_feature_api", ("use-node-feature-api",),
            ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"), Kind.BOOL, False,
            "publish a NodeFeature object instead of writing the features file",
            file_field="use_node_feature_api"),
    GfdFlag("device_discovery_strategy", ("device-discovery-strategy",),
            ("DEVICE_DISCOVERY_STRATEGY",), Kind.STRING, "auto",
            "which backend discovers the devices", settings_flag="device-discovery-strategy"),
    GfdFlag("driver_root_ctr_path", ("driver-root-ctr-path", "container-driver-root"),
            ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"), Kind.STRING, "/driver-root",
            "where the driver root is mounted inside this container",
            settings_flag="driver-root-ctr-path"),
    GfdFlag("kubeconfig", ("kubeconfig",), ("KUBECONFIG",), Kind.STRING, "",
            "kubeconfig file; empty means the in-cluster configuration"),
    GfdFlag("kube_api_qps", ("kube-api-qps",), ("KUBE_API_QPS",), Kind.FLOAT, 5.0,
            "queries per second to the Kubernetes API"),
    GfdFlag("kube_api_burst", ("kube-api-burst",), ("KUBE_API_BURST",), Kind.INT, 10,
            "burst of queries to the Kubernetes API"),
    GfdFlag("namespace", ("namespace",), ("NAMESPACE",), Kind.STRING, "default",
            "namespace of the NodeFeature object"),
    GfdFlag("node_name", ("node-name",), ("NODE_NAME",), Kind.STRING, "",
            "name of this node"),
    GfdFlag("pod_name", ("pod-name",), ("POD_NAME",), Kind.STRING, "",
            "name of this pod (owner of the NodeFeature object)"),
    GfdFlag("write_node_labels", ("write-node-labels",), ("GFD_WRITE_NODE_LABELS",), Kind.BOOL,
            False, "also set the labels on this node through the Kubernetes API",
            reference=False),
    GfdFlag("mock_nvml", ("mock-nvml",), ("MOCK_NVML",), Kind.STRING, "",
            "use the simulated GPU backend: a node profile name or a node description file",
            settings_flag="mock-nvml", reference=False),
    GfdFlag("log_format", ("log-format",), ("LOG_FORMAT",), Kind.STRING, "text",
            "log record format: json or text", settings_flag="log-format", reference=False),
    GfdFlag("metrics_address", ("metrics-address",), ("GFD_METRICS_ADDRESS",), Kind.STRING, "",
            "HOST:PORT of /healthz, /readyz and /metrics; empty serves none",
            reference=False),
    GfdFlag("sysfs_root", ("sysfs-root",), ("GFD_SYSFS_ROOT",), Kind.STRING, "/sys",
            "where the host's sysfs is mounted (PCI classes, vGPU detection)",
            reference=False),
    GfdFlag("config_directory", ("config-directory",), ("CONFIG_DIRECTORY",), Kind.STRING, "",
            "directory of named configs (a mounted ConfigMap) chosen by the node label",
            settings_flag="config-directory", reference=False),
    GfdFlag("default_config", ("default-config",), ("DEFAULT_CONFIG",), Kind.STRING, "",
            "config in --config-directory used when the node label is unset",
            settings_flag="default-config", reference=False),
    GfdFlag("fallback_strategies", ("fallback-strategies",), ("FALLBACK_STRATEGIES",),
            Kind.LIST, ("named", "single"),
            "what to use when neither the label nor --default-config names a config",
            settings_flag="fallback-strategies", reference=False),
    GfdFlag("node_label", ("node-label",), ("NODE_LABEL",), Kind.STRING,
            "nvidia.com/device-plugin.config",
            "node label whose value names the config to use",
            settings_flag="node-label", reference=False),
)
# fmt: on

FLAGS_BY_FIELD = {flag.field: flag for flag in GFD_FLAGS}
_HELP = frozenset({"-h", "--help", "-help"})


@dataclass(frozen=True)
class SetValue:
    """A value given on the command line or in the environment, and under which name."""

    value: Any
    text: str  # as written (forwarded verbatim to the settings loader)
    name: str  # ``--oneshot`` or ``GFD_ONESHOT``
    origin: str  # ``command line`` or ``environment``


def _convert(flag: GfdFlag, text: str) -> Any:
    match flag.kind:
        case Kind.BOOL:
            return parse_bool(text)
        case Kind.DURATION:
            seconds = parse_duration(text)
            if seconds < 0:
                raise ValueError(f"negative duration {text!r}")
            return seconds
        case Kind.FLOAT:
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"invalid number {text!r}") from None
        case Kind.INT:
            try:
                return int(text, 0)
            except ValueError:
                raise ValueError(f"invalid integer {text!r}") from None
        case Kind.LIST:
            return tuple(split_list(text))
        case Kind.STRING:
            return text


def _build_parser() -> argparse.ArgumentParser:
    parser = FlagParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for flag in GFD_FLAGS:
        options = [form for name in flag.names for form in (f"--{name}", f"-{name}")]
        nargs = "?" if flag.kind is Kind.BOOL else None
        parser.add_argument(*options, dest=flag.field, action=RecordAction, nargs=nargs)
    return parser


_PARSER = _build_parser()


def wants_help(argv: Sequence[str]) -> bool:
    return any(argument in _HELP for argument in argv)


def _command_line(argv: Sequence[str]) -> dict[str, SetValue]:
    try:
        namespace, extras = _PARSER.parse_known_args(list(argv))
    except argparse.ArgumentError as error:
        raise ConfigError(error.message, origin="command line") from None
    if extras:
        first = extras[0]
        if first.startswith("-"):
            option = first.split("=", 1)[0]
            raise ConfigError("flag provided but not defined", origin="command line", path=option)
        raise ConfigError(f"unexpected argument {first!r}", origin="command line")
    result: dict[str, SetValue] = {}
    for flag in GFD_FLAGS:
        seen: list[tuple[str, str]] | None = getattr(namespace, flag.field, None)
        if not seen:
            continue
        forms = list(dict.fromkeys("--" + option.lstrip("-") for option, _ in seen))
        if len(forms) > 1:
            raise ConfigError(
                f"Cannot use two forms of the same flag: {forms[0][2:]} {forms[1][2:]}",
                origin="command line",
                path=forms[0],
            )
        text = seen[-1][1]
        try:
            value = _convert(flag, text)
        except ValueError as error:
            raise ConfigError(str(error), origin="command line", path=forms[0]) from None
        result[flag.field] = SetValue(value, text, forms[0], "command line")
    return result


def _environment(env: Mapping[str, str]) -> dict[str, SetValue]:
    result: dict[str, SetValue] = {}
    for flag in GFD_FLAGS:
        name = next((candidate for candidate in flag.env if candidate in env), None)
        if name is None:
            continue
        text = env[name]
        if text == "" and flag.kind is Kind.BOOL:
            result[flag.field] = SetValue(False, "false", name, "environment")
            continue
        if text == "" and flag.kind in (Kind.DURATION, Kind.FLOAT, Kind.INT):
            continue
        try:
            value = _convert(flag, text)
        except ValueError as error:
            raise ConfigError(
                f"{error} for flag {flag.names[0]}", origin="environment", path=name
            ) from None
        result[flag.field] = SetValue(value, text, name, "environment")
    return result


def parse_arguments(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, SetValue]:
    """The flags set explicitly, command line over environment, by field name.

    Raises:
        ConfigError: an unknown flag, two spellings of one flag, or a malformed value.
    """
    values = _environment(env)
    values.update(_command_line(argv))
    return values


def _show_default(flag: GfdFlag) -> str:
    value = flag.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if flag.kind is Kind.DURATION:
        return f"{value:g}s"
    if isinstance(value, tuple):
        return ",".join(value)
    return f'"{value}"'


def help_text() -> str:
    lines = ["Usage: gpu-feature-discovery [flags]", "", "Flags:"]
    for flag in GFD_FLAGS:
        names = ", ".join(f"-{n}" if len(n) == 1 else f"--{n}" for n in flag.names)
        variables = ", ".join(flag.env)
        lines.append(f"  {names}  (env: {variables}; default: {_show_default(flag)})")
        lines.append(f"      {flag.help}")
    return "\n".join(lines)
