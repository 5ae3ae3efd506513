"""SIGTERM at awkward moments: mid-reconfiguration, mid-start-up, and twice.

Kubernetes stops a pod with SIGTERM whenever it likes, including while the
plugin is applying a config edit or has not finished starting. Whatever it
was doing, the plugin must remove its sockets and exit 0; a second SIGTERM
means "now" and must end the process at once (leaving a socket that the next
start cleans up).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from kubelet.api import api_pb2, api_pb2_grpc
from kubelet_sim import Event, EventKind, KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/mig-1g.5gb"
STOP_SECONDS = 5.0


def sliced(replicas: int, id_strategy: str = "uuid") -> str:
    return (
        "version: v1\nflags:\n  migStrategy: mixed\n"
        f"  plugin:\n    deviceIDStrategy: {id_strategy}\n"
        "sharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {SHARED}\n      replicas: {replicas}\n"
    )


def plugin_sockets(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_socket() and p.name != "kubelet.sock")


async def stopped_cleanly(plugin: PluginProcess, directory: Path, *, within: float) -> None:
    """SIGTERM: exit 0, no socket of the plugin's left, no traceback (`make bench` times it)."""
    plugin.signal(signal.SIGTERM)
    code = await plugin.wait_exit(timeout=within + 5)
    assert code == 0, f"exit status {code}: {plugin.stderr[-1500:]}"
    assert plugin_sockets(directory) == []
    assert "Traceback" not in plugin.stderr


