"""Answering the kubelet's Allocate and GetPreferredAllocation for one resource.

`Allocator` is immutable and built from one `ResourceSet`, so the gRPC
handlers stay pure lookups: no NVML, no locks, no I/O on the hot path except
the optional control-node probe that the reference also runs per request.

Preferred allocation: resources made of whole, unreplicated GPUs get the
topology-aware choice of `resources.aligned`; replicas and MIG devices get the
distributed/packed policies of `resources.greedy`. Both see the candidates in
the resource's device order (NVML index, then replica number), whatever order
the kubelet sends, so the same request always gets the same answer. The answer
is the required IDs in the order given, then the chosen ones in device order.

A request that cannot be met gets "no preference" (an empty list), as from
the reference, rather than an error, since an error fails the pod's
admission: a size of 0 or less, more required IDs than the size, fewer
available IDs than the size, or a required ID that is not available. The
answer never holds an ID that was not offered as available. Repeated IDs
count once, in `available`, `must_include` and Allocate's request alike (a
repeated ID names one device; the reference counts repeats against
`failRequestsGreaterThanOne`). An ID the resource does not have is an error
for whole GPUs (the reference's `no device with uuid` text) and is ignored
otherwise, as in the reference, which also decides between the two policies
by whether any available ID is a replica.

A resource shared with `distinctDevices` holds at most one replica of each
device per request: preferred allocation picks replicas of as many distinct
devices as the candidates allow (after the required ones), and Allocate
refuses a request holding two replicas of one device, in the shape of the
reference's `failRequestsGreaterThanOne` refusal. With MPS, a container
holding several replicas of one GPU is told the sum of their limits
(`resources.mps_share`).

Every answer is bounded in time (see `resources.aligned` for whole GPUs; the
greedy policies are O(n log n)); the kubelet servicer also runs it off the
event loop.
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NoReturn

from resources.aligned import best_effort
from resources.builder import ResourceSet
from resources.edits import ContainerEdits
from resources.errors import InvalidRequest
from resources.greedy import greedy_pick
from resources.ids import has_annotation, strip_replica, unique
from resources.mps_share import replica_thread_percentage
from resources.options import ResourceOptions, SharingStrategy
from resources.responses import container_edits
from resources.tiling import SubMatrix, Weights

__all__ = ["Allocator", "strip_replica"]


def _uuid4() -> str:
    return str(uuid.uuid4())


# Pools of GPUs up to this size get their pair scores copied whole for the
# search; larger ones are read through a lazy `SubMatrix`.
COPY_POOL_MAX = 256

# An error echoes the ID it refuses; a request can carry an arbitrarily long
# one, and gRPC drops a status message larger than its metadata limit (16 KiB)
# in favour of an unreadable RESOURCE_EXHAUSTED.
MAX_QUOTED_ID = 256


def quoted(device_id: str) -> str:
    """`device_id` for an error message, clipped to MAX_QUOTED_ID characters."""
    if len(device_id) <= MAX_QUOTED_ID:
        return device_id
    return f"{device_id[:MAX_QUOTED_ID]}... ({len(device_id)} characters)"


class Allocator:
    """Allocation behaviour of one resource.

    Args:
        resource: the resource, with its devices and behaviour.
        options: supplies the control-node probe (`host_dev_exists`); the
            defaults are used when omitted.
        new_response_id: source of the per-container CDI annotation UUID.
    """

    def __init__(
        self,
        resource: ResourceSet,
        options: ResourceOptions | None = None,
        *,
        new_response_id: Callable[[], str] = _uuid4,
    ) -> None:
        self.resource = resource
        self.options = options if options is not None else ResourceOptions()
        self._new_response_id = new_response_id
        self._known = {device.id: device for device in resource.devices}
        self._order = {device.id: position for position, device in enumerate(resource.devices)}
        # Fixed per plan, so not rebuilt per GetPreferredAllocation call.
        self._group_of = {device.id: strip_replica(device.id) for device in resource.devices}
        self._physical = {device.id: device.gpu_uuid for device in resource.devices}
        self._group_sizes = Counter(self._group_of.values())
        self._gpu_sizes = Counter(self._physical.values())
        self._mps_thread_percentage = (
            replica_thread_percentage(self._group_sizes.values())
            if resource.behaviour.mps is not None
            else None
        )

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def aligned(self) -> bool:
        """Whether preferred allocation is topology-aware (whole, unreplicated GPUs)."""
        return self.resource.links is not None

    # ------------------------------------------------------------------ Allocate

    def validate(self, ids: Sequence[str]) -> None:
        """The reference's request validation, with its messages, and `distinctDevices`.

        `ids` are the request's with repeats removed (`allocate` does that once).

        Raises:
            InvalidRequest: `invalid allocation request for "<resource>": ...`.
        """
        unknown = next((device_id for device_id in ids if device_id not in self._known), None)
        if unknown is not None:
            self._refuse(f"invalid request: unknown device: {quoted(unknown)}")
        behaviour = self.resource.behaviour
        shared = behaviour.sharing in (SharingStrategy.TIME_SLICING, SharingStrategy.MPS)
        replicas = [device_id for device_id in ids if has_annotation(device_id)]
        if shared and behaviour.fail_requests_greater_than_one and len(ids) > 1 and replicas:
            self._refuse(
                f"invalid request: maximum request size for shared resources is 1; found {len(ids)}"
            )
        if shared and behaviour.distinct_devices and replicas:
            device, count = Counter(self._group_of[i] for i in replicas).most_common(1)[0]
            if count > 1:
                self._refuse(
                    "invalid request: maximum number of replicas of one device for shared "
                    f"resources with distinctDevices is 1; found {count} of {quoted(device)}"
                )

    def allocate(self, ids: Sequence[str]) -> ContainerEdits:
        """Container edits for one container request.

        Raises:
            InvalidRequest: the request fails validation.
            AllocationError: a CDI name breaks the CDI naming rules.
        """
        ids = unique(ids)
        self.validate(ids)
        return container_edits(
            resource=self.name,
            behaviour=self.resource.behaviour,
            devices=self._known,
            ids=ids,
            new_response_id=self._new_response_id,
            node_exists=self.options.host_dev_exists,
            mps_thread_percentage=self._mps_thread_percentage,
        )

    def _refuse(self, message: str) -> NoReturn:
        raise InvalidRequest(f'invalid allocation request for "{self.name}": {message}')

    # ------------------------------------------------------- GetPreferredAllocation

    def preferred(self, available: Sequence[str], required: Sequence[str], size: int) -> list[str]:
        """Required IDs plus the best `size - len(required)` of the others, or [].

        Raises:
            InvalidRequest: an ID unknown to a resource of whole GPUs.
        """
        offered = unique(available)
        must = unique(required)
        aligned = self.aligned and not any(has_annotation(i) for i in offered)
        if aligned:
            self._check_known("available", offered)
            self._check_known("required", must)
        else:
            offered = [i for i in offered if i in self._known]
        if size <= 0 or len(must) > size or len(offered) < size:
            return []
        if not set(must).issubset(offered):
            return []
        needed = size - len(must)
        if needed == 0:
            return must
        if len(offered) == size:  # everything on offer is needed: no choice to make
            return [*must, *sorted(set(offered) - set(must), key=self._order.__getitem__)]
        taken = set(must)
        candidates = sorted((i for i in offered if i not in taken), key=self._order.__getitem__)
        if aligned:
            chosen = self._aligned(candidates, must, size)
        else:
            chosen = greedy_pick(
                candidates=candidates,
                needed=needed,
                group_sizes=self._group_sizes,
                group_of=self._group_of,
                physical=self._physical,
                policy=self.resource.behaviour.allocation_policy,
                gpu_sizes=self._gpu_sizes,
                required=[self._group_of[i] for i in must],
                distinct=self.resource.behaviour.distinct_devices,
            )
        return [*must, *chosen]

    def _aligned(self, candidates: list[str], required: list[str], size: int) -> list[str]:
        pool = sorted([*candidates, *required], key=self._order.__getitem__)
        must = set(required)
        positions = [p for p, device_id in enumerate(pool) if device_id in must]
        selection = best_effort(self._weights(pool), positions, size)
        return [pool[p] for p in selection.members if pool[p] not in must]

    def _weights(self, pool: Sequence[str]) -> Weights:
        """Pair scores of `pool`, cut from the resource's matrix without a Python loop per pair.

        A node of 2048 GPUs has 4 million pairs: a pool that is the whole
        resource is the matrix itself, a large one is cut row by row as the
        search reads it, and a small one is copied whole (faster to index).
        """
        links = self.resource.links
        assert links is not None
        rows = self._link_rows
        found = [rows.get(self._known[i].uuid) for i in pool]
        indices = [row for row in found if row is not None]
        if len(indices) < max(2, len(pool)):
            return links.weights([self._known[i].uuid for i in pool])
        matrix = links.matrix
        if indices == list(range(len(matrix))):
            return matrix
        view = SubMatrix(matrix, indices)
        return view if len(indices) > COPY_POOL_MAX else [view[p] for p in range(len(view))]

    @functools.cached_property
    def _link_rows(self) -> dict[str, int]:
        links = self.resource.links
        return {} if links is None else {gpu: row for row, gpu in enumerate(links.uuids)}

    def _check_known(self, what: str, ids: Sequence[str]) -> None:
        unknown = next((i for i in ids if i not in self._known), None)
        if unknown is not None:
            raise InvalidRequest(
                f"unable to retrieve list of {what} devices: no device with uuid: {quoted(unknown)}"
            )
