"""One plan per kubelet API, end to end: a DRA node serves the DRA plan and nothing else.

The plugin process on the simulated `dgx-a100` node, with the emulated API
server and the kubelet simulator's DRA side, tried the ways a new user
would: a config file with node-wide MPS sharing and a CDI device-list
strategy on a DRA node, two claims that name the same GPU, and an API
server that refuses the slices at first.
"""

from __future__ import annotations

from pathlib import Path

from kubelet_sim import KubeletSimulator
from tests.e2e.dra_support import (
    DRIVER,
    FIRST_PUBLISH,
    GPU,
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
from tests.waiting import eventually

__all__ = ["api", "dra_sim"]  # the fixtures

MPS_ON_DRA = """version: v1
flags:
  plugin:
    kubeletApi: dra
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


async def test_node_wide_mps_on_a_dra_node_is_said_and_the_node_becomes_ready(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(
        sock_dir,
        tmp_path,
        api,
        extra=("--device-list-strategy", "cdi-cri", "--mps-root", str(tmp_path / "mps")),
    )
    node.config.write_text(MPS_ON_DRA)
    async with node.process() as plugin:
        await serving_dra(api, dra_sim)
        state = await plugin.wait_state(lambda s: s["ready"], timeout=FIRST_PUBLISH)
        assert state["state"] == "serving"
        assert (await plugin.get("/readyz")).status == 200  # no MPS daemon waited for
        (warning,) = [w for w in state["plan"]["warnings"] if w.startswith("sharing.mps")]
        assert "GpuConfig" in warning
        assert state["plan"]["resources"] == []  # only the plan that is served
        assert state["resources"] == []
        assert dra_sim.snapshot().resource(GPU) is None
        # No node-wide CDI spec: only claims' specs ever land on a DRA node.
        cdi = node.cdi
        assert not cdi.exists() or [p.name for p in cdi.iterdir()] == []
        await eventually(
            lambda: plugin.stderr.count("sharing.mps is ignored on a node served through DRA") == 1,
            what="one log line naming sharing.mps",
            timeout=5.0,
        )
        history = [r for r in state["history"] if r["trigger"] == "initialized"]
        assert [w for r in history for w in r["detail"].get("warnings", [])] == [warning]


async def test_a_gpu_prepared_for_one_claim_is_refused_to_another(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    first = await create_claim(api, "claim-a", ["gpu-1"])
    second = await create_claim(api, "claim-b", ["gpu-1"])
    async with node.process():
        await serving_dra(api, dra_sim)
        assert answered(await dra_sim.prepare(DRIVER, [first]), first) == (
            "",
            cdi_ids(first, "gpu-1"),
        )
        spec = node.cdi / spec_name(first)
        before = spec.read_bytes()
        error, devices = answered(await dra_sim.prepare(DRIVER, [second]), second)
        assert error == (
            "ResourceClaim default/claim-b: device gpu-1 is already prepared for claim "
            "default/claim-a"
        )
        assert devices == []
        assert spec.read_bytes() == before
        assert node.claim_specs() == {spec_name(first)}
        checkpoint = node.checkpoint.read_text()
        assert first.uid in checkpoint
        assert second.uid not in checkpoint
        # The same claim again, twice at once: one answer, the same as before.
        again = await dra_sim.prepare(DRIVER, [first, first])
        assert answered(again, first) == ("", cdi_ids(first, "gpu-1"))


async def test_serving_means_the_slices_have_landed(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    # Refused twice (the first write and its first retry), then written on the backoff.
    refusal = api.handler.fail("create", 503, "ServiceUnavailable", "etcd is down", times=2)
    async with node.process() as plugin:
        failing = await plugin.wait_state(
            lambda s: "dra:slices" in (s["reason"] or ""), timeout=FIRST_PUBLISH
        )
        assert failing["state"] != "serving"
        assert "etcd is down" in failing["reason"]
        assert await api.slices() == {}

        served = await plugin.wait_state(lambda s: s["state"] == "serving", timeout=FIRST_PUBLISH)
        assert refusal.served == 2
        slices = served["dra"]["slices"]
        assert (slices["converged"], slices["count"], slices["devices"]) == (True, 1, 8)
        assert len(await api.slices()) == 1  # written before /state said serving
