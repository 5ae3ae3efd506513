"""The DRA claim checkpoint across kill -9, reboots and damage, with the real process.

The plugin kills itself (SIGKILL) at a named step of a prepare
(`PLUGIN_KILL_AT`, see `kubelet.dra.prepare`), the test looks at what it left
on disk, and a plugin started on the same node must clean it up and answer
the kubelet's retry as if nothing had happened. A checkpoint of another boot
and a damaged one are the other two things a node's disk can hold at start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kmock
import pytest

from foundation.kill_points import ENV as KILL_AT
from kubelet.dra.checkpoint import current_boot_id
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
    serving_dra,
    spec_name,
)
from tests.e2e.harness import PluginProcess
from tests.unit.kube.apiserver import ApiServer
from tests.waiting import eventually

__all__ = ["api", "dra_sim"]  # the fixtures

pytestmark = pytest.mark.skipif(
    not current_boot_id(), reason="the kernel does not say its boot id (/proc/sys/kernel/random)"
)

EVENTS = "events.k8s.io/v1/events"

# Each step, and what a kill there leaves: (the claim's phase in the checkpoint, its spec).
STEPS: list[tuple[str, str | None, bool]] = [
    ("prepare:claim-read", None, False),
    ("checkpoint:before-rename", None, False),  # the PrepareStarted write, cut before its rename
    ("prepare:started", "PrepareStarted", False),
    ("prepare:spec-written", "PrepareStarted", True),
    ("prepare:completed", "PrepareCompleted", True),
]


def killing_at(node: DraNode, step: str) -> PluginProcess:
    node.config.write_text(config_text("dra"))
    node.events.touch()
    return PluginProcess(node.args(), env={**node.env(), KILL_AT: step})


def on_disk(node: DraNode) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(node.checkpoint.read_text())
    return document


def phases(node: DraNode) -> dict[str, str]:
    if not node.checkpoint.exists():
        return {}
    return {uid: claim["phase"] for uid, claim in on_disk(node)["claims"].items()}


async def test_a_kill_at_each_step_of_a_prepare_is_cleaned_up_and_prepared_again(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    claim = await create_claim(api, "torn", ["gpu-3"])
    registrations = 0
    for step, phase, spec in STEPS:
        async with killing_at(node, step) as plugin:
            registrations += 1
            await dra_sim.wait_dra_registered(
                DRIVER, min_registrations=registrations, timeout=FIRST_PUBLISH
            )
            # What the last kill left was cleaned up before the socket served.
            assert phases(node) == {}
            assert node.claim_specs() == set()
            with pytest.raises(PluginCallError):
                await dra_sim.prepare(DRIVER, [claim])
            assert await plugin.wait_exit() == -9, plugin.stderr
            assert f"{KILL_AT}: killed at {step}" in plugin.stderr
        assert phases(node) == ({} if phase is None else {claim.uid: phase}), step
        assert (spec_name(claim) in node.claim_specs()) == spec, step
        if step == "prepare:completed":
            break
        leftovers = [p.name for p in node.checkpoint.parent.iterdir() if p.name.endswith(".tmp")]
        assert bool(leftovers) == (step == "checkpoint:before-rename"), leftovers

    async with node.process():
        await dra_sim.wait_dra_registered(
            DRIVER, min_registrations=registrations + 1, timeout=FIRST_PUBLISH
        )
        # Completed before the kill: the kubelet's retry is answered from the checkpoint.
        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim) == (
            "",
            cdi_ids(claim, "gpu-3"),
        )
        assert phases(node) == {claim.uid: "PrepareCompleted"}
        assert on_disk(node)["bootId"] == current_boot_id()
        response = await dra_sim.unprepare(DRIVER, [claim])
        assert response.claims[claim.uid].error == ""
        assert node.claim_specs() == set()
        assert phases(node) == {}


async def test_a_checkpoint_of_another_boot_is_discarded_and_its_claims_prepared_afresh(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    claim = await create_claim(api, "before-reboot", ["gpu-2"])
    async with node.process():
        await serving_dra(api, dra_sim)
        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim)[0] == ""
    document = on_disk(node)
    document["bootId"] = "00000000-0000-4000-8000-000000000000"  # the boot before this one
    node.checkpoint.write_text(json.dumps(document))

    async with node.process() as plugin:
        await dra_sim.wait_dra_registered(DRIVER, min_registrations=2, timeout=FIRST_PUBLISH)
        assert node.claim_specs() == set()
        assert on_disk(node) == {**document, "bootId": current_boot_id(), "claims": {}}
        assert "prepared before the node rebooted are discarded" in plugin.stderr
        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim) == (
            "",
            cdi_ids(claim, "gpu-2"),
        )
        assert node.claim_specs() == {spec_name(claim)}


async def test_a_corrupt_checkpoint_is_set_aside_said_three_ways_and_the_node_serves(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    api.handler.resources[EVENTS] = kmock.ResourceInfo(namespaced=True, kind="Event")
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api)
    node.checkpoint.parent.mkdir(parents=True)
    node.checkpoint.write_bytes(b'{"version": 2, "claims": {"0b1c": {"namesp')  # torn
    claim = await create_claim(api, "after", ["gpu-1"])
    async with node.process() as plugin:
        await serving_dra(api, dra_sim)
        state = await plugin.wait_state(lambda s: s["dra"]["problem"] is not None)
        problem = state["dra"]["problem"]
        assert "is not a checkpoint" in problem
        assert "set aside as checkpoint.json.corrupt" in problem
        assert problem in plugin.stderr
        aside = node.checkpoint.with_name("checkpoint.json.corrupt")
        assert aside.read_bytes().startswith(b'{"version": 2, "claims"')

        def events() -> list[dict[str, Any]]:
            return [
                obj.raw
                for (resource, _, _), obj in api.handler.objects.items()
                if resource == kmock.resource(EVENTS)
                and obj.raw.get("reason") == "ClaimCheckpointProblem"
            ]

        (event,) = await eventually(events, what="a ClaimCheckpointProblem Event", timeout=15)
        assert (event["type"], event["note"]) == ("Warning", problem)
        assert answered(await dra_sim.prepare(DRIVER, [claim]), claim) == (
            "",
            cdi_ids(claim, "gpu-1"),
        )
