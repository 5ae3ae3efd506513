"""MPS sharing end to end: the daemon manager, the plugin's `mps_starting` gate, Allocate.

Both real processes run: `mps-control-daemon` (with the stand-in control
program first on PATH) and the plugin, sharing an MPS root in a temp dir. The
plugin advertises the shared resource only once the daemon answers its probe,
hands out the MPS environment and mounts, and takes the resource back when the
daemon dies. With the chart's config directory both follow the same node
label (through the emulated API server), so they always serve one config.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet_sim import KubeletSimulator
from mps.layout import MpsLayout
from tests.e2e.harness import REPO, PluginProcess, plugin_args
from tests.unit.kube.apiserver import kubeconfig, running_apiserver
from tests.unit.mps.helpers import daemon_pid, kill_fake_daemons, path_with_fakes, state
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"


@pytest.fixture
def mps_root(sock_dir: Path) -> Iterator[Path]:
    root = sock_dir / "mps"
    root.mkdir()
    try:
        yield root
    finally:
        kill_fake_daemons(root)


@pytest.fixture
def sim_dir(sock_dir: Path) -> Path:
    """The simulated kubelet's directory: `kubelet` below the socket directory."""
    return sock_dir / "kubelet"


def start_daemon(
    mps_root: Path,
    config: Path | None,
    log: Path,
    profile: str = "dgx-a100",
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    env = {
        "PATH": path_with_fakes(),
        "PYTHONPATH": str(REPO / "src"),
        "FAKE_NVIDIA_SMI_LOG": str(mps_root.parent / "smi.log"),
        **(extra_env or {}),
    }
    config_args = [] if config is None else ["--config-file", str(config)]
    with log.open("ab") as sink:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mps",
                "--mps-container-root",
                str(mps_root),
                *config_args,
                "--mock-nvml",
                profile,
                "--health-interval",
                "0.2",
                "--restart-backoff",
                "0.5",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
        )


async def test_mps_gates_registration_and_recovers(
    sim: KubeletSimulator, mps_root: Path, tmp_path: Path
) -> None:
    config = REPO / "config" / "mps.yaml"
    args = plugin_args(
        sim.directory,
        "dgx-a100",
        "--config-file",
        str(config),
        "--mps-root",
        "/run/nvidia/mps",
        "--mps-container-root",
        str(mps_root),
    )
    env = {"PATH": path_with_fakes()}
    async with PluginProcess(args, env=env) as plugin:
        # No daemon yet: the plugin waits in mps_starting and says why.
        state_ = await plugin.wait_state(
            lambda s: s["state"] == "mps_starting" and s["reason"] is not None, timeout=20
        )
        assert "waiting for the MPS daemon" in state_["reason"]
        assert sim.snapshot().resource(GPU) is None

        daemon = start_daemon(mps_root, config, tmp_path / "daemon.log")
        try:
            view = await sim.wait_devices(GPU, lambda d: len(d) == 80, timeout=20)
            assert len({d.id.split("::")[0] for d in view.devices}) == 8
            state_ = await plugin.wait_state(lambda s: s["state"] == "serving")
            transitions = [(h["source"], h["dest"]) for h in state_["history"]]
            assert ("init", "mps_starting") in transitions
            assert transitions[-1] == ("mps_starting", "serving")

            layout = MpsLayout(mps_root)
            sent = state(layout)["commands"]
            # 40960 MiB / 10 replicas, and 100 / 10 percent.
            assert "set_default_device_pinned_mem_limit 0 4096M" in sent
            assert "set_default_active_thread_percentage 10" in sent

            response = await sim.allocate(GPU, [[view.devices[0].id]])
            (container,) = response.container_responses
            assert container.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
            assert [(m.container_path, m.host_path) for m in container.mounts] == [
                ("/mps/nvidia.com/gpu/pipe", "/run/nvidia/mps/nvidia.com/gpu/pipe"),
                ("/dev/shm", "/run/nvidia/mps/shm"),
            ]

            # The daemon dies: the resource goes back to mps_starting...
            pid = daemon_pid(layout)
            assert pid is not None
            daemon.send_signal(signal.SIGSTOP)  # keep the supervisor from restarting it
            os.kill(pid, signal.SIGKILL)
            await sim.wait_devices(GPU, lambda d: len(d) == 0, timeout=15)
            await plugin.wait_state(lambda s: s["state"] == "mps_starting")
            # ...and comes back with the daemon.
            daemon.send_signal(signal.SIGCONT)
            await sim.wait_devices(GPU, lambda d: len(d) == 80, timeout=20)
            await plugin.wait_state(lambda s: s["state"] == "serving")
        finally:
            daemon.send_signal(signal.SIGCONT)
            daemon.terminate()
            await asyncio.to_thread(daemon.wait, 15)


def mps_config(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  mps:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


async def test_plugin_and_daemon_follow_one_node_label(
    sim: KubeletSimulator, mps_root: Path, tmp_path: Path
) -> None:
    """The chart's setup: one ConfigMap directory, one node label, both components agree."""
    configs = tmp_path / "available-configs"
    configs.mkdir()
    (configs / "mps-2").write_text(mps_config(2))
    (configs / "mps-4").write_text(mps_config(4))
    async with running_apiserver() as apiserver:
        await apiserver.add_node(NODE, {LABEL: "mps-4"})
        selection = {
            "CONFIG_DIRECTORY": str(configs),
            "DEFAULT_CONFIG": "mps-2",
            "NODE_NAME": NODE,
            "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", apiserver.url)),
        }
        args = plugin_args(
            sim.directory, "t4x4", "--mps-root", "/run/nvidia/mps",
            "--mps-container-root", str(mps_root),
        )  # fmt: skip
        # The daemon first: the plugin's first probe then finds it (that the
        # plugin waits for a late daemon is the test above).
        daemon = start_daemon(mps_root, None, tmp_path / "daemon.log", "t4x4", selection)
        try:
            layout = MpsLayout(mps_root)
            await eventually(layout.ready.exists, what="the daemons ready", timeout=20)
            env = {"PATH": path_with_fakes(), **selection}
            async with PluginProcess(args, env=env) as plugin:
                # The label's config on both sides: 4 GPUs x 4 replicas, 25% each.
                await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=20)
                assert "set_default_active_thread_percentage 25" in state(layout)["commands"]
                first = daemon_pid(layout)

                # Each follows the label on its own. Held still, the daemon
                # cannot follow, so the plugin sees the change first: it keeps
                # the 16 devices its daemon's limits were made for and says
                # what it waits for, rather than advertise 8 under 25% limits.
                daemon.send_signal(signal.SIGSTOP)
                await apiserver.set_labels(NODE, {LABEL: "mps-2"})
                waiting = await plugin.wait_state(
                    lambda s: "applies other limits" in (s["reason"] or ""), timeout=20
                )
                assert "(25% of threads" in waiting["reason"]
                view = sim.snapshot().resource(GPU)
                assert view is not None
                assert len(view.devices) == 16
                assert daemon_pid(layout) == first
                daemon.send_signal(signal.SIGCONT)
                # By the time the kubelet sees 8 devices, the new daemon runs with 50% each.
                await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
                assert daemon_pid(layout) not in (None, first)
                assert "set_default_active_thread_percentage 50" in state(layout)["commands"]
                await plugin.wait_state(lambda s: s["state"] == "serving", timeout=20)
        finally:
            daemon.send_signal(signal.SIGCONT)
            daemon.terminate()
            await asyncio.to_thread(daemon.wait, 15)
    assert daemon.returncode == 0, (tmp_path / "daemon.log").read_text()
