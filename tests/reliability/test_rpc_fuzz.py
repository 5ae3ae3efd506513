"""RPC fuzz: random and malformed requests on the plugin's own sockets.

Requests go straight to the plugin's sockets with the v1beta1 stubs, as the
kubelet would send them but with the content a buggy client could produce:
unknown, repeated and foreign IDs, empty and huge lists, very long and odd
strings, sizes of every sign and magnitude, and bytes that are not protobuf
or not gRPC at all. Every request must get a real answer (OK or a deliberate
error status, never UNKNOWN from an exception), the answer must follow the
rules in `rpc_oracle`, and nothing about the plugin may change: the same
devices at the kubelet, the same lifecycle history, no descriptors left open.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubelet.api import api_pb2, api_pb2_grpc
from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.reliability import rpc_oracle as oracle
from tests.reliability import wire
from tests.reliability.observe import advertised, settled_usage, wait_usage
from tests.reliability.rpc_edges import allocate, hostile_requests

MIXED_SLICED = (
    "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/mig-1g.5gb\n      replicas: 3\n"
    "    - name: nvidia.com/mig-2g.10gb\n      replicas: 2\n"
)
SETUPS = {"dgx-a100": ("dgx-a100", None), "mig-mixed-sliced": ("a100-mig-mixed", MIXED_SLICED)}
CALL_SECONDS = 10.0  # an answer comes from memory: a call still unanswered by then hung
FD_SLACK = 2  # see test_restart_storm: one connection may be closing as we look


class Served:
    """A running plugin with one channel per resource socket."""

    def __init__(self, sim: KubeletSimulator, plugin: PluginProcess) -> None:
        self.sim = sim
        self.plugin = plugin
        self.resources: dict[str, oracle.Resource] = {}
        self.stubs: dict[str, api_pb2_grpc.DevicePluginStub] = {}
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.before: dict[str, Any] = {}
        self.requests = 0

    async def open(self) -> None:
        state = await self.plugin.wait_state(
            lambda s: s["state"] == "serving" and all(r["registered"] for r in s["resources"]),
            timeout=20,
        )
        count = len(state["resources"])
        snap = await self.sim.wait_for(lambda snap: len(advertised(snap)) == count)
        for name, ids in advertised(snap).items():
            self.resources[name] = oracle.Resource(name=name, ids=ids)
        for resource in state["resources"]:
            path = self.sim.directory / resource["endpoint"]
            channel = grpc.aio.insecure_channel(f"unix://{path}")
            self.channels[resource["name"]] = channel
            self.stubs[resource["name"]] = api_pb2_grpc.DevicePluginStub(channel)
        self.before = observable(state)

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()

    def raw(self, resource: str, method: str) -> grpc.aio.UnaryUnaryMultiCallable:
        return self.channels[resource].unary_unary(f"/v1beta1.DevicePlugin/{method}")

    async def call(self, method: Any, request: Any) -> tuple[grpc.StatusCode, Any, str]:
        self.requests += 1
        try:
            answer = await method(request, timeout=CALL_SECONDS)
            code, details = grpc.StatusCode.OK, ""
        except grpc.aio.AioRpcError as err:
            answer, code, details = None, err.code(), err.details() or ""
        assert code is not grpc.StatusCode.DEADLINE_EXCEEDED, "no answer: the call hung"
        assert code is not grpc.StatusCode.UNKNOWN, f"unhandled exception in the plugin: {details}"
        return code, answer, details

    async def unchanged(self) -> None:
        """The plugin's lifecycle, resources and devices are what they were."""
        state = await self.plugin.state()
        assert observable(state) == self.before
        now = advertised(self.sim.snapshot())
        assert now == {name: r.ids for name, r in self.resources.items()}


def observable(state: dict[str, Any]) -> dict[str, Any]:
    """The parts of /state a request must never change."""
    return {
        "state": state["state"],
        "reason": state["reason"],
        "plan": state["plan"],
        "history": json.dumps(state["history"]),
        "resources": [(r["name"], r["registered"], r["devices"]) for r in state["resources"]],
    }


@pytest.fixture(params=sorted(SETUPS))
async def served(
    request: pytest.FixtureRequest, sim: KubeletSimulator, tmp_path: Path
) -> AsyncIterator[Served]:
    profile, config = SETUPS[request.param]
    extra: list[str] = []
    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
        extra = ["--config-file", str(tmp_path / "config.yaml")]
    async with PluginProcess(plugin_args(sim.directory, profile, *extra)) as plugin:
        rig = Served(sim, plugin)
        await rig.open()
        try:
            yield rig
        finally:
            await rig.close()
            print(f"rpc requests sent ({request.param}): {rig.requests}")


