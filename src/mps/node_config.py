"""The config the MPS control daemons run with, and when a new one needs a restart.

The daemons must serve exactly the MPS replicas the plugin advertises, so the
daemon reads its config the way the plugin does: ``--config-file``, or with
``--config-directory`` (the chart's ConfigMap) the file the node label picks,
by the plugin's own rules (`settings.selection.ConfigDirectory`). The label
is followed through the Kubernetes API when the daemon has a node name and
access; without them it counts as unset (the default, else the fallbacks),
as in the plugin, and the log says so once.

Restarting the daemons cuts off every MPS client on the node, so a label
change restarts them only when the new config changes what they are built
from (`daemon_inputs`). A config that cannot be read or selected leaves the
running daemons alone; the reason is logged.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loguru import logger

from kube import on_demand
from kube.pacing import LABELLER_WATCH_TIMEOUTS
from mps.plan import needs_mps
from settings import ConfigError, EffectiveConfig, SetValue, load_config
from settings.selection import ChosenConfig, ConfigDirectory

if TYPE_CHECKING:
    from kube.label_follower import NodeLabelFollower

__all__ = [
    "USER_AGENT",
    "ConfigSource",
    "Loaded",
    "daemon_inputs",
    "follow_label",
    "load_daemon_config",
]

USER_AGENT = "mps-control-daemon"
_MPS_ROOT_REQUIRED = "using MPS requires --mps-root to be specified"


def load_daemon_config(
    given: Mapping[str, SetValue],
    env: Mapping[str, str],
    root: Path,
    *,
    config_file: str | None = None,
) -> EffectiveConfig:
    """The plugin's loader, with the container root standing in for a missing ``--mps-root``.

    ``config_file`` replaces ``--config-file`` ("" for none), as for the plugin.
    """
    try:
        return load_config([], env, config_file=config_file, given=given)
    except ConfigError as error:
        if error.problem != _MPS_ROOT_REQUIRED or error.more:
            raise
    return load_config([], {**env, "MPS_ROOT": str(root)}, config_file=config_file, given=given)


def daemon_inputs(config: EffectiveConfig) -> Hashable:
    """Everything in a config that decides which daemons run and how.

    Two configs with equal inputs give the same daemons on the same GPUs: the
    device library they are discovered with (backend, driver root, discovery
    strategy) and what `mps.plan.plan_daemons` builds the resources from (MIG
    strategy, replicas, renaming, MPS root, the GPUs included and excluded).
    Settings only the plugin reads, such as the device list strategy, are left
    out.
    """
    if not needs_mps(config.sharing):
        return None
    flags, sharing = config.flags, config.sharing
    return (
        flags.mock_nvml,
        flags.driver_root_ctr_path,
        flags.device_discovery_strategy,
        flags.mig_strategy,
        flags.mps_root,
        flags.include_devices,
        flags.exclude_devices,
        sharing.rename_by_default,
        tuple((resource.name, resource.replicas) for resource in sharing.resources),
    )


@dataclass(frozen=True)
class Loaded:
    """A config read for the daemons, and the directory entry it came from (if any)."""

    config: EffectiveConfig
    name: str | None = None


class ConfigSource:
    """Reads the daemons' config; in directory mode, selected by the latest label value."""

    def __init__(
        self,
        given: Mapping[str, SetValue],
        env: Mapping[str, str],
        root: Path,
        boot: EffectiveConfig,
    ) -> None:
        self._given = given
        self._env = env
        self._root = root
        self.directory = ConfigDirectory.of(boot.flags)
        self.label_value: Callable[[], str | None] = lambda: None
        self.current: str | None = None  # the directory entry the running daemons use
        self._reported: ChosenConfig | None = None
        # Just read from the same flags and file: the first load is answered
        # with it. Later ones (after SIGHUP) read the file again.
        self._boot: EffectiveConfig | None = None if self.directory else boot

    def load(self) -> Loaded:
        """The config to run with now (not yet in use: see `accept`).

        Raises:
            ConfigError: the selection or the file is invalid.
        """
        if self.directory is None:
            boot, self._boot = self._boot, None
            if boot is not None:
                return Loaded(boot)
            return Loaded(load_daemon_config(self._given, self._env, self._root))
        chosen = self.directory.choose(label_value=self.label_value(), current=self.current)
        if chosen != self._reported and chosen.reason:
            logger.info("config selection: {reason}", reason=chosen.reason)
        self._reported = chosen
        config = load_daemon_config(self._given, self._env, self._root, config_file=chosen.path)
        return Loaded(config, chosen.name)

    def accept(self, loaded: Loaded) -> None:
        """The daemons now run with ``loaded``."""
        self.current = loaded.name


def follow_label(
    boot: EffectiveConfig,
    env: Mapping[str, str],
    on_value: Callable[[str | None], None],
) -> NodeLabelFollower | None:
    """Start following the node's config label, or say once why the label counts as unset."""
    flags = boot.flags
    if not flags.config_directory:
        return None
    # The Kubernetes client costs about half a second to import: only a daemon
    # that selects its config by label pays for it.
    return on_demand.start_node_label_follower(
        node_name=flags.node_name,
        label=flags.node_label,
        env=env,
        user_agent=USER_AGENT,
        on_value=on_value,
        watch_timeouts=LABELLER_WATCH_TIMEOUTS,
    )
