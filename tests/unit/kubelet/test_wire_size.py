"""The resource layer's hand-computed ListAndWatch size equals protobuf's own encoding."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kubelet.translate import list_and_watch_response
from resources.model import Health, PluginDevice
from resources.wire import list_and_watch_size

device_ids = st.one_of(
    st.uuids().map(lambda u: f"GPU-{u}"),
    st.tuples(st.uuids(), st.integers(0, 300)).map(lambda t: f"GPU-{t[0]}::{t[1]}"),
    st.text(min_size=0, max_size=200),
)
devices = st.builds(
    PluginDevice,
    id=device_ids,
    uuid=st.just("GPU-x"),
    gpu_uuid=st.just("GPU-x"),
    index=st.just("0"),
    paths=st.just(("/dev/nvidia0",)),
    numa_node=st.one_of(st.none(), st.integers(-1, 300)),
    health=st.sampled_from(list(Health)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(devices, max_size=40))
def test_size_matches_protobuf(listed: list[PluginDevice]) -> None:
    assert list_and_watch_size(listed) == list_and_watch_response(listed).ByteSize()


def test_a_4096_device_node_fits_the_kubelet_limit() -> None:
    listed = [
        PluginDevice(
            id=f"GPU-{gpu:08x}-1111-4222-8333-444444444444::{replica}",
            uuid="GPU-x",
            gpu_uuid="GPU-x",
            index=str(gpu),
            paths=(),
            numa_node=gpu // 8,
        )
        for gpu in range(16)
        for replica in range(256)
    ]
    size = list_and_watch_size(listed)
    assert size == list_and_watch_response(listed).ByteSize()
    assert size < 4 * 1024 * 1024
