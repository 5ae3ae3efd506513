"""Resources end to end: MIG mixed naming, time-slicing with rename, and request limits.

The real plugin process serves what the resource logic decides, and the
kubelet simulator sees exactly that: the resource names, their device counts,
and the documented rejection of a too-large shared request.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from kubelet_sim import KubeletSimulator
from kubelet_sim.client import PluginCallError
from tests.e2e.harness import PluginProcess, plugin_args

CONFIG = Path(__file__).resolve().parents[2] / "config"


async def test_mig_mixed_advertises_one_resource_per_profile(sim: KubeletSimulator) -> None:
    expected = {
        # a100-mig-mixed: six MIG-enabled GPUs with these devices, two GPUs with MIG off.
        "nvidia.com/mig-1g.5gb": 8,
        "nvidia.com/mig-2g.10gb": 6,
        "nvidia.com/mig-3g.20gb": 2,
        "nvidia.com/mig-4g.20gb": 1,
        "nvidia.com/mig-7g.40gb": 1,
        "nvidia.com/mig-1g.10gb": 1,
        "nvidia.com/mig-1g.5gb.me": 1,
        "nvidia.com/gpu": 2,
    }
    args = plugin_args(sim.directory, "a100-mig-mixed", "--mig-strategy", "mixed")
    async with PluginProcess(args) as plugin:
        for name, count in expected.items():
            view = await sim.wait_devices(name, lambda d, n=count: len(d) == n, timeout=20)
            assert view.endpoint == f"nvidia-{name.split('/')[1]}.sock"
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert sorted(r["name"] for r in state["resources"]) == sorted(expected)
        assert {r.name for r in sim.snapshot().resources} == set(expected)
        mig = (await sim.wait_devices("nvidia.com/mig-1g.5gb")).devices
        assert all(d.id.startswith("MIG-") for d in mig)
        response = await sim.allocate("nvidia.com/mig-1g.5gb", [[mig[0].id]])
        assert dict(response.container_responses[0].envs) == {
            "NVIDIA_VISIBLE_DEVICES": mig[0].id
        }


async def test_mig_profiles_with_suffixes_are_resources_of_their_own(
    sim: KubeletSimulator,
) -> None:
    # rtx-pro-6000-mig: every GPU has MIG on; `+` becomes `.` in a resource name, `-` stays.
    expected = {
        "nvidia.com/mig-1g.24gb.gfx": 5,
        "nvidia.com/mig-4g.96gb.gfx": 1,
        "nvidia.com/mig-1g.24gb.me.all": 1,
        "nvidia.com/mig-1g.24gb-me": 1,
        "nvidia.com/mig-2g.48gb-me": 1,
        "nvidia.com/mig-1g.24gb.me": 1,
        "nvidia.com/mig-2g.48gb": 1,
    }
    args = plugin_args(sim.directory, "rtx-pro-6000-mig", "--mig-strategy", "mixed")
    async with PluginProcess(args) as plugin:
        for name, count in expected.items():
            view = await sim.wait_devices(name, lambda d, n=count: len(d) == n, timeout=20)
            assert view.endpoint == f"nvidia-{name.split('/')[1]}.sock"
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        served = {r["name"]: r for r in state["resources"]}
        assert sorted(served) == sorted(expected)
        gfx = {d["index"] for d in served["nvidia.com/mig-1g.24gb.gfx"]["devices"]}
        assert gfx == {"0:0", "0:1", "0:2", "0:3", "2:1"}
        assert {r.name for r in sim.snapshot().resources} == set(expected)
        chosen = (await sim.wait_devices("nvidia.com/mig-1g.24gb-me")).devices[0].id
        response = await sim.allocate("nvidia.com/mig-1g.24gb-me", [[chosen]])
        assert dict(response.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": chosen}


async def test_time_slicing_rename_advertises_eighty_shared_devices(
    sim: KubeletSimulator,
) -> None:
    args = plugin_args(
        sim.directory, "dgx-a100", "--config-file", str(CONFIG / "time-slicing-rename.yaml")
    )
    async with PluginProcess(args) as plugin:
        view = await sim.wait_devices(
            "nvidia.com/gpu.shared", lambda devices: len(devices) == 80, timeout=20
        )
        assert view.endpoint == "nvidia-gpu.shared.sock"
        ids = [d.id for d in view.devices]
        assert len(set(ids)) == 80
        assert all("::" in i for i in ids)
        assert len({i.split("::")[0] for i in ids}) == 8
        assert sim.snapshot().resource("nvidia.com/gpu") is None
        # Two replicas of the same GPU: the runtime sees that GPU once.
        first = ids[0].split("::")[0]
        same_gpu = [i for i in ids if i.startswith(first)][:2]
        response = await sim.allocate("nvidia.com/gpu.shared", [same_gpu])
        assert dict(response.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": first}
        state = await plugin.state()
        assert state["config"]["sources"]["config_file"] == "flag"


async def test_fail_requests_greater_than_one_reaches_the_kubelet(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "ts.yaml"
    config.write_text(
        "version: v1\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    failRequestsGreaterThanOne: true\n"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        "      replicas: 4\n"
    )
    args = plugin_args(sim.directory, "t4x4", "--config-file", str(config))
    async with PluginProcess(args):
        view = await sim.wait_devices(
            "nvidia.com/gpu", lambda devices: len(devices) == 16, timeout=20
        )
        ids = [d.id for d in view.devices]
        with pytest.raises(PluginCallError) as caught:
            await sim.allocate("nvidia.com/gpu", [ids[:2]])
        assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
        # The reference's current text (older releases said "request for
        # 'nvidia.com/gpu: 2' too large: ..."; both share the last clause).
        assert caught.value.details == (
            'invalid allocation request for "nvidia.com/gpu": '
            "invalid request: maximum request size for shared resources is 1; found 2"
        )
        single = await sim.allocate("nvidia.com/gpu", [ids[:1]])
        assert len(single.container_responses) == 1
