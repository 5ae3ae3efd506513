"""Claim fuzz: ResourceClaims by the hundred through the real plugin's NodePrepareResources.

One plugin serves a simulated `a100-mig-mixed` node through DRA for the whole
fuzz, against the emulated API server and the kubelet simulator (see
`tests.e2e.dra_support`). Two GPUs are unhealthy (XID 79 on GPU 6 and on
GPU 4, whose three MIG devices follow), and three innocent claims are
prepared first, holding five devices between them. Hypothesis then makes
batches of claims (`tests.reliability.claims`: random allocations, opaque
configs, device names, pools, uids, hostile strings), creates them in the API
and prepares each batch in one NodePrepareResources call, sometimes with an
innocent claim in the same call, then unprepares them.

For every fuzzed claim the answer is a success (CDI IDs naming only free,
healthy devices of this node, and its spec file there) or an error of one
line, not empty and at most 1 KiB. After every batch the plugin is alive and
serving, each innocent claim's spec is byte for byte what it was, the
checkpoint still holds it, no device is held by two claims, and preparing
the innocents again answers what it did at first. Unpreparing the batch
leaves no file of it anywhere in the node's directories.

Batches do not depend on each other (each one is unprepared before the next),
but a failure leaves the plugin as the batch left it, so shrinking is off: a
failure reports the batch's claims as Hypothesis drew them.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from kube.resource_claims import AllocatedDevice, OpaqueConfig
from kubelet.dra.types import ClaimRef
from kubelet_sim import KubeletSimulator
from resources.claim_spec import claim_device_id, claim_spec_file
from tests.e2e.dra_support import (
    DRIVER,
    NODE,
    DraNode,
    answered,
    api,
    dra_sim,
    published,
    serving_dra,
)
from tests.e2e.harness import PluginProcess
from tests.reliability.claims import (
    API_VERSION,
    FREE_DEVICES,
    INNOCENT_DEVICES,
    SICK_DEVICES,
    ClaimCase,
    claim_cases,
)
from tests.unit.kube.apiserver import ApiServer

__all__ = ["api", "dra_sim"]  # the fixtures

PROFILE = "a100-mig-mixed"
DEVICES = 22  # what the node publishes under --mig-strategy mixed
BATCH = 5  # fuzzed claims per NodePrepareResources call
SHORT_BATCHES = 8  # 40 claims per `make test`
LONG_BATCHES = 200  # 1,000 claims under `make reliability`
ERROR_LIMIT = 1024  # bytes of one claim's error
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
GPU_CONFIG = {"apiVersion": API_VERSION, "kind": "GpuConfig"}
TIME_SLICED = {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing"}}

# The innocent claims: name -> (request, device) pairs and their opaque configs.
INNOCENTS: dict[str, tuple[list[tuple[str, str]], list[OpaqueConfig]]] = {
    "innocent-whole": ([("gpu", "gpu-5")], []),
    "innocent-mig": (
        [("gpu", "gpu-0-mig-1g5gb-19-0"), ("gpu", "gpu-7-mig-2g10gb-14-0")],
        [OpaqueConfig((), DRIVER, TIME_SLICED)],
    ),
    "innocent-two-requests": (
        [("a", "gpu-3-mig-7g40gb-0-0"), ("b", "gpu-2-mig-3g20gb-9-0")],
        [OpaqueConfig(("a",), DRIVER, GPU_CONFIG)],
    ),
}


@dataclass
class Innocent:
    ref: ClaimRef
    answer: tuple[str, list[list[str]]]
    spec: bytes


@dataclass
class Rig:
    """The plugin, its node, the innocent claims and what the fuzz has seen."""

    plugin: PluginProcess
    node: DraNode
    sim: KubeletSimulator
    api: ApiServer
    innocents: list[Innocent]
    tree: set[str]  # every file of the node's directories with only the innocents prepared
    claims: int = 0
    batches: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    broken: bool = False  # a batch failed: the counts say nothing

    def __repr__(self) -> str:
        return f"Rig(claims={self.claims}, outcomes={dict(self.outcomes)})"


# Why claims were refused, by the words of the error (for the summary `pytest -s` shows).
KINDS = {
    ": missing ": "the kubelet's name incomplete",
    " not found": "no such claim",
    " has uid ": "re-created (another uid)",
    " has no device of driver ": "no device of this driver",
    " in another pool ": "another pool",
    " is not published ": "unknown device",
    " is unhealthy ": "unhealthy device",
    " is already prepared for claim ": "device held by another claim",
    ": opaque config for ": "invalid GpuConfig",
    "MPS sharing is not available": "MPS",
    "time-slice interval": "time-slice interval",
    "status.allocation": "malformed allocation",
    "cannot write the claim's CDI spec": "spec not writable (uid)",
    "invalid device name": "not a CDI name (uid)",
}


def kind_of(error: str) -> str:
    return next((kind for words, kind in KINDS.items() if words in error), error[:60])


def files_under(*roots: Path) -> set[str]:
    """Every file and directory below `roots` (the socket directory and the test's)."""
    found: set[str] = set()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            found.update(os.path.join(folder, name) for name in [*dirs, *files])
    return found


def spec_path(node: DraNode, uid: str) -> Path:
    return node.cdi / claim_spec_file(DRIVER, uid)


def spec_exists(node: DraNode, uid: str) -> bool:
    """Whether a claim's spec is there (False for a name no file can have: too long, a NUL)."""
    return os.path.lexists(spec_path(node, uid))


def checkpoint_claims(node: DraNode) -> dict[str, Any]:
    claims: dict[str, Any] = json.loads(node.checkpoint.read_text())["claims"]
    return claims


async def create(api: ApiServer, case: ClaimCase, name: str) -> str:
    """The claim in the API with `case.status` as its status; its uid."""
    metadata: dict[str, Any] = {"name": name, "namespace": case.namespace}
    if case.uid is not None:
        metadata["uid"] = case.uid
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
    }
    path = CLAIMS_PATH.format(namespace=case.namespace)
    created = await api.create(path, body)
    await api.replace(f"{path}/{name}/status", {**created, "status": case.status})
    return str(created["metadata"]["uid"])


