"""Everything one labelling run is configured with, resolved with precedence.

The flags shared with the plugin (MIG strategy, fail-on-init-error, the
simulated backend, the discovery strategy), the labeller's own flags that
are keys of the file (``flags.gfd.*`` and ``flags.useNodeFeatureAPI``) and
the config file itself are resolved by the plugin's own settings loader, so
the two binaries read the same file the same way: the values set here are
passed to it as given flags, and it applies file and defaults below them.
The labeller's other flags are the value given, else their default.

With ``--config-directory`` (the chart mounts its ConfigMap there) the node
label picks the file with the plugin's own rules
(`settings.selection.ConfigDirectory`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loguru import logger

from foundation.files import FileRejected, read_small_file
from labels.flags import GFD_FLAGS, SHARED_FIELDS, SetValue
from settings import EffectiveConfig, load_config
from settings.file_reader import CONFIG_FILE_LIMIT
from settings.selection import ConfigDirectory

__all__ = ["ConfigChoice", "GfdOptions", "boot_config", "choose_config", "resolve_options"]

# The labeller never starts MPS daemons, so the plugin's "MPS needs --mps-root"
# check must not stop it from labelling an MPS node; any value satisfies it.
_MPS_ROOT_PLACEHOLDER = "--mps-root=/run/nvidia/mps"


@dataclass(frozen=True)
class ConfigChoice:
    """The config file a run uses ("" for none) and, in directory mode, its name and why."""

    path: str
    name: str | None = None
    reason: str | None = None

    def fingerprint(self) -> tuple[str, str | None]:
        """Identity of the choice and of the file's content, for change detection."""
        if not self.path:
            return (self.path, None)
        try:
            content = read_small_file(self.path, limit=CONFIG_FILE_LIMIT)
            digest = hashlib.sha256(content).hexdigest()
        except FileRejected as error:
            digest = f"unreadable: {error.reason}"
        return (self.path, digest)


@dataclass(frozen=True)
class GfdOptions:
    """The labeller's resolved flags plus the shared effective config."""

    config: EffectiveConfig
    oneshot: bool
    no_timestamp: bool
    sleep_interval: float  # seconds; math.inf means no timer, only signals
    output_file: str
    machine_type_file: str
    machine_type_file_set: bool  # named by a flag, a variable or the file
    use_node_feature_api: bool
    write_node_labels: bool
    sysfs_root: str
    namespace: str
    node_name: str
    pod_name: str
    kubeconfig: str
    kube_api_qps: float
    kube_api_burst: int
    # own flag -> command line | environment | file | default (shared ones: config.sources)
    origins: Mapping[str, str]

    def describe(self) -> dict[str, object]:
        """JSON-able summary for the start-up log line: what labelling depends on."""
        flags = self.config.flags
        sharing = self.config.sharing
        return {
            "config_path": self.config.config_path,
            "digest": self.config.digest,
            "mig_strategy": flags.mig_strategy.value,
            "fail_on_init_error": flags.fail_on_init_error,
            "mock_nvml": flags.mock_nvml,
            "include_devices": list(flags.include_devices),
            "exclude_devices": list(flags.exclude_devices),
            "sharing": {
                "strategy": sharing.strategy.value,
                "rename_by_default": sharing.rename_by_default,
                # A list: several entries may name one resource (counts per GPU).
                "resources": [[r.name, r.replicas, r.devices] for r in sharing.resources],
            },
            "gfd": {
                flag.field: getattr(self, flag.field)
                for flag in GFD_FLAGS
                if flag.field in self.origins and hasattr(self, flag.field)
            },
        }


def _given(values: Mapping[str, SetValue], field: str) -> Any:
    given = values.get(field)
    return None if given is None else given.value


def choose_config(
    values: Mapping[str, SetValue], *, label_value: str | None, current: str | None
) -> ConfigChoice:
    """The file this run reads: the directory's selection, else ``--config-file``.

    The selection is the plugin's own (`settings.selection.ConfigDirectory`),
    so on one node both pick the same file from the same label value.

    Raises:
        ConfigError: the directory cannot be read, or nothing usable is selected.
    """
    directory = _given(values, "config_directory") or ""
    if not directory:
        return ConfigChoice(_given(values, "config_file") or "")
    chosen = ConfigDirectory.given(
        directory, _given(values, "default_config"), _given(values, "fallback_strategies")
    ).choose(label_value=label_value, current=current)
    return ConfigChoice(chosen.path, chosen.name, chosen.reason)


def _shared_config(values: Mapping[str, SetValue], choice: ConfigChoice) -> EffectiveConfig:
    shared = {field: value for field, value in values.items() if field in SHARED_FIELDS}
    # An empty environment: every variable the labeller honours is in `shared` already,
    # each value keeping the name it was given under for error messages.
    return load_config([_MPS_ROOT_PLACEHOLDER], {}, config_file=choice.path, given=shared)


def boot_config(values: Mapping[str, SetValue]) -> EffectiveConfig:
    """The shared flags validated, without any config file: what selection needs.

    Raises:
        ConfigError: a shared flag is invalid.
    """
    return _shared_config(values, ConfigChoice(""))


def resolve_options(values: Mapping[str, SetValue], choice: ConfigChoice) -> GfdOptions:
    """Apply precedence: command line > environment > config file > default.

    Raises:
        ConfigError: the config file or a shared flag is invalid.
    """
    config = _shared_config(values, choice)
    resolved: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for flag in GFD_FLAGS:
        given = values.get(flag.field)
        if flag.path[:1] == ("gfd",):  # resolved by the settings loader, into `config.gfd`
            resolved[flag.field] = getattr(config.gfd, flag.field)
            origins[flag.field] = given.origin if given else config.sources[flag.field]
        elif flag.field not in SHARED_FIELDS:  # (the others: into `config.flags`)
            resolved[flag.field] = given.value if given else flag.default
            origins[flag.field] = given.origin if given else "default"
    for warning in config.warnings:
        logger.warning("{}", warning)
    return GfdOptions(
        config=config,
        oneshot=bool(resolved["oneshot"]),
        no_timestamp=bool(resolved["no_timestamp"]),
        sleep_interval=float(resolved["sleep_interval"]),
        output_file=str(resolved["output_file"]),
        machine_type_file=str(resolved["machine_type_file"]),
        machine_type_file_set=origins["machine_type_file"] != "default",
        use_node_feature_api=bool(resolved["use_node_feature_api"]),
        write_node_labels=bool(resolved["write_node_labels"]),
        sysfs_root=str(resolved["sysfs_root"]),
        namespace=str(resolved["namespace"]),
        node_name=str(resolved["node_name"]),
        pod_name=str(resolved["pod_name"]),
        kubeconfig=str(resolved["kubeconfig"]),
        kube_api_qps=float(resolved["kube_api_qps"]),
        kube_api_burst=int(resolved["kube_api_burst"]),
        origins=origins,
    )
