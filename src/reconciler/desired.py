"""Desired state: effective config + inventory -> the resources to serve.

Pure: the same config and inventory always give the same `Desired`, and
building it touches nothing shared (it runs on the NVML worker, see
`reconciler.reading`). It is only what the node *should* look like; whether
it does is for each actuator to observe (see `reconciler.actuators`). Its
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
from dataclasses import asdict, dataclass, field
from typing import Any

from devices.model import Inventory
from resources import options as ro
from resources.allocation import Allocator
from resources.builder import plan_resources
from resources.gpu_filter import GpuSelection, select_gpus
from resources.model import PluginDevice
from resources.responses import referenced_cdi_names
from settings import EffectiveConfig
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
class Desired:
    """What the node should serve, and the inputs it was built from.

    `inventory` holds only the GPUs the config selects (`selection` says
    which were left out and why), so the health source and `/state` follow
    the same GPUs as the resources.
    """

    config: EffectiveConfig
    inventory: Inventory
    options: ro.ResourceOptions
    allocators: tuple[Allocator, ...]
    digest: str
    warnings: tuple[str, ...] = ()
    cdi: tuple[dict[str, Any], ...] = ()
    resources: Mapping[str, ResourceIntent] = field(default_factory=dict)
    selection: GpuSelection | None = None  # None: built without a selection step

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
    from resources.cdi_spec import cdi_specs

    return cdi_specs(inventory, options)


def build_desired(config: EffectiveConfig, inventory: Inventory) -> Desired:
    """Raises ResourceError when devices and config do not make valid resources."""
    selection = select_gpus(inventory, selector_of(config))
    inventory = selection.inventory
    options = resource_options(config)
    planned = plan_resources(inventory, options)
    allocators = tuple(Allocator(resource, options) for resource in planned.resources)
    specs = _cdi_specs(inventory, options)
    digest = hashlib.sha256(
        ":".join(
            [config.digest, inventory_digest(inventory), *(a.resource.digest for a in allocators)]
        ).encode()
    ).hexdigest()[:16]
    return Desired(
        config=config,
        inventory=inventory,
        options=options,
        allocators=allocators,
        digest=digest,
        # everything an operator should fix, from the config file and from the devices
        warnings=(*config.warnings, *selection.warnings, *planned.warnings),
        cdi=specs,
        resources={a.name: ResourceIntent.of(a) for a in allocators},
        selection=selection,
    )
