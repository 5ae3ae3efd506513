"""Dynamic MIG claims end to end: a placement prepared is a MIG instance made, and undone.

The plugin runs `--dra-dynamic-mig` on the simulated `a100-mig-dynamic` node
(8 A100-40GB in MIG mode, no instances) whose MIG instances live in a state
file (`MOCK_NVML_STATE`), as a real GPU's outlive a plugin restart. The
kubelet simulator prepares claims the scheduler allocated to placements; the
test reads the state file for what exists on the GPUs, the claim's spec for
what the container gets, and the checkpoint for what the plugin recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devices.backends import MIG_STATE_ENV
from devices.simulated import available_profiles
from foundation.kill_points import ENV as KILL_AT
from kubelet_sim import KubeletSimulator, PluginCallError
from tests.e2e.dra_support import (
    DRIVER,
    FIRST_PUBLISH,
    NODE,
    DraNode,
    answered,
    api,
    cdi_ids,
    config_text,
    create_claim,
    dra_sim,
    published,
    spec_name,
)
from tests.e2e.harness import PluginProcess
from tests.unit.kube.apiserver import ApiServer

__all__ = ["api", "dra_sim"]  # the fixtures

PROFILE = "a100-mig-dynamic"

pytestmark = pytest.mark.skipif(
    PROFILE not in available_profiles(), reason=f"the simulated profile {PROFILE} is missing"
)


class MigNode(DraNode):
    """A dynamic MIG node: its MIG state file, and its plugin started with or without a kill."""

    @property
    def state(self) -> Path:
        return self.tmp_path / "mig-state.json"

    def started(self, kill_at: str = "") -> PluginProcess:
        self.config.write_text(config_text("dra"))
        self.events.touch()
        env = {**self.env(), MIG_STATE_ENV: str(self.state)}
        if kill_at:
            env[KILL_AT] = kill_at
        return PluginProcess(self.args(), env=env)

    def instances(self) -> dict[str, list[tuple[int, int]]]:
        """GPU UUID -> (profile id, start) of each MIG instance on it."""
        if not self.state.exists():
            return {}
        gpus = json.loads(self.state.read_text())["gpus"]
        return {
            uuid: sorted((i["profileId"], i["start"]) for i in gpu["instances"])
            for uuid, gpu in gpus.items()
            if gpu["instances"]
        }

    def recorded(self) -> dict[str, Any]:
        claims: dict[str, Any] = json.loads(self.checkpoint.read_text())["claims"]
        return claims


async def partitioned(api: ApiServer) -> dict[str, str]:
    """Once the node's slices are in: placement device name -> its GPU's UUID."""
    devices = await published(api, lambda d: len(d) == 8 * 26, "the node's 208 devices")
    uuids = {
        d["name"]: d["attributes"]["uuid"]["string"] for d in devices if "uuid" in d["attributes"]
    }
    return {d["name"]: uuids[d["name"].split("-mig-")[0]] for d in devices}


async def test_placements_are_created_refused_when_they_overlap_and_destroyed(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = MigNode(sock_dir, tmp_path, api, profile=PROFILE, extra=("--dra-dynamic-mig",))
    big = await create_claim(api, "big", ["gpu-0-mig-3g20gb-9-0"])
    inside = await create_claim(api, "inside", ["gpu-0-mig-1g5gb-19-2"])
    beside = await create_claim(api, "beside", ["gpu-0-mig-1g5gb-19-4"])
    async with node.started():
        gpu_of = await partitioned(api)
        await dra_sim.wait_dra_registered(DRIVER, timeout=FIRST_PUBLISH)
        gpu0 = gpu_of["gpu-0"]
        assert answered(await dra_sim.prepare(DRIVER, [big]), big) == (
            "",
            cdi_ids(big, "gpu-0-mig-3g20gb-9-0"),
        )
        assert node.instances() == {gpu0: [(9, 0)]}
        spec = json.loads((node.cdi / spec_name(big)).read_text())
        (entry,) = spec["devices"]
        paths = [n["path"] for n in entry["containerEdits"]["deviceNodes"]]
        assert paths[0] == "/dev/nvidia0"
        assert [p.startswith("/dev/nvidia-caps/nvidia-cap") for p in paths[1:]] == [True, True]
        (record,) = node.recorded()[big.uid]["mig"]
        assert (record["gpu"], record["profileId"], record["start"]) == (gpu0, 9, 0)
        assert record["gi"] is not None

        error, _ = answered(await dra_sim.prepare(DRIVER, [inside]), inside)
        assert error == (
            "ResourceClaim default/inside: device gpu-0-mig-1g5gb-19-2 overlaps "
            "gpu-0-mig-3g20gb-9-0, already prepared for claim default/big"
        )
        assert answered(await dra_sim.prepare(DRIVER, [beside]), beside)[0] == ""
        assert node.instances() == {gpu0: [(9, 0), (19, 4)]}

        response = await dra_sim.unprepare(DRIVER, [big, beside])
        assert [response.claims[c.uid].error for c in (big, beside)] == ["", ""]
        assert node.instances() == {}
        assert node.claim_specs() == set()
        # Free again: the claim that overlapped prepares now.
        assert answered(await dra_sim.prepare(DRIVER, [inside]), inside)[0] == ""
        assert node.instances() == {gpu0: [(19, 2)]}


async def test_an_instance_made_before_a_kill_is_destroyed_at_start_and_its_gpu_stays_partitioned(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = MigNode(sock_dir, tmp_path, api, profile=PROFILE, extra=("--dra-dynamic-mig",))
    kept = await create_claim(api, "kept", ["gpu-2-mig-7g40gb-0-0"])
    torn = await create_claim(api, "torn", ["gpu-1-mig-2g10gb-14-2"])
    async with node.started(kill_at="prepare:mig-created") as plugin:
        gpu_of = await partitioned(api)
        await dra_sim.wait_dra_registered(DRIVER, timeout=FIRST_PUBLISH)
        with pytest.raises(PluginCallError):
            await dra_sim.prepare(DRIVER, [torn])
        assert await plugin.wait_exit() == -9, plugin.stderr
    gpu1, gpu2 = gpu_of["gpu-1"], gpu_of["gpu-2"]
    assert node.instances() == {gpu1: [(14, 2)]}  # made, its claim never answered
    assert node.recorded()[torn.uid]["phase"] == "PrepareStarted"

    async with node.started():
        await dra_sim.wait_dra_registered(DRIVER, min_registrations=2, timeout=FIRST_PUBLISH)
        assert node.instances() == {}  # rolled back before the socket served
        assert answered(await dra_sim.prepare(DRIVER, [torn, kept]), torn) == (
            "",
            cdi_ids(torn, "gpu-1-mig-2g10gb-14-2"),
        )
        assert node.instances() == {gpu1: [(14, 2)], gpu2: [(0, 0)]}
        assert {uid: c["phase"] for uid, c in node.recorded().items()} == {
            torn.uid: "PrepareCompleted",
            kept.uid: "PrepareCompleted",
        }
    # A restart with the claims' instances in place: the GPUs stay partitioned.
    async with node.started():
        gpu_of_again = await partitioned(api)
        assert gpu_of_again == gpu_of
