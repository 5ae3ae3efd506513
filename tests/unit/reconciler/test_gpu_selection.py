"""--exclude-devices and --include-devices in the running plugin (real loop, kubelet, CDI).

An excluded GPU is not advertised, not in the CDI spec, not in the health
book and not touched by a health event; a change of the lists is a new
device list on the open stream; a bad edit keeps the running selection; a
selection problem is on `/state` and logged once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from reconciler.core.mailbox import Hint
from reconciler.observation.snapshot import take
from reconciler.plan.desired import build_desired
from settings import load_config
from states.names import State

from .rig import running_plugin

GPU = "nvidia.com/gpu"
VENDOR = "k8s.device-plugin.nvidia.com/gpu"
GPU0 = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"
GPU3 = "GPU-184b362b-70e2-50de-b227-3a382639ed11"
GPU4 = "GPU-12833d08-2f9e-5ab4-b9d5-9a45bfc88f72"


def excluding(*entries: str) -> str:
    listed = ", ".join(f'"{entry}"' for entry in entries)
    return f"version: v1\nflags:\n  plugin:\n    excludeDevices: [{listed}]\n"


@pytest.fixture
def warnings_logged() -> Iterator[list[str]]:
    records: list[str] = []
    handler = logger.add(
        lambda m: records.append(m.record["message"]), level="WARNING", filter="reconciler"
    )
    try:
        yield records
    finally:
        logger.remove(handler)


def test_desired_state_is_built_from_the_selected_gpus_only(tmp_path: Path) -> None:
    from devices.backends import open_library

    library = open_library("dgx-a100")
    library.init()
    argv = ["--exclude-devices", "3", "--device-list-strategy", "cdi-cri"]
    config = load_config([*argv, "--driver-root-ctr-path", str(tmp_path)], {})
    desired = build_desired(config, library.inventory())
    assert GPU3 not in {gpu.uuid for gpu in desired.inventory.gpus}  # what health follows
    (spec,) = desired.cdi
    names = {device["name"] for device in spec["devices"]}
    assert len(names) == 7
    assert GPU3 not in names
    assert desired.selection is not None
    assert [gpu.uuid for gpu in desired.selection.left_out] == [GPU3]
    (allocator,) = desired.allocators
    assert GPU3 not in {device.uuid for device in allocator.resource.devices}


async def test_exclude_edit_shrinks_the_list_on_the_same_stream(
    tmp_path: Path, sock_dir: Path
) -> None:
    flags = ("--device-list-strategy", "cdi-cri")
    async with running_plugin(tmp_path, sock_dir, *flags, config=excluding(GPU3)) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 7)
        assert f"{VENDOR}={GPU3}" not in rig.spec_names()
        health = rig.reconciler.inputs.health
        assert health is not None
        assert health.book is not None
        assert GPU3 not in health.book.to_json()["devices"]

        rig.write_config(excluding(GPU3, "0000:87:00.0"))
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 6)
        view = rig.sim.snapshot().resource(GPU)
        assert view is not None
        assert {device.id for device in view.devices}.isdisjoint({GPU3, GPU4})
        assert view.counters.registrations == 1
        assert view.counters.streams_opened == 1
        await rig.until(lambda: f"{VENDOR}={GPU4}" not in rig.spec_names())
        assert GPU4 not in health.book.to_json()["devices"]
        # The new list reaches the kubelet before the pass records its end.
        await rig.until(lambda: rig.triggers()[-2:] == ["config_changed", "reconfigured"])

        rig.write_config(excluding())  # back to every GPU
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 8)
        assert rig.sim.snapshot().resource(GPU).counters.registrations == 1  # type: ignore[union-attr]


async def test_a_health_event_on_an_excluded_gpu_changes_nothing(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir, config=excluding("3")) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 7)
        rig.inject(uuid=GPU3, xid=79)
        rig.inject(uuid=GPU0, xid=79)  # a watched GPU, to know the events were read
        await rig.sim.wait_devices(
            GPU, lambda devices: [d.id for d in devices if d.health == "Unhealthy"] == [GPU0]
        )
        state = take(rig.reconciler.status()).state
        assert GPU3 not in state["health"]["devices"]  # type: ignore[index]


async def test_invalid_edit_keeps_the_running_selection(tmp_path: Path, sock_dir: Path) -> None:
    async with running_plugin(tmp_path, sock_dir, config=excluding("3")) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 7)
        rig.write_config(excluding("3", "bogus"))
        await rig.until(lambda: rig.reconciler.status().reason is not None)
        reason = rig.reconciler.status().reason
        assert reason is not None
        assert (
            f'{rig.config_file}: flags.plugin.excludeDevices: invalid device "bogus": expected '
            "a GPU index, a GPU UUID (GPU-...) or a PCI bus ID (0000:07:00.0)"
        ) in reason
        assert rig.state is State.SERVING
        view = rig.sim.snapshot().resource(GPU)
        assert view is not None
        assert len(view.devices) == 7


async def test_no_match_entry_is_on_state_and_logged_once(
    tmp_path: Path, sock_dir: Path, warnings_logged: list[str]
) -> None:
    config = excluding("3", "GPU-00000000-0000-0000-0000-000000000000")
    async with running_plugin(tmp_path, sock_dir, config=config) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 7)
        warning = (
            f"{rig.config_file}: flags.plugin.excludeDevices: UUID "
            "GPU-00000000-0000-0000-0000-000000000000 matches no GPU on this node"
        )
        plan = take(rig.reconciler.status()).state["plan"]
        assert isinstance(plan, dict)
        assert plan["warnings"] == [warning]
        assert plan["excluded_gpus"] == [
            {"index": 3, "uuid": GPU3, "pci_bus_id": "00000000:4E:00.0"}
        ]
        # Re-reading the same inputs (a touch, SIGHUP) says nothing again.
        await rig.settle(Hint.CONFIG)
        await rig.settle(Hint.RELOAD)
        assert warnings_logged.count(warning) == 1


async def test_an_include_that_selects_nothing_is_the_quiet_idle_with_a_warning(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir, "--include-devices", "9") as rig:
        await rig.until(lambda: rig.reconciler.status().desired is not None)
        await rig.until(lambda: rig.state is State.SERVING)
        status = rig.reconciler.status()
        assert status.reason is None
        plan = take(status).state["plan"]
        assert isinstance(plan, dict)
        assert plan["resources"] == []
        assert plan["warnings"] == [
            "command line: --include-devices: index 9 matches no GPU on this node",
            "command line: --include-devices: none of the 8 GPUs on this node is selected",
        ]
        assert len(plan["excluded_gpus"]) == 8  # type: ignore[arg-type]
        assert rig.sim.snapshot().resource(GPU) is None


def test_an_mps_resource_waits_for_its_daemon_when_its_gpus_change(tmp_path: Path) -> None:
    from devices.backends import open_library

    library = open_library("dgx-a100")
    library.init()
    inventory = library.inventory()
    config = tmp_path / "mps.yaml"
    config.write_text(
        "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
        "      replicas: 2\n"
    )
    base = ["--config-file", str(config), "--mps-root", "/run/nvidia/mps"]

    def key(*flags: str) -> str | None:
        desired = build_desired(load_config([*base, *flags], {}), inventory)
        return desired.resources[GPU].mps_key

    four = key("--include-devices", "0,1,2,3")
    assert four is not None
    # The same GPUs named another way: the running daemon still covers them.
    assert key("--include-devices", "0000:07:00.0,1,2,3") == four
    # A GPU joins: not served before the daemon is restarted to cover it.
    assert key("--include-devices", "0,1,2,3,4") != four
    assert key("--include-devices", "0,1,2,3", "--exclude-devices", "3") != four