def reference(case: ClaimCase, name: str, uid: str) -> ClaimRef:
    if case.ref == "own":
        return ClaimRef(case.namespace, uid, name)
    if case.ref == "stale":
        return ClaimRef(case.namespace, str(uuid.uuid4()), name)
    if case.ref == "absent":
        return ClaimRef(case.namespace, str(uuid.uuid4()), f"absent-{name}")
    namespace, hostile_name, hostile_uid = case.hostile_ref
    return ClaimRef(namespace, hostile_uid, hostile_name)


def check_error(error: str, what: str) -> None:
    assert error, f"{what}: an empty error"
    assert error.splitlines() == [error], f"{what}: an error of more than one line: {error!r}"
    size = len(error.encode("utf-8", errors="surrogatepass"))
    assert size <= ERROR_LIMIT, f"{what}: an error of {size} bytes: {error[:300]!r}..."


def check_success(node: DraNode, uid: str, devices: Sequence[Any], what: str) -> None:
    assert devices, f"{what}: prepared with no device"
    names = [device.device_name for device in devices]
    assert len(names) == len(set(names)), f"{what}: a device twice: {names}"
    for device in devices:
        name = device.device_name
        assert name in FREE_DEVICES, f"{what}: prepared with {name!r}, not a free healthy device"
        assert device.pool_name == NODE
        assert list(device.cdi_device_ids) == [claim_device_id(DRIVER, uid, name)]
        assert device.request_names, f"{what}: {name} answers no request"
    spec = spec_path(node, uid)
    assert spec_exists(node, uid), f"{what}: prepared, but its spec {spec.name!r} is not there"
    written = [d["name"] for d in json.loads(spec.read_text())["devices"]]
    assert written == [f"{uid}-{name}" for name in names]


