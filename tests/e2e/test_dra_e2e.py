"""DRA mode end to end: slices, the kubelet plugin, prepare/unprepare, health, a flip.

The plugin process runs with `--kubelet-api dra` (or flips to it), `--node-name`
and a KUBECONFIG pointing at the emulated API server; the kubelet simulator
watches its plugins_registry directory and calls the DRA plugin as the
kubelet does. A GPU is served through one API at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

from kube.resource_claims import AllocatedDevice, OpaqueConfig
from kubelet.dra.types import ClaimRef
from kubelet_sim import KubeletSimulator
from tests.e2e.dra_support import (
    DRIVER,
    FIRST_PUBLISH,
    GPU,
    GPU0,
    NODE,
    DraNode,
    api,
    config_text,
    dra_sim,
    published,
)
from tests.e2e.harness import write_atomically
from tests.unit.kube.apiserver import ApiServer

__all__ = ["api", "dra_sim"]  # the fixtures


async def test_a_dra_node_publishes_slices_prepares_claims_and_taints_a_sick_gpu(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    events = node.events
    async with node.process("dra") as process:
        devices = await published(api, lambda d: len(d) == 8, "8 GPUs in the node's slices")
        assert sorted(d["name"] for d in devices) == [f"gpu-{i}" for i in range(8)]
        slice_ = next(iter((await api.slices()).values()))
        assert slice_["spec"]["nodeName"] == NODE
        assert slice_["spec"]["pool"]["name"] == NODE
        await dra_sim.wait_dra_registered(DRIVER, timeout=FIRST_PUBLISH)
        assert dra_sim.snapshot().resource(GPU) is None  # never both APIs

        # A claim for gpu-1, prepared: CDI IDs out, a spec on disk.
        created = await api.create_claim(
            "default", "one-gpu", [AllocatedDevice("gpu", DRIVER, NODE, "gpu-1")]
        )
        claim = ClaimRef("default", created["metadata"]["uid"], "one-gpu")
        answer = (await dra_sim.prepare(DRIVER, [claim])).claims[claim.uid]
        assert answer.error == ""
        (device,) = answer.devices
        assert list(device.cdi_device_ids) == [f"k8s.gpu.nvidia.com/claim={claim.uid}-gpu-1"]
        spec = node.cdi / f"k8s.gpu.nvidia.com-claim_{claim.uid}.json"
        assert json.loads(spec.read_text())["devices"][0]["name"] == f"{claim.uid}-gpu-1"

        # XID 79 on GPU 0: its device is tainted, and a claim for it is refused.
        with events.open("a") as handle:
            handle.write(json.dumps({"uuid": GPU0, "xid": 79}) + "\n")
        tainted = await published(
            api,
            lambda d: any(x["name"] == "gpu-0" and x.get("taints") for x in d),
            "a taint on gpu-0",
        )
        (taint,) = next(x for x in tainted if x["name"] == "gpu-0")["taints"]
        assert (taint["key"], taint["value"], taint["effect"]) == (
            "gpu.nvidia.com/xid",
            "79",
            "NoSchedule",
        )
        sick = await api.create_claim(
            "default",
            "sick",
            [AllocatedDevice("gpu", DRIVER, NODE, "gpu-0")],
            config=[OpaqueConfig((), DRIVER, {"kind": "GpuConfig"})],
        )
        sick_ref = ClaimRef("default", sick["metadata"]["uid"], "sick")
        refused = (await dra_sim.prepare(DRIVER, [sick_ref])).claims[sick_ref.uid]
        assert refused.error == "ResourceClaim default/sick: device gpu-0 is unhealthy (xid 79)"

        # Unprepare removes exactly what prepare wrote.
        assert (await dra_sim.unprepare(DRIVER, [claim])).claims[claim.uid].error == ""
        assert not spec.exists()
        # `/state` follows once the loop has taken the preparer's note.
        state = await process.wait_state(lambda s: s["dra"]["prepared_claims"] == 0)
        assert state["dra"]["serving"] is True
        sick_device = next(d for d in state["dra"]["devices"] if d["name"] == "gpu-0")
        assert (sick_device["health"], sick_device["reason"]) == ("Unhealthy", "xid 79")


async def test_flipping_a_node_between_the_apis_never_serves_a_gpu_through_both(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    config = node.config
    async with node.process("device-plugin") as process:
        await dra_sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        assert await api.slices() == {}

        write_atomically(config, config_text("dra"))
        await published(api, lambda d: len(d) == 8, "the node's slices after the flip")
        withdrawn = dra_sim.snapshot().resource(GPU)
        assert withdrawn is not None
        assert withdrawn.devices == ()  # announced empty before any slice went out
        await dra_sim.wait_dra_registered(DRIVER, timeout=FIRST_PUBLISH)
        state = await process.wait_state(
            lambda s: any(h["trigger"] == "reconfigured" for h in s["history"][-3:])
        )
        assert state["state"] == "serving"

        write_atomically(config, config_text("device-plugin"))
        await dra_sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        assert await api.slices() == {}  # gone before the device plugin served again
