"""A GPU's health reaches the kubelet on the DRA device-health stream (KEP-4680), and back.

The plugin serves a node through DRA; the kubelet simulator registers the driver
and watches its `DRAResourceHealth.NodeWatchResources` stream as the kubelet
does. An XID injected through the simulated backend's events file makes the
kubelet hear the GPU `Unhealthy` with the XID as the reason, and a reset makes
it `Healthy` again, each as soon as the health machine decides it. A GPU no
health event can reach is `Unknown`, and says why.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubelet_sim import DraDeviceHealth, KubeletSimulator, Snapshot
from resources.dra_health import HEALTH_CHECK_TIMEOUT_SECONDS
from tests.e2e.dra_support import (
    DRIVER,
    FIRST_PUBLISH,
    GPU0,
    NODE,
    DraNode,
    api,
    dra_sim,
    serving_dra,
)
from tests.unit.kube.apiserver import ApiServer

__all__ = ["api", "dra_sim"]  # the fixtures

QUIET = "0.3"  # the health machine's quiet period: a reset is looked at this soon
CONFIG = Path(__file__).resolve().parents[2] / "config"


def inject(events: Path, **event: object) -> None:
    with events.open("a") as out:
        out.write(json.dumps(event) + "\n")


async def test_the_kubelet_hears_a_gpu_unhealthy_with_its_xid_then_healthy_again(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api, extra=("--health-quiet-period", QUIET))
    async with node.process("dra"):
        await serving_dra(api, dra_sim)
        # The first list: every device of the pool, named as the slices name them.
        await dra_sim.wait_dra_health(DRIVER, "gpu-7", "Healthy", timeout=FIRST_PUBLISH)
        view = dra_sim.snapshot().dra_driver(DRIVER)
        assert view is not None
        assert view.health_service == "v1beta1.DRAResourceHealth"
        assert sorted(d.device for d in view.health) == sorted(f"gpu-{i}" for i in range(8))
        assert {(d.pool, d.health, d.timeout) for d in view.health} == {
            (NODE, "Healthy", HEALTH_CHECK_TIMEOUT_SECONDS)
        }

        inject(node.events, uuid=GPU0, xid=79)
        sick = await dra_sim.wait_dra_health(DRIVER, "gpu-0", "Unhealthy", timeout=5)
        assert (sick.pool, sick.message) == (NODE, "xid 79")
        view = dra_sim.snapshot().dra_driver(DRIVER)
        assert view is not None
        assert [d.device for d in view.health if d.health != "Healthy"] == ["gpu-0"]

        inject(node.events, uuid=GPU0, reset=True)  # XID 79 waits for a reset
        well = await dra_sim.wait_dra_health(DRIVER, "gpu-0", "Healthy", timeout=10)
        assert well.message == ""


async def test_a_gpu_no_health_event_can_reach_is_unknown_to_the_kubelet_with_why(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    # The t4x4 node, with its third GPU too old for health events: the mark comes
    # when watching starts, after the first list went out, and moves no taint.
    profile = tmp_path / "node.yaml"
    head, *gpus = (CONFIG / "nodes" / "t4x4.yaml").read_text().split("\n  - uuid: ")
    gpus[2] = gpus[2].replace("migCapable: false\n", "migCapable: false\n    healthEvents: false\n")
    profile.write_text("\n  - uuid: ".join([head, *gpus]))
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api, profile=str(profile))
    async with node.process("dra"):
        await serving_dra(api, dra_sim, gpus=4)

        def unknown(snap: Snapshot) -> list[DraDeviceHealth]:
            view = snap.dra_driver(DRIVER)
            return [] if view is None else [d for d in view.health if d.health == "Unknown"]

        snap = await dra_sim.wait_for(lambda s: bool(unknown(s)), timeout=FIRST_PUBLISH)
        (blind,) = unknown(snap)
        assert blind.message == "unmonitored: nvmlDeviceRegisterEvents: Not Supported"
        view = snap.dra_driver(DRIVER)
        assert view is not None
        assert sorted(d.health for d in view.health) == ["Healthy"] * 3 + ["Unknown"]