async def check_innocents(rig: Rig, what: str) -> None:
    """The plugin serves, and every innocent claim is as it was."""
    assert rig.plugin.proc is not None
    assert rig.plugin.proc.returncode is None, f"{what}: the plugin exited"
    state = await rig.plugin.state()
    assert state["state"] == "serving", f"{what}: {state['state']} ({state['reason']})"
    assert state["dra"]["serving"] is True
    assert state["dra"]["problem"] is None
    held = checkpoint_claims(rig.node)
    for innocent in rig.innocents:
        spec = spec_path(rig.node, innocent.ref.uid).read_bytes()
        assert spec == innocent.spec, f"{what}: the spec of {innocent.ref.name} changed"
        entry = held.get(innocent.ref.uid)
        assert entry is not None, f"{what}: {innocent.ref.name} left the checkpoint"
        assert entry["phase"] == "PrepareCompleted"
    devices = [d["device"] for claim in held.values() for d in claim["devices"]]
    twice = sorted(name for name, count in Counter(devices).items() if count > 1)
    assert not twice, f"{what}: devices held by two claims: {twice}"
    again = await rig.sim.prepare(DRIVER, [i.ref for i in rig.innocents])
    for innocent in rig.innocents:
        got = answered(again, innocent.ref)
        assert got == innocent.answer, f"{what}: {innocent.ref.name} now answers {got}"


async def fuzz_batch(rig: Rig, cases: Sequence[ClaimCase], innocents: Iterable[int]) -> None:
    what = f"batch {rig.batches}"
    refs: list[ClaimRef] = []
    for case in cases:
        name = f"fuzz-{rig.claims}"
        rig.claims += 1
        uid = await create(rig.api, case, name)
        ref = reference(case, name, uid)
        note(f"{name}: {case!r} -> {ref!r}")
        refs += [ref, ref] if case.twice else [ref]
    mixed_in = [rig.innocents[i] for i in innocents]
    call = [*refs, *(i.ref for i in mixed_in)]
    response = await rig.sim.prepare(DRIVER, call)
    assert set(response.claims) == {ref.uid for ref in call}, f"{what}: claims left unanswered"
    for innocent in mixed_in:
        got = answered(response, innocent.ref)
        assert got == innocent.answer, f"{what}: {innocent.ref.name} prepared with others: {got}"
    for ref in dict.fromkeys(refs):
        entry = response.claims[ref.uid]
        about = f"{what}: claim {ref!r}"
        if entry.error:
            assert not entry.devices, f"{about}: an error and devices"
            check_error(entry.error, about)
            assert not spec_exists(rig.node, ref.uid), f"{about}: refused, spec written"
            rig.outcomes[f"refused: {kind_of(entry.error)}"] += 1
        else:
            check_success(rig.node, ref.uid, entry.devices, about)
            rig.outcomes["prepared"] += 1
    await check_innocents(rig, f"{what}, prepared")

    undone = await rig.sim.unprepare(DRIVER, refs)
    for ref in dict.fromkeys(refs):
        error = undone.claims[ref.uid].error
        if error:
            assert response.claims[ref.uid].error, f"{what}: {ref!r} prepared, not unprepared"
            check_error(error, f"{what}: unpreparing {ref!r}")
    await check_innocents(rig, f"{what}, unprepared")
    assert set(checkpoint_claims(rig.node)) == {i.ref.uid for i in rig.innocents}
    left = files_under(rig.node.sock_dir, rig.node.tmp_path) ^ rig.tree
    assert not left, f"{what}: files that are not the innocents' after unprepare: {sorted(left)}"
    rig.batches += 1


