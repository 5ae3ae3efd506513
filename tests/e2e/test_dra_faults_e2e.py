"""DRA mode under faults, end to end: what the device plugin survives, the DRA plugin survives.

The real plugin process against the emulated API server and the kubelet
simulator (see `tests.e2e.dra_support`): its own sockets deleted, a kubelet
restart, the plugin killed around a prepare, a node too big for one slice,
claims with configs it cannot honour, and the API server down while the node
moves between the two kubelet APIs. Also: what the real process publishes for
the three nodes docs/dra.md lists.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import kmock
import pytest

from kube.resource_claims import OpaqueConfig
from kubelet_sim import KubeletSimulator, PluginCallError, Snapshot
from resources.options import MigStrategy
from scripts.dra_table import PROFILES, slices_of
from tests.e2e.dra_support import (
    DRIVER,
    FIRST_PUBLISH,
    GPU,
    NODE,
    DraNode,
    answered,
    api,
    cdi_ids,
    config_text,
    create_claim,
    dra_sim,
    published,
    serving_dra,
    spec_devices,
    spec_name,
    stored_slices,
)
from tests.e2e.harness import write_atomically
from tests.unit.kube.apiserver import ApiServer, Outage
from tests.waiting import eventually

__all__ = ["api", "dra_sim"]  # the fixtures

CLAIMS = kmock.resource("resource.k8s.io", "v1", "resourceclaims")
GPU_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}


def dra_registered(snapshot: Snapshot) -> bool:
    view = snapshot.dra_driver(DRIVER)
    return view is not None and view.registered


def prepared_in_checkpoint(node: DraNode) -> set[str]:
    return set(json.loads(node.checkpoint.read_text())["claims"])


async def test_a_deleted_dra_socket_or_a_kubelet_restart_registers_the_driver_anew(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    async with node.process() as process:
        seen = await serving_dra(api, dra_sim)
        claim = await create_claim(api, "one-gpu", ["gpu-1"])
        for socket in (node.registration_socket, node.plugin_socket):
            socket.unlink()
            again = await dra_sim.wait_dra_registered(
                DRIVER, min_registrations=seen.registrations + 1, timeout=10
            )
            assert again.endpoint == str(node.plugin_socket)
            assert socket.exists()
            seen = again
            # What the new kubelet registration said is on /state without any other event.
            state = await process.wait_state(lambda s: s["dra"]["kubelet_registered"] is True)
            assert state["state"] == "serving"
        # The endpoint the kubelet holds now answers.
        error, ids = answered(await dra_sim.prepare(DRIVER, [claim]), claim)
        assert (error, ids) == ("", cdi_ids(claim, "gpu-1"))
        assert "a DRA socket was deleted underneath the plugin: serving it again" in process.stderr

        # A kubelet restart registers the driver again, and the new kubelet
        # unprepares what the old one prepared.
        await dra_sim.restart()
        view = await dra_sim.wait_dra_registered(
            DRIVER, min_registrations=seen.registrations + 1, timeout=10
        )
        assert view.endpoint == str(node.plugin_socket)
        response = await dra_sim.unprepare(DRIVER, [claim])
        assert response.claims[claim.uid].error == ""
        assert node.claim_specs() == set()
        state = await process.wait_state(lambda s: s["dra"]["prepared_claims"] == 0)
        assert state["dra"]["kubelet_registered"] is True


async def test_claims_prepare_again_with_the_same_ids_and_those_it_cannot_honour_fail_alone(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)

    def config(**fields: Any) -> list[OpaqueConfig]:
        return [OpaqueConfig((), DRIVER, {**GPU_CONFIG, **fields})]

    good = await create_claim(api, "good", ["gpu-1"], config=config())
    unknown = await create_claim(api, "unknown", ["gpu-2"], config=config(bogus=1))
    strategy = await create_claim(
        api, "strategy", ["gpu-3"], config=config(sharing={"strategy": "Sliced"})
    )
    mps = await create_claim(api, "mps", ["gpu-4"], config=config(sharing={"strategy": "MPS"}))
    async with node.process() as process:
        await serving_dra(api, dra_sim)

        # A claim prepares, unprepares and prepares again with the same IDs.
        claim = await create_claim(api, "two-gpus", ["gpu-3", "gpu-4"])
        first = answered(await dra_sim.prepare(DRIVER, [claim]), claim)
        assert first == ("", cdi_ids(claim, "gpu-3", "gpu-4"))
        spec = node.cdi / spec_name(claim)

        assert (await dra_sim.unprepare(DRIVER, [claim])).claims[claim.uid].error == ""
        assert not spec.exists()  # so what the next prepare answers with is written anew
        assert prepared_in_checkpoint(node) == set()

        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim) == first
        assert spec_devices(node.cdi, claim) == [f"{claim.uid}-gpu-3", f"{claim.uid}-gpu-4"]
        assert prepared_in_checkpoint(node) == {claim.uid}
        assert (await dra_sim.unprepare(DRIVER, [claim])).claims[claim.uid].error == ""
        assert node.claim_specs() == set()

        # Claims with configs the plugin cannot honour fail alone.
        response = await dra_sim.prepare(DRIVER, [unknown, good, strategy, mps])
        assert answered(response, good) == ("", cdi_ids(good, "gpu-1"))
        errors = {c.name: answered(response, c) for c in (unknown, strategy, mps)}
        opaque = f"opaque config for {DRIVER}"
        assert errors == {
            "unknown": (f"ResourceClaim default/unknown: {opaque}: bogus: unknown field", []),
            "strategy": (
                f"ResourceClaim default/strategy: {opaque}: sharing.strategy: "
                "expected one of 'TimeSlicing' or 'MPS' (found 'Sliced')",
                [],
            ),
            "mps": (
                "ResourceClaim default/mps: MPS sharing is not available through DRA claims "
                "yet; share with MPS through the device-plugin API (sharing.mps in the config "
                "file)",
                [],
            ),
        }
        assert node.claim_specs() == {spec_name(good)}
        assert prepared_in_checkpoint(node) == {good.uid}

        # Still serving: the refused claims are refused again, the good one unprepares.
        again = await dra_sim.prepare(DRIVER, [mps])
        assert answered(again, mps) == errors["mps"]
        assert (await dra_sim.unprepare(DRIVER, [good])).claims[good.uid].error == ""
        state = await process.state()
        assert (state["state"], state["dra"]["serving"]) == ("serving", True)


async def test_a_plugin_killed_around_prepares_answers_the_same_after_its_restart(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    done = await create_claim(api, "prepared", ["gpu-5"])
    slow = await create_claim(api, "slow", ["gpu-6"])
    async with node.process() as first:
        await serving_dra(api, dra_sim)
        before = answered(await dra_sim.prepare(DRIVER, [done]), done)
        assert before == ("", cdi_ids(done, "gpu-5"))

        # The next claim read hangs: the plugin is killed with that prepare in flight.
        outage = Outage()
        api.handler[CLAIMS][kmock.action.FETCH] << outage
        in_flight = asyncio.create_task(dra_sim.prepare(DRIVER, [slow]))
        await asyncio.wait_for(outage.reached.wait(), 10)
        await first.kill()
        with pytest.raises(PluginCallError):
            await asyncio.wait_for(in_flight, 10)
        outage.end()
    assert node.claim_specs() == {spec_name(done)}  # nothing of the killed prepare
    assert prepared_in_checkpoint(node) == {done.uid}

    async with node.process() as second:
        await dra_sim.wait_dra_registered(DRIVER, min_registrations=2, timeout=FIRST_PUBLISH)
        response = await dra_sim.prepare(DRIVER, [done, slow])
        assert answered(response, done) == before  # from the checkpoint
        assert answered(response, slow) == ("", cdi_ids(slow, "gpu-6"))
        assert node.claim_specs() == {spec_name(done), spec_name(slow)}
        response = await dra_sim.unprepare(DRIVER, [done, slow])
        assert [response.claims[c.uid].error for c in (done, slow)] == ["", ""]
        assert node.claim_specs() == set()
        assert prepared_in_checkpoint(node) == set()
        state = await second.wait_state(lambda s: s["dra"]["prepared_claims"] == 0)
        assert state["dra"]["problem"] is None


async def test_a_prepare_killed_between_its_spec_and_its_checkpoint_is_done_again(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    kept = await create_claim(api, "kept", ["gpu-0"])
    torn = await create_claim(api, "torn", ["gpu-7"])
    async with node.process() as first:
        await serving_dra(api, dra_sim)
        assert answered(await dra_sim.prepare(DRIVER, [kept]), kept)[0] == ""
        checkpoint_before = node.checkpoint.read_bytes()
        torn_ids = answered(await dra_sim.prepare(DRIVER, [torn]), torn)
        assert torn_ids == ("", cdi_ids(torn, "gpu-7"))
        await first.kill()
    # What a crash after the spec was written and before the checkpoint was
    # replaced leaves: the spec, and the checkpoint as it was before.
    node.checkpoint.write_bytes(checkpoint_before)
    assert node.claim_specs() == {spec_name(kept), spec_name(torn)}

    async with node.process():
        await dra_sim.wait_dra_registered(DRIVER, min_registrations=2, timeout=FIRST_PUBLISH)
        assert answered(await dra_sim.prepare(DRIVER, [torn]), torn) == torn_ids
        assert spec_devices(node.cdi, torn) == [f"{torn.uid}-gpu-7"]
        assert prepared_in_checkpoint(node) == {kept.uid, torn.uid}
        response = await dra_sim.unprepare(DRIVER, [kept, torn])
        assert [response.claims[c.uid].error for c in (kept, torn)] == ["", ""]
        assert node.claim_specs() == set()
        assert sorted(p.name for p in node.cdi.iterdir() if p.name.startswith(".")) == []


def big_profile(gpus: int) -> str:
    """A simulated node of `gpus` whole GPUs, no links."""
    lines = ['driverVersion: "550.54.15"', 'cudaDriverVersion: "12.4"', "gpus:"]
    for index in range(gpus):
        lines += [
            f"  - uuid: GPU-{index:08x}-0000-4000-8000-{index:012x}",
            '    name: "NVIDIA A100-SXM4-80GB"',
            "    memoryMiB: 81920",
            f'    pciBusID: "{index // 256:08X}:{index % 256:02X}:00.0"',
            "    numaNode: 0",
            '    computeCapability: "8.0"',
        ]
    return "\n".join(lines) + "\n"


async def test_a_300_gpu_node_is_one_pool_of_three_slices(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    profile = tmp_path / "node-300.yaml"
    profile.write_text(big_profile(300))
    node = DraNode(sock_dir, tmp_path, api, profile=str(profile))
    async with node.process():
        await published(api, lambda d: len(d) == 300, "300 devices in the node's slices")
        slices = sorted((await api.slices()).values(), key=lambda s: s["metadata"]["name"])
        assert [s["metadata"]["name"] for s in slices] == [f"{NODE}-{DRIVER}-{i}" for i in range(3)]
        assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
        pools = [s["spec"]["pool"] for s in slices]
        assert {p["name"] for p in pools} == {NODE}
        assert {p["resourceSliceCount"] for p in pools} == {3}
        assert len({p["generation"] for p in pools}) == 1
        names = [d["name"] for s in slices for d in s["spec"]["devices"]]
        assert len(names) == len(set(names)) == 300
        assert set(names) == {f"gpu-{i}" for i in range(300)}

        # A device of the last slice is prepared like any other.
        await dra_sim.wait_dra_registered(DRIVER, timeout=FIRST_PUBLISH)
        claim = await create_claim(api, "last", ["gpu-299"])
        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim) == (
            "",
            cdi_ids(claim, "gpu-299"),
        )


async def test_the_api_server_down_during_flips_never_serves_both_apis(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    async with node.process("device-plugin") as process:
        await dra_sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)

        # To DRA with the API server down: the device plugin lets go, no slice can go out.
        await api.down()
        write_atomically(node.config, config_text("dra"))
        await dra_sim.wait_devices(GPU, lambda d: len(d) == 0, timeout=FIRST_PUBLISH)
        state = await process.wait_state(
            lambda s: "publishing ResourceSlices" in (s["reason"] or ""), timeout=FIRST_PUBLISH
        )
        assert "connection refused" in state["dra"]["slices"]["error"]
        assert state["dra"]["slices"]["converged"] is False
        assert state["state"] == "blocked_on_error"  # no GPU is in either API: not serving
        assert stored_slices(api) == []

        await api.up()
        await published(api, lambda d: len(d) == 8, "the node's slices once the API is back")
        assert dra_sim.snapshot().resource(GPU).devices == ()  # type: ignore[union-attr]
        state = await process.wait_state(
            lambda s: s["dra"]["slices"]["converged"] and s["reason"] is None,
            timeout=FIRST_PUBLISH,
        )
        assert state["state"] == "serving"

        # Back to the device plugin with the API server down: it waits for the slices to go.
        await api.down()
        write_atomically(node.config, config_text("device-plugin"))
        state = await process.wait_state(
            lambda s: "withdrawing this node's ResourceSlices" in (s["reason"] or ""),
            timeout=FIRST_PUBLISH,
        )
        assert state["dra"]["serving"] is False
        assert state["state"] == "blocked_on_error"  # the device plugin waits for the slices
        assert len(stored_slices(api)) == 1
        assert dra_sim.snapshot().resource(GPU).devices == ()  # type: ignore[union-attr]

        await api.up()
        served = await dra_sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=FIRST_PUBLISH)
        assert len(served.devices) == 8
        assert stored_slices(api) == []  # gone before the device plugin served again
        state = await process.wait_state(lambda s: s["reason"] is None, timeout=FIRST_PUBLISH)
        assert state["dra"]["slices"]["goal"] == "withdraw"


async def test_a_claim_prepared_before_a_move_back_keeps_its_sockets_served_until_unprepared(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    async with node.process() as process:
        seen = await serving_dra(api, dra_sim)
        claim = await create_claim(api, "running", ["gpu-1"])
        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim)[0] == ""

        write_atomically(node.config, config_text("device-plugin"))
        await dra_sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=FIRST_PUBLISH)
        assert await api.slices() == {}
        state = await process.wait_state(lambda s: s["dra"]["serving"] is False)
        assert state["dra"]["prepared_claims"] == 1

        # Still the kubelet's way to unprepare the claim: served again when deleted.
        node.plugin_socket.unlink()
        await dra_sim.wait_dra_registered(
            DRIVER, min_registrations=seen.registrations + 1, timeout=10
        )
        assert (await dra_sim.unprepare(DRIVER, [claim])).claims[claim.uid].error == ""
        assert node.claim_specs() == set()

        # Unprepared: nothing keeps the DRA sockets any more.
        await dra_sim.wait_for(lambda s: not dra_registered(s), timeout=10)
        await eventually(
            lambda: not node.plugin_socket.exists() and not node.registration_socket.exists(),
            what="the DRA sockets removed",
            timeout=10,
        )
        assert len(dra_sim.snapshot().resource(GPU).devices) == 8  # type: ignore[union-attr]


@pytest.mark.parametrize(("profile", "strategy"), PROFILES, ids=[p for p, _ in PROFILES])
async def test_the_published_slices_are_those_docs_dra_md_lists(
    profile: str,
    strategy: MigStrategy,
    dra_sim: KubeletSimulator,
    api: ApiServer,
    sock_dir: Path,
    tmp_path: Path,
) -> None:
    await api.add_node(NODE)
    documented = slices_of(profile, strategy)
    count = sum(len(s["spec"]["devices"]) for s in documented)
    node = DraNode(sock_dir, tmp_path, api, profile, ("--mig-strategy", str(strategy)))
    async with node.process():
        await published(api, lambda d: len(d) == count, f"{count} devices of {profile}")
        held = await api.slices()
        assert sorted(held) == [s["metadata"]["name"] for s in documented]
        for wanted in documented:
            got = held[wanted["metadata"]["name"]]
            assert got["spec"] == wanted["spec"]
            (owner,) = got["metadata"]["ownerReferences"]
            (documented_owner,) = wanted["metadata"]["ownerReferences"]
            assert {**owner, "uid": ""} == {**documented_owner, "uid": ""}
