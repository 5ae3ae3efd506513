"""The DRAPlugin service over real unix-socket gRPC, with a scripted preparer.

Calls go through the generated stubs of each version (as the kubelet's own client
addresses the method paths), so both served versions are exercised on the wire.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import ModuleType

import grpc
import pytest
from grpc import aio

from kubelet.api.dra.v1 import api_pb2 as v1
from kubelet.api.dra.v1 import api_pb2_grpc as v1_grpc
from kubelet.api.dra.v1beta1 import api_pb2 as v1beta1
from kubelet.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from kubelet.dra.servicer import NOT_ANSWERED, NOT_UNPREPARED
from kubelet.dra.types import ClaimRef, PreparedDevice, PrepareResult
from tests.unit.kubelet.conftest import DraFactory
from tests.unit.kubelet.dra_support import ScriptedPreparer, device

VERSIONS = [
    pytest.param((v1, v1_grpc), id="v1"),
    pytest.param((v1beta1, v1beta1_grpc), id="v1beta1"),
]


class Kubelet:
    """A DRAPlugin client of one version, on a served plugin's socket."""

    def __init__(self, channel: aio.Channel, version: tuple[ModuleType, ModuleType]) -> None:
        self.pb, grpc_module = version
        self.stub = grpc_module.DRAPluginStub(channel)

    def claims(self, *names: str) -> list[object]:
        return [self.pb.Claim(namespace="ns", uid=f"uid-{n}", name=n) for n in names]

    async def prepare(self, *names: str, claims: list[object] | None = None):
        request = self.pb.NodePrepareResourcesRequest(claims=claims or self.claims(*names))
        return await self.stub.NodePrepareResources(request, timeout=5)

    async def unprepare(self, *names: str):
        request = self.pb.NodeUnprepareResourcesRequest(claims=self.claims(*names))
        return await self.stub.NodeUnprepareResources(request, timeout=5)


@pytest.fixture
def preparer() -> ScriptedPreparer:
    return ScriptedPreparer()


@pytest.fixture(params=VERSIONS)
async def kubelet(
    request: pytest.FixtureRequest, serve_dra: DraFactory, preparer: ScriptedPreparer
) -> AsyncIterator[Kubelet]:
    server = await serve_dra(preparer)
    async with aio.insecure_channel(f"unix://{server.plugin_socket}") as channel:
        yield Kubelet(channel, request.param)


def _devices(answer) -> list[tuple[list[str], str, str, list[str]]]:
    return [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
        for d in answer.devices
    ]


