"""Desired state: effective config + inventory -> the one serving plan of the node.

The node's kubelet API (`--kubelet-api`, a config value the node label can
move) chooses the plan: a `DevicePluginPlan` (resources, allocators, node CDI
specs, MPS intents) or a `DraPlan` (the ResourceSlice devices, and the
driver, node and directories that serve them). Never both: a GPU is served
through one API at a time, and what the other API would need is never built.
Node-wide sharing on a DRA node is not served (sharing is chosen per claim
there) and is said so in the plan's warnings.

Pure: the same config and inventory always give the same `Desired`, and
building it touches nothing shared (it runs on the NVML worker, see
`reconciler.plan.reading`). It is only what the node *should* look like; whether
it does is for each actuator to observe (see `reconciler.actuators.order`). Its
`digest` names it in the history and on `/state`; it never decides whether
anything changed. Each resource is
a `ResourceIntent` carrying what its actuators compare: the allocator (and
through it the behaviour and devices digests), the CDI names its answers
refer to, and for MPS-shared resources the key their daemon must answer for.
The settings object is translated here into the resource logic's own
options, so `resources` never depends on pydantic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from devices.model import Inventory
from kubelet.dra.checkpoint import checkpoint_path
from kubelet.dra.mig_instances import owned_instances
from reconciler import on_demand
from resources import options as ro
from resources.allocation import Allocator
from resources.builder import plan_resources
from resources.dra_partitions import partitioned_devices
from resources.dra_slices import (
    CounterSet,
    DeviceHealthView,
    SliceDevice,
    pack,
    slice_devices,
    with_health,
)
from resources.gpu_filter import GpuSelection, select_gpus
from resources.model import PluginDevice
from resources.responses import referenced_cdi_names
from settings import EffectiveConfig, KubeletApi, SharingStrategy
from settings.gpu_selector import selector_of


@dataclass(frozen=True)
class ResourceIntent:
    """One resource as it should be served."""

    allocator: Allocator
    # qualified CDI names its Allocate answers can refer to: all must be on disk first
    cdi_names: frozenset[str] = frozenset()
    # for a resource shared through MPS: what its control daemon must have
    # answered for (behaviour, replica count and GPUs) before it is served
    mps_key: str | None = None

    @property
    def name(self) -> str:
        return self.allocator.name

    @classmethod
    def of(cls, allocator: Allocator) -> ResourceIntent:
        resource = allocator.resource
        mps_key = None
        if resource.behaviour.mps is not None:
            # The GPUs too: a GPU that joins (include/exclude lists) is served only
            # once its daemon has been restarted to cover it.
            gpus = sorted({device.gpu_uuid for device in resource.devices})
            digest = hashlib.sha256(",".join(gpus).encode()).hexdigest()[:16]
            mps_key = f"{resource.behaviour_digest}:{_replica_counts(resource.devices)}:{digest}"
        return cls(
            allocator=allocator,
            cdi_names=referenced_cdi_names(resource.devices, resource.behaviour),
            mps_key=mps_key,
        )


def _replica_counts(devices: Sequence[PluginDevice]) -> str:
    """The replica count, or a digest of the counts per GPU where they differ."""
    counts = {device.index: device.replicas for device in devices}
    if len(set(counts.values())) <= 1:
        return str(max(counts.values(), default=0))
    return hashlib.sha256(json.dumps(sorted(counts.items())).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DevicePluginPlan:
    """A node served through the device-plugin API: its resources, node CDI specs and MPS gates."""

    allocators: tuple[Allocator, ...] = ()
    resources: Mapping[str, ResourceIntent] = field(default_factory=dict)
    cdi: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class DraPlan:
    """A node served through DRA: its devices, and the driver, node and directories serving them.

    `devices` are the ResourceSlice devices before health: each pass taints
    the unhealthy ones (`slice_devices()`), as the device plugin marks a listed
    device Unhealthy. `counter_sets` are what its dynamic MIG devices consume
    (`--dra-dynamic-mig`; none without it).
    """

    driver: str
    node: str
    registrar: Path
    plugins: Path
    cdi_dir: Path
    devices: tuple[SliceDevice, ...] = ()
    counter_sets: tuple[CounterSet, ...] = ()
    # A claim waits for its `/dev` nodes; not on a simulated node without a
    # `/dev` of its own (its driver root's), whose GPUs have none on the host.
    check_device_nodes: bool = True

    def slice_devices(self, health: DeviceHealthView) -> tuple[SliceDevice, ...]:
        """The devices as published now: each unhealthy one tainted."""
        return tuple(with_health(self.devices, health))

    def slices(
        self, devices: Sequence[SliceDevice], *, counters_apart: bool = False
    ) -> list[dict[str, Any]]:
        """The ResourceSlice objects that publish `devices` (and the counter sets) as this pool.

        `counters_apart`: the API server takes counter sets in slices of their
        own (Kubernetes >= 1.35); it changes nothing without counter sets.
        """
        return pack(
            devices,
            driver=self.driver,
            node=self.node,
            pool_generation=0,
            counter_sets=self.counter_sets,
            counters_apart=counters_apart,
        )


Plan = DevicePluginPlan | DraPlan


@dataclass(frozen=True)
class Desired:
    """What the node should serve, and the inputs it was built from.

    `plan` is the one serving plan for the node's kubelet API: a
    `DevicePluginPlan` or a `DraPlan`, never both, so nothing of the other
    API (an allocator, a node CDI spec, an MPS gate, a slice) exists on the
    node. `inventory` holds only the GPUs the config selects (`selection`
    says which were left out and why), so the health source and `/state`
    follow the same GPUs as what is served.
    """

    config: EffectiveConfig
    inventory: Inventory
    options: ro.ResourceOptions
    plan: Plan
    digest: str
    warnings: tuple[str, ...] = ()
    selection: GpuSelection | None = None  # None: built without a selection step
    # the warnings the plan itself adds (not the config file's, not the selection's)
    plan_warnings: tuple[str, ...] = ()

    def new_plan_warnings(self, previous: Desired | None) -> list[str]:
        """The plan's warnings that `previous` did not have: said once, when they appear."""
        said = () if previous is None else previous.plan_warnings
        return [warning for warning in self.plan_warnings if warning not in said]

    @property
    def device_plugin(self) -> DevicePluginPlan:
        """The device-plugin plan; an empty one on a DRA node (nothing served that way)."""
        return self.plan if isinstance(self.plan, DevicePluginPlan) else _NO_DEVICE_PLUGIN

    @property
    def dra(self) -> DraPlan | None:
        return self.plan if isinstance(self.plan, DraPlan) else None

    @property
    def allocators(self) -> tuple[Allocator, ...]:
        return self.device_plugin.allocators

    @property
    def resources(self) -> Mapping[str, ResourceIntent]:
        return self.device_plugin.resources

    @property
    def cdi(self) -> tuple[dict[str, Any], ...]:
        return self.device_plugin.cdi

    @property
    def resource_names(self) -> list[str]:
        return [allocator.name for allocator in self.allocators]

    @property
    def mps_resources(self) -> list[str]:
        """Resources shared through MPS: served only once their daemon answers."""
        return [name for name, intent in self.resources.items() if intent.mps_key is not None]

    @property
    def needs_mps(self) -> bool:
        return bool(self.mps_resources)


