"""KubeletSimulator against a fake device plugin over real unix-socket gRPC."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import grpc
import pytest
from grpc import aio

from kubelet.api import api_pb2
from kubelet_sim import (
    EventKind,
    KubeletSimulator,
    PluginCallError,
    ResourceNotRegistered,
    SimulatorError,
    read_snapshot,
)

RESOURCE = "example.com/gpu"


def device(device_id: str, health: str = "Healthy", numa: int | None = None) -> api_pb2.Device:
    dev = api_pb2.Device(ID=device_id, health=health)
    if numa is not None:
        dev.topology.nodes.add(ID=numa)
    return dev


async def registered_plugin(sim: KubeletSimulator, make_plugin, **kwargs):
    plugin = await make_plugin(**kwargs)
    await plugin.register(sim.socket_path)
    await sim.wait_devices(plugin.resource)
    return plugin


def _pin_inode(path: Path) -> int:
    """Hard-link `path` into a subdirectory so its inode number cannot be reused.

    Filesystems hand a freed inode number straight to the next file; keeping the old
    inode alive makes "a new file was created" observable as a different number.
    """
    keep = path.parent / "pinned"
    keep.mkdir(exist_ok=True)
    os.link(path, keep / path.name)
    return path.stat().st_ino


# -- registration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        pytest.param({"version": "v1alpha1"}, "API version", id="version"),
        pytest.param({"resource": "gpu"}, "ResourceName", id="resource-without-slash"),
        pytest.param({"resource": ""}, "ResourceName", id="empty-resource"),
        pytest.param({"resource": "kubernetes.io/gpu"}, "ResourceName", id="native-resource"),
        pytest.param({"endpoint": "sub/fake.sock"}, "invalid endpoint", id="endpoint-path"),
        pytest.param({"endpoint": ""}, "invalid endpoint", id="empty-endpoint"),
        pytest.param({"endpoint": "missing.sock"}, "failed to dial", id="endpoint-not-served"),
    ],
)
async def test_invalid_registration_is_rejected(
    simulator: KubeletSimulator, make_plugin, overrides: dict[str, str], reason: str
) -> None:
    plugin = await make_plugin()
    with pytest.raises(aio.AioRpcError) as caught:
        await plugin.register(simulator.socket_path, **overrides)
    assert caught.value.code() is grpc.StatusCode.UNKNOWN
    assert reason in (caught.value.details() or "")
    snap = simulator.snapshot()
    assert snap.resources == ()
    [rejected] = snap.events_of(EventKind.REJECTED)
    assert reason in rejected.detail


async def test_registration_opens_stream_and_tracks_devices(
    simulator: KubeletSimulator, make_plugin
) -> None:
    plugin = await make_plugin(devices=[device("gpu-a", numa=1), device("gpu-b")])
    await plugin.register(simulator.socket_path)

    view = await simulator.wait_devices(RESOURCE, lambda devs: len(devs) == 2)
    assert view.endpoint == plugin.endpoint
    assert view.registered
    assert view.streaming
    assert view.options.get_preferred_allocation_available
    assert not view.options.pre_start_required
    assert [(d.id, d.health, d.numa_nodes) for d in view.devices] == [
        ("gpu-a", "Healthy", (1,)),
        ("gpu-b", "Healthy", ()),
    ]

    plugin.set_health("gpu-b", "Unhealthy")
    view = await simulator.wait_devices(
        RESOURCE, lambda devs: any(d.health == "Unhealthy" for d in devs)
    )
    assert view.healthy_ids == ("gpu-a",)
    assert view.counters.registrations == 1
    assert view.counters.streams_opened == 1
    assert view.counters.lists_received == 2
    assert view.counters.streams_closed == view.counters.stream_errors == 0

    kinds = [e.kind for e in simulator.snapshot().events if e.resource == RESOURCE]
    assert kinds == [
        EventKind.REGISTERED,
        EventKind.STREAM_OPENED,
        EventKind.LIST_RECEIVED,
        EventKind.LIST_RECEIVED,
    ]
    counts = [e.device_count for e in simulator.snapshot().events_of(EventKind.LIST_RECEIVED)]
    assert counts == [2, 2]


async def test_reregistration_replaces_the_stream(simulator: KubeletSimulator, make_plugin) -> None:
    plugin = await registered_plugin(simulator, make_plugin)
    await plugin.register(simulator.socket_path)
    view = await simulator.wait_for(
        lambda s: (r := s.resource(RESOURCE)) is not None and r.counters.lists_received == 2
    )
    resource = view.resource(RESOURCE)
    assert resource is not None
    assert resource.counters.registrations == 2
    assert resource.counters.streams_opened == 2
    assert resource.counters.streams_closed == 1
    assert resource.streaming
    [closed] = view.events_of(EventKind.STREAM_CLOSED, RESOURCE)
    assert "replaced" in closed.detail

    # The surviving stream is the new one: updates still arrive.
    plugin.set_health("dev-0", "Unhealthy")
    await simulator.wait_devices(RESOURCE, lambda devs: devs[0].health == "Unhealthy")


async def test_stream_ended_by_plugin_is_recorded(simulator: KubeletSimulator, make_plugin) -> None:
    plugin = await registered_plugin(simulator, make_plugin)
    plugin.finish_streams()
    snap = await simulator.wait_for(lambda s: bool(s.events_of(EventKind.STREAM_CLOSED)))
    view = snap.resource(RESOURCE)
    assert view is not None
    assert not view.streaming
    assert view.registered
    assert view.counters.streams_closed == 1
    assert snap.events_of(EventKind.STREAM_CLOSED)[0].detail == "ended by the plugin"


async def test_plugin_going_away_is_a_stream_error(
    simulator: KubeletSimulator, make_plugin
) -> None:
    plugin = await registered_plugin(simulator, make_plugin)
    await plugin.stop()
    snap = await simulator.wait_for(lambda s: bool(s.events_of(EventKind.STREAM_ERROR)))
    view = snap.resource(RESOURCE)
    assert view is not None
    assert not view.streaming
    assert view.counters.stream_errors == 1


async def test_two_resources_are_tracked_independently(
    simulator: KubeletSimulator, make_plugin
) -> None:
    gpus = await registered_plugin(simulator, make_plugin)
    other = await registered_plugin(
        simulator,
        make_plugin,
        resource="example.com/mig-1g",
        endpoint="fake-mig.sock",
        devices=[device("mig-0")],
    )
    snap = simulator.snapshot()
    assert [r.name for r in snap.resources] == ["example.com/gpu", "example.com/mig-1g"]
    mig = snap.resource(other.resource)
    assert mig is not None
    assert [d.id for d in mig.devices] == ["mig-0"]
    # A change of one resource's list leaves the other's as it was.
    gpus.set_health("dev-0", "Unhealthy")
    snap = await simulator.wait_for(
        lambda s: (r := s.resource(RESOURCE)) is not None and r.counters.lists_received == 2
    )
    assert snap.resource(other.resource) == mig


# -- calls on the plugin ---------------------------------------------------------------


async def test_allocate_round_trip(simulator: KubeletSimulator, make_plugin) -> None:
    plugin = await registered_plugin(simulator, make_plugin)
    response = await simulator.allocate(RESOURCE, [["dev-0"], ["dev-0", "dev-1"]])
    envs = [dict(c.envs) for c in response.container_responses]
    assert envs == [
        {"FAKE_VISIBLE_DEVICES": "dev-0"},
        {"FAKE_VISIBLE_DEVICES": "dev-0,dev-1"},
    ]
    [request] = plugin.allocate_requests
    assert [list(c.devices_ids) for c in request.container_requests] == [
        ["dev-0"],
        ["dev-0", "dev-1"],
    ]


async def test_allocate_error_keeps_code_and_details(
    simulator: KubeletSimulator, make_plugin
) -> None:
    await registered_plugin(simulator, make_plugin)
    with pytest.raises(PluginCallError) as caught:
        await simulator.allocate(RESOURCE, [["dev-0", "nope"]])
    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details == "unknown device: nope"
    assert caught.value.method == "Allocate"


async def test_preferred_allocation(simulator: KubeletSimulator, make_plugin) -> None:
    await registered_plugin(simulator, make_plugin, devices=[device("a"), device("b"), device("c")])
    response = await simulator.preferred(RESOURCE, ["a", "b", "c"], ["c"], 2)
    assert [list(c.deviceIDs) for c in response.container_responses] == [["c", "a"]]


async def test_options_and_pre_start(simulator: KubeletSimulator, make_plugin) -> None:
    options = api_pb2.DevicePluginOptions(pre_start_required=True)
    await registered_plugin(simulator, make_plugin, options=options)
    assert await simulator.options(RESOURCE) == options
    view = simulator.snapshot().resource(RESOURCE)
    assert view is not None
    assert view.options.pre_start_required
    assert not view.options.get_preferred_allocation_available
    assert await simulator.pre_start(RESOURCE, ["dev-0"]) == api_pb2.PreStartContainerResponse()


async def test_calls_on_unknown_resource_fail(simulator: KubeletSimulator) -> None:
    none = "example.com/none"
    with pytest.raises(ResourceNotRegistered):
        await simulator.allocate(none, [["x"]])
    with pytest.raises(ResourceNotRegistered):
        await simulator.preferred(none, ["x"], [], 1)
    with pytest.raises(ResourceNotRegistered):
        await simulator.options(none)
    with pytest.raises(ResourceNotRegistered):
        await simulator.pre_start(none, ["x"])


# -- restart, stop, snapshot file --------------------------------------------------------


async def test_restart_wipes_sockets_and_recreates_kubelet_sock(
    simulator: KubeletSimulator, make_plugin, short_dir: Path
) -> None:
    plugin = await registered_plugin(simulator, make_plugin)
    stray = short_dir / "stray.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(stray))
    keep = short_dir / "checkpoint"
    keep.write_text("not a socket")
    old_inode = _pin_inode(simulator.socket_path)

    await simulator.restart()

    assert not plugin.socket_path.exists()
    assert not stray.exists()
    assert keep.read_text() == "not a socket"
    assert simulator.socket_path.is_socket()
    assert simulator.socket_path.stat().st_ino != old_inode
    snap = simulator.snapshot()
    assert snap.restarts == 1
    view = snap.resource(RESOURCE)
    assert view is not None
    assert not view.registered
    assert not view.streaming
    assert view.devices == ()
    [closed] = snap.events_of(EventKind.STREAM_CLOSED, RESOURCE)
    assert closed.detail == "kubelet restarted"

    # The plugin notices, serves a new socket and registers again.
    await plugin.stop()
    await plugin.start()
    await plugin.register(simulator.socket_path)
    view = await simulator.wait_registered(RESOURCE, min_registrations=2)
    view = await simulator.wait_devices(RESOURCE)
    assert view.counters.registrations == 2
    assert [d.id for d in view.devices] == ["dev-0", "dev-1"]


async def test_snapshot_file_follows_changes_and_is_removed_on_stop(
    short_dir: Path, make_plugin
) -> None:
    sim = KubeletSimulator(short_dir, stop_grace=0.1)
    await sim.start()
    try:
        assert sim.snapshot_file is not None
        assert read_snapshot(sim.snapshot_file).serving
        plugin = await registered_plugin(sim, make_plugin, devices=[device("g", numa=0)])
        on_disk = read_snapshot(sim.snapshot_file)
        assert on_disk.version == sim.snapshot().version
        view = on_disk.resource(plugin.resource)
        assert view is not None
        assert view.endpoint == plugin.endpoint
        assert [(d.id, d.numa_nodes) for d in view.devices] == [("g", (0,))]
        assert view.counters == sim.snapshot().resource(plugin.resource).counters
    finally:
        await sim.stop()
    assert not sim.socket_path.exists()
    assert not sim.snapshot_file.exists()
    assert not sim.snapshot().serving
    assert sim.snapshot().events[-1].kind is EventKind.STOPPED


async def test_second_simulator_on_a_live_socket_is_refused(
    simulator: KubeletSimulator, short_dir: Path
) -> None:
    other = KubeletSimulator(short_dir, write_snapshot_file=False)
    with pytest.raises(SimulatorError, match="another kubelet"):
        await other.start()
    assert simulator.socket_path.is_socket()


async def test_stale_socket_is_replaced(short_dir: Path) -> None:
    stale = short_dir / "kubelet.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(stale))
    stale_inode = _pin_inode(stale)
    async with KubeletSimulator(short_dir, stop_grace=0.1) as sim:
        assert sim.socket_path.stat().st_ino != stale_inode
        assert sim.snapshot().serving


async def test_too_long_socket_path_is_refused(short_dir: Path) -> None:
    deep = short_dir / ("d" * 100)
    with pytest.raises(ValueError, match="too long"):
        await KubeletSimulator(deep).start()


async def test_wait_for_times_out_with_the_last_snapshot(simulator: KubeletSimulator) -> None:
    with pytest.raises(TimeoutError, match="condition not met") as caught:
        await simulator.wait_registered("example.com/never", timeout=0.05)
    assert str(caught.value).endswith(f"last snapshot: {simulator.snapshot()!r}")
