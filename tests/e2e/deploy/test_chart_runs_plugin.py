"""The plugin starts with exactly what the chart gives its container, and serves.

The rendered container's command, args and environment are used as they are;
only what cannot exist on a test machine is redirected: every volume mount
path to a temp directory (the ConfigMap's files written there), the
inspection port to a free local port, and the GPUs to a simulated node.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import REPO, free_port, http_get
from tests.unit.deploy.chart import mounts_of, plugin_container, render, resolved_env
from tests.waiting import eventually

TIME_SLICED = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 2\n"
)
VALUES: dict[str, Any] = {
    "config": {"map": {"default": "version: v1\n", "ts": TIME_SLICED}, "default": "ts"}
}


@pytest.fixture
def sim_dir(sock_dir: Path) -> Path:
    """The simulated kubelet's directory: `dp` below the socket directory."""
    return sock_dir / "dp"


def redirect(value: str, mounts: dict[str, Path]) -> str:
    for container_path, host_dir in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        if value == container_path or value.startswith(container_path + "/"):
            return str(host_dir) + value[len(container_path) :]
    return value


async def test_plugin_serves_with_the_rendered_container(
    sim: KubeletSimulator, sock_dir: Path
) -> None:
    container = plugin_container(render(VALUES))
    mounts: dict[str, Path] = {}
    for name, mount in mounts_of(container).items():
        if mount["mountPath"] == "/var/lib/kubelet/device-plugins":
            mounts[mount["mountPath"]] = sim.directory
        else:
            mounts[mount["mountPath"]] = sock_dir / name
            mounts[mount["mountPath"]].mkdir()
    for name, text in VALUES["config"]["map"].items():
        (mounts["/available-configs"] / name).write_text(text)

    env = {
        key: redirect(value, mounts)
        for key, value in resolved_env(container, node_name="gpu-node-1").items()
    }
    port, probe_port = free_port(), free_port()
    assert env.pop("STATE_ADDRESS") == "0.0.0.0:9040"
    assert env.pop("PROBE_ADDRESS") == "0.0.0.0:9041"
    env.update(
        STATE_ADDRESS=f"127.0.0.1:{port}",
        PROBE_ADDRESS=f"127.0.0.1:{probe_port}",
        MOCK_NVML="dgx-a100",
        # The chart relies on the kubelet's default socket path, inside the mount.
        KUBELET_SOCKET=redirect("/var/lib/kubelet/device-plugins/kubelet.sock", mounts),
        PATH=os.environ["PATH"],
        PYTHONPATH=str(REPO / "src"),
    )
    command = [*container["command"], *container.get("args", [])]
    assert command[0] == "nvidia-device-plugin"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reconciler",
        *command[1:],
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        view = await sim.wait_devices("nvidia.com/gpu", lambda d: len(d) == 16, timeout=20)
        assert view.endpoint == "nvidia-gpu.sock"
        # Where the chart's probes look: the `probes` port. Ready once the
        # pass that registered is over, which can be just after the kubelet
        # sees the devices.
        async def ready() -> bool:
            return (await http_get(probe_port, "/readyz")).status == 200

        await eventually(ready, what="/readyz on the probes port to answer 200")
        assert (await http_get(probe_port, "/healthz")).status == 200
        state = (await http_get(port, "/state")).json()
        assert state["state"] == "serving"
        assert state["selection"]["selected"] == "ts"
        assert state["config"]["sources"]["log_format"] == "env"
    finally:
        proc.terminate()
        _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    # LOG_FORMAT=json from the chart: every log line is a JSON record.
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert lines
    assert all(line.startswith("{") for line in lines)
