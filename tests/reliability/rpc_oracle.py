"""What the plugin must answer to any Allocate or GetPreferredAllocation request.

The rules are the documented ones (`resources.allocation`): Allocate refuses
an ID the resource does not advertise; GetPreferredAllocation refuses unknown
or repeated IDs, a size below one or below the number of required IDs, and a
size the offered IDs cannot fill. Everything else is answered, and an answer
must be usable: one response per container, the required IDs first, only IDs
that were on offer, none twice, exactly as many as asked for.
"""

from __future__ import annotations

from collections import Counter
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


def preferred_status(resource: Resource, containers: Sequence[Preferred]) -> grpc.StatusCode:
    known = set(resource.ids)
    for available, required, size in containers:
        if any(device not in known for device in [*available, *required]):
            return INVALID
        if max(Counter(available).values(), default=1) > 1:
            return INVALID
        if max(Counter(required).values(), default=1) > 1:
            return INVALID
        if size < len(required) or size <= 0:
            return INVALID
        if len(set(available) - set(required)) < size - len(required):
            return INVALID
    return OK


def check_allocate_answer(
    containers: Sequence[Sequence[str]], answer: api_pb2.AllocateResponse
) -> None:
    assert len(answer.container_responses) == len(containers)
    for devices, response in zip(containers, answer.container_responses, strict=True):
        visible = response.envs.get("NVIDIA_VISIBLE_DEVICES")
        assert visible is not None, f"no NVIDIA_VISIBLE_DEVICES in {response}"
        assert set(visible.split(",")) - {""} == {strip_replica(d) for d in devices}


def check_preferred_answer(
    containers: Sequence[Preferred], answer: api_pb2.PreferredAllocationResponse
) -> None:
    assert len(answer.container_responses) == len(containers)
    for (available, required, size), response in zip(
        containers, answer.container_responses, strict=True
    ):
        chosen = list(response.deviceIDs)
        assert len(chosen) == size, f"asked for {size}, got {chosen}"
        assert chosen[: len(required)] == list(required)
        assert len(set(chosen)) == len(chosen), f"an ID twice: {chosen}"
        assert set(chosen) <= set(available) | set(required)