ODD_IDS = [
    "",
    " ",
    "GPU-does-not-exist",
    "MIG-00000000-0000-0000-0000-000000000000",
    "\x00",
    "GPU-\u202e",
    "🙂" * 8,
    "x" * 300,
    "::1",
    "GPU-0,GPU-1",
]


def ids_of(rig: Served, resource: str) -> st.SearchStrategy[str]:
    own = rig.resources[resource].ids
    foreign = sorted({i for r in rig.resources.values() for i in r.ids} - set(own))
    variants = [own[0] + "::0", own[0] + "::99", own[0].lower(), " " + own[0], own[0][:-1]]
    pools: list[st.SearchStrategy[str]] = [
        st.sampled_from(own),
        st.sampled_from(own),
        st.sampled_from(own),
        st.sampled_from(ODD_IDS + variants),
        st.text(max_size=24),
    ]
    if foreign:
        pools.append(st.sampled_from(foreign))
    return st.one_of(pools)


async def fuzz_one(rig: Served, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(rig.resources)), label="resource")
    resource = rig.resources[name]
    ids = ids_of(rig, name)
    if data.draw(st.booleans(), label="allocate"):
        containers = data.draw(st.lists(st.lists(ids, max_size=10), max_size=4), label="containers")
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=c) for c in containers]
        )
        code, answer, details = await rig.call(rig.stubs[name].Allocate, request)
        assert code is oracle.allocate_status(resource, containers), details
        if code is oracle.OK:
            oracle.check_allocate_answer(containers, answer)
    else:
        size = st.one_of(
            st.integers(min_value=-2, max_value=len(resource.ids) + 2),
            st.sampled_from([-(2**31), 2**31 - 1]),
        )
        wanted = data.draw(
            st.lists(
                st.tuples(st.lists(ids, max_size=12), st.lists(ids, max_size=3), size),
                min_size=1,
                max_size=3,
            ),
            label="preferred",
        )
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=a, must_include_deviceIDs=r, allocation_size=n
                )
                for a, r, n in wanted
            ]
        )
        code, answer, details = await rig.call(rig.stubs[name].GetPreferredAllocation, request)
        assert code is oracle.preferred_status(resource, wanted), details
        if code is oracle.OK:
            oracle.check_preferred_answer(resource, wanted, answer)
    await rig.unchanged()


FUZZ = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@settings(FUZZ, max_examples=250)
@given(data=st.data())
async def test_rpc_fuzz(served: Served, data: st.DataObject) -> None:
    await fuzz_one(served, data)


@pytest.mark.long
@pytest.mark.timeout(900)
@settings(FUZZ, max_examples=5000)
@given(data=st.data())
async def test_rpc_fuzz_long(served: Served, data: st.DataObject) -> None:
    await fuzz_one(served, data)


async def test_hostile_requests_change_nothing(served: Served) -> None:
    assert served.plugin.proc is not None
    pid = served.plugin.proc.pid
    # Settled first: the file watches start after the first pass, maybe just now.
    baseline = await settled_usage(pid)
    count = await hostile_requests(served)
    assert count > 0
    await served.unchanged()
    for channel in served.channels.values():
        await channel.close()
    served.channels.clear()
    await wait_usage(
        pid, lambda now: now.fds <= baseline.fds + FD_SLACK, timeout=10, baseline=baseline
    )


@pytest.mark.parametrize("served", ["dgx-a100"], indirect=True)
async def test_malformed_protobuf_and_a_very_long_unknown_id_are_invalid_argument(
    served: Served,
) -> None:
    name = next(iter(served.resources))
    codes: dict[str, grpc.StatusCode] = {}
    for method, bodies in (
        ("Allocate", wire.ALLOCATE_MALFORMED),
        ("GetPreferredAllocation", wire.PREFERRED_MALFORMED),
    ):
        for label, body in bodies.items():
            try:
                await served.raw(name, method)(body, timeout=10)
                codes[f"{method}/{label}"] = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as err:
                codes[f"{method}/{label}"] = err.code()
    wrong = {k: c.name for k, c in codes.items() if c is not grpc.StatusCode.INVALID_ARGUMENT}
    assert not wrong, f"not INVALID_ARGUMENT: {wrong}"
    assert "Traceback" not in served.plugin.stderr

    # A very long unknown ID is refused readably, by both methods.
    long_id = "GPU-" + "f" * 65536
    stub = served.stubs[name]
    code, _, details = await served.call(stub.Allocate, allocate([[long_id]]))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, f"Allocate {code.name}: {details[:200]}"
    assert len(details) < 4096
    request = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=[long_id], allocation_size=1
            )
        ]
    )
    code, _, details = await served.call(stub.GetPreferredAllocation, request)
    assert code is grpc.StatusCode.INVALID_ARGUMENT, f"Preferred {code.name}: {details[:200]}"
    assert len(details) < 4096
