"""The ListAndWatch size arithmetic agrees with what protobuf really encodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foundation.wire_size import (
    KUBELET_MAX_MESSAGE,
    max_replicas,
    replicated_entries_size,
)
from kubelet.api import api_pb2


def encoded(device_id: str, replicas: int, numa: int | None) -> int:
    message = api_pb2.ListAndWatchResponse()
    for number in range(replicas):
        device = message.devices.add(ID=f"{device_id}::{number}", health="Unhealthy")
        if numa is not None:
            device.topology.nodes.add(ID=numa)
    return message.ByteSize()


@pytest.mark.parametrize("replicas", [0, 1, 9, 10, 11, 99, 100, 101, 1000, 1001])
@pytest.mark.parametrize("numa", [None, 0, 1, 300])
def test_replicas_across_digit_boundaries(replicas: int, numa: int | None) -> None:
    device_id = "GPU-00000000-0000-0000-0000-000000000000"
    assert replicated_entries_size(len(device_id), replicas, numa_node=numa) == encoded(
        device_id, replicas, numa
    )


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 200), st.integers(0, 300), st.sampled_from([None, 0, 3]))
def test_any_id_length_and_count(id_length: int, replicas: int, numa: int | None) -> None:
    # Lengths around 125 cross the one-byte length varint of the ID.
    assert replicated_entries_size(id_length, replicas, numa_node=numa) == encoded(
        "x" * id_length, replicas, numa
    )


@pytest.mark.parametrize(("id_length", "numa"), [(1, None), (40, None), (40, 1)])
def test_max_replicas_is_the_exact_boundary(id_length: int, numa: int | None) -> None:
    most = max_replicas(id_length, numa_node=numa)
    assert replicated_entries_size(id_length, most, numa_node=numa) <= KUBELET_MAX_MESSAGE
    assert replicated_entries_size(id_length, most + 1, numa_node=numa) > KUBELET_MAX_MESSAGE
    # And protobuf agrees at the boundary itself.
    assert (
        encoded("x" * id_length, most, numa)
        <= KUBELET_MAX_MESSAGE
        < encoded("x" * id_length, most + 1, numa)
    )


def test_a_million_replicas_are_sized_without_building_them() -> None:
    size = replicated_entries_size(40, 1_000_000)
    assert size > 60 * 1_000_000  # each replica costs at least its 40-byte ID and its health
    assert max_replicas(40, limit=size) == 1_000_000
