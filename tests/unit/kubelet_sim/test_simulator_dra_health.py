"""The simulated kubelet watches each registered DRA driver's device-health stream.

Against DraPluginServer (both health versions listed: v1beta1 is watched) and
against hand-made plugins: one serving only v1alpha1, one serving no health at
all (UNIMPLEMENTED: one note, nothing shown, no retry). A stream that ends is
opened again by the driver's next registration.
"""

from __future__ import annotations

from pathlib import Path

from kubelet.api.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet.dra.health_stream import HealthFeed, HealthStreamServicer, health_handlers
from kubelet.dra.servicer import DraServicer, dra_handlers
from kubelet_sim import DraDeviceHealth, EventKind, KubeletSimulator, Snapshot
from kubelet_sim.cli_dra import dra_lines
from kubelet_sim.dra import NOT_SERVED
from resources.dra_health import HEALTH_CHECK_TIMEOUT_SECONDS, DeviceHealthReport, StreamHealth
from tests.unit.kubelet.conftest import DraFactory
from tests.unit.kubelet.dra_support import (
    DRIVER,
    FakeRegistration,
    ScriptedPreparer,
    serve_only,
)

POOL = "node-a"
SICK = (
    DeviceHealthReport(POOL, "gpu-0", StreamHealth.UNHEALTHY, "xid 79"),
    DeviceHealthReport(POOL, "gpu-1", StreamHealth.HEALTHY),
)
WELL = (
    DeviceHealthReport(POOL, "gpu-0", StreamHealth.HEALTHY),
    DeviceHealthReport(POOL, "gpu-1", StreamHealth.HEALTHY),
)


