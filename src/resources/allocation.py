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

Requests the reference would silently answer with an empty list or crash on
are refused here with an `InvalidRequest` naming the problem: unknown or
repeated IDs, a size below the number of required IDs or above the number of
IDs on offer. Required IDs count as on offer even if the kubelet left them out
of the available list.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NoReturn

from resources.aligned import best_effort
from resources.builder import ResourceSet
from resources.edits import ContainerEdits
from resources.errors import InvalidRequest
from resources.greedy import greedy_pick
from resources.ids import has_annotation, strip_replica
from resources.options import ResourceOptions, SharingStrategy
from resources.responses import container_edits

__all__ = ["Allocator", "strip_replica"]


def _uuid4() -> str:
    return str(uuid.uuid4())


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
        self._group_sizes = Counter(strip_replica(device.id) for device in resource.devices)

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def aligned(self) -> bool:
        """Whether preferred allocation is topology-aware (whole, unreplicated GPUs)."""
        return self.resource.links is not None

    # ------------------------------------------------------------------ Allocate

    def validate(self, ids: Sequence[str]) -> None:
        """The reference's request validation, with its messages.

        Raises:
            InvalidRequest: `invalid allocation request for "<resource>": ...`.
        """
        unknown = next((device_id for device_id in ids if device_id not in self._known), None)
        if unknown is not None:
            self._refuse(f"invalid request: unknown device: {quoted(unknown)}")
        behaviour = self.resource.behaviour
        if (
            behaviour.sharing in (SharingStrategy.TIME_SLICING, SharingStrategy.MPS)
            and behaviour.fail_requests_greater_than_one
            and len(ids) > 1
            and any(has_annotation(device_id) for device_id in ids)
        ):
            self._refuse(
                f"invalid request: maximum request size for shared resources is 1; found {len(ids)}"
            )

    def allocate(self, ids: Sequence[str]) -> ContainerEdits:
        """Container edits for one container request.

        Raises:
            InvalidRequest: the request fails validation.
            AllocationError: a CDI name breaks the CDI naming rules.
        """
        self.validate(ids)
        return container_edits(
            resource=self.name,
            behaviour=self.resource.behaviour,
            devices=self._known,
            ids=list(ids),
            new_response_id=self._new_response_id,
            node_exists=self.options.host_dev_exists,
        )

    def _refuse(self, message: str) -> NoReturn:
        raise InvalidRequest(f'invalid allocation request for "{self.name}": {message}')

    # ------------------------------------------------------- GetPreferredAllocation

    def preferred(self, available: Sequence[str], required: Sequence[str], size: int) -> list[str]:
        """Required IDs plus the best `size - len(required)` of the others.

        Raises:
            InvalidRequest: unknown or repeated IDs, or a size that cannot be met.
        """
        self._check_ids("available", available)
        self._check_ids("required", required)
        if size < len(required):
            raise InvalidRequest(
                f"allocation size {size} is smaller than the {len(required)} required devices"
            )
        if size <= 0:
            raise InvalidRequest(f"allocation size must be at least 1, got {size}")
        must = set(required)
        candidates = sorted((i for i in available if i not in must), key=self._order.__getitem__)
        needed = size - len(required)
        if len(candidates) < needed:
            raise InvalidRequest("not enough available devices to satisfy allocation")
        if needed == 0:
            return list(required)
        if self.aligned:
            chosen = self._aligned(candidates, list(required), size)
        else:
            chosen = greedy_pick(
                candidates=candidates,
                needed=needed,
                group_sizes=self._group_sizes,
                physical={i: self._known[i].gpu_uuid for i in candidates},
                policy=self.resource.behaviour.allocation_policy,
            )
        return [*required, *chosen]

    def _aligned(self, candidates: list[str], required: list[str], size: int) -> list[str]:
        pool = sorted([*candidates, *required], key=self._order.__getitem__)
        links = self.resource.links
        assert links is not None
        weights = links.weights([self._known[i].uuid for i in pool])
        must = set(required)
        positions = [p for p, device_id in enumerate(pool) if device_id in must]
        selection = best_effort(weights, positions, size)
        return [pool[p] for p in selection.members if pool[p] not in must]

    def _check_ids(self, what: str, ids: Sequence[str]) -> None:
        unknown = next((i for i in ids if i not in self._known), None)
        if unknown is not None:
            raise InvalidRequest(f"unknown device in {what} list: {quoted(unknown)}")
        repeated = next((i for i, n in Counter(ids).items() if n > 1), None)
        if repeated is not None:
            raise InvalidRequest(
                f"device listed more than once in {what} list: {quoted(repeated)}"
            )
