"""Which control daemons a node needs, from the effective config and the inventory.

The daemon must serve exactly the resources the plugin advertises as MPS
replicas, so it builds them with the plugin's own resource logic
(`resources.builder.build_resources`) rather than re-deriving names, renames
and GPU sets; only the options that decide those are carried over from the
config. MIG devices are refused there with the plugin's message, and the GPUs
``--include-devices``/``--exclude-devices`` leave out are dropped first
(`resources.gpu_filter`), so no daemon serves or sets the compute mode of one.
"""

from __future__ import annotations

from devices.model import Inventory
from mps.layout import CONTAINER_ROOT
from mps.limits import DaemonSpec, daemon_specs
from resources.builder import build_resources
from resources.gpu_filter import GpuSelection, select_gpus
from resources.options import ResourceOptions, sharing_options
from settings import EffectiveConfig, Sharing
from settings import SharingStrategy as ConfiguredStrategy
from settings.gpu_selector import selector_of

__all__ = ["gpu_selection", "mps_resource_options", "needs_mps", "plan_daemons"]


def needs_mps(sharing: Sharing) -> bool:
    """MPS is active: ``sharing.mps`` is configured with a resource replicated at least twice."""
    return sharing.strategy is ConfiguredStrategy.MPS and any(
        resource.replicas > 1 for resource in sharing.resources
    )


def mps_resource_options(config: EffectiveConfig) -> ResourceOptions:
    """The resource options that decide which resources exist and how they are replicated.

    Only the MIG strategy, the sharing section and the MPS root matter to the
    daemon; everything else keeps the defaults. The MPS root falls back to
    the container root because the daemon never uses the host path.
    """
    return ResourceOptions(
        mig_strategy=config.flags.mig_strategy,
        sharing=sharing_options(config.sharing),
        mps_root=config.flags.mps_root or str(CONTAINER_ROOT),
    )


def plan_daemons(config: EffectiveConfig, inventory: Inventory) -> tuple[DaemonSpec, ...]:
    """The daemons to run; none when the config does not share through MPS.

    Raises:
        ResourceError: the devices cannot be exposed as configured (MIG devices
            with MPS: ``sharing using MPS is not supported for MIG devices``).
        MpsConfigError: a device has more replicas than MPS accepts clients.
    """
    if not needs_mps(config.sharing):
        return ()
    selected = gpu_selection(config, inventory).inventory
    return daemon_specs(build_resources(selected, mps_resource_options(config)))


def gpu_selection(config: EffectiveConfig, inventory: Inventory) -> GpuSelection:
    """The GPUs --include-devices/--exclude-devices leave to the node, as for the plugin."""
    return select_gpus(inventory, selector_of(config))
