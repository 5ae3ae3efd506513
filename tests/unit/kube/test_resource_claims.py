"""Reading a ResourceClaim's allocation, and making allocated claims, against the emulated API."""

from __future__ import annotations

import asyncio
from typing import Any

import kubernetes_validate
import pytest

from kube.errors import KubeError
from kube.resource_claims import (
    AllocatedDevice,
    ClaimReader,
    OpaqueConfig,
    allocation_status,
    claim_object,
    create_allocated_claim,
    parse_claim,
)
from tests.unit.kube.apiserver import ApiServer, resource_claims

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"
GPU0 = AllocatedDevice("gpu", DRIVER, NODE, "gpu-0")
GPU1 = AllocatedDevice("gpu", DRIVER, NODE, "gpu-1")
MIG = AllocatedDevice("mig", DRIVER, NODE, "gpu-2-mig-3g20gb-9-4")
FOREIGN = AllocatedDevice("nic", "net.example.com", NODE, "eth1")
SHARING = OpaqueConfig(
    ("gpu",),
    DRIVER,
    {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
     "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}},
)  # fmt: skip


async def read(apiserver: ApiServer, namespace: str, name: str) -> Any:
    reader = ClaimReader(apiserver.access())
    try:
        return await asyncio.to_thread(reader.get, namespace, name)
    finally:
        reader.close()


async def test_the_reader_returns_results_and_opaque_config_of_an_allocated_claim(
    apiserver: ApiServer,
) -> None:
    created = await apiserver.create_claim(
        "team-a", "train", [GPU0, GPU1, MIG, FOREIGN], config=[SHARING]
    )
    view = await read(apiserver, "team-a", "train")
    assert (view.namespace, view.name, view.uid) == ("team-a", "train", created["metadata"]["uid"])
    assert view.allocated
    assert view.results == (GPU0, GPU1, MIG, FOREIGN)
    assert view.results_for(DRIVER, NODE) == (GPU0, GPU1, MIG)
    assert view.results_for(DRIVER, "another-node") == ()
    (config,) = view.config
    assert config.requests == ("gpu",)
    assert config.parameters["sharing"]["strategy"] == "TimeSlicing"
    assert view.config_for(DRIVER, "gpu") == (config,)
    assert view.config_for(DRIVER, "mig") == ()


async def test_a_config_naming_no_requests_applies_to_every_request(apiserver: ApiServer) -> None:
    everywhere = OpaqueConfig((), DRIVER, {"kind": "GpuConfig"})
    await apiserver.create_claim("team-a", "c", [GPU0, MIG], config=[everywhere])
    view = await read(apiserver, "team-a", "c")
    assert view.config_for(DRIVER, "gpu") == view.config_for(DRIVER, "mig") == view.config
    assert view.config_for("other.example.com", "gpu") == ()


async def test_a_claim_not_yet_allocated_reads_as_such(apiserver: ApiServer) -> None:
    await apiserver.create(resource_claims("team-a"), claim_object("team-a", "waiting", [GPU0]))
    view = await read(apiserver, "team-a", "waiting")
    assert not view.allocated
    assert view.results == ()


async def test_a_missing_claim_is_one_line_with_its_status(apiserver: ApiServer) -> None:
    with pytest.raises(KubeError) as caught:
        await read(apiserver, "team-a", "gone")
    assert str(caught.value) == "resourceclaim team-a/gone not found"
    assert caught.value.status == 404


async def test_a_refused_read_says_forbidden_with_the_servers_reason(apiserver: ApiServer) -> None:
    apiserver.handler.fail(
        "get", 403, "Forbidden",
        'resourceclaims.resource.k8s.io "x" is forbidden: User "node" cannot get',
    )  # fmt: skip
    with pytest.raises(KubeError) as caught:
        await read(apiserver, "team-a", "x")
    message = str(caught.value)
    assert message.startswith("resourceclaim team-a/x: forbidden: ")
    assert 'cannot get' in message
    assert "\n" not in message
    assert caught.value.status == 403


async def test_an_unreachable_api_server_is_one_line(apiserver: ApiServer) -> None:
    await apiserver.down()
    with pytest.raises(KubeError, match=r"^reading resourceclaim team-a/x: cannot connect"):
        await read(apiserver, "team-a", "x")


@pytest.mark.parametrize(
    ("devices", "error"),
    [
        ({"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE}]},
         r"results\[0\]: no device"),
        ({"results": "gpu-0"}, "results: not a list"),
        ({"config": [{"opaque": {"parameters": {}}}]}, r"config\[0\].opaque: no driver"),
        ({"config": [{"opaque": {"driver": DRIVER, "parameters": "x"}}]},
         r"config\[0\].opaque.parameters: not an object"),
    ],
)  # fmt: skip
def test_a_malformed_allocation_is_refused_in_one_line(devices: dict[str, Any], error: str) -> None:
    claim = {"metadata": {"name": "c"}, "status": {"allocation": {"devices": devices}}}
    with pytest.raises(ValueError, match=error):
        parse_claim(claim)


async def test_the_reader_turns_a_malformed_claim_into_a_kube_error(apiserver: ApiServer) -> None:
    created = await apiserver.create(
        resource_claims("team-a"), claim_object("team-a", "bad", [GPU0])
    )
    created["status"] = {"allocation": {"devices": {"results": [{"request": "gpu"}]}}}
    await apiserver.replace(f"{resource_claims('team-a')}/bad/status", created)
    with pytest.raises(KubeError, match=r"^resourceclaim team-a/bad: status.allocation"):
        await read(apiserver, "team-a", "bad")


def test_claims_and_their_allocation_validate_against_the_kubernetes_schema() -> None:
    claim = claim_object("team-a", "train", [GPU0, GPU1, MIG], config=[SHARING])
    claim["status"] = allocation_status([GPU0, GPU1, MIG], [SHARING])
    kubernetes_validate.validate(claim, kubernetes_validate.latest_version(), strict=True)
    requests = claim["spec"]["devices"]["requests"]
    assert [(r["name"], r["exactly"]["count"]) for r in requests] == [("gpu", 2), ("mig", 1)]


async def test_create_allocated_claim_leaves_a_claim_as_the_scheduler_would(
    apiserver: ApiServer,
) -> None:
    view = await asyncio.to_thread(
        create_allocated_claim, apiserver.access(), "team-b", "infer", [GPU1], config=[SHARING]
    )
    assert view.results == (GPU1,)
    assert view.uid
    assert await read(apiserver, "team-b", "infer") == view


async def test_the_emulated_server_sets_a_claims_status_only_through_its_subresource(
    apiserver: ApiServer,
) -> None:
    body = claim_object("team-a", "c", [GPU0])
    body["status"] = allocation_status([GPU1])
    created = await apiserver.create(resource_claims("team-a"), body)
    assert "status" not in created  # a create never sets the status
    created["status"] = allocation_status([GPU0])
    updated = await apiserver.replace(f"{resource_claims('team-a')}/c", created)
    assert "status" not in updated  # nor does an update of the claim
    allocated = await apiserver.create_claim("team-a", "d", [GPU0])
    allocated["spec"]["devices"]["requests"][0]["name"] = "changed"
    allocated["status"] = allocation_status([GPU1])
    after = await apiserver.replace(f"{resource_claims('team-a')}/d/status", allocated)
    assert after["spec"]["devices"]["requests"][0]["name"] == "gpu"  # spec kept
    assert after["status"] == allocation_status([GPU1])
