"""Dynamic MIG end to end: MIG placements and counter sets published as each API version takes.

The plugin process runs `--kubelet-api dra --dra-dynamic-mig` on the
`a100-mig-dynamic` profile (8 A100-40GB in MIG mode, no MIG instances) against
the emulated API server, which answers `/version` as the test says and refuses
slices its version's rules refuse. Each GPU publishes its full device and its
25 placements (26 devices) and a counter set `gpu-<minor>-counter-set`; from
Kubernetes 1.35 the sets are in a slice of their own, before 1.35 each set is
in the slice of its devices, and a version the plugin cannot read is taken as
the older one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devices.simulated import available_profiles
from kubelet_sim import KubeletSimulator
from tests.e2e.dra_support import DRIVER, FIRST_PUBLISH, NODE, DraNode, api, dra_sim
from tests.unit.kube.apiserver import ApiServer
from tests.unit.kube.slice_rules import slice_problems
from tests.waiting import eventually

__all__ = ["api", "dra_sim"]  # the fixtures

PROFILE = "a100-mig-dynamic"
GPUS = 8
PER_GPU = 26  # the full GPU and 25 placements of an A100-40GB
COUNTERS = {
    "multiprocessors": "98", "copy-engines": "7", "decoders": "5", "encoders": "0",
    "jpeg-engines": "1", "ofa-engines": "1", "memory": "40192Mi",
    **{f"memory-slice-{i}": "1" for i in range(8)},
}  # fmt: skip

pytestmark = pytest.mark.skipif(
    PROFILE not in available_profiles(),
    reason=f"the simulated profile {PROFILE} is not in config/nodes yet",
)


def devices_of(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices") or ()]


def sets_of(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for s in slices for c in s["spec"].get("sharedCounters") or ()]


async def complete_pool(api: ApiServer) -> list[dict[str, Any]]:
    """The node's slices once they hold every device and counter set of the node."""

    async def pool() -> list[dict[str, Any]] | None:
        slices = list((await api.slices()).values())
        done = len(devices_of(slices)) == GPUS * PER_GPU and len(sets_of(slices)) == GPUS
        return slices if done else None

    found: list[dict[str, Any]] = await eventually(
        pool, what="the dynamic MIG pool", timeout=FIRST_PUBLISH, detail=lambda: "see the API"
    )
    return found


@pytest.mark.parametrize(
    ("version", "apart"),
    [("v1.35.0", True), ("v1.34.2", False), (None, False)],
    ids=["1.35", "1.34", "unreadable-1.34"],
)
async def test_dynamic_mig_slices_follow_the_api_servers_version(
    dra_sim: KubeletSimulator,
    api: ApiServer,
    sock_dir: Path,
    tmp_path: Path,
    version: str | None,
    apart: bool,
) -> None:
    api.handler.server_version = version
    if version is None:
        api.handler.slice_rules = (1, 34)  # /version fails; the server is a 1.34 one
    release = api.handler.release
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api, profile=PROFILE, extra=("--dra-dynamic-mig",))
    async with node.process("dra") as process:
        slices = await complete_pool(api)
        await dra_sim.wait_dra_registered(DRIVER, timeout=FIRST_PUBLISH)

        # Every slice is one the server takes: within its version's limits.
        for item in slices:
            assert slice_problems(item, release) == [], item["metadata"]["name"]
            assert item["spec"]["pool"]["resourceSliceCount"] == len(slices)
        with_sets = [s for s in slices if s["spec"].get("sharedCounters")]
        if apart:
            # One slice of the 8 counter sets, then the devices: 2 GPUs (52) a slice.
            assert [s["metadata"]["name"] for s in with_sets] == [f"{NODE}-{DRIVER}-0"]
            assert "devices" not in with_sets[0]["spec"]
            sizes = sorted(len(s["spec"].get("devices") or ()) for s in slices)
            assert sizes == [0, 52, 52, 52, 52]
        else:
            # Each set in the slice of its devices: 2 GPUs (30 counters) a slice.
            assert len(slices) == len(with_sets) == 4
            for item in slices:
                consumed = {c["counterSet"] for d in item["spec"]["devices"]
                            for c in d["consumesCounters"]}  # fmt: skip
                assert consumed == {c["name"] for c in item["spec"]["sharedCounters"]}

        # The counter sets and devices are NVIDIA's DRA driver's.
        sets = {c["name"]: c["counters"] for c in sets_of(slices)}
        assert sorted(sets) == sorted(f"gpu-{i}-counter-set" for i in range(GPUS))
        assert {k: v["value"] for k, v in sets["gpu-0-counter-set"].items()} == COUNTERS
        devices = {d["name"]: d for d in devices_of(slices)}
        full = devices["gpu-0"]
        (consumed,) = full["consumesCounters"]
        assert consumed["counterSet"] == "gpu-0-counter-set"
        assert consumed["counters"] == sets["gpu-0-counter-set"]
        assert full["attributes"]["type"] == {"string": "gpu"}
        placement = devices["gpu-0-mig-3g20gb-9-4"]
        assert placement["attributes"]["type"] == {"string": "mig"}
        assert placement["attributes"]["profile"] == {"string": "3g.20gb"}
        assert "uuid" not in placement["attributes"]
        assert placement["capacity"]["memory"] == {"value": "19968Mi"}
        (taken,) = placement["consumesCounters"]
        assert {k: v["value"] for k, v in taken["counters"].items()} == {
            "multiprocessors": "42", "copy-engines": "3", "decoders": "2", "encoders": "0",
            "jpeg-engines": "0", "ofa-engines": "0", "memory": "19968Mi",
            **{f"memory-slice-{i}": "1" for i in range(4, 8)},
        }  # fmt: skip
        profiles = Counter(
            d["attributes"]["profile"]["string"]
            for d in devices.values()
            if d["name"].startswith("gpu-0-mig-")
        )
        assert profiles == {"1g.5gb": 7, "1g.5gb+me": 7, "1g.10gb": 4, "2g.10gb": 3,
                            "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1}  # fmt: skip

        # `/state` lists every device; the version was asked once.
        state = await process.wait_state(
            lambda s: len(s["dra"]["devices"]) == GPUS * PER_GPU, timeout=FIRST_PUBLISH
        )
        assert state["dra"]["slices"]["count"] == len(slices)
        reads = [r for r in api.handler if r.url.path.rstrip("/") == "/version"]
        assert len(reads) == 1


async def test_a_version_unread_on_a_1_35_server_is_read_again_when_the_write_fails(
    dra_sim: KubeletSimulator, api: ApiServer, sock_dir: Path, tmp_path: Path
) -> None:
    api.handler.server_version = None  # /version fails at first; the server takes 1.35's rules
    await api.add_node(NODE)
    node = DraNode(sock_dir, tmp_path, api, profile=PROFILE, extra=("--dra-dynamic-mig",))
    async with node.process("dra") as process:
        # The older layout is refused (sets and devices in one slice)...
        await process.wait_state(
            lambda s: "only one of" in ((s["dra"]["slices"] or {}).get("error") or ""),
            timeout=FIRST_PUBLISH,
        )
        assert await api.slices() == {}
        # ... and once /version answers, the retry reads it and the slices land apart.
        api.handler.server_version = "v1.35.0"
        slices = await complete_pool(api)
        assert [s["metadata"]["name"] for s in slices if "sharedCounters" in s["spec"]] == [
            f"{NODE}-{DRIVER}-0"
        ]
        for item in slices:
            assert slice_problems(item, (1, 35)) == []
