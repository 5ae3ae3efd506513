"""Hitless reconfiguration through config edits, end to end.

The plugin watches the directory holding its config. An edit is re-read,
validated and applied by diff: the changed resource gets its new device list,
an unchanged resource keeps its registration and its open ListAndWatch stream,
and an invalid edit is rejected while the previous config keeps serving.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args, write_atomically

SHARED = "nvidia.com/mig-1g.5gb"
UNCHANGED = "nvidia.com/gpu"


def sliced(replicas: object) -> str:
    return (
        "version: v1\n"
        "flags:\n"
        "  migStrategy: mixed\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    resources:\n"
        f"    - name: {SHARED}\n"
        f"      replicas: {replicas}\n"
    )


async def test_replicas_edit_is_applied_by_diff(sim: KubeletSimulator, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(sliced(2))
    args = plugin_args(sim.directory, "a100-mig-mixed", "--config-file", str(config))
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(SHARED, lambda d: len(d) == 16, timeout=20)
        await sim.wait_devices(UNCHANGED, lambda d: len(d) == 2)
        before = sim.snapshot()

        write_atomically(config, sliced(4))  # how fast: `make bench`, config_edit
        await sim.wait_devices(SHARED, lambda d: len(d) == 32, timeout=5)

        after = sim.snapshot()
        old, new = before.resource(UNCHANGED), after.resource(UNCHANGED)
        assert old is not None
        assert new is not None
        # The untouched resource: no re-registration, the same stream, no new list.
        assert new.counters == old.counters
        assert new.streaming
        # The edited resource: a new list on the same stream, no re-registration.
        shared_before, shared_after = before.resource(SHARED), after.resource(SHARED)
        assert shared_before is not None
        assert shared_after is not None
        assert shared_after.counters.registrations == shared_before.counters.registrations
        assert shared_after.counters.streams_opened == shared_before.counters.streams_opened
        state = await plugin.wait_state(lambda s: s["history"][-1]["trigger"] == "reconfigured")
        assert state["state"] == "serving"
        assert [h["trigger"] for h in state["history"][-2:]] == ["config_changed", "reconfigured"]
        detail = state["history"][-1]["detail"]
        assert detail["changed"] is True
        assert detail["updated"] == [SHARED]
        assert detail["restarted"] == []
        assert detail["started"] == []
        assert detail["stopped"] == []


async def test_sharing_edit_for_gpus_leaves_mig_resources_untouched(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: mixed\n")
    args = plugin_args(sim.directory, "a100-mig-mixed", "--config-file", str(config))
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(UNCHANGED, lambda d: len(d) == 2, timeout=20)
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        mig = [r["name"] for r in state["resources"] if r["name"] != UNCHANGED]
        assert len(mig) >= 2
        for name in mig:  # each stream's first list is in before counting from here
            await sim.wait_devices(name, timeout=10)
        before = sim.snapshot()
        gpu_sliced = (
            "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n"
            "    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n"
        )
        write_atomically(config, gpu_sliced)
        await sim.wait_devices(UNCHANGED, lambda d: len(d) == 6, timeout=5)
        state = await plugin.wait_state(lambda s: s["history"][-1]["trigger"] == "reconfigured")
        detail = state["history"][-1]["detail"]
        # sharing is an in-place update of the resource it concerns, and of no other
        assert detail["updated"] == [UNCHANGED]
        assert detail["restarted"] == []
        assert detail["started"] == []
        gpu_before, gpu_after = before.resource(UNCHANGED), sim.snapshot().resource(UNCHANGED)
        assert gpu_before is not None
        assert gpu_after is not None
        assert gpu_after.counters.registrations == gpu_before.counters.registrations
        after = sim.snapshot()
        for name in mig:
            old, new = before.resource(name), after.resource(name)
            assert old is not None
            assert new is not None
            assert new.counters == old.counters, name  # same registration, stream and list


async def test_invalid_edit_keeps_the_running_config(sim: KubeletSimulator, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(sliced(2))
    args = plugin_args(sim.directory, "a100-mig-mixed", "--config-file", str(config))
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(SHARED, lambda d: len(d) == 16, timeout=20)
        write_atomically(config, sliced('"ten"'))
        state = await plugin.wait_state(lambda s: s["reason"] is not None, timeout=5)
        assert state["state"] == "serving"
        assert "rejected" in state["reason"]
        assert "replicas" in state["reason"]
        assert str(config) in state["reason"]
        metrics = (await plugin.get("/metrics")).body.decode()
        assert "nvidia_device_plugin_config_load_errors_total 1.0" in metrics
        view = sim.snapshot().resource(SHARED)
        assert view is not None
        assert len(view.devices) == 16  # still serving the previous config
        assert (await plugin.get("/readyz")).status == 200

        write_atomically(config, sliced(3))
        await sim.wait_devices(SHARED, lambda d: len(d) == 24, timeout=5)
        state = await plugin.wait_state(lambda s: s["reason"] is None)
        assert state["state"] == "serving"


async def test_configmap_symlink_swap_is_seen(sim: KubeletSimulator, tmp_path: Path) -> None:
    # The layout kubelet gives a mounted ConfigMap: files are links through `..data`.
    configs = tmp_path / "configs"
    configs.mkdir()

    def publish(version: int, replicas: int) -> None:
        data = configs / f"..2026_11_29_00_00_0{version}"
        data.mkdir()
        (data / "shared").write_text(sliced(replicas))
        link = configs / "..data_tmp"
        link.symlink_to(data.name)
        os.replace(link, configs / "..data")

    publish(1, 2)
    (configs / "shared").symlink_to("..data/shared")
    args = plugin_args(
        sim.directory,
        "a100-mig-mixed",
        "--config-directory",
        str(configs),
        "--default-config",
        "shared",
    )
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(SHARED, lambda d: len(d) == 16, timeout=20)
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["selection"]["selected"] == "shared"
        assert state["selection"]["outcome"] == "default"
        publish(2, 4)
        await sim.wait_devices(SHARED, lambda d: len(d) == 32, timeout=5)
