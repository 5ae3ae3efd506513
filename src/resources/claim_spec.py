"""The CDI spec of one prepared DRA claim: its devices, the driver, its sharing.

In DRA mode the kubelet asks the plugin to prepare a ResourceClaim; the
answer is a list of CDI device IDs, one per allocated device, that the
container runtime resolves from a spec file. As NVIDIA's DRA driver does,
each claim gets its own transient spec (`k8s.<driver>-claim_<uid>.json`,
kind `k8s.<driver>/claim`) whose devices are named `<claim uid>-<device>`,
so unpreparing a claim is deleting its one file, and two claims never share
an entry.

The content is the one the device-plugin's CDI specs carry (`cdi.driver`):
each GPU its `/dev/nvidiaN` and DRM nodes, each MIG device its parent's node
and its two capability nodes, and the driver (libraries, binaries, control
nodes, hooks) in the spec's common edits, with the claim's sharing settings
as environment. Pure: it reads the inventory and the options it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdi.driver import common_edits, gpu_edits
from cdi.edits import Edits
from devices.model import Gpu, Inventory, MigDevice
from resources.cdi_files import Spec
from resources.cdi_names import device_name_error, minimum_version
from resources.cdi_spec import cdi_hooks, cdi_layout
from resources.devnodes import mig_device_paths
from resources.errors import ResourceError
from resources.options import ResourceOptions

CLAIM_CLASS = "claim"


def claim_vendor(driver: str) -> str:
    return f"k8s.{driver}"


def claim_kind(driver: str) -> str:
    """`k8s.gpu.nvidia.com/claim` for the driver `gpu.nvidia.com`."""
    return f"{claim_vendor(driver)}/{CLAIM_CLASS}"


def claim_spec_file(driver: str, claim_uid: str) -> str:
    """The transient spec file of one claim: `k8s.gpu.nvidia.com-claim_<uid>.json`."""
    return f"{claim_vendor(driver)}-{CLAIM_CLASS}_{claim_uid}.json"


def claim_device_id(driver: str, claim_uid: str, device: str) -> str:
    """The qualified CDI name the kubelet passes on: `k8s.gpu.nvidia.com/claim=<uid>-gpu-0`."""
    return f"{claim_kind(driver)}={claim_uid}-{device}"


@dataclass(frozen=True)
class ClaimDevice:
    """One allocated device: its name in the ResourceSlice and the GPU or MIG UUID it is."""

    name: str
    uuid: str


def _find(inventory: Inventory, uuid: str) -> tuple[Gpu, MigDevice | None]:
    for gpu in inventory.gpus:
        if gpu.uuid == uuid:
            return gpu, None
        for mig in gpu.mig_devices:
            if mig.uuid == uuid:
                return gpu, mig
    raise ResourceError(f"device {uuid} is not on this node")


def device_node_paths(inventory: Inventory, uuid: str) -> tuple[str, ...]:
    """The `/dev` nodes of one GPU (`/dev/nvidiaN`) or MIG device (its parent's and its caps).

    Raises:
        ResourceError: the device is not on this node, or a MIG capability is unknown.
    """
    gpu, mig = _find(inventory, uuid)
    return (gpu.device_path,) if mig is None else mig_device_paths(gpu, mig)


def claim_spec(
    *,
    driver: str,
    claim_uid: str,
    devices: Sequence[ClaimDevice],
    inventory: Inventory,
    options: ResourceOptions,
    env: tuple[str, ...] = (),
) -> Spec:
    """The spec for one claim's devices, `env` added to every container that uses one.

    Raises:
        ResourceError: a device is not on this node, a MIG device lacks its
            capability nodes, or a name does not make a valid CDI device name.
    """
    layout, hooks = cdi_layout(options), cdi_hooks(options)
    entries: list[dict[str, Any]] = []
    for device in devices:
        gpu, mig = _find(inventory, device.uuid)
        if mig is None:
            edits = gpu_edits(gpu, layout, hooks)
        else:
            paths = mig_device_paths(gpu, mig)
            edits = Edits(device_nodes=tuple(layout.device_node(p) for p in paths))
        name = f"{claim_uid}-{device.name}"
        problem = device_name_error(name)
        if problem is not None:
            raise ResourceError(f"claim {claim_uid}: {problem}")
        entries.append({"name": name, "containerEdits": edits.to_json()})
    common = common_edits(inventory.driver_version, layout, hooks)
    if env:
        common = Edits(
            env=(*common.env, *env),
            device_nodes=common.device_nodes,
            mounts=common.mounts,
            hooks=common.hooks,
        )
    spec: Spec = {"cdiVersion": "", "kind": claim_kind(driver), "devices": entries}
    if common:
        spec["containerEdits"] = common.to_json()
    spec["cdiVersion"] = minimum_version(spec)
    return spec
