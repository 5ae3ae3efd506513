"""Build the set of resources to serve from the inventory and the options.

`plan_resources` is the pure desired-state function of this package: the MIG
strategy groups devices into resources (`devicemap`), sharing replicates them
(`replicas`), IMEX channels and the extra CDI classes are discovered through
the injected probes, and each resource is given the `Behaviour` its Allocate
and GetPreferredAllocation answers depend on.

A `ResourceSet` is a frozen value. Two digests let the reconciler tell a change
of the device list (resend ListAndWatch, swap the allocator in place) from a
change of options (restart the resource's server): `devices_digest` covers
the devices, their link scores and how they are shared (`SHARING_FIELDS`),
`behaviour_digest` covers the name and the other options, and `digest`
covers both. Equality ignores the link scores, which
follow from the devices, so `replace(a, devices=()) == replace(b, devices=())`
also means "same behaviour".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from devices.model import Inventory
from resources.devicemap import device_map, visible_gpus
from resources.devnodes import enabled_extras, extra_nodes
from resources.errors import ResourceError
from resources.ids import has_annotation
from resources.imex import discover_imex_channels
from resources.model import PluginDevice
from resources.options import (
    AllocationPolicy,
    DeviceIdStrategy,
    DeviceListStrategy,
    ResourceOptions,
    SharingStrategy,
    join_root,
)
from resources.replicas import replicate, select
from resources.topology import LinkScores, link_scores
from resources.wire import check_list_size, check_replication_fits

MPS_CONTAINER_ROOT = "/mps"


@dataclass(frozen=True)
class MpsPaths:
    """Where a resource's MPS pipe directory and shared memory live."""

    pipe_dir: str  # inside the workload container: /mps/<resource>/pipe
    host_pipe_dir: str  # <mps root>/<resource>/pipe
    host_shm: str  # <mps root>/shm

    @classmethod
    def for_resource(cls, name: str, mps_root: str) -> MpsPaths:
        return cls(
            pipe_dir=f"{MPS_CONTAINER_ROOT}/{name}/pipe",
            host_pipe_dir=join_root(mps_root, f"/{name}/pipe"),
            host_shm=join_root(mps_root, "/shm"),
        )


@dataclass(frozen=True, kw_only=True)
class Behaviour:
    """Everything an allocation of *this* resource depends on, besides its devices.

    Nothing node-wide that this resource's answers do not read belongs here:
    the digest of a behaviour decides whether its server restarts, so a
    sharing edit for `nvidia.com/gpu` must leave a MIG resource's behaviour
    (and its socket, registration and streams) untouched, and a replica count
    is part of the device list, not of the behaviour.
    """

    sharing: SharingStrategy = SharingStrategy.NONE
    fail_requests_greater_than_one: bool = False
    # at most one replica of each device per request (`distinctDevices`)
    distinct_devices: bool = False
    device_list_strategy: tuple[DeviceListStrategy, ...] = (DeviceListStrategy.ENVVAR,)
    device_id_strategy: DeviceIdStrategy = DeviceIdStrategy.UUID
    pass_device_specs: bool = False
    host_dev_root: str = "/"
    gdrcopy: bool = False
    gds: bool = False
    mofed: bool = False
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    cdi_extra_classes: tuple[str, ...] = ()
    imex_channels: tuple[str, ...] = ()
    mps: MpsPaths | None = None
    allocation_policy: AllocationPolicy = AllocationPolicy.DISTRIBUTED

    @property
    def strategies(self) -> frozenset[DeviceListStrategy]:
        return frozenset(self.device_list_strategy)


# How a resource's devices are shared. Sharing turns a device list into a list
# of replicas, which the kubelet learns through ListAndWatch like any other
# list, and the rest only changes how Allocate and GetPreferredAllocation
# judge a request; nothing the kubelet learned at registration depends on it.
# So a sharing edit is an in-place update of the resource (new allocator, new
# list on the open stream), never a re-registration.
SHARING_FIELDS = (
    "sharing",
    "fail_requests_greater_than_one",
    "distinct_devices",
    "allocation_policy",
)


