"""`/metrics` and `/state` of the real process, read the way Prometheus and an operator do.

One plugin on the `dgx-a100` profile with two time-slicing replicas per GPU:
its text is parsed with prometheus-client's own parser, and every series an
operator alerts on is checked against what `/state` and the simulated kubelet
say: process series, build info, readiness, per-device health (replicas of
one GPU share one sample), RPCs by resource, and the applied config's digest
and time, which move with a config edit and not with a reload that changes
nothing.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubelet_sim import KubeletSimulator
from kubelet_sim.client import PluginCallError
from tests.e2e.harness import PluginProcess, plugin_args
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
P = "nvidia_device_plugin_"

Samples = dict[str, list[tuple[dict[str, str], float]]]
Running = tuple[KubeletSimulator, PluginProcess, Path]


def sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {GPU}\n      replicas: {replicas}\n"
    )


async def scrape(plugin: PluginProcess) -> Samples:
    reply = await plugin.get("/metrics")
    assert reply.status == 200
    text = reply.body.decode()
    assert "_created" not in text
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    matches = [v for have, v in found.get(name, []) if labels.items() <= have.items()]
    assert len(matches) == 1, (name, labels, found.get(name))
    return matches[0]


def unix(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@pytest.fixture
async def running(sock_dir: Path, tmp_path: Path) -> AsyncIterator[Running]:
    config = tmp_path / "config.yaml"
    config.write_text(sliced(2))
    events = tmp_path / "events.jsonl"
    events.touch()
    extra = ["--config-file", str(config), "--mock-nvml-events", str(events)]
    async with (
        KubeletSimulator(sock_dir, write_snapshot_file=False) as sim,
        PluginProcess(plugin_args(sock_dir, "dgx-a100", *extra)) as plugin,
    ):
        await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=20)
        await plugin.wait_state(lambda s: s["ready"] and s["health"] is not None)
        yield sim, plugin, tmp_path


async def test_process_series_rpcs_device_health_and_the_applied_config(
    running: Running,
) -> None:
    """One plugin, read in the order that keeps each step's counts its own: the process
    and build series, the RPCs by resource, a device's health, then a config edit."""
    sim, plugin, tmp = running
    found = await scrape(plugin)
    assert value(found, "process_resident_memory_bytes") > 10 * 2**20
    assert value(found, "process_open_fds") > 5
    assert value(found, "process_cpu_seconds_total") > 0
    assert abs(value(found, "process_start_time_seconds") - time.time()) < 300
    installed = metadata.version("nvidia-device-plugin-py")
    assert value(found, P + "build_info", version=installed) == 1
    assert value(found, P + "ready", readiness="serving") == 1
    assert value(found, P + "lifecycle_state", state="serving") == 1

    # RPCs are counted by resource.
    view = sim.snapshot().resource(GPU)
    assert view is not None
    await sim.allocate(GPU, [[view.devices[0].id]])
    with pytest.raises(PluginCallError):
        await sim.allocate(GPU, [["GPU-nope"]])
    found = await scrape(plugin)
    ok = {"resource": GPU, "method": "Allocate", "code": "OK"}
    assert value(found, P + "rpc_requests_total", **ok) == 1
    bad = {"resource": GPU, "method": "Allocate", "code": "INVALID_ARGUMENT"}
    assert value(found, P + "rpc_requests_total", **bad) == 1
    assert value(found, P + "rpc_duration_seconds_count", resource=GPU, method="Allocate") == 2

    # Device health per device and in the kubelet's words.
    state = await plugin.state()
    (resource,) = state["resources"]
    uuids = {d["uuid"]: d["index"] for d in resource["devices"]}
    assert len(resource["devices"]) == 16
    assert len(uuids) == 8
    found = await scrape(plugin)
    per_device = {(s["uuid"], s["index"]): v for s, v in found[P + "device_healthy"]}
    assert per_device == {(uuid, index): 1.0 for uuid, index in uuids.items()}
    assert {s["resource"] for s, _ in found[P + "device_healthy"]} == {GPU}

    target = sorted(uuids)[2]
    with (tmp / "events.jsonl").open("a") as out:
        out.write(json.dumps({"uuid": target, "xid": 79}) + "\n")
    await sim.wait_devices(GPU, lambda d: sum(x.health == "Unhealthy" for x in d) == 2, timeout=10)
    state = await plugin.wait_state(
        lambda s: s["health"]["devices"][target]["health"] == "Unhealthy"
    )
    assert state["health"]["devices"][target]["stage"] == "unhealthy"
    found = await scrape(plugin)
    assert value(found, P + "device_healthy", uuid=target) == 0
    assert value(found, P + "devices", resource=GPU, health="Unhealthy") == 2
    assert value(found, P + "devices", resource=GPU, health="Healthy") == 14
    transitions = found[P + "health_transitions_total"]
    assert transitions == [({"health": "Unhealthy", "reason": "xid 79"}, 1.0)]

    # The applied config's digest and time.
    state = await plugin.state()
    config: dict[str, Any] = state["config"]
    assert config["values"]["sharing"]["resources"] == [
        {
            "name": GPU,
            "replicas": 2,
            "rename": None,
            "devices": "all",
            "distinct_devices": None,
            "where": "sharing.timeSlicing.resources[0]",
        }
    ]
    assert config["values"]["flags"]["mock_nvml"] == "dgx-a100"
    assert config["sources"]["config_file"] == "flag"
    assert config["sources"]["mig_strategy"] == "default"
    assert config["path"] == str(tmp / "config.yaml")
    found = await scrape(plugin)
    (sample,) = found[P + "config_applied_timestamp_seconds"]
    assert sample == ({"digest": config["digest"]}, pytest.approx(unix(config["applied_at"])))

    # A reload that changes nothing keeps the time: the config in force is the same.
    plugin.signal(signal.SIGHUP)
    reloaded = await plugin.wait_state(
        lambda s: [h["trigger"] for h in s["history"]][-1] == "reconfigured"
    )
    assert reloaded["config"]["applied_at"] == config["applied_at"]

    first_applied = unix(config["applied_at"])
    await eventually(
        lambda: time.time() >= first_applied + 0.001,
        what="the wall clock to pass the first application's millisecond",
    )
    scratch = tmp / "config.tmp"
    scratch.write_text(sliced(3))
    os.replace(scratch, tmp / "config.yaml")
    await sim.wait_devices(GPU, lambda d: len(d) == 24, timeout=10)
    edited = await plugin.wait_state(lambda s: s["config"]["digest"] != config["digest"])
    assert unix(edited["config"]["applied_at"]) > unix(config["applied_at"])
    found = await scrape(plugin)
    (sample,) = found[P + "config_applied_timestamp_seconds"]
    assert sample[0] == {"digest": edited["config"]["digest"]}