async def test_the_latest_list_of_a_registered_driver_is_in_the_snapshot_and_the_listing(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    await server.health.publish(SICK)
    sick = await dra_simulator.wait_dra_health(DRIVER, "gpu-0", "Unhealthy")
    assert (sick.pool, sick.message, sick.timeout) == (
        POOL,
        "xid 79",
        HEALTH_CHECK_TIMEOUT_SECONDS,
    )
    view = dra_simulator.snapshot().dra_driver(DRIVER)
    assert view is not None
    assert view.health_service == "v1beta1.DRAResourceHealth"  # the newest one listed
    assert [(d.device, d.health) for d in view.health] == [
        ("gpu-0", "Unhealthy"),
        ("gpu-1", "Healthy"),
    ]
    lines = dra_lines(dra_simulator.snapshot())
    assert lines[2:] == [
        "  health  service=v1beta1.DRAResourceHealth  lists=1",
        "  node-a/gpu-0  Unhealthy  xid 79",
        "  node-a/gpu-1  Healthy",
    ]

    await server.health.publish(WELL)  # recovered: the next list says so
    await dra_simulator.wait_dra_health(DRIVER, "gpu-0", "Healthy")
    received = dra_simulator.snapshot().events_of(EventKind.DRA_HEALTH_RECEIVED, DRIVER)
    assert [(e.device_count, e.detail) for e in received] == [
        (2, "unhealthy=1 unknown=0 service=v1beta1.DRAResourceHealth"),
        (2, "unhealthy=0 unknown=0 service=v1beta1.DRAResourceHealth"),
    ]


async def test_the_health_in_the_snapshot_round_trips_through_json(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    await server.health.publish(SICK)
    await dra_simulator.wait_dra_health(DRIVER, "gpu-0", "Unhealthy")
    snap = dra_simulator.snapshot()
    assert Snapshot.from_dict(snap.to_dict()) == snap


async def test_a_stream_that_ends_is_opened_again_by_the_next_registration(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory, short_dir: Path
) -> None:
    server = await serve_dra()
    await server.health.publish(SICK)
    await dra_simulator.wait_dra_health(DRIVER, "gpu-0", "Unhealthy")
    await server.stop()  # the stream ends, then the driver goes
    gone = await dra_simulator.wait_for(
        lambda s: (v := s.dra_driver(DRIVER)) is not None and not v.registered
    )
    view = gone.dra_driver(DRIVER)
    assert view is not None
    assert view.health == ()  # forgotten with the stream, as the kubelet does

    await server.health.publish(WELL)
    outcome = await server.converge(DRIVER, short_dir / "registry", short_dir / "plugins")
    assert outcome.converged
    await dra_simulator.wait_dra_registered(DRIVER, min_registrations=2)
    healed = await dra_simulator.wait_dra_health(DRIVER, "gpu-0", "Healthy")
    assert healed.message == ""


async def _hand_made(
    short_dir: Path, handlers: tuple[object, ...], versions: list[str]
) -> tuple[object, FakeRegistration]:
    endpoint = short_dir / "plugins" / "hand" / "dra.sock"
    plugin = await serve_only(endpoint, handlers)  # type: ignore[arg-type]
    registration = FakeRegistration(
        short_dir / "registry" / "hand-reg.sock",
        registration_pb2.PluginInfo(
            type="DRAPlugin", name=DRIVER, endpoint=str(endpoint), supported_versions=versions
        ),
    )
    await registration.start()
    return plugin, registration


async def test_a_plugin_listing_only_v1alpha1_is_watched_through_v1alpha1(
    dra_simulator: KubeletSimulator, short_dir: Path
) -> None:
    feed = HealthFeed()
    await feed.publish(SICK)
    v1alpha1_only = health_handlers(HealthStreamServicer(feed, driver=DRIVER))[1:]
    handlers = (*dra_handlers(DraServicer(ScriptedPreparer(), driver=DRIVER)), *v1alpha1_only)
    plugin, registration = await _hand_made(
        short_dir, handlers, ["v1.DRAPlugin", "v1alpha1.DRAResourceHealth"]
    )
    try:
        found = await dra_simulator.wait_dra_health(DRIVER, "gpu-0", "Unhealthy")
        view = dra_simulator.snapshot().dra_driver(DRIVER)
    finally:
        await registration.stop()
        await feed.end()
        await plugin.stop(0)  # type: ignore[attr-defined]
    assert found == DraDeviceHealth(
        POOL, "gpu-0", "Unhealthy", "xid 79", found.last_updated, HEALTH_CHECK_TIMEOUT_SECONDS
    )
    assert view is not None
    assert view.health_service == "v1alpha1.DRAResourceHealth"


async def test_a_plugin_without_the_stream_is_noted_once_shown_nothing_and_not_asked_again(
    dra_simulator: KubeletSimulator, short_dir: Path
) -> None:
    handlers = dra_handlers(DraServicer(ScriptedPreparer(), driver=DRIVER))
    plugin, registration = await _hand_made(short_dir, handlers, ["v1.DRAPlugin"])
    try:
        await dra_simulator.wait_dra_registered(DRIVER)
        snap = await dra_simulator.wait_for(
            lambda s: bool(s.events_of(EventKind.DRA_HEALTH_ENDED, DRIVER))
        )
        watcher = dra_simulator._dra._plugins[DRIVER].health  # type: ignore[union-attr]
    finally:
        await registration.stop()
        await plugin.stop(0)  # type: ignore[attr-defined]
    (ended,) = snap.events_of(EventKind.DRA_HEALTH_ENDED, DRIVER)
    assert ended.detail == NOT_SERVED  # tried v1beta1 and v1alpha1: UNIMPLEMENTED in both
    view = snap.dra_driver(DRIVER)
    assert view is not None
    assert (view.health_service, view.health, view.health_note) == ("", (), NOT_SERVED)
    assert watcher is not None
    assert watcher.done()  # nothing left retrying
    assert not snap.events_of(EventKind.DRA_HEALTH_RECEIVED)
    assert len(dra_lines(snap)) == 2  # the registry and the driver: no health shown
