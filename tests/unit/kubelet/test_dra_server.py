"""DraPluginServer as an actuator: its two sockets, their repair, its failures and its stop.

Each test looks at the files and dials the sockets; the kubelet's side is the
generated pluginregistration stub, so what the plugin watcher would see is
asserted on the wire.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from grpc import aio

from foundation.outcome import Change, Kind
from kubelet.api.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet.api.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from kubelet.dra.server import DraPluginServer
from tests.unit.kubelet.conftest import DraFactory
from tests.unit.kubelet.dra_support import DRIVER, ScriptedPreparer, read_only_directory


def _is_socket(path: Path) -> bool:
    return path.exists() and stat.S_ISSOCK(os.lstat(path).st_mode)


def _paths(root: Path, driver: str = DRIVER) -> tuple[Path, Path]:
    return root / "registry" / f"{driver}-reg.sock", root / "plugins" / driver / "dra.sock"


async def _info(registration: Path) -> registration_pb2.PluginInfo:
    async with aio.insecure_channel(f"unix://{registration}") as channel:
        stub = registration_grpc.RegistrationStub(channel)
        return await stub.GetInfo(registration_pb2.InfoRequest(), timeout=5)


async def _notify(registration: Path, registered: bool, error: str = "") -> None:
    async with aio.insecure_channel(f"unix://{registration}") as channel:
        stub = registration_grpc.RegistrationStub(channel)
        status = registration_pb2.RegistrationStatus(plugin_registered=registered, error=error)
        await stub.NotifyRegistrationStatus(status, timeout=5)


def _pin_inode(path: Path) -> int:
    """Hard-link `path` aside so its inode number cannot be reused by the next file."""
    keep = path.parent.parent / "pinned"
    keep.mkdir(exist_ok=True)
    os.link(path, keep / path.name)
    return os.stat(path).st_ino


def _foreign_socket(path: Path) -> socket.socket:
    """Someone else's listening socket at `path` (the caller closes it)."""
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    return listener


@pytest.fixture
async def server() -> DraPluginServer:
    return DraPluginServer(ScriptedPreparer(), timeout=2.0)


async def _converge(server: DraPluginServer, root: Path, driver: str = DRIVER):
    return await server.converge(driver, root / "registry", root / "plugins")


# -- serving -------------------------------------------------------------------------


async def test_first_converge_serves_both_sockets_and_creates_the_driver_directory(
    short_dir: Path, server: DraPluginServer
) -> None:
    registration, plugin = _paths(short_dir)
    try:
        outcome = await _converge(server, short_dir)
        assert (outcome.kind, outcome.name, outcome.changes) == (
            Kind.DRA,
            DRIVER,
            frozenset({Change.STARTED}),
        )
        assert outcome.converged
        assert _is_socket(registration)
        assert _is_socket(plugin)
        assert (server.registration_socket, server.plugin_socket) == (registration, plugin)
        assert not server.pending(DRIVER, short_dir / "registry", short_dir / "plugins")
    finally:
        await server.stop(0)


async def test_no_hidden_staging_socket_is_left_beside_the_served_ones(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    await serve_dra()
    assert sorted(os.listdir(short_dir / "registry")) == [f"{DRIVER}-reg.sock"]
    assert sorted(os.listdir(short_dir / "plugins" / DRIVER)) == ["dra.sock"]


async def test_get_info_names_the_driver_its_endpoint_and_both_versions(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    info = await _info(_paths(short_dir)[0])
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "DRAPlugin",
        DRIVER,
        str(server.plugin_socket),
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1beta1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ],
    )


