"""Device health end to end: injected events reach the kubelet, and devices recover.

Events are appended to the `--mock-nvml-events` file of a running plugin, as an
operator testing their alerting would; the kubelet simulator shows the result.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubelet_sim import KubeletSimulator
from kubelet_sim.model import DeviceInfo
from tests.e2e.harness import PluginProcess, plugin_args

GPU = "nvidia.com/gpu"
CONFIG = Path(__file__).resolve().parents[2] / "config"
QUIET = "0.3"


def inject(events: Path, **event: object) -> None:
    with events.open("a") as out:
        out.write(json.dumps(event) + "\n")


def unhealthy(devices: tuple[DeviceInfo, ...]) -> set[str]:
    return {d.id for d in devices if d.health == "Unhealthy"}


async def start(
    sim: KubeletSimulator, events: Path, *extra: str
) -> tuple[PluginProcess, list[str]]:
    events.touch()
    args = plugin_args(
        sim.directory,
        "dgx-a100",
        "--mock-nvml-events",
        str(events),
        "--health-quiet-period",
        QUIET,
        *extra,
    )
    plugin = await PluginProcess(args).start()
    try:
        view = await sim.wait_devices(GPU, lambda d: len(d) >= 8, timeout=20)
        await plugin.wait_state(lambda s: s["health"] is not None)
    except BaseException:
        await plugin.__aexit__(None)
        raise
    return plugin, [d.id for d in view.devices]


async def test_sticky_xid_until_reset_transient_xid_by_itself_ignored_xid_not_at_all(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    plugin, ids = await start(sim, events)
    async with plugin:
        # A sticky XID marks one GPU until it is reset.
        target = ids[3]
        inject(events, uuid=target, xid=79)  # how fast it arrives: `make bench`, health
        view = await sim.wait_devices(GPU, lambda d: unhealthy(d) == {target}, timeout=5)
        assert len(view.healthy_ids) == 7
        state = await plugin.wait_state(
            lambda s: any(d.get("reason") == "xid 79" for d in s["resources"][0]["devices"])
        )
        (device,) = [d for d in state["resources"][0]["devices"] if d["id"] == target]
        assert device["health"] == "Unhealthy"
        assert device["since"]
        assert state["history"][-1]["trigger"] == "device_health_changed"
        # Sticky: the quiet period ends, a probe finds no reset, and it stays out...
        state = await plugin.wait_state(
            lambda s: s["health"]["devices"][target]["detail"] == "waiting for a reset"
        )
        assert state["health"]["devices"][target]["health"] == "Unhealthy"
        assert state["health"]["devices"][target]["stage"] == "unhealthy"
        view = sim.snapshot().resource(GPU)
        assert view is not None
        assert unhealthy(view.devices) == {target}
        # ...a reset does.
        inject(events, uuid=target, reset=True)
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)
        metrics = (await plugin.get("/metrics")).body.decode()
        counted = (
            "nvidia_device_plugin_health_transitions_total"
            '{health="Unhealthy",reason="xid 79"}'
        )
        assert counted in metrics

        # A transient XID recovers by itself.
        inject(events, uuid=ids[5], xid=94)
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {ids[5]}, timeout=5)
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)
        # /state is published once the pass that sent the list is over: wait for it.
        await plugin.wait_state(
            lambda s: [h["to"] for h in s["health"]["devices"][ids[5]]["history"]][-3:]
            == ["unhealthy", "recovering", "healthy"],
            timeout=5,
        )

        # An ignored XID changes nothing.
        inject(events, uuid=ids[0], xid=13)  # an application error: ignored by default
        inject(events, uuid=ids[1], xid=79)  # a marker that the first line was read
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {ids[1]}, timeout=5)
        view = sim.snapshot().resource(GPU)
        assert view is not None
        assert ids[0] in view.healthy_ids


async def test_replicas_follow_their_gpu(sim: KubeletSimulator, tmp_path: Path) -> None:
    config = tmp_path / "ts.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    events = tmp_path / "events.jsonl"
    plugin, ids = await start(sim, events, "--config-file", str(config))
    async with plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 32)
        gpu = ids[0].split("::")[0]
        replicas = {i for i in ids if i.startswith(gpu + "::")}
        assert len(replicas) == 4
        inject(events, uuid=gpu, xid=79)
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == replicas, timeout=5)
        inject(events, uuid=gpu, reset=True)
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)


async def test_health_section_of_the_config_file(sim: KubeletSimulator, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    # XID 79 made transient: it recovers after the quiet period without a reset.
    config.write_text("version: v1\nhealth:\n  transientXids: [79]\n  stickyXids: []\n")
    events = tmp_path / "events.jsonl"
    plugin, ids = await start(sim, events, "--config-file", str(config))
    async with plugin:
        inject(events, uuid=ids[2], xid=79)
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {ids[2]}, timeout=5)
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)
        # An invalid section is rejected like any other invalid config.
        config.write_text("version: v1\nhealth:\n  stickyXids: [79]\n  transientXids: [79]\n")
        state = await plugin.wait_state(lambda s: s["reason"] is not None, timeout=5)
        assert "health." in state["reason"]
        assert str(config) in state["reason"]
        assert state["state"] == "serving"


async def test_a_gpu_that_cannot_register_for_events_is_unmonitored_and_healthy(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    # The t4x4 node, with its third GPU too old for health events.
    profile = tmp_path / "node.yaml"
    head, *gpus = (CONFIG / "nodes" / "t4x4.yaml").read_text().split("\n  - uuid: ")
    gpus[2] = gpus[2].replace("migCapable: false\n", "migCapable: false\n    healthEvents: false\n")
    profile.write_text("\n  - uuid: ".join([head, *gpus]))
    old = gpus[2].split("\n", 1)[0]  # its UUID
    assert old.startswith("GPU-")
    events = tmp_path / "events.jsonl"
    events.touch()
    args = plugin_args(sim.directory, str(profile), "--mock-nvml-events", str(events))
    async with PluginProcess(args) as plugin:
        state = await plugin.wait_state(
            lambda s: s["health"] is not None and s["health"]["devices"][old]["unmonitored"]
        )
        why = "nvmlDeviceRegisterEvents: Not Supported"
        assert {u: d["unmonitored"] for u, d in state["health"]["devices"].items()} == {
            gpu: (why if gpu == old else None) for gpu in state["health"]["devices"]
        }
        assert state["health"]["devices"][old]["health"] == "Healthy"
        assert state["health"]["monitoring"]["state"] == "active"
        (resource,) = state["resources"]
        assert {d["uuid"]: d["unmonitored"] for d in resource["devices"]}[old] == why
        view = await sim.wait_devices(GPU, lambda d: len(d) == 4)
        assert len(view.healthy_ids) == 4  # the kubelet keeps it
        metrics = (await plugin.get("/metrics")).body.decode()
        samples = {
            line.split('uuid="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
            for line in metrics.splitlines()
            if line.startswith("nvidia_device_plugin_device_unmonitored{")
        }
        assert samples == {gpu: ("1.0" if gpu == old else "0.0") for gpu in samples}
        assert len(samples) == 4
        # Events from the other GPUs still arrive.
        watched = next(u for u in samples if u != old)
        inject(events, uuid=watched, xid=79)
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {watched}, timeout=5)