# SIGTERM lands right after the edit (before the config watch has fired), or
# from inside the reconfiguration: when the kubelet sees the changed
# resource's old stream close, and while it answers the new registration.
@pytest.mark.parametrize(
    "moment",
    [None, EventKind.STREAM_CLOSED, EventKind.REGISTERED],
    ids=["after-edit", "old-stream-closed", "re-registering"],
)
async def test_sigterm_during_reconfiguration(
    sock_dir: Path, tmp_path: Path, moment: EventKind | None
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(sliced(2))
    armed: list[int] = []  # the plugin's pid once the edit is written
    fired = asyncio.Event()

    def on_event(event: Event) -> None:
        if armed and not fired.is_set() and event.kind is moment and event.resource == SHARED:
            os.kill(armed[0], signal.SIGTERM)
            fired.set()

    args = plugin_args(sock_dir, "a100-mig-mixed", "--config-file", str(config))
    async with (
        KubeletSimulator(sock_dir, write_snapshot_file=False, on_event=on_event) as sim,
        PluginProcess(args) as plugin,
    ):
        await sim.wait_devices(SHARED, lambda d: len(d) == 16, timeout=20)
        assert plugin.proc is not None
        scratch = tmp_path / "config.tmp"
        # A new device ID strategy restarts every resource's server (a replica
        # count alone would be an in-place list update with nothing to interrupt).
        scratch.write_text(sliced(5, "index"))
        armed.append(plugin.proc.pid)
        os.replace(scratch, config)
        if moment is None:
            plugin.signal(signal.SIGTERM)
        code = await plugin.wait_exit(timeout=STOP_SECONDS + 5)
        assert code == 0, plugin.stderr[-1500:]
        assert moment is None or fired.is_set()
        assert plugin_sockets(sock_dir) == []
        assert "Traceback" not in plugin.stderr


class _Kubelet(api_pb2_grpc.RegistrationServicer):
    """A kubelet that accepts connections but never answers a registration."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.Empty:
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.fixture
async def stuck_kubelet(sock_dir: Path) -> AsyncIterator[_Kubelet]:
    kubelet = _Kubelet()
    server = grpc.aio.server()
    api_pb2_grpc.add_RegistrationServicer_to_server(kubelet, server)
    assert server.add_insecure_port(f"unix://{sock_dir / 'kubelet.sock'}") != 0
    await server.start()
    try:
        yield kubelet
    finally:
        await server.stop(None)


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for `signum` (its SigCgt mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


async def _importing(plugin: PluginProcess) -> None:
    # The entry point installs its SIGTERM handler before importing grpc,
    # pydantic and the Kubernetes client, which takes far longer; the endpoint
    # listens only once they are imported.
    assert plugin.proc is not None
    pid = plugin.proc.pid
    await eventually(
        lambda: _catches(pid, signal.SIGTERM),
        what="the SIGTERM handler",
        timeout=20,
        interval=0.002,  # the window between the handler and the endpoint is short
    )
    try:
        await plugin.get("/healthz")
    except OSError:
        return
    pytest.skip("start-up finished before the signal could be sent while importing")


async def _waiting_for_the_label(plugin: PluginProcess) -> None:
    # The first failed read of the label is logged; start-up then keeps waiting.
    await eventually(
        lambda: "node label watch:" in plugin.stderr,
        what="the first failed read of the node label in the log",
        timeout=20,
    )


@pytest.mark.parametrize(
    "moment", [_importing, _waiting_for_the_label], ids=["importing", "waiting-for-node-label"]
)
async def test_sigterm_before_start_up_is_done(
    sim: KubeletSimulator, tmp_path: Path, moment: Callable[[PluginProcess], Awaitable[None]]
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters:\n- name: k\n  cluster:\n    server: http://127.0.0.1:1\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
    )
    args = plugin_args(sim.directory, "dgx-a100", "--node-name", "n1")
    args += ["--config-directory", str(configs)]
    plugin = PluginProcess(args, env={"KUBECONFIG": str(unreachable)})
    await plugin.start()
    try:
        await moment(plugin)
        await stopped_cleanly(plugin, sim.directory, within=STOP_SECONDS)
    finally:
        await plugin.kill()


async def test_sigterm_as_soon_as_the_endpoint_answers(sim: KubeletSimulator) -> None:
    async with PluginProcess(plugin_args(sim.directory)) as plugin:
        await eventually(
            lambda: plugin.get("/healthz"),
            what="the endpoint to answer",
            timeout=20,
            interval=0.01,
            ignoring=(OSError,),
        )
        await stopped_cleanly(plugin, sim.directory, within=STOP_SECONDS)


async def test_sigterm_while_waiting_for_the_kubelet(sock_dir: Path) -> None:
    async with PluginProcess(plugin_args(sock_dir)) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "blocked_on_error", timeout=20)
        assert "kubelet" in state["reason"]
        await stopped_cleanly(plugin, sock_dir, within=STOP_SECONDS)


async def test_sigterm_while_registration_hangs(sock_dir: Path, stuck_kubelet: _Kubelet) -> None:
    # Start-up is stuck in Register (up to its 5 s timeout): the stop waits for
    # it, then removes the socket that was already served.
    async with PluginProcess(plugin_args(sock_dir)) as plugin:
        async with asyncio.timeout(20):
            await stuck_kubelet.asked.wait()
        assert plugin_sockets(sock_dir) == ["nvidia-gpu.sock"]
        await stopped_cleanly(plugin, sock_dir, within=STOP_SECONDS + 3)


async def test_second_sigterm_exits_at_once(sock_dir: Path, stuck_kubelet: _Kubelet) -> None:
    async with PluginProcess(plugin_args(sock_dir)) as plugin:
        async with asyncio.timeout(20):
            await stuck_kubelet.asked.wait()
        plugin.signal(signal.SIGTERM)
        await eventually(
            lambda: "received SIGTERM: stopping" in plugin.stderr, what="the stop logged", timeout=5
        )
        plugin.signal(signal.SIGTERM)
        # The first stop waits on the stuck kubelet; the second ends it, unclean.
        code = await plugin.wait_exit(timeout=5)
        assert code != 0  # an interrupted stop is not a clean one
        assert "second SIGTERM" in plugin.stderr


async def test_next_start_cleans_up_after_an_abrupt_exit(sock_dir: Path) -> None:
    # What a second SIGTERM (or SIGKILL) leaves: a plugin socket nobody serves.
    async with KubeletSimulator(sock_dir, write_snapshot_file=False) as sim:
        async with PluginProcess(plugin_args(sock_dir)) as first:
            await sim.wait_registered(GPU, timeout=20)
            await first.kill()
        assert plugin_sockets(sock_dir) == ["nvidia-gpu.sock"]
        async with PluginProcess(plugin_args(sock_dir)) as second:
            await sim.wait_registered(GPU, min_registrations=2, timeout=20)
            view = await sim.wait_devices(GPU, lambda d: len(d) == 8)
            assert view.streaming
            await stopped_cleanly(second, sock_dir, within=STOP_SECONDS)
