"""What the plugin must answer to any Allocate or GetPreferredAllocation request.

The rules are the documented ones (`resources.allocation`): Allocate refuses
an ID the resource does not advertise. GetPreferredAllocation refuses only an
unknown ID on a resource of whole GPUs when no replica ID is on offer (the
reference's topology-aware path); elsewhere unknown IDs are dropped. A
request that cannot be met (a size below one, more required IDs than the
size, fewer distinct known IDs on offer than the size, a required ID not on
offer) is answered with an empty list. Any other answer must be usable: one
response per container, the required IDs first, only IDs that were on offer,
none twice, exactly as many as asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from kubelet.api import api_pb2
from resources.allocation import strip_replica

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT

Preferred = tuple[Sequence[str], Sequence[str], int]


@dataclass(frozen=True)
class Resource:
    """One served resource as the kubelet sees it."""

    name: str
    ids: tuple[str, ...]


def int32(value: int) -> int:
    """What an int32 field holds after a peer sent `value` (the low 32 bits)."""
    return (value + 2**31) % 2**32 - 2**31


def allocate_status(resource: Resource, containers: Sequence[Sequence[str]]) -> grpc.StatusCode:
    known = set(resource.ids)
    if any(device not in known for devices in containers for device in devices):
        return INVALID
    return OK


def _whole_gpus(resource: Resource) -> bool:
    return all("::" not in i and not i.startswith("MIG-") for i in resource.ids)


def preferred_status(resource: Resource, containers: Sequence[Preferred]) -> grpc.StatusCode:
    known = set(resource.ids)
    for available, required, _ in containers:
        aligned = _whole_gpus(resource) and not any("::" in i for i in available)
        if aligned and any(device not in known for device in [*available, *required]):
            return INVALID
    return OK


def _can_be_met(
    resource: Resource, available: Sequence[str], required: Sequence[str], size: int
) -> bool:
    offered = {i for i in available if i in set(resource.ids)}
    must = set(required)
    return 0 < size <= len(offered) and len(must) <= size and must <= offered


def check_allocate_answer(
    containers: Sequence[Sequence[str]], answer: api_pb2.AllocateResponse
) -> None:
    assert len(answer.container_responses) == len(containers)
    for devices, response in zip(containers, answer.container_responses, strict=True):
        visible = response.envs.get("NVIDIA_VISIBLE_DEVICES")
        assert visible is not None, f"no NVIDIA_VISIBLE_DEVICES in {response}"
        assert set(visible.split(",")) - {""} == {strip_replica(d) for d in devices}


def check_preferred_answer(
    resource: Resource, containers: Sequence[Preferred], answer: api_pb2.PreferredAllocationResponse
) -> None:
    assert len(answer.container_responses) == len(containers)
    for (available, required, size), response in zip(
        containers, answer.container_responses, strict=True
    ):
        chosen = list(response.deviceIDs)
        if not _can_be_met(resource, available, required, size):
            assert chosen == [], f"no preference expected, got {chosen}"
            continue
        must = list(dict.fromkeys(required))
        assert len(chosen) == size, f"asked for {size}, got {chosen}"
        assert chosen[: len(must)] == must
        assert len(set(chosen)) == len(chosen), f"an ID twice: {chosen}"
        assert set(chosen) <= set(available)