async def make_sick(plugin: PluginProcess, api: ApiServer, node: DraNode) -> None:
    """XID 79 on GPU 6 and on GPU 4 (and so on its MIG devices): unhealthy until a reset."""
    devices = await published(api, lambda d: len(d) == DEVICES, "the node's devices")
    gpus = set()
    for device in devices:
        if device["name"] in SICK_DEVICES:
            attributes = device["attributes"]
            gpus.add((attributes.get("parentUUID") or attributes["uuid"])["string"])
    with node.events.open("a") as events:
        for gpu in sorted(gpus):
            events.write(json.dumps({"uuid": gpu, "xid": 79}) + "\n")
    await plugin.wait_state(
        lambda s: (
            {d["name"] for d in s["dra"]["devices"] if d["health"] == "Unhealthy"}
            == set(SICK_DEVICES)
        ),
        timeout=20,
    )


@pytest.fixture
async def rig(
    request: pytest.FixtureRequest,
    dra_sim: KubeletSimulator,
    api: ApiServer,
    sock_dir: Path,
    tmp_path: Path,
) -> AsyncIterator[Rig]:
    # kmock looks through every request it keeps for each new one: keep few, or
    # the thousandth claim is read ten times slower than the first.
    api.handler.keep_requests = 2
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api, PROFILE, ("--mig-strategy", "mixed"))
    async with node.process() as plugin:
        await serving_dra(api, dra_sim, gpus=DEVICES)
        await make_sick(plugin, api, node)
        innocents = []
        for name, (allocated, config) in INNOCENTS.items():
            results = [AllocatedDevice(r, DRIVER, NODE, d) for r, d in allocated]
            created = await api.create_claim("default", name, results, config=config)
            innocents.append(ClaimRef("default", created["metadata"]["uid"], name))
        response = await dra_sim.prepare(DRIVER, innocents)
        kept = []
        for ref in innocents:
            error, ids = answered(response, ref)
            assert error == "", f"{ref.name}: {error}"
            assert len(ids) == len(INNOCENTS[ref.name][0])
            kept.append(Innocent(ref, (error, ids), spec_path(node, ref.uid).read_bytes()))
        held = {d for allocated, _ in INNOCENTS.values() for _, d in allocated}
        assert held == set(INNOCENT_DEVICES)
        rig = Rig(plugin, node, dra_sim, api, kept, files_under(sock_dir, tmp_path))
        yield rig
        # Shown with `pytest -s`: how the claims fared.
        print(f"claim fuzz: {rig.claims} claims in {rig.batches} batches")
        for outcome, count in rig.outcomes.most_common():
            print(f"  {count:5d}  {outcome}")
        long = request.node.get_closest_marker("long") is not None
        assert rig.broken or rig.claims >= BATCH * (LONG_BATCHES if long else SHORT_BATCHES)
        assert "Traceback" not in plugin.stderr
        undone = await dra_sim.unprepare(DRIVER, innocents)
        assert [undone.claims[ref.uid].error for ref in innocents] == [""] * len(innocents)
        assert node.claim_specs() == set()


FUZZ = settings(
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
batches = st.lists(claim_cases(), min_size=BATCH, max_size=BATCH)
mixed_in = st.lists(st.integers(0, len(INNOCENTS) - 1), unique=True, max_size=2)


async def fuzz(rig: Rig, cases: Sequence[ClaimCase], innocents: Iterable[int]) -> None:
    try:
        await fuzz_batch(rig, cases, innocents)
    except BaseException:
        rig.broken = True
        note(f"--- plugin stderr (last 3000 characters) ---\n{rig.plugin.stderr[-3000:]}")
        raise


# A fixed sample: the same 40 claims in every `make test`.
@settings(FUZZ, max_examples=SHORT_BATCHES, derandomize=True)
@given(cases=batches, innocents=mixed_in)
async def test_claim_fuzz(rig: Rig, cases: list[ClaimCase], innocents: list[int]) -> None:
    await fuzz(rig, cases, innocents)


@pytest.mark.long
@pytest.mark.timeout(900)
@settings(FUZZ, max_examples=LONG_BATCHES)
@given(cases=batches, innocents=mixed_in)
async def test_claim_fuzz_long(rig: Rig, cases: list[ClaimCase], innocents: list[int]) -> None:
    await fuzz(rig, cases, innocents)
