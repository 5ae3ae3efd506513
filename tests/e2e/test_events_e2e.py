"""Node events end to end: the plugin process posts what it sees to the API server.

The plugin runs with `--node-name` and a KUBECONFIG pointing at an emulated
API server that validates Events like a real one; the kubelet simulator is
its kubelet. An XID injected through the simulated backend's events file
must show up as a Warning Event on the Node, the reset as a Normal one, and
a rejected config as another Warning, all where `kubectl describe node`
looks: namespace `default`, regarding the Node.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.unit.kube.apiserver import kubeconfig
from tests.unit.kube.events_api import EventsApi, running_events_api
from tests.waiting import eventually

NODE = "gpu-node-1"
NODE_UID = "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"
GPU = "nvidia.com/gpu"
DROPPED = "dropping node events until the API server takes them"


@pytest.fixture
async def api() -> AsyncIterator[EventsApi]:
    async with running_events_api() as server:
        yield server


# The plugin loads the Kubernetes client at its first event: seconds on a busy machine.
FIRST_EVENT = 30.0


async def event_where(
    api: EventsApi, match: Callable[[dict[str, Any]], bool], timeout: float = 10.0
) -> dict[str, Any]:
    found: list[dict[str, Any]] = await eventually(
        lambda: [event for event in api.events() if match(event)],
        what="a matching event on the node",
        timeout=timeout,
        detail=api.events,
    )
    return found[0]


async def logged(plugin: PluginProcess, text: str, timeout: float = 10.0) -> None:
    await eventually(lambda: text in plugin.stderr, what=f"{text!r} in the log", timeout=timeout)


async def test_an_injected_xid_becomes_an_event_on_the_node(
    sim: KubeletSimulator, api: EventsApi, tmp_path: Path
) -> None:
    await api.add_node_with_uid(NODE, NODE_UID)
    injected = tmp_path / "gpu-events.jsonl"
    injected.touch()
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    args = plugin_args(
        sim.directory,
        "dgx-a100",
        "--mock-nvml-events",
        str(injected),
        "--health-quiet-period",
        "0.3",
        "--config-file",
        str(config),
        "--node-name",
        NODE,
    )
    env = {
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url)),
        "POD_NAME": "nvidia-device-plugin-abcde",
    }
    async with PluginProcess(args, env=env) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        await plugin.wait_state(lambda s: s["health"] is not None)
        target = view.devices[3].id
        with injected.open("a") as out:
            out.write(json.dumps({"uuid": target, "xid": 79}) + "\n")

        event = await event_where(api, lambda e: e["reason"] == "GPUUnhealthy", FIRST_EVENT)
        assert event["type"] == "Warning"
        assert event["note"] == f"GPU 3 ({target}) is unhealthy: xid 79"
        assert event["regarding"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": NODE,
            "uid": NODE_UID,
        }
        assert event["metadata"]["namespace"] == "default"
        assert event["reportingController"] == "nvidia.com/device-plugin"
        assert event["reportingInstance"] == "nvidia-device-plugin-abcde"

        with injected.open("a") as out:
            out.write(json.dumps({"uuid": target, "reset": True}) + "\n")
        event = await event_where(api, lambda e: e["reason"] == "GPURecovered")
        assert event["type"] == "Normal"
        assert event["note"] == f"GPU 3 ({target}) is healthy again after xid 79"

        config.write_text("version: v1\nflags:\n  migStrategy: bogus\n")
        event = await event_where(api, lambda e: e["reason"] == "ConfigRejected")
        assert event["type"] == "Warning"
        assert "unknown MIG strategy: bogus" in event["note"]
        state = await plugin.state()
        assert state["state"] == "serving", "a rejected config keeps the old one serving"
    assert "posting events about node gpu-node-1" in plugin.stderr
    assert "Traceback" not in plugin.stderr


async def test_api_server_down_changes_nothing_for_the_kubelet(
    sim: KubeletSimulator, api: EventsApi, tmp_path: Path
) -> None:
    injected = tmp_path / "gpu-events.jsonl"
    injected.touch()
    args = plugin_args(
        sim.directory, "t4x4", "--mock-nvml-events", str(injected), "--node-name", NODE
    )
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url))}
    await api.down()
    async with PluginProcess(args, env=env) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 4, timeout=20)
        await plugin.wait_state(lambda s: s["health"] is not None)
        for device in view.devices[:2]:
            with injected.open("a") as out:
                out.write(json.dumps({"uuid": device.id, "xid": 79}) + "\n")
        unhealthy = {d.id for d in view.devices[:2]}
        await sim.wait_devices(
            GPU, lambda d: {x.id for x in d if x.health == "Unhealthy"} == unhealthy, timeout=5
        )
        await logged(plugin, DROPPED, FIRST_EVENT)
        state = await plugin.state()
        assert state["state"] == "serving"
        assert (await plugin.get("/readyz")).status == 200
    log = plugin.stderr
    assert log.count(DROPPED) == 1, "one line per outage, not one per event"
    assert "Traceback" not in log
