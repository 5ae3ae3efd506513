"""The whole plugin as a process against the kubelet simulator (the foundation's contract).

Registration fields, the eight `dgx-a100` devices with their NUMA nodes,
Allocate and its rejection, re-registration after kubelet restarts, SIGTERM,
SIGHUP, and the inspection endpoint in each case. Start-up failures (exit 1,
or blocked then recovering) are in `test_start_up_failures_e2e`.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from kubelet.api import api_pb2_grpc
from kubelet_sim import KubeletSimulator
from kubelet_sim.client import PluginCallError
from kubelet_sim.model import EventKind
from tests.e2e.harness import PluginProcess, free_port, http_get, plugin_args
from tests.waiting import eventually

GPU = "nvidia.com/gpu"


@pytest.fixture
async def plugin(sim: KubeletSimulator) -> AsyncIterator[PluginProcess]:
    async with PluginProcess(plugin_args(sim.directory)) as process:
        await sim.wait_registered(GPU, timeout=20)
        yield process


async def test_registers_eight_gpus_with_numa_allocates_and_shows_its_state(
    sim: KubeletSimulator, plugin: PluginProcess
) -> None:
    view = await sim.wait_devices(GPU, lambda devices: len(devices) == 8)
    assert view.endpoint == "nvidia-gpu.sock"
    assert view.options.get_preferred_allocation_available
    assert not view.options.pre_start_required
    assert len({d.id for d in view.devices}) == 8
    assert all(d.id.startswith("GPU-") and d.health == "Healthy" for d in view.devices)
    # dgx-a100: GPUs 0-3 on NUMA node 0, 4-7 on NUMA node 1 (advertised in index order).
    assert [d.numa_nodes for d in view.devices] == [(0,)] * 4 + [(1,)] * 4
    registered = sim.snapshot().events_of(EventKind.REGISTERED, GPU)
    assert len(registered) == 1

    # Allocate, and the rejection of an unknown device.
    ids = [d.id for d in view.devices]
    response = await sim.allocate(GPU, [[ids[0], ids[1]]])
    (container,) = response.container_responses
    assert dict(container.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{ids[0]},{ids[1]}"}
    with pytest.raises(PluginCallError) as caught:
        await sim.allocate(GPU, [[ids[0], "GPU-does-not-exist"]])
    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "GPU-does-not-exist" in caught.value.details
    # The rejection changed nothing: the next allocation still works.
    again = await sim.allocate(GPU, [[ids[2]]])
    assert dict(again.container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"] == ids[2]

    # The inspection endpoint while serving (allocations are no lifecycle event).
    state = await plugin.wait_state(lambda s: s["state"] == "serving")
    assert state["reason"] is None
    assert state["since"].endswith("Z")
    (resource,) = state["resources"]
    assert resource["name"] == GPU
    assert resource["endpoint"] == "nvidia-gpu.sock"
    assert resource["registered"] is True
    assert len(resource["devices"]) == 8
    assert {d["health"] for d in resource["devices"]} == {"Healthy"}
    assert [(h["source"], h["trigger"], h["dest"]) for h in state["history"]] == [
        ("init", "initialized", "serving")
    ]
    assert all(h["at"] for h in state["history"])
    assert (await plugin.get("/readyz")).status == 200
    assert (await plugin.get("/healthz")).status == 200
    assert (await plugin.get("/nope")).status == 404
    assert (await plugin.get("/state?x=1")).status == 200


async def test_sighup_then_three_kubelet_restarts_then_sigterm(
    sim: KubeletSimulator, plugin: PluginProcess
) -> None:
    # SIGHUP reloads without touching unchanged resources.
    await sim.wait_devices(GPU, lambda devices: len(devices) == 8)
    plugin.signal(signal.SIGHUP)
    state = await plugin.wait_state(
        lambda s: [h["trigger"] for h in s["history"]][-2:] == ["reload_requested", "reconfigured"]
    )
    assert state["state"] == "serving"
    assert state["history"][-1]["detail"]["changed"] is False
    view = sim.snapshot().resource(GPU)
    assert view is not None
    assert view.counters.registrations == 1
    assert view.counters.streams_opened == 1

    # How fast is the `restart` row of `make bench`; here, that each restart
    # is followed by a registration and the full list.
    for round_ in range(2, 5):
        await sim.restart()
        view = await sim.wait_registered(GPU, min_registrations=round_, timeout=10)
        assert view.endpoint == "nvidia-gpu.sock"
        await sim.wait_devices(GPU, lambda devices: len(devices) == 8)
    # One record can count more than one restart when a busy plugin sees two
    # kubelets in one pass (its detail says how many): the total is what counts.
    state = await plugin.wait_state(
        lambda s: sum(
            (h["detail"] or {}).get("restarts", 1)
            for h in s["history"]
            if h["trigger"] == "kubelet_restarted"
        )
        == 3
    )
    assert state["state"] == "serving"
    assert state["resources"][0]["registered"] is True

    # SIGTERM removes the plugin's sockets and exits 0.
    socket_path = sim.directory / "nvidia-gpu.sock"
    assert socket_path.exists()
    code = await plugin.terminate(timeout=5)
    assert code == 0, plugin.stderr
    assert not socket_path.exists()
    assert (sim.directory / "kubelet.sock").exists()  # the kubelet's own socket is not ours


async def test_probes_on_their_own_port_answer_as_the_endpoint_does(
    sim: KubeletSimulator,
) -> None:
    probe_port = free_port()
    args = plugin_args(sim.directory, "dgx-a100", "--probe-address", f"127.0.0.1:{probe_port}")
    async with PluginProcess(args) as plugin:
        await plugin.wait_state(lambda s: s["state"] == "serving")
        for path in ("/healthz", "/readyz"):
            mine, shared = await http_get(probe_port, path), await plugin.get(path)
            assert (mine.status, mine.body) == (shared.status, shared.body) == (200, mine.body)
        # Only the probes: readers of /state and /metrics stay on the shared endpoint.
        assert (await http_get(probe_port, "/state")).status == 404
        assert (await http_get(probe_port, "/metrics")).status == 404
        # Said once start-up is through, which may be just after `serving` shows.
        await eventually(
            lambda: f"probes on http://127.0.0.1:{probe_port}/healthz" in plugin.stderr,
            what="the probes' address in the log",
        )


async def test_node_without_gpus_is_a_quiet_ready_idle(sim: KubeletSimulator) -> None:
    async with PluginProcess(plugin_args(sim.directory, "no-gpus")) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["resources"] == []
        assert state["reason"] is None
        assert (await plugin.get("/readyz")).status == 200
        assert sim.snapshot().resources == ()


async def test_registration_waits_for_a_late_kubelet(sock_dir: Path) -> None:
    async with PluginProcess(plugin_args(sock_dir)) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "blocked_on_error")
        assert "kubelet socket" in state["reason"]
        async with KubeletSimulator(sock_dir, write_snapshot_file=False) as sim:
            # The directory watch sees kubelet.sock appear and registers at once,
            # well before the backoff timer would.
            await sim.wait_registered(GPU, timeout=5)
            await plugin.wait_state(lambda s: s["state"] == "serving")
            await plugin.terminate()
    assert not (sock_dir / "nvidia-gpu.sock").exists()


async def test_sockets_are_served_before_registration(sim: KubeletSimulator) -> None:
    # Registration dials the plugin's socket synchronously (as the kubelet does),
    # so a registration the simulator accepted proves the socket answered first.
    async with PluginProcess(plugin_args(sim.directory)) as plugin:
        await sim.wait_registered(GPU, timeout=20)
        rejected = sim.snapshot().events_of(EventKind.REJECTED)
        assert rejected == ()
        await plugin.terminate()


def _unreachable_cluster(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment that make start-up wait for the node label (10 s)."""
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters:\n- name: k\n  cluster:\n    server: http://127.0.0.1:1\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
    )
    args = ["--node-name", "n1", "--config-directory", str(configs)]
    return args, {"KUBECONFIG": str(kubeconfig)}