_NO_DEVICE_PLUGIN = DevicePluginPlan()


def resource_options(config: EffectiveConfig) -> ro.ResourceOptions:
    flags = config.flags
    return ro.ResourceOptions(
        mig_strategy=flags.mig_strategy,
        sharing=ro.sharing_options(config.sharing),
        device_list_strategy=tuple(flags.device_list_strategy),
        device_id_strategy=flags.device_id_strategy,
        pass_device_specs=flags.pass_device_specs,
        driver_root=flags.driver_root,
        dev_root=flags.dev_root or None,
        driver_root_ctr_path=flags.driver_root_ctr_path,
        gdrcopy_enabled=flags.gdrcopy_enabled,
        gds_enabled=flags.gds_enabled,
        mofed_enabled=flags.mofed_enabled,
        cdi_annotation_prefix=flags.cdi_annotation_prefix,
        nvidia_cdi_hook_path=flags.nvidia_cdi_hook_path,
        cdi_disable_hooks=tuple(flags.cdi_disable_hooks),
        mps_root=flags.mps_root,
        shared_devices_allocation_policy=flags.shared_devices_allocation_policy,
        imex_channel_ids=config.flags.imex_channel_ids,
        imex_required=config.flags.imex_required,
    )


def inventory_digest(inventory: Inventory) -> str:
    blob = json.dumps(asdict(inventory), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cdi_specs(inventory: Inventory, options: ro.ResourceOptions) -> tuple[dict[str, Any], ...]:
    """The CDI specs to write; none (and the spec builder never loaded) without a CDI strategy."""
    if not options.cdi_enabled:
        return ()
    return on_demand.cdi_specs(inventory, options)


def build_desired(config: EffectiveConfig, inventory: Inventory) -> Desired:
    """The node's one serving plan, for the kubelet API its config names.

    Raises:
        ResourceError: devices and config do not make valid resources or DRA devices.
    """
    selection = select_gpus(inventory, selector_of(config))
    inventory = selection.inventory
    options = resource_options(config)
    plan: Plan
    if config.flags.kubelet_api is KubeletApi.DRA:
        ignored = _node_sharing_ignored(config)
        options = replace(options, sharing=ro.SharingOptions())
        options.validate()
        plan = _dra_plan(config, inventory, options)
        parts = [json.dumps([device.to_json() for device in plan.devices], sort_keys=True)]
        if plan.counter_sets:
            parts.append(json.dumps([item.to_json() for item in plan.counter_sets], sort_keys=True))
        planned_warnings: tuple[str, ...] = ignored
    else:
        planned = plan_resources(inventory, options)
        allocators = tuple(Allocator(resource, options) for resource in planned.resources)
        plan = DevicePluginPlan(
            allocators=allocators,
            resources={a.name: ResourceIntent.of(a) for a in allocators},
            cdi=_cdi_specs(inventory, options),
        )
        parts = [a.resource.digest for a in allocators]
        planned_warnings = planned.warnings
    digest = hashlib.sha256(
        ":".join([config.digest, inventory_digest(inventory), *parts]).encode()
    ).hexdigest()[:16]
    return Desired(
        config=config,
        inventory=inventory,
        options=options,
        plan=plan,
        digest=digest,
        # everything an operator should fix, from the config file and from the devices
        warnings=(*config.warnings, *selection.warnings, *planned_warnings),
        selection=selection,
        plan_warnings=tuple(planned_warnings),
    )


def _dra_plan(
    config: EffectiveConfig, inventory: Inventory, options: ro.ResourceOptions
) -> DraPlan:
    flags = config.flags
    counter_sets: tuple[CounterSet, ...] = ()
    if flags.dra_dynamic_mig:
        # The instances claims made keep their GPU partitioned (file I/O: on the worker).
        path = checkpoint_path(Path(flags.kubelet_plugins_directory_path), flags.dra_driver_name)
        owned = owned_instances(path, inventory)
        partitioned = partitioned_devices(inventory, options.mig_strategy, owned=owned)
        devices, counter_sets = partitioned.devices, partitioned.counter_sets
    else:
        devices = tuple(slice_devices(inventory, options.mig_strategy))
    return DraPlan(
        driver=flags.dra_driver_name,
        node=flags.node_name,
        registrar=Path(flags.kubelet_registrar_directory_path),
        plugins=Path(flags.kubelet_plugins_directory_path),
        cdi_dir=Path(flags.cdi_spec_dir),
        devices=devices,
        counter_sets=counter_sets,
        check_device_nodes=not flags.mock_nvml or options.container_dev_root != "/",
    )


_SHARING_KEYS = {
    SharingStrategy.TIME_SLICING: "sharing.timeSlicing",
    SharingStrategy.MPS: "sharing.mps",
}


def _node_sharing_ignored(config: EffectiveConfig) -> tuple[str, ...]:
    """On a DRA node sharing is chosen per claim: node-wide sharing is said to be ignored."""
    key = _SHARING_KEYS.get(config.sharing.strategy)
    if key is None:
        return ()
    return (
        f"{key} is ignored on a node served through DRA (--kubelet-api dra): "
        "GPUs are shared per claim, through the claim's opaque GpuConfig "
        f"(sharing.strategy TimeSlicing or MPS, driver {config.flags.dra_driver_name})",
    )