async def test_prepare_answers_each_claim_with_its_devices_and_cdi_ids(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.results["uid-b"] = PrepareResult(
        devices=(
            PreparedDevice(("r1", "r2"), "node-a", "gpu-1", ("vendor/class=a", "vendor/class=b")),
            PreparedDevice((), "node-a", "gpu-2", ()),
        )
    )
    response = await kubelet.prepare("a", "b")
    assert sorted(response.claims) == ["uid-a", "uid-b"]
    assert _devices(response.claims["uid-a"]) == [
        (["gpu"], "node-a", "dev-a", ["k8s.gpu.example.com/claim=dev-a"])
    ]
    assert _devices(response.claims["uid-b"]) == [
        (["r1", "r2"], "node-a", "gpu-1", ["vendor/class=a", "vendor/class=b"]),
        ([], "node-a", "gpu-2", []),
    ]
    assert not response.claims["uid-a"].error
    assert preparer.prepared == [[ClaimRef("ns", "uid-a", "a"), ClaimRef("ns", "uid-b", "b")]]


async def test_one_failed_claim_is_its_own_entry_and_the_others_are_prepared(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.results["uid-bad"] = PrepareResult(error="device gpu-9 is not on this node")
    response = await kubelet.prepare("ok", "bad")
    assert response.claims["uid-bad"].error == "device gpu-9 is not on this node"
    assert list(response.claims["uid-bad"].devices) == []
    assert response.claims["uid-ok"].error == ""
    assert [d.device_name for d in response.claims["uid-ok"].devices] == ["dev-ok"]


async def test_an_error_result_carries_no_devices_even_if_the_preparer_gave_some(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.results["uid-a"] = PrepareResult(devices=(device("gpu-0"),), error="half done")
    response = await kubelet.prepare("a")
    assert (response.claims["uid-a"].error, len(response.claims["uid-a"].devices)) == (
        "half done",
        0,
    )


async def test_a_preparer_that_raises_fails_every_claim_of_the_call_and_logs_one_line(
    kubelet: Kubelet, preparer: ScriptedPreparer, logs: list[tuple[str, str]]
) -> None:
    preparer.raises = RuntimeError("checkpoint\nunreadable")
    response = await kubelet.prepare("a", "b")
    expected = "NodePrepareResources failed: RuntimeError: checkpoint unreadable"
    assert {uid: r.error for uid, r in response.claims.items()} == {
        "uid-a": expected,
        "uid-b": expected,
    }
    errors = [message for level, message in logs if level == "ERROR"]
    assert len(errors) == 1
    assert "NodePrepareResources of 2 claim(s) failed" in errors[0]
    assert "\n" not in errors[0]


async def test_the_server_keeps_answering_after_a_preparer_raised(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.raises = KeyError("boom")
    failed = await kubelet.prepare("a")
    preparer.raises = None
    response = await kubelet.prepare("a")
    assert failed.claims["uid-a"].error == "NodePrepareResources failed: KeyError: 'boom'"
    assert response.claims["uid-a"].error == ""
    assert [d.device_name for d in response.claims["uid-a"].devices] == ["dev-a"]


async def test_an_exception_without_a_message_is_named_by_its_type(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.raises = TimeoutError()
    response = await kubelet.prepare("a")
    assert response.claims["uid-a"].error == "NodePrepareResources failed: TimeoutError"


async def test_an_empty_request_gets_an_empty_answer_without_calling_the_preparer(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    prepared = await kubelet.stub.NodePrepareResources(
        kubelet.pb.NodePrepareResourcesRequest(), timeout=5
    )
    unprepared = await kubelet.stub.NodeUnprepareResources(
        kubelet.pb.NodeUnprepareResourcesRequest(), timeout=5
    )
    assert (len(prepared.claims), len(unprepared.claims)) == (0, 0)
    assert (preparer.prepared, preparer.unprepared) == ([], [])


async def test_a_claim_the_preparer_did_not_answer_is_reported_not_prepared(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.omit = {"uid-lost"}
    response = await kubelet.prepare("kept", "lost")
    assert response.claims["uid-lost"].error == NOT_ANSWERED
    assert response.claims["uid-kept"].error == ""


async def test_a_result_that_does_not_fit_the_message_fails_only_its_claim(
    kubelet: Kubelet, preparer: ScriptedPreparer, logs: list[tuple[str, str]]
) -> None:
    preparer.results["uid-odd"] = PrepareResult(devices=(None,))  # type: ignore[arg-type]
    response = await kubelet.prepare("odd", "fine")
    assert response.claims["uid-odd"].error.startswith(
        "not prepared: unusable result from the plugin: AttributeError"
    )
    assert response.claims["uid-fine"].error == ""
    assert any(level == "ERROR" and "uid-odd" in message for level, message in logs)


@pytest.mark.parametrize(
    ("claim", "problem"),
    [
        pytest.param({"namespace": "ns", "name": "a"}, "claim ns/a: missing uid", id="no-uid"),
        pytest.param({"uid": "u", "name": "a"}, "claim ?/a: missing namespace", id="no-namespace"),
        pytest.param({"uid": "u"}, "claim ?/?: missing namespace, name", id="uid-only"),
    ],
)
async def test_a_malformed_claim_gets_an_error_entry_and_is_not_passed_on(
    kubelet: Kubelet, preparer: ScriptedPreparer, claim: dict[str, str], problem: str
) -> None:
    claims = [kubelet.pb.Claim(**claim), *kubelet.claims("good")]
    response = await kubelet.prepare(claims=claims)
    assert response.claims[claim.get("uid", "")].error == problem
    assert response.claims["uid-good"].error == ""
    assert preparer.prepared == [[ClaimRef("ns", "uid-good", "good")]]


async def test_a_claim_listed_twice_is_prepared_once(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    response = await kubelet.prepare("a", "a")
    assert list(response.claims) == ["uid-a"]
    assert preparer.prepared == [[ClaimRef("ns", "uid-a", "a")]]


async def test_unprepare_answers_every_claim_with_its_error_or_none(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.unprepare_errors["uid-b"] = "cannot remove the claim's CDI spec: read-only"
    preparer.omit = {"uid-c"}
    response = await kubelet.unprepare("a", "b", "c")
    assert {uid: r.error for uid, r in response.claims.items()} == {
        "uid-a": "",
        "uid-b": "cannot remove the claim's CDI spec: read-only",
        "uid-c": NOT_UNPREPARED,
    }
    assert preparer.unprepared == [[ClaimRef("ns", f"uid-{n}", n) for n in "abc"]]


async def test_unprepare_with_a_preparer_that_raises_fails_each_claim(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.raises = OSError(28, "No space left on device")
    response = await kubelet.unprepare("a", "b")
    expected = "NodeUnprepareResources failed: OSError: [Errno 28] No space left on device"
    assert {r.error for r in response.claims.values()} == {expected}
    assert sorted(response.claims) == ["uid-a", "uid-b"]


async def test_unprepare_reports_a_non_text_answer_as_unusable(
    kubelet: Kubelet, preparer: ScriptedPreparer
) -> None:
    preparer.unprepare_errors["uid-a"] = None  # type: ignore[assignment]
    response = await kubelet.unprepare("a")
    assert response.claims["uid-a"].error == (
        "not unprepared: unusable result from the plugin: None"
    )


@pytest.mark.parametrize("method", ["NodePrepareResources", "NodeUnprepareResources"])
async def test_a_body_that_is_not_protobuf_is_invalid_argument_in_one_line(
    serve_dra: DraFactory, method: str
) -> None:
    server = await serve_dra()
    async with aio.insecure_channel(f"unix://{server.plugin_socket}") as channel:
        call = channel.unary_unary(
            f"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/{method}",
            request_serializer=lambda raw: raw,
            response_deserializer=lambda raw: raw,
        )
        with pytest.raises(aio.AioRpcError) as caught:
            await call(b"\x0a\xff\xff", timeout=5)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed" in (caught.value.details() or "")
    assert "\n" not in (caught.value.details() or "")


async def test_each_call_is_observed_with_driver_and_method(serve_dra: DraFactory) -> None:
    seen: list[tuple[str, str, str]] = []
    server = await serve_dra(observe=lambda d, m, seconds, code: seen.append((d, m, code)))
    async with aio.insecure_channel(f"unix://{server.plugin_socket}") as channel:
        kubelet = Kubelet(channel, (v1, v1_grpc))
        await kubelet.prepare("a")
        await kubelet.unprepare("a")
    assert seen == [
        ("gpu.example.com", "NodePrepareResources", "OK"),
        ("gpu.example.com", "NodeUnprepareResources", "OK"),
    ]
