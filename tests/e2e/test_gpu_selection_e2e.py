"""--exclude-devices end to end: the plugin process, its config file and the simulated kubelet.

Started with one GPU excluded, the kubelet sees 7 of the 8 GPUs of a DGX
A100; excluding another in the config file shrinks the list on the same
ListAndWatch stream, with no second registration; an entry that matches no
GPU is a warning on `/state`.
"""

from __future__ import annotations

from pathlib import Path

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args, write_atomically

GPU = "nvidia.com/gpu"
GPU3 = "GPU-184b362b-70e2-50de-b227-3a382639ed11"
GPU4 = "GPU-12833d08-2f9e-5ab4-b9d5-9a45bfc88f72"
NO_SUCH_GPU = "GPU-00000000-0000-0000-0000-000000000000"


def excluding(*entries: str) -> str:
    listed = ", ".join(f'"{entry}"' for entry in entries)
    return f"version: v1\nflags:\n  plugin:\n    excludeDevices: [{listed}]\n"


async def test_excluding_gpus_is_a_hitless_list_update(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(excluding("3"))
    args = plugin_args(sim.directory, "dgx-a100", "--config-file", str(config))
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(GPU, lambda devices: len(devices) == 7, timeout=20)
        first = sim.snapshot().resource(GPU)
        assert first is not None
        assert GPU3 not in {device.id for device in first.devices}

        # GPU 4 by its lspci -D bus ID, and one entry that names nothing here.
        write_atomically(config, excluding("3", "0000:87:00.0", NO_SUCH_GPU))
        await sim.wait_devices(GPU, lambda devices: len(devices) == 6, timeout=5)

        after = sim.snapshot().resource(GPU)
        assert after is not None
        assert {device.id for device in after.devices}.isdisjoint({GPU3, GPU4})
        assert after.counters.registrations == 1
        assert after.counters.streams_opened == first.counters.streams_opened == 1
        assert after.streaming
        state = await plugin.wait_state(lambda s: s["history"][-1]["trigger"] == "reconfigured")
        assert state["state"] == "serving"
        assert state["history"][-1]["detail"]["updated"] == [GPU]
        assert state["plan"]["warnings"] == [
            f"{config}: flags.plugin.excludeDevices: UUID {NO_SUCH_GPU} matches no GPU on this node"
        ]
        assert [gpu["uuid"] for gpu in state["plan"]["excluded_gpus"]] == [GPU3, GPU4]
        assert set(state["health"]["devices"]).isdisjoint({GPU3, GPU4})
        assert state["config"]["values"]["flags"]["exclude_devices"] == [
            "3", "0000:87:00.0", NO_SUCH_GPU
        ]  # fmt: skip


async def test_a_bad_entry_at_start_is_one_line_and_exit_1(sock_dir: Path) -> None:
    plugin = PluginProcess(plugin_args(sock_dir, "dgx-a100", "--exclude-devices", "3,GPU-12"))
    await plugin.start()
    assert await plugin.wait_exit(timeout=20) == 1
    lines = [line for line in plugin.stderr.splitlines() if line.strip()]
    if lines and lines[0].endswith(" starting"):  # the version, once logging is set up
        lines = lines[1:]
    assert lines == [
        'nvidia-device-plugin: command line: --exclude-devices: invalid device "GPU-12": '
        "expected a GPU index, a GPU UUID (GPU-...) or a PCI bus ID (0000:07:00.0)"
    ]
    assert not (sock_dir / "nvidia-gpu.sock").exists()
