"""Sharing end to end: replica counts per GPU, distinctDevices, MPS with several replicas.

The real plugin serves what the kubelet simulator sees: the issue's example
(``devices: [0, 1]`` x 4 beside ``devices: [2..7]`` x 2) advertises 20
devices on 8 GPUs; with ``distinctDevices`` the preferred allocation spreads
over GPUs and Allocate refuses two replicas of one; overlapping entries stop
start-up with one line naming both, and one only the node reveals is refused
at run time while the previous plan keeps serving. With MPS (the daemon
manager and its stand-in control program running beside the plugin) and
``failRequestsGreaterThanOne: false``, a container holding two replicas of a
GPU is told the sum of their limits.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from kubelet_sim import KubeletSimulator
from kubelet_sim.client import PluginCallError
from mps.layout import MpsLayout
from tests.e2e.harness import REPO, PluginProcess, plugin_args
from tests.e2e.test_mps_e2e import start_daemon
from tests.unit.mps.helpers import kill_fake_daemons, path_with_fakes, state
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
PER_GPU = REPO / "config" / "time-slicing-per-gpu.yaml"


def uuids(profile: str) -> list[str]:
    node = yaml.safe_load((REPO / "config" / "nodes" / f"{profile}.yaml").read_text())
    return [gpu["uuid"] for gpu in node["gpus"]]


def per_index(ids: list[str], profile: str) -> dict[int, int]:
    index = {uuid: position for position, uuid in enumerate(uuids(profile))}
    return dict(Counter(index[i.split("::")[0]] for i in ids))


@pytest.fixture
def sim_dir(sock_dir: Path) -> Path:
    """The simulated kubelet below the socket directory, beside the MPS root."""
    return sock_dir / "kubelet"


@pytest.fixture
def mps_root(sock_dir: Path) -> Iterator[Path]:
    root = sock_dir / "mps"
    root.mkdir()
    try:
        yield root
    finally:
        kill_fake_daemons(root)


async def test_per_gpu_example_advertises_twenty_and_keeps_requests_on_distinct_gpus(
    sim: KubeletSimulator,
) -> None:
    args = plugin_args(sim.directory, "dgx-a100", "--config-file", str(PER_GPU))
    async with PluginProcess(args) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 20, timeout=20)
        ids = [d.id for d in view.devices]
        assert per_index(ids, "dgx-a100") == {0: 4, 1: 4, **{i: 2 for i in range(2, 8)}}
        await plugin.wait_state(lambda s: s["state"] == "serving")

        # Preferred: three replicas of three GPUs, although GPU 0 has the most free.
        answer = await sim.preferred(GPU, ids, [], 3)
        (chosen,) = answer.container_responses
        picked = list(chosen.deviceIDs)
        assert len(picked) == 3
        assert len({i.split("::")[0] for i in picked}) == 3

        # Allocate: two replicas of one GPU are refused, in the reference's shape.
        first = uuids("dgx-a100")[0]
        with pytest.raises(PluginCallError) as caught:
            await sim.allocate(GPU, [[f"{first}::0", f"{first}::1"]])
        assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details == (
            'invalid allocation request for "nvidia.com/gpu": invalid request: maximum number '
            "of replicas of one device for shared resources with distinctDevices is 1; "
            f"found 2 of {first}"
        )
        granted = await sim.allocate(GPU, [picked])
        visible = granted.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"]
        assert len(visible.split(",")) == 3


async def test_overlapping_entries_stop_start_up_with_one_line_naming_both(
    sock_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "overlap.yaml"
    config.write_text(
        PER_GPU.read_text().replace("devices: [2, 3, 4, 5, 6, 7]", "devices: [1, 2, 3]")
    )
    plugin = PluginProcess(plugin_args(sock_dir, "dgx-a100", "--config-file", str(config)))
    await plugin.start()
    assert await plugin.wait_exit(timeout=20) == 1
    lines = [line for line in plugin.stderr.splitlines() if line.strip()]
    if lines and lines[0].endswith(" starting"):
        lines = lines[1:]
    assert lines == [
        f"nvidia-device-plugin: {config}: sharing.timeSlicing.resources[1].devices: overlaps "
        "sharing.timeSlicing.resources[0].devices for nvidia.com/gpu: both select device 1"
    ]


async def test_an_overlap_only_the_node_shows_is_refused_and_the_running_plan_kept(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(PER_GPU.read_text())
    args = plugin_args(sim.directory, "dgx-a100", "--config-file", str(config))
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 20, timeout=20)
        await plugin.wait_state(lambda s: s["state"] == "serving")
        # GPU 2 by its UUID in the first entry, by its index in the second.
        second = uuids("dgx-a100")[2]
        config.write_text(
            PER_GPU.read_text().replace("devices: [0, 1]", f"devices: [0, 1, {second}]")
        )
        expected = (
            "sharing.timeSlicing.resources[1].devices: overlaps "
            "sharing.timeSlicing.resources[0].devices for nvidia.com/gpu: "
            f"both select device 2 ({second})"
        )
        await plugin.wait_state(lambda s: expected in (s["reason"] or ""), timeout=20)
        view = sim.snapshot().resource(GPU)
        assert view is not None
        assert len(view.devices) == 20


async def test_mps_container_with_two_replicas_of_a_gpu_gets_the_sum_of_their_limits(
    sim: KubeletSimulator, mps_root: Path, tmp_path: Path
) -> None:
    # t4x4: 15360 MiB per GPU. GPUs 0 and 1 get 4 replicas (3840M each), GPUs 2
    # and 3 get 2 (7680M each); one thread percentage for the daemon: 100 / 4.
    config = tmp_path / "mps.yaml"
    config.write_text(
        "version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n"
        "    resources:\n"
        "    - {name: nvidia.com/gpu, devices: [0, 1], replicas: 4}\n"
        "    - {name: nvidia.com/gpu, devices: [2, 3], replicas: 2}\n"
    )
    args = plugin_args(
        sim.directory, "t4x4", "--config-file", str(config),
        "--mps-root", "/run/nvidia/mps", "--mps-container-root", str(mps_root),
    )  # fmt: skip
    # The daemon first: the plugin's first probe then finds it (that the plugin
    # waits for a late daemon is test_mps_e2e's).
    daemon = start_daemon(mps_root, config, tmp_path / "daemon.log", "t4x4")
    try:
        await eventually(MpsLayout(mps_root).ready.exists, what="the daemons ready", timeout=20)
        async with PluginProcess(args, env={"PATH": path_with_fakes()}) as plugin:
            view = await sim.wait_devices(GPU, lambda d: len(d) == 12, timeout=20)
            await plugin.wait_state(lambda s: s["state"] == "serving")
            sent = state(MpsLayout(mps_root))["commands"]
            assert "set_default_device_pinned_mem_limit 0 3840M" in sent
            assert "set_default_device_pinned_mem_limit 2 7680M" in sent
            assert "set_default_active_thread_percentage 25" in sent

            gpu0, _, gpu2, _ = uuids("t4x4")
            assert per_index([d.id for d in view.devices], "t4x4") == {0: 4, 1: 4, 2: 2, 3: 2}
            response = await sim.allocate(GPU, [[f"{gpu2}::0", f"{gpu0}::0", f"{gpu0}::1"]])
            envs = dict(response.container_responses[0].envs)
            assert envs == {
                "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe",
                # Ordinals count the container's GPUs in index order: GPU 0, then GPU 2.
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=7680M,1=7680M",
                # The least-held GPU (one replica of GPU 2) decides: 1 x 25.
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                "NVIDIA_VISIBLE_DEVICES": f"{gpu2},{gpu0}",
            }
            single = await sim.allocate(GPU, [[f"{gpu0}::2"]])
            assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in single.container_responses[0].envs
    finally:
        daemon.terminate()
        await asyncio.to_thread(daemon.wait, 15)
