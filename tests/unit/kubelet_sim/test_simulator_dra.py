"""The simulator's DRA side against DraPluginServer and against hand-made plugins.

What the simulated kubelet does with a registration socket (dial, GetInfo, check,
dial the endpoint, NotifyRegistrationStatus), with a socket that goes or comes
back, and across a kubelet restart; and the prepare/unprepare calls it makes.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kubelet.api.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet.dra.servicer import DraServicer, dra_handlers
from kubelet.dra.types import ClaimRef
from kubelet_sim import (
    DraDriverView,
    DriverNotRegistered,
    EventKind,
    KubeletSimulator,
    Snapshot,
)
from kubelet_sim.dra import DraRegistry
from kubelet_sim.ledger import Ledger
from tests.unit.kubelet.conftest import DraFactory
from tests.unit.kubelet.dra_support import (
    DRIVER,
    FakeRegistration,
    ScriptedPreparer,
    serve_only,
)

CLAIM = ClaimRef("ns", "uid-1", "claim-1")


def _unregistered(snap: Snapshot) -> bool:
    view = snap.dra_driver(DRIVER)
    return view is not None and not view.registered


async def _rejected(sim: KubeletSimulator, name: str) -> str:
    snap = await sim.wait_for(lambda s: bool(s.events_of(EventKind.DRA_REJECTED, name)))
    return snap.events_of(EventKind.DRA_REJECTED, name)[-1].detail


# -- registration ----------------------------------------------------------------------


async def test_a_served_plugin_is_registered_with_the_v1_service(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    view = await dra_simulator.wait_dra_registered(DRIVER)
    assert view == DraDriverView(
        name=DRIVER,
        endpoint=str(server.plugin_socket),
        versions=(
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1beta1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ),
        service="v1.DRAPlugin",
        socket=str(server.registration_socket),
        registered=True,
        registrations=1,
    )


async def test_the_plugin_hears_that_it_was_registered(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    await dra_simulator.wait_dra_registered(DRIVER)
    assert (server.status.registered, server.status.error, server.status.notifications) == (
        True,
        "",
        1,
    )


async def test_prepare_and_unprepare_reach_the_preparer_through_the_simulator(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    preparer = ScriptedPreparer()
    await serve_dra(preparer)
    await dra_simulator.wait_dra_registered(DRIVER)
    prepared = await dra_simulator.prepare(DRIVER, [CLAIM])
    unprepared = await dra_simulator.unprepare(DRIVER, [CLAIM])
    assert [d.device_name for d in prepared.claims["uid-1"].devices] == ["dev-claim-1"]
    assert dict(unprepared.claims)["uid-1"].error == ""
    assert (preparer.prepared, preparer.unprepared) == ([[CLAIM]], [[CLAIM]])


async def test_a_re_created_registration_socket_is_dialed_again(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory, short_dir: Path
) -> None:
    server = await serve_dra()
    await dra_simulator.wait_dra_registered(DRIVER)
    assert server.registration_socket is not None
    server.registration_socket.unlink()
    await dra_simulator.wait_for(_unregistered)
    await server.converge(DRIVER, short_dir / "registry", short_dir / "plugins")
    view = await dra_simulator.wait_dra_registered(DRIVER, min_registrations=2)
    assert view.registered
    assert server.status.registered is True
    deregistered = dra_simulator.snapshot().events_of(EventKind.DRA_DEREGISTERED, DRIVER)
    assert [e.detail for e in deregistered] == [f"registration socket {DRIVER}-reg.sock removed"]


async def test_a_stopped_plugin_is_unregistered_and_calls_on_it_are_refused(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    await dra_simulator.wait_dra_registered(DRIVER)
    await server.stop(0)
    await dra_simulator.wait_for(_unregistered)
    with pytest.raises(DriverNotRegistered, match=f"DRA driver {DRIVER} is not registered"):
        await dra_simulator.prepare(DRIVER, [CLAIM])


async def test_a_restart_forgets_the_drivers_and_registers_them_again(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    await dra_simulator.wait_dra_registered(DRIVER)
    await dra_simulator.restart()
    assert dra_simulator.snapshot().restarts == 1
    view = await dra_simulator.wait_dra_registered(DRIVER, min_registrations=2)
    assert view.registered
    assert server.status.notifications == 2
    prepared = await dra_simulator.prepare(DRIVER, [CLAIM])
    assert prepared.claims["uid-1"].error == ""


async def test_a_plugin_serving_only_v1beta1_is_called_through_v1beta1(
    dra_simulator: KubeletSimulator, short_dir: Path
) -> None:
    preparer = ScriptedPreparer()
    endpoint = short_dir / "plugins" / "old" / "dra.sock"
    v1beta1_only = dra_handlers(DraServicer(preparer, driver=DRIVER))[1:]
    plugin = await serve_only(endpoint, v1beta1_only)
    registration = FakeRegistration(
        short_dir / "registry" / "old-reg.sock",
        registration_pb2.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=str(endpoint),
            supported_versions=["v1beta1.DRAPlugin"],
        ),
    )
    await registration.start()
    try:
        view = await dra_simulator.wait_dra_registered(DRIVER)
        prepared = await dra_simulator.prepare(DRIVER, [CLAIM])
    finally:
        await registration.stop()
        await plugin.stop(0)
    assert view.service == "v1beta1.DRAPlugin"
    assert [d.device_name for d in prepared.claims["uid-1"].devices] == ["dev-claim-1"]
    assert registration.statuses == [(True, "")]


@pytest.mark.parametrize(
    ("info", "reason"),
    [
        pytest.param(
            {"type": "CSIPlugin", "name": DRIVER, "supported_versions": ["v1.DRAPlugin"]},
            "no handler registered for plugin type: CSIPlugin at socket",
            id="not-a-dra-plugin",
        ),
        pytest.param(
            {"type": "DRAPlugin", "name": "", "supported_versions": ["v1.DRAPlugin"]},
            "DRA driver name is empty",
            id="no-name",
        ),
        pytest.param(
            {"type": "DRAPlugin", "name": DRIVER, "supported_versions": []},
            "empty list of supported gRPC services (aka supported versions)",
            id="no-versions",
        ),
        pytest.param(
            {"type": "DRAPlugin", "name": DRIVER, "supported_versions": ["v1alpha4.Node"]},
            "none of services supported by the plugin (['v1alpha4.Node']) are supported by "
            "the kubelet (['v1.DRAPlugin', 'v1beta1.DRAPlugin'])",
            id="unknown-versions",
        ),
        pytest.param(
            {
                "type": "DRAPlugin",
                "name": DRIVER,
                "endpoint": "plugins/dra.sock",
                "supported_versions": ["v1.DRAPlugin"],
            },
            "endpoint plugins/dra.sock of DRA driver gpu.example.com is not an absolute path",
            id="relative-endpoint",
        ),
        pytest.param(
            {
                "type": "DRAPlugin",
                "name": DRIVER,
                "endpoint": "/nonexistent/dra.sock",
                "supported_versions": ["v1.DRAPlugin"],
            },
            "cannot dial DRA driver gpu.example.com at /nonexistent/dra.sock",
            id="endpoint-not-served",
        ),
    ],
)
async def test_a_plugin_the_kubelet_cannot_use_is_told_why_and_not_registered(
    dra_simulator: KubeletSimulator, short_dir: Path, info: dict[str, object], reason: str
) -> None:
    registration = FakeRegistration(
        short_dir / "registry" / "bad-reg.sock", registration_pb2.PluginInfo(**info)
    )
    await registration.start()
    try:
        detail = await _rejected(dra_simulator, str(info["name"]) or "bad-reg.sock")
    finally:
        await registration.stop()
    assert reason in detail
    assert registration.statuses == [(False, detail)]
    assert dra_simulator.snapshot().dra_drivers == ()


async def test_a_refused_plugin_is_not_asked_again_until_its_socket_changes(
    short_dir: Path,
) -> None:
    ledger = Ledger(str(short_dir))
    watcher = DraRegistry(short_dir / "registry", ledger, dial_timeout=1.0)
    info = registration_pb2.PluginInfo(type="CSIPlugin", name="csi.example.com")
    registration = FakeRegistration(short_dir / "registry" / "csi-reg.sock", info)
    await registration.start()
    try:
        for _ in range(3):
            await watcher.scan()
        assert len(registration.statuses) == 1
        await registration.stop()
        await registration.start()  # the same path, a new socket
        await watcher.scan()
        assert len(registration.statuses) == 2
    finally:
        await registration.stop()
        await watcher.stop()
    assert len(ledger.snapshot().events_of(EventKind.DRA_REJECTED, "csi.example.com")) == 2


async def test_a_socket_nobody_listens_on_is_reported_once_and_registered_once_served(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    ledger = Ledger(str(short_dir))
    watcher = DraRegistry(short_dir / "registry", ledger, dial_timeout=1.0)
    registry = short_dir / "registry"
    registry.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(registry / f"{DRIVER}-reg.sock"))
    dead.close()  # the file stays, nothing listens
    try:
        for _ in range(3):
            await watcher.scan()
        [rejected] = ledger.snapshot().events_of(EventKind.DRA_REJECTED)
        assert rejected.resource == f"{DRIVER}-reg.sock"
        assert rejected.detail.startswith("nothing accepts connections on ")
        await serve_dra()  # replaces the dead socket
        await watcher.scan()
        view = ledger.snapshot().dra_driver(DRIVER)
        assert view is not None
        assert view.registered
    finally:
        await watcher.stop()
    assert len(ledger.snapshot().events_of(EventKind.DRA_REJECTED)) == 1


async def test_hidden_files_and_non_sockets_in_the_registry_are_ignored(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory, short_dir: Path
) -> None:
    registry = short_dir / "registry"
    registry.mkdir()
    (registry / "notes.txt").write_text("not a socket")
    hidden = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hidden.bind(str(registry / ".hidden-reg.sock"))
    hidden.listen()
    try:
        await serve_dra()
        await dra_simulator.wait_dra_registered(DRIVER)
    finally:
        hidden.close()
    assert dra_simulator.snapshot().events_of(EventKind.DRA_REJECTED) == ()
    assert [d.name for d in dra_simulator.snapshot().dra_drivers] == [DRIVER]


async def test_the_snapshot_names_the_registry_and_round_trips_through_json(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory, short_dir: Path
) -> None:
    await serve_dra()
    await dra_simulator.wait_dra_registered(DRIVER)
    snap = dra_simulator.snapshot()
    assert snap.registry == str(short_dir / "registry")
    again = Snapshot.from_dict(snap.to_dict())
    assert (again.registry, again.dra_drivers) == (snap.registry, snap.dra_drivers)


async def test_without_a_registry_the_dra_side_is_off(short_dir: Path) -> None:
    async with KubeletSimulator(short_dir, write_snapshot_file=False) as sim:
        assert sim.snapshot().registry == ""
        with pytest.raises(DriverNotRegistered, match="watches no plugins_registry"):
            await sim.prepare(DRIVER, [CLAIM])


async def test_a_missing_registry_directory_is_watched_until_it_appears(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    async with KubeletSimulator(
        short_dir / "dp", registry_dir=short_dir / "registry", write_snapshot_file=False
    ) as sim:
        assert not (short_dir / "registry").exists()
        await serve_dra()  # creates it
        view = await sim.wait_dra_registered(DRIVER)
    assert view.registered