async def test_a_second_converge_with_nothing_changed_does_nothing(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    before = [os.stat(p).st_ino for p in _paths(short_dir)]
    outcome = await _converge(server, short_dir)
    assert (outcome.converged, outcome.changes) == (True, frozenset())
    assert [os.stat(p).st_ino for p in _paths(short_dir)] == before


# -- what the kubelet says -----------------------------------------------------------


async def test_notify_registration_status_is_recorded_and_observed(short_dir: Path) -> None:
    heard: list[tuple[bool, str]] = []
    server = DraPluginServer(ScriptedPreparer(), on_status=lambda ok, err: heard.append((ok, err)))
    try:
        await _converge(server, short_dir)
        assert server.status.registered is None
        await _notify(_paths(short_dir)[0], True)
        assert (server.status.registered, server.status.error) == (True, "")
        await _notify(_paths(short_dir)[0], False, "no supported version")
        assert (server.status.registered, server.status.error) == (False, "no supported version")
        assert server.status.notifications == 2
        assert heard == [(True, ""), (False, "no supported version")]
    finally:
        await server.stop(0)


async def test_a_refusal_by_the_kubelet_is_logged_as_a_warning_with_its_reason(
    short_dir: Path, serve_dra: DraFactory, logs: list[tuple[str, str]]
) -> None:
    await serve_dra()
    await _notify(_paths(short_dir)[0], False, "endpoint already registered")
    warnings = [m for level, m in logs if level == "WARNING"]
    assert warnings == [f"the kubelet refused DRA driver {DRIVER}: endpoint already registered"]


async def test_a_status_observer_that_raises_does_not_fail_the_kubelets_call(
    short_dir: Path, serve_dra: DraFactory, logs: list[tuple[str, str]]
) -> None:
    def broken(registered: bool, error: str) -> None:
        raise RuntimeError("observer bug")

    server = await serve_dra(on_status=broken)
    await _notify(_paths(short_dir)[0], True)
    assert server.status.registered is True
    assert any(level == "ERROR" and "observer bug" in m for level, m in logs)


# -- repair --------------------------------------------------------------------------


async def test_a_deleted_registration_socket_is_pending_and_served_again(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    registration, plugin = _paths(short_dir)
    await _notify(registration, True)
    plugin_inode = os.stat(plugin).st_ino
    assert not server.disturbed()
    _pin_inode(registration)
    registration.unlink()
    assert server.pending(DRIVER, short_dir / "registry", short_dir / "plugins")
    assert server.disturbed()
    outcome = await _converge(server, short_dir)
    assert not server.disturbed()
    assert (outcome.converged, outcome.changes) == (True, frozenset({Change.RECREATED}))
    assert _is_socket(registration)
    assert os.stat(plugin).st_ino == plugin_inode  # the endpoint was left alone
    assert server.status.registered is None  # the kubelet has to look at us again
    assert (await _info(registration)).name == DRIVER


async def test_a_deleted_plugin_socket_serves_both_again_so_the_kubelet_re_registers(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    registration, plugin = _paths(short_dir)
    registration_inode = _pin_inode(registration)
    plugin.unlink()
    assert server.pending(DRIVER, short_dir / "registry", short_dir / "plugins")
    assert server.disturbed()
    outcome = await _converge(server, short_dir)
    assert not server.disturbed()
    assert outcome.changes == frozenset({Change.RECREATED})
    assert _is_socket(plugin)
    assert os.stat(registration).st_ino != registration_inode


async def test_a_socket_replaced_by_someone_else_is_taken_back(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    registration, _ = _paths(short_dir)
    with _foreign_socket(registration):
        assert server.pending(DRIVER, short_dir / "registry", short_dir / "plugins")
        assert server.disturbed()
        outcome = await _converge(server, short_dir)
    assert outcome.changes == frozenset({Change.RECREATED})
    assert (await _info(registration)).name == DRIVER


async def test_a_stale_socket_from_an_earlier_run_is_replaced(short_dir: Path) -> None:
    registration, plugin = _paths(short_dir)
    plugin.parent.mkdir(parents=True)
    registration.parent.mkdir(parents=True)
    for path in (registration, plugin):
        _foreign_socket(path).close()  # a socket file nobody listens on
    server = DraPluginServer(ScriptedPreparer(), timeout=2.0)
    try:
        outcome = await _converge(server, short_dir)
        assert outcome.converged
        assert (await _info(registration)).endpoint == str(plugin)
    finally:
        await server.stop(0)


async def test_another_driver_name_restarts_on_its_own_sockets(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    old = _paths(short_dir)
    outcome = await _converge(server, short_dir, "other.example.com")
    assert (outcome.name, outcome.changes) == ("other.example.com", frozenset({Change.RESTARTED}))
    assert not any(p.exists() for p in old)
    assert all(_is_socket(p) for p in _paths(short_dir, "other.example.com"))


# -- failures: not converged, one line, retried ----------------------------------------


async def test_a_path_too_long_for_a_unix_socket_is_a_one_line_error(short_dir: Path) -> None:
    deep = short_dir / ("d" * 100)
    server = DraPluginServer(ScriptedPreparer())
    outcome = await server.converge(DRIVER, short_dir / "registry", deep)
    assert not outcome.converged
    assert str(outcome.error).startswith("socket path too long for a unix socket (107 bytes)")
    assert "\n" not in str(outcome.error)
    assert not deep.exists()  # nothing created for a socket that cannot be bound
    assert server.pending(DRIVER, short_dir / "registry", deep)
    await server.stop(0)


async def test_a_file_in_the_way_of_the_driver_directory_fails_then_the_retry_serves(
    short_dir: Path,
) -> None:
    (short_dir / "plugins").mkdir()
    blocker = short_dir / "plugins" / DRIVER
    blocker.write_text("not a directory")
    server = DraPluginServer(ScriptedPreparer(), timeout=2.0)
    try:
        failed = await _converge(server, short_dir)
        assert not failed.converged
        assert str(failed.error) == f"cannot create directory {blocker}: a file is in the way"
        blocker.unlink()
        retried = await _converge(server, short_dir)
        assert (retried.converged, retried.changes) == (True, frozenset({Change.STARTED}))
    finally:
        await server.stop(0)


async def test_a_registry_that_is_a_file_fails_with_the_plugin_socket_served(
    short_dir: Path,
) -> None:
    (short_dir / "registry").write_text("")
    server = DraPluginServer(ScriptedPreparer(), timeout=2.0)
    try:
        outcome = await _converge(server, short_dir)
        assert not outcome.converged
        assert str(outcome.error) == (
            f"cannot create directory {short_dir / 'registry'}: a file is in the way"
        )
        assert outcome.changes == frozenset({Change.STARTED})  # the DRAPlugin socket is up
        assert _is_socket(_paths(short_dir)[1])
        # Not served is the retry's to repair, on its backoff; nothing was deleted underneath.
        assert not server.disturbed()
    finally:
        await server.stop(0)


async def test_a_read_only_registry_fails_in_one_line_and_the_retry_serves(
    short_dir: Path,
) -> None:
    server = DraPluginServer(ScriptedPreparer(), timeout=2.0)
    with read_only_directory(short_dir) as (registry, make_writable):
        try:
            failed = await server.converge(DRIVER, registry, short_dir / "plugins")
            assert not failed.converged
            assert str(failed.error) == (
                f"cannot bind {registry / f'{DRIVER}-reg.sock'}: its directory is not writable"
            )
            assert server.pending(DRIVER, registry, short_dir / "plugins")
            make_writable()
            retried = await server.converge(DRIVER, registry, short_dir / "plugins")
            assert retried.converged
            assert _is_socket(registry / f"{DRIVER}-reg.sock")
        finally:
            await server.stop(0)


async def test_a_read_only_plugins_directory_fails_to_create_the_driver_directory(
    short_dir: Path,
) -> None:
    server = DraPluginServer(ScriptedPreparer(), timeout=2.0)
    with read_only_directory(short_dir) as (plugins, _):
        outcome = await server.converge(DRIVER, short_dir / "registry", plugins)
        await server.stop(0)
    assert not outcome.converged
    assert str(outcome.error).startswith(f"cannot create directory {plugins / DRIVER}: ")
    assert "\n" not in str(outcome.error)


# -- stop ----------------------------------------------------------------------------


async def test_stop_removes_both_sockets(short_dir: Path, serve_dra: DraFactory) -> None:
    server = await serve_dra()
    await server.stop(0)
    assert not any(p.exists() for p in _paths(short_dir))
    assert not server.running
    assert server.pending(DRIVER, short_dir / "registry", short_dir / "plugins")
    assert not server.disturbed()  # stopped: nothing of its own to repair


async def test_stop_leaves_a_socket_that_is_no_longer_its_own(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    server = await serve_dra()
    registration, plugin = _paths(short_dir)
    with _foreign_socket(registration), _foreign_socket(plugin):
        foreign = [os.stat(p).st_ino for p in (registration, plugin)]
        await server.stop(0)
        assert [os.stat(p).st_ino for p in (registration, plugin)] == foreign


async def test_converge_after_stop_serves_again(short_dir: Path, serve_dra: DraFactory) -> None:
    server = await serve_dra()
    await server.stop(0)
    outcome = await _converge(server, short_dir)
    assert (outcome.converged, outcome.changes) == (True, frozenset({Change.STARTED}))
    assert (await _info(_paths(short_dir)[0])).name == DRIVER
