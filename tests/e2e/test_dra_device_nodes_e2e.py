"""A fresh node never gets a claim spec without device nodes (NVIDIA DRA driver #1380).

The simulated node's driver root carries a `/dev` of its own (as a driver
container's does), empty at first: the driver is loaded, but nothing has
created `/dev/nvidia*` yet. The kubelet's prepare must be refused, naming
what is missing, until the nodes exist; then the same claim prepares and its
spec hands them to the container.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubelet_sim import KubeletSimulator
from tests.e2e.dra_support import (
    DRIVER,
    NODE,
    DraNode,
    answered,
    api,
    cdi_ids,
    create_claim,
    dra_sim,
    serving_dra,
    spec_name,
)
from tests.unit.kube.apiserver import ApiServer

__all__ = ["api", "dra_sim"]  # the fixtures

# dgx-a100's gpu-4 is minor 4; CUDA also opens the driver's two control nodes.
NEEDED = ("nvidiactl", "nvidia-uvm", "nvidia4")


async def test_a_claim_waits_for_the_device_nodes_then_gets_them(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    root = tmp_path / "driver-root"
    (root / "dev").mkdir(parents=True)
    node = DraNode(sock_dir, tmp_path, api, extra=("--driver-root-ctr-path", str(root)))
    claim = await create_claim(api, "first-workload", ["gpu-4"])
    async with node.process():
        await serving_dra(api, dra_sim)
        error, ids = answered(await dra_sim.prepare(DRIVER, [claim]), claim)
        assert error == (
            "ResourceClaim default/first-workload: device nodes /dev/nvidiactl, "
            "/dev/nvidia-uvm, /dev/nvidia4 do not exist yet on this node (the driver creates "
            "them: nvidia-smi or nvidia-ctk system create-device-nodes); waiting for them"
        )
        assert ids == []
        assert node.claim_specs() == set()

        for name in NEEDED:  # what `nvidia-ctk system create-device-nodes` does
            (root / "dev" / name).touch()
        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim) == (
            "",
            cdi_ids(claim, "gpu-4"),
        )
        spec = json.loads((node.cdi / spec_name(claim)).read_text())
        paths = {n["path"] for n in spec["containerEdits"]["deviceNodes"]}
        paths |= {n["path"] for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]}
        assert {f"/dev/{name}" for name in NEEDED} <= paths
