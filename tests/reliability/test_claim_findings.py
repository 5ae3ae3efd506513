"""What the claim fuzz found, each case alone: one claim's bad input is that claim's error.

Through the DRA servicer and the real preparer, in process (a scripted API
read, real files in a temp directory): a line break anywhere in a claim, a
NUL in its uid, a memory limit past what a float holds, a config error that
quotes a long value. Each once failed the whole call, left a claim holding a
device, or made an error of several lines or any size; the claim fuzz
(`test_claim_fuzz.py`) generates them among the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubelet.api.dra.v1 import api_pb2 as dra_v1
from kubelet.dra.servicer import DraServicer
from resources.claim_catalog import Catalog
from tests.reliability.claims import API_VERSION
from tests.unit.kubelet.test_dra_prepare import (
    DRIVER,
    Api,
    Opaque,
    View,
    allocated,
    make_catalog,
    preparer,
)

GOOD = "11111111-0000-4000-8000-000000000001"
NEXT = "33333333-0000-4000-8000-000000000003"
LIMIT = 1024  # bytes: the fuzz's bound on one claim's error


def servicer(tmp_path: Path, api: Api) -> DraServicer:
    catalog: Catalog = make_catalog(tmp_path)
    return DraServicer(preparer(tmp_path, api, catalog), driver=DRIVER)


def refs(*claims: tuple[str, str]) -> list[dra_v1.Claim]:
    return [dra_v1.Claim(namespace="ns", uid=uid, name=name) for name, uid in claims]


async def prepare(dra: DraServicer, claims: list[dra_v1.Claim]) -> dict[str, Any]:
    request = dra_v1.NodePrepareResourcesRequest(claims=claims)
    response = await dra.NodePrepareResources(request, None)  # type: ignore[arg-type]
    return {uid: (answer.error, len(answer.devices)) for uid, answer in response.claims.items()}


async def unprepare(dra: DraServicer, claims: list[dra_v1.Claim]) -> dict[str, str]:
    request = dra_v1.NodeUnprepareResourcesRequest(claims=claims)
    response = await dra.NodeUnprepareResources(request, None)  # type: ignore[arg-type]
    return {uid: answer.error for uid, answer in response.claims.items()}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("gpu-0\nx", id="LF"),
        pytest.param("gpu-0\rx", id="CR"),
        pytest.param("gpu-0\u2028x", id="LINE-SEPARATOR"),
    ],
)
async def test_a_line_break_in_a_claims_strings_is_still_a_one_line_error(
    tmp_path: Path, text: str
) -> None:
    api = Api({("ns", "c1"): View(GOOD, allocated(text))})
    dra = servicer(tmp_path, api)
    answers = await prepare(dra, [*refs(("c1", GOOD)), dra_v1.Claim(namespace=text, name=text)])
    errors = [error for error, _ in answers.values()]
    assert all(error.splitlines() == [error] for error in errors), errors


async def test_a_nul_in_a_claim_uid_fails_that_claim_alone(tmp_path: Path) -> None:
    nul = "nul\x00byte"
    api = Api(
        {
            ("ns", "good"): View(GOOD, allocated("gpu-0")),
            ("ns", "nul"): View(nul, allocated("gpu-1-mig-0")),
        }
    )
    dra = servicer(tmp_path, api)
    answers = await prepare(dra, refs(("good", GOOD), ("nul", nul)))
    assert answers[GOOD] == ("", 1), "the good claim was failed with the other"
    assert answers[nul][0], "the NUL claim was prepared"
    undone = await unprepare(dra, refs(("good", GOOD), ("nul", nul)))
    assert undone[GOOD] == ""
    # Its device is free again for the next claim.
    api.claims[("ns", "next")] = View(NEXT, allocated("gpu-1-mig-0"))
    again = await prepare(dra, refs(("next", NEXT)))
    assert again[NEXT] == ("", 1)


@pytest.mark.parametrize(
    "limit",
    [
        pytest.param("1" + "0" * 400, id="401-digit-string"),
        pytest.param(10**400, id="401-digit-number"),
        pytest.param("1" + "0" * 300 + "Ei", id="1e300Ei"),
    ],
)
async def test_a_huge_memory_limit_fails_that_claim_alone(tmp_path: Path, limit: Any) -> None:
    mps = {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": limit}}
    config = {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": mps}
    bad = "44444444-0000-4000-8000-000000000004"
    api = Api(
        {
            ("ns", "good"): View(GOOD, allocated("gpu-0")),
            ("ns", "huge"): View(bad, allocated("gpu-1-mig-0"), (Opaque((), DRIVER, config),)),
        }
    )
    answers = await prepare(servicer(tmp_path, api), refs(("good", GOOD), ("huge", bad)))
    assert answers[GOOD] == ("", 1), "the good claim was failed with the other"
    assert "defaultPinnedDeviceMemoryLimit" in answers[bad][0]


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"apiVersion": API_VERSION, "kind": "x" * 5000}, id="long-kind"),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": ["x"] * 2000}},
            id="long-list",
        ),
    ],
)
async def test_an_error_quoting_a_long_value_is_bounded(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    api = Api({("ns", "c1"): View(GOOD, allocated("gpu-0"), (Opaque((), DRIVER, config),))})
    answers = await prepare(servicer(tmp_path, api), refs(("c1", GOOD)))
    error, devices = answers[GOOD]
    assert error.startswith("ResourceClaim ns/c1: opaque config for gpu.nvidia.com:")
    assert devices == 0
    assert len(error.encode()) <= LIMIT, f"an error of {len(error.encode())} bytes"