@pytest.mark.parametrize("moment", ["waiting-for-the-node-label", "registration-hangs"])
async def test_endpoint_answers_before_start_up_is_through(
    sock_dir: Path, tmp_path: Path, moment: str
) -> None:
    # The probes and /state answer during a slow start: while the node label
    # is awaited (up to 10 s with an unreachable API server), and while the
    # first Register hangs on a kubelet that never answers (up to 5 s).
    from tests.reliability.test_signals import _Kubelet

    kubelet = _Kubelet()
    server = grpc.aio.server()
    api_pb2_grpc.add_RegistrationServicer_to_server(kubelet, server)
    assert server.add_insecure_port(f"unix://{sock_dir / 'kubelet.sock'}") != 0
    await server.start()
    extra, env = _unreachable_cluster(tmp_path) if moment.startswith("waiting") else ([], {})
    probe_port = free_port()
    extra += ["--probe-address", f"127.0.0.1:{probe_port}"]
    try:
        async with PluginProcess(plugin_args(sock_dir, "dgx-a100", *extra), env=env) as plugin:
            if moment.startswith("waiting"):
                await eventually(
                    lambda: "node label watch:" in plugin.stderr,
                    what="the node label watch's first error in the log",
                    timeout=20,
                )
            else:
                async with asyncio.timeout(20):
                    await kubelet.asked.wait()
            state = await plugin.state()  # answered while start-up is still waiting
            assert (state["state"], state["ready"], state["history"]) == ("init", False, [])
            assert not kubelet.asked.is_set() or moment == "registration-hangs"
            assert (await plugin.get("/healthz")).status == 200
            assert (await plugin.get("/readyz")).status == 503
            # The probes' own listener is up by then too.
            assert (await http_get(probe_port, "/healthz")).status == 200
            assert (await http_get(probe_port, "/readyz")).status == 503
            # A stop while Register still hangs waits out its 5 s timeout
            # (tests/reliability/test_signals.py proves that stop): end the
            # hang first, as a kubelet going away would.
            await server.stop(None)
            await plugin.terminate(timeout=15)
    finally:
        await server.stop(None)
