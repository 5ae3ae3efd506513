"""Cordoning one GPU with `kubectl annotate`, end to end.

The plugin process runs with `--node-name` and a KUBECONFIG pointing at the
emulated API server (real HTTP, watch streams, Events validated as the real
server does); the kubelet simulator is its kubelet. Annotating the node with
`nvidia.com/gpu.cordon` must make that GPU's devices Unhealthy on the open
stream (no re-registration), say `cordoned` on `/state`, and post a
`GPUCordoned` Event; removing the annotation must bring them back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.unit.kube.apiserver import kubeconfig
from tests.unit.kube.events_api import EventsApi, running_events_api
from tests.waiting import eventually

NODE = "gpu-node-1"
NODE_UID = "6c1f0a52-9d7e-4b1a-8f3c-2e5d4a7b9c10"
GPU = "nvidia.com/gpu"
CORDON = "nvidia.com/gpu.cordon"
T4_2 = "GPU-274c30b2-2bea-5c78-9d5a-34d2566cf150"  # t4x4, index 2, bus 00000000:AF:00.0
# The plugin loads the Kubernetes client after its first registration: seconds on a busy machine.
FIRST_LIST = 30.0


@pytest.fixture
async def api() -> AsyncIterator[EventsApi]:
    async with running_events_api() as server:
        yield server


def replicated(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


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


def sample(text: str, name: str, labels: dict[str, str]) -> float | None:
    """The value of one series in Prometheus text, or None when it is absent."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return None


def unhealthy(devices: Any) -> set[str]:
    return {device.id for device in devices if device.health == "Unhealthy"}


async def test_annotating_the_node_withdraws_one_gpu_and_removing_it_brings_it_back(
    sim: KubeletSimulator, api: EventsApi, tmp_path: Path
) -> None:
    await api.add_node_with_uid(NODE, NODE_UID)
    config = tmp_path / "config.yaml"
    config.write_text(replicated(2))
    args = plugin_args(sim.directory, "t4x4", "--config-file", str(config), "--node-name", NODE)
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url))}
    async with PluginProcess(args, env=env) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        replicas = {f"{T4_2}::0", f"{T4_2}::1"}
        assert replicas <= {device.id for device in view.devices}
        await plugin.wait_state(
            lambda s: (s["health"] or {}).get("cordon", {}).get("off") is None, timeout=FIRST_LIST
        )
        registrations = view.counters.registrations

        # kubectl annotate node gpu-node-1 nvidia.com/gpu.cordon=00000000:AF:00.0
        await api.set_annotations(NODE, {CORDON: " 00000000:AF:00.0 "})
        view = await sim.wait_devices(GPU, lambda d: unhealthy(d) == replicas, timeout=FIRST_LIST)
        assert view.counters.registrations == registrations, "no re-registration"
        assert view.counters.streams_closed == 0
        state = await plugin.wait_state(lambda s: s["health"]["cordon"]["gpus"] == [T4_2])
        assert state["state"] == "serving"
        assert state["health"]["devices"][T4_2]["reason"] == "cordoned"
        assert state["health"]["devices"][T4_2]["cordoned"] is True
        (resource,) = state["resources"]
        assert {d["reason"] for d in resource["devices"] if d["uuid"] == T4_2} == {"cordoned"}
        event = await event_where(api, lambda e: e["reason"] == "GPUCordoned", FIRST_LIST)
        assert event["type"] == "Warning"
        assert event["note"] == f"GPU 2 ({T4_2}) is cordoned by the node annotation {CORDON}"
        assert event["regarding"]["uid"] == NODE_UID
        metrics = (await plugin.get("/metrics")).body.decode()
        transitions = {"health": "Unhealthy", "reason": "cordoned"}
        assert sample(metrics, "nvidia_device_plugin_health_transitions_total", transitions) == 1
        healthy = {"resource": GPU, "uuid": T4_2, "index": "2"}
        assert sample(metrics, "nvidia_device_plugin_device_healthy", healthy) == 0
        assert sample(metrics, "nvidia_device_plugin_devices_cordoned", {"resource": GPU}) == 2

        # kubectl annotate node gpu-node-1 nvidia.com/gpu.cordon-
        await api.set_annotations(NODE, {CORDON: None})
        view = await sim.wait_devices(GPU, lambda d: unhealthy(d) == set(), timeout=10)
        assert view.counters.registrations == registrations
        event = await event_where(api, lambda e: e["reason"] == "GPUUncordoned")
        assert (event["type"], event["note"]) == ("Normal", f"GPU 2 ({T4_2}) is no longer cordoned")
        state = await plugin.wait_state(lambda s: s["health"]["cordon"]["value"] is None)
        assert state["health"]["devices"][T4_2]["reason"] is None
    assert "Traceback" not in plugin.stderr


async def test_garbage_in_the_annotation_is_a_warning_and_serving_goes_on(
    sim: KubeletSimulator, api: EventsApi, tmp_path: Path
) -> None:
    await api.add_node(NODE, {}, annotations={CORDON: "GPU 2,, 17"})
    args = plugin_args(sim.directory, "t4x4", "--node-name", NODE)
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url))}
    async with PluginProcess(args, env=env) as plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 4, timeout=20)
        state = await plugin.wait_state(
            lambda s: len((s["health"] or {}).get("cordon", {}).get("warnings", [])) == 2,
            timeout=FIRST_LIST,
        )
        assert state["health"]["cordon"]["warnings"] == [
            f'annotation {CORDON}: "GPU 2": not a GPU UUID, index or PCI bus ID',
            f'annotation {CORDON}: "17": no such GPU on this node',
        ]
        assert state["state"] == "serving"
        assert (await plugin.get("/readyz")).status == 200
        assert unhealthy(sim.snapshot().resource(GPU).devices) == set()  # type: ignore[union-attr]
    log = plugin.stderr
    assert log.count('"17": no such GPU on this node') == 1, "said once"


async def test_with_a_config_directory_a_cordon_holds_from_the_first_list(
    sim: KubeletSimulator, api: EventsApi, tmp_path: Path
) -> None:
    await api.add_node(NODE, {}, annotations={CORDON: "2"})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    args = plugin_args(
        sim.directory, "t4x4", "--config-directory", str(configs), "--node-name", NODE
    )
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url))}
    async with PluginProcess(args, env=env) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 4, timeout=20)
        assert view.counters.lists_received == 1
        assert unhealthy(view.devices) == {T4_2}, "never advertised Healthy"
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["health"]["devices"][T4_2]["reason"] == "cordoned"
