"""Per-node config selection through the node label, end to end.

The plugin runs with `--node-name` and a KUBECONFIG that points at kmock's
emulated API server (a real HTTP server, watch streams included); a mounted
ConfigMap-like directory holds two named configs. Switching the node label
switches the config; an unknown value keeps the running one; the API server
going away never stops serving.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.unit.kube.apiserver import ApiServer, kubeconfig, running_apiserver

NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"
GPU = "nvidia.com/gpu"


def sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server


def configs(directory: Path) -> Path:
    directory.mkdir()
    (directory / "two").write_text(sliced(2))
    (directory / "four").write_text(sliced(4))
    return directory


async def test_label_selects_and_switches_the_config(
    sim: KubeletSimulator, apiserver: ApiServer, tmp_path: Path
) -> None:
    await apiserver.add_node(NODE, {LABEL: "two"})
    args = plugin_args(
        sim.directory,
        "t4x4",
        "--config-directory",
        str(configs(tmp_path / "configs")),
        "--default-config",
        "four",
        "--node-name",
        NODE,
    )
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", apiserver.url))}
    async with PluginProcess(args, env=env) as plugin:
        # The label was read before the first plan: no detour through the default.
        view = await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        assert view.counters.lists_received == 1
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["selection"]["selected"] == "two"
        assert state["selection"]["outcome"] == "label"

        await apiserver.set_labels(NODE, {LABEL: "four"})
        await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=5)
        state = await plugin.wait_state(lambda s: s["history"][-1]["trigger"] == "reconfigured")
        assert [h["trigger"] for h in state["history"][-2:]] == [
            "node_label_changed",
            "reconfigured",
        ]

        # An unknown value keeps the running config and says so.
        await apiserver.set_labels(NODE, {LABEL: "nope"})
        state = await plugin.wait_state(
            lambda s: (s["selection"] or {}).get("outcome") == "kept", timeout=5
        )
        assert "nope" in state["selection"]["reason"]
        resource = sim.snapshot().resource(GPU)
        assert resource is not None
        assert len(resource.devices) == 16

        # Label removed: back to the default config ("four"), so nothing changes.
        await apiserver.set_labels(NODE, {LABEL: None})
        state = await plugin.wait_state(
            lambda s: (s["selection"] or {}).get("outcome") == "default", timeout=5
        )
        assert state["selection"]["selected"] == "four"

        # The API server goes away: serving goes on, and the watch comes back with it.
        await apiserver.down()
        state = await plugin.state()
        assert state["state"] == "serving"
        assert (await plugin.get("/readyz")).status == 200
        await apiserver.up()
        await apiserver.set_labels(NODE, {LABEL: "two"})
        await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=15)


async def test_without_api_access_the_default_config_serves(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    args = plugin_args(
        sim.directory,
        "t4x4",
        "--config-directory",
        str(configs(tmp_path / "configs")),
        "--default-config",
        "two",
        "--node-name",
        NODE,
    )
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["selection"]["outcome"] == "default"
    assert "per-node config selection is off: no Kubernetes API access" in plugin.stderr
