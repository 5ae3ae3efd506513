"""Applied means applied, end to end: the real process, the simulator, real faults.

A CDI spec directory that cannot be written during an edit leaves the old
device lists serving (and every CDI name Allocate returns defined on disk,
health events included) until the directory is back, then the edit lands by
itself. A plugin socket deleted underneath the plugin is served and
registered again within a second.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args, write_atomically
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
GPU0 = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"
KIND = "k8s.device-plugin.nvidia.com/gpu"


def sliced(replicas: int, *, by_index: bool = False) -> str:
    flags = "flags:\n  plugin:\n    deviceIDStrategy: index\n" if by_index else ""
    return (
        f"version: v1\n{flags}sharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


def names_on_disk(directory: Path) -> set[str]:
    found: set[str] = set()
    if directory.is_dir():
        for path in directory.glob("*.json"):
            spec = json.loads(path.read_text())
            found |= {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    return found


async def allocated_names(sim: KubeletSimulator, device_id: str) -> set[str]:
    response = await sim.allocate(GPU, [[device_id]])
    annotations = response.container_responses[0].annotations
    return {name for value in annotations.values() for name in value.split(",")}


def put_file_in_place_of(directory: Path) -> bool:
    """Replace `directory` by a file; False when something re-created it meanwhile."""
    try:
        if directory.is_dir():
            for path in directory.iterdir():
                path.unlink()
            directory.rmdir()
        with directory.open("x") as handle:
            handle.write("in the way\n")
    except OSError:
        return False
    return True


async def test_cdi_directory_broken_during_an_edit(sim: KubeletSimulator, tmp_path: Path) -> None:
    config, cdi, events = tmp_path / "config.yaml", tmp_path / "cdi", tmp_path / "events"
    config.write_text(sliced(2))
    events.touch()
    args = plugin_args(
        sim.directory,
        "dgx-a100",
        *("--config-file", str(config), "--cdi-spec-dir", str(cdi)),
        *("--device-list-strategy", "cdi-annotations", "--mock-nvml-events", str(events)),
    )
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=20)
        # Broken before start-up is through, it would be a start-up failure (exit 1).
        await plugin.wait_state(lambda s: s["state"] == "serving")
        # Neither root nor anyone can write below a file. The plugin may
        # re-create the directory meanwhile (a drift repair): then again.
        await eventually(lambda: put_file_in_place_of(cdi), what="a file where the CDI dir was")

        write_atomically(config, sliced(4, by_index=True))
        # The deleted files alone are drift the plugin may try to repair (and
        # fail) before it reads the edit: wait for the edit's own failure.
        state = await plugin.wait_state(
            lambda s: "cdi" in (s["reason"] or "")
            and any(h["trigger"] == "config_changed" for h in s["history"]),
            timeout=5,
        )
        assert state["state"] == "serving"
        assert "not yet applied" in state["reason"]
        assert state["history"][-1]["trigger"] == "failed"

        with events.open("a") as handle:  # a health event during the failure
            handle.write(json.dumps({"uuid": GPU0, "xid": 79}) + "\n")
        view = await sim.wait_devices(
            GPU, lambda d: any(x.health == "Unhealthy" for x in d), timeout=5
        )
        assert len(view.devices) == 16  # the old list, with the new health
        healthy = next(d.id for d in view.devices if d.health == "Healthy")
        names = await allocated_names(sim, healthy)
        assert names
        assert all(n.startswith(f"{KIND}=GPU-") for n in names)

        cdi.unlink()
        cdi.mkdir()
        view = await sim.wait_devices(GPU, lambda d: len(d) == 32, timeout=10)
        state = await plugin.wait_state(lambda s: s["reason"] is None)
        triggers = [h["trigger"] for h in state["history"]]
        assert triggers[-1] == "reconfigured"
        assert "retry" in triggers
        assert triggers.count("config_changed") == 1
        on_disk = names_on_disk(cdi)
        assert f"{KIND}=0" in on_disk
        assert not any(n.startswith(f"{KIND}=GPU-") for n in on_disk)
        device = next(d.id for d in view.devices if d.health == "Healthy")
        assert await allocated_names(sim, device) <= on_disk


async def test_a_deleted_plugin_socket_is_served_and_registered_again(
    sim: KubeletSimulator,
) -> None:
    async with PluginProcess(plugin_args(sim.directory)) as plugin:
        await sim.wait_devices(GPU, timeout=20)
        await plugin.wait_state(lambda s: s["state"] == "serving")
        socket = sim.directory / "nvidia-gpu.sock"
        socket.unlink()  # how fast it is back: `make bench`, plugin_socket_repair
        await sim.wait_registered(GPU, min_registrations=2, timeout=5)
        assert socket.exists()
        response = await sim.allocate(GPU, [[GPU0]])
        assert response.container_responses
        # said once the repair is done, just after the kubelet saw it
        await plugin.wait_state(lambda _: "deleted underneath the plugin" in plugin.stderr)
        assert (await plugin.get("/readyz")).status == 200