@dataclass(frozen=True)
class ResourceSet:
    """One kubelet resource: its full name, advertised devices and allocation behaviour.

    `links` holds the pair scores of its GPUs when the resource is made of
    whole, unreplicated GPUs (topology-aware preferred allocation); it is
    `None` otherwise.

    The digests are computed once per object (it is immutable): on a node of
    thousands of replicas one costs about 100 ms, and the reconcile loop
    compares them on every pass.
    """

    name: str
    devices: tuple[PluginDevice, ...]
    behaviour: Behaviour = field(default_factory=Behaviour)
    # Derived from the devices' hardware, so it belongs with the device list:
    # equality ignores it and `devices_digest` covers it.
    links: LinkScores | None = field(default=None, compare=False)

    @cached_property
    def devices_digest(self) -> str:
        """The device list and how it is shared: swapped in place and resent on the stream."""
        links = None if self.links is None else [self.links.uuids, self.links.matrix]
        behaviour = dataclasses.asdict(self.behaviour)
        sharing = {key: behaviour[key] for key in SHARING_FIELDS}
        return _digest([[dataclasses.asdict(d) for d in self.devices], links, sharing])

    @cached_property
    def behaviour_digest(self) -> str:
        """The resource's options: a change restarts its server (and only its server)."""
        behaviour = dataclasses.asdict(self.behaviour)
        options = {key: value for key, value in behaviour.items() if key not in SHARING_FIELDS}
        return _digest([self.name, options])

    @cached_property
    def digest(self) -> str:
        return _digest([self.devices_digest, self.behaviour_digest])


@dataclass(frozen=True)
class ResourcePlan:
    """The resources to serve, plus what discovery found and what to warn about."""

    resources: tuple[ResourceSet, ...]
    imex_channels: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def resource(self, name: str) -> ResourceSet | None:
        return next((r for r in self.resources if r.name == name), None)


def plan_resources(inventory: Inventory, options: ResourceOptions | None = None) -> ResourcePlan:
    """Resources with at least one device, in name order.

    Raises:
        ResourceError: the options are invalid, the node cannot be exposed
            under the MIG strategy, MPS meets MIG devices, a required IMEX
            channel is missing, or a device list would not fit in one
            ListAndWatch message.
    """
    options = options if options is not None else ResourceOptions()
    options.validate()
    mapped = device_map(inventory, options.mig_strategy)
    selections = select(mapped.resources, options.sharing)
    check_replication_fits(mapped.resources, selections)  # before building any replica
    table = replicate(mapped.resources, selections)
    distinct = {shared.target for shared in selections.values() if shared.distinct}
    mps = options.sharing.strategy is SharingStrategy.MPS
    if mps and any(device.is_mig for devices in table.values() for device in devices):
        raise ResourceError("sharing using MPS is not supported for MIG devices")
    imex = discover_imex_channels(options)
    extras = tuple(kind for kind in enabled_extras(options) if extra_nodes(kind, options))
    gpus = {gpu.uuid: gpu for gpu in visible_gpus(inventory)}
    resources = []
    for name in sorted(table):
        devices = table[name]
        check_list_size(name, devices)
        shared = any(device.replicas for device in devices)
        behaviour = Behaviour(
            # Sharing options matter only to a resource whose devices are replicated.
            sharing=options.sharing.strategy if shared else SharingStrategy.NONE,
            fail_requests_greater_than_one=shared and options.sharing.fails_multiple_requests,
            distinct_devices=shared and name in distinct,
            device_list_strategy=tuple(s for s in DeviceListStrategy if s in options.strategies),
            device_id_strategy=options.device_id_strategy,
            pass_device_specs=options.pass_device_specs,
            host_dev_root=options.host_dev_root,
            gdrcopy=options.gdrcopy_enabled,
            gds=options.gds_enabled,
            mofed=options.mofed_enabled,
            cdi_annotation_prefix=options.cdi_annotation_prefix,
            cdi_extra_classes=extras if options.cdi_enabled else (),
            imex_channels=imex.channels,
            # MPS edits only where a control daemon serves the resource, i.e.
            # where its devices are replicated (the reference also adds them to
            # unreplicated resources, which then never pass the daemon probe).
            mps=MpsPaths.for_resource(name, options.mps_root or "/") if mps and shared else None,
            # the policy orders replicas of one device; unreplicated devices ignore it
            allocation_policy=(
                options.shared_devices_allocation_policy if shared else AllocationPolicy.DISTRIBUTED
            ),
        )
        aligned = all(not d.is_mig and not has_annotation(d.id) for d in devices)
        links = link_scores([gpus[d.uuid] for d in devices if d.uuid in gpus]) if aligned else None
        resources.append(ResourceSet(name, devices, behaviour, links))
    return ResourcePlan(
        resources=tuple(resources),
        imex_channels=imex.channels,
        warnings=mapped.warnings + imex.warnings,
    )


def build_resources(
    inventory: Inventory, options: ResourceOptions | None = None
) -> tuple[ResourceSet, ...]:
    """The resources of `plan_resources`, without discovery details and warnings."""
    return plan_resources(inventory, options).resources


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
