"""NVML faults in the simulated backend: lost GPUs, a damaged event stream.

The simulated backend fails the way NVML does: `{"uuid": ..., "lost": true}`
in the events file makes a device stop answering, and the events file itself
can be deleted, replaced or filled with junk by whoever is testing. In every
case the plugin must keep running, say what is wrong, keep the fault to the
devices it concerns, and come back by itself when the fault goes away. (A
driver that cannot start at all is in `tests/e2e/test_start_up_failures_e2e`.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from kubelet_sim import KubeletSimulator
from kubelet_sim.model import DeviceInfo
from tests.e2e.harness import PluginProcess, plugin_args
from tests.reliability.configs import REPO

GPU = "nvidia.com/gpu"
QUIET = "0.3"


def unhealthy(devices: tuple[DeviceInfo, ...]) -> set[str]:
    return {d.id for d in devices if d.health == "Unhealthy"}


def inject(events: Path, line: str | dict[str, object]) -> None:
    with events.open("a") as out:
        out.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


@pytest.fixture
def events(tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    path.touch()
    return path


def with_events(events: Path, sim: KubeletSimulator, profile: str, *extra: str) -> PluginProcess:
    args = plugin_args(
        sim.directory,
        profile,
        "--mock-nvml-events",
        str(events),
        "--health-quiet-period",
        QUIET,
        *extra,
    )
    return PluginProcess(args)


async def following(plugin: PluginProcess) -> None:
    """Serving, with the events file followed."""
    await plugin.wait_state(
        lambda s: (
            s["state"] == "serving"
            and s["health"] is not None
            and s["health"]["monitoring"]["state"] != "disabled"
        ),
        timeout=20,
    )


async def test_lost_gpu_is_the_only_unhealthy_one(sim: KubeletSimulator, events: Path) -> None:
    async with with_events(events, sim, "dgx-a100") as plugin:
        await following(plugin)
        view = await sim.wait_devices(GPU, lambda d: len(d) == 8)
        ids = [d.id for d in view.devices]
        for target in (ids[2], ids[6]):
            inject(events, {"uuid": target, "lost": True})
            view = await sim.wait_devices(GPU, lambda d, t=target: unhealthy(d) == {t}, timeout=5)
            assert len(view.healthy_ids) == 7
            # /state is published once the step that told the kubelet has finished
            state = await plugin.wait_state(
                lambda s, t=target: any(
                    d["id"] == t and d["health"] == "Unhealthy"
                    for d in s["resources"][0]["devices"]
                ),
                timeout=2,
            )
            assert state["state"] == "serving"
            (device,) = [d for d in state["resources"][0]["devices"] if d["id"] == target]
            assert device["health"] == "Unhealthy"
            assert device["reason"]
            # Still lost: the quiet period ends, the probe fails, it stays out.
            await plugin.wait_state(
                lambda s, t=target: (
                    s["health"]["devices"][t]["detail"] is not None
                    and "lost" in s["health"]["devices"][t]["detail"]
                ),
                timeout=5,
            )
            assert unhealthy(sim.snapshot().resource(GPU).devices) == {target}  # type: ignore[union-attr]
            inject(events, {"uuid": target, "lost": False})
            await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)


async def test_lost_gpu_takes_only_its_mig_devices(
    sim: KubeletSimulator, events: Path, tmp_path: Path
) -> None:
    config = tmp_path / "mixed.yaml"
    config.write_text((REPO / "config" / "dp-example-config1.yaml").read_text())
    async with with_events(events, sim, "a100-mig-mixed", "--config-file", str(config)) as plugin:
        await following(plugin)
        state = await plugin.state()
        names = [r["name"] for r in state["resources"]]
        node = yaml.safe_load((REPO / "config" / "nodes" / "a100-mig-mixed.yaml").read_text())
        gpu0 = node["gpus"][0]
        children = {m["uuid"] for m in gpu0["migDevices"]}
        inject(events, {"uuid": gpu0["uuid"], "lost": True})

        def sick_everywhere(s: dict[str, object]) -> set[str]:
            return {
                d["id"]
                for r in s["resources"]  # type: ignore[attr-defined]
                for d in r["devices"]
                if d["health"] == "Unhealthy"
            }

        state = await plugin.wait_state(lambda s: sick_everywhere(s) == children, timeout=5)
        await sim.wait_devices(
            "nvidia.com/mig-1g.5gb", lambda d: unhealthy(d) == children, timeout=5
        )
        for name in names:
            if name != "nvidia.com/mig-1g.5gb":
                view = sim.snapshot().resource(name)
                assert view is not None
                assert not unhealthy(view.devices), name
        inject(events, {"uuid": gpu0["uuid"], "lost": False})
        await plugin.wait_state(lambda s: not sick_everywhere(s), timeout=10)


JUNK_LINES = [
    "not json at all",
    "{broken json",
    "[]",
    '"a string"',
    "{}",
    '{"uuid": "GPU-not-on-this-node", "xid": 79}',
    '{"xid": 79}',
    '{"uuid": 7, "xid": 79}',
    '{"uuid": "GPU-x", "xid": -1}',
    '{"uuid": "GPU-x", "xid": 79, "ecc": true}',
    '{"uuid": "GPU-x", "bogus": 1}',
    "\x00\x01\x02",
    "{" + '"a": 1, ' * 200_000 + '"b": 2}',
]


async def test_damaged_event_stream_is_survived(sim: KubeletSimulator, events: Path) -> None:
    async with with_events(events, sim, "dgx-a100") as plugin:
        await following(plugin)
        view = await sim.wait_devices(GPU, lambda d: len(d) == 8)
        ids = [d.id for d in view.devices]
        faults = 0

        async def still_follows(target: str) -> None:
            inject(events, {"uuid": target, "xid": 79})
            await sim.wait_devices(GPU, lambda d: unhealthy(d) == {target}, timeout=5)
            inject(events, {"uuid": target, "reset": True})
            await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)

        for line in JUNK_LINES:
            inject(events, line.replace("GPU-x", ids[0]))
            faults += 1
        with events.open("ab") as out:
            out.write(b"\xff\xfe\xfd binary\n")
        faults += 1
        await still_follows(ids[3])
        # A half-written line is read once it is finished.
        with events.open("ab") as out:
            out.write(b'{"uuid": "' + ids[1].encode() + b'", "xid": 7')
        faults += 1
        assert not unhealthy(sim.snapshot().resource(GPU).devices)  # type: ignore[union-attr]
        with events.open("ab") as out:
            out.write(b"9}\n")
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {ids[1]}, timeout=5)
        inject(events, {"uuid": ids[1], "reset": True})
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)

        events.unlink()  # deleted while followed
        faults += 1
        events.write_text("")
        await still_follows(ids[4])

        replacement = events.with_suffix(".new")  # replaced by rename: a new inode
        replacement.write_text('{"uuid": "' + ids[5] + '", "xid": 79}\n')
        os.replace(replacement, events)
        faults += 1
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {ids[5]}, timeout=5)
        inject(events, {"uuid": ids[5], "reset": True})
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)

        events.write_text("")  # truncated
        faults += 1
        await still_follows(ids[6])

        state = await plugin.state()
        assert state["state"] == "serving"
        assert state["reason"] is None
        assert "Traceback" not in plugin.stderr
        print(f"event stream faults injected: {faults}")
