"""The gpu-feature-discovery command publishes a NodeFeature to the emulated API server."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from labels.node_sink import USER_AGENT
from tests.e2e.harness import REPO
from tests.unit.kube.apiserver import (
    ApiServer,
    api_requests,
    kubeconfig,
    request_counts,
    running_apiserver,
)
from tests.unit.labels.helpers import run_oneshot

NODE = "gpu-node-1"


NAMESPACE = "gpu-operator"


POD = "nvdp-gpu-feature-discovery-q9z4m"


OBJECT = (
    f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures/nvidia-features-for-{NODE}"
)


ARGS = ("--mock-nvml", "dgx-a100", "--no-timestamp", "--machine-type-file", "")


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        await server.add_node(NODE, {})
        yield server


async def run_gfd(*args: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "labels.cli",
        *args,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO / "src"), **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def chart_env(apiserver: ApiServer, tmp_path: Path) -> dict[str, str]:
    """What the chart's GFD DaemonSet sets, pointed at the emulated API server."""
    return {
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", apiserver.url)),
        "NODE_NAME": NODE,
        "NAMESPACE": NAMESPACE,
        "POD_NAME": POD,
        "GFD_USE_NODE_FEATURE_API": "true",
        "GFD_OUTPUT_FILE": str(tmp_path / "features.d" / "gfd"),
    }


def sent(apiserver: ApiServer) -> dict[str, int]:
    return request_counts(api_requests(apiserver.handler, USER_AGENT))


async def test_the_labeller_publishes_its_labels_as_a_node_feature(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    await apiserver.create(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": POD,
                "namespace": NAMESPACE,
                "uid": "pod-uid",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd", "uid": "ds-uid"}
                ],
            },
        },
    )
    code, err = await run_gfd("--oneshot", *ARGS, env=chart_env(apiserver, tmp_path))
    assert code == 0, err

    assert not (tmp_path / "features.d" / "gfd").exists()  # the object replaces the file
    status, obj = await apiserver.get(OBJECT)
    assert status == 200, obj
    _, from_file = run_oneshot(tmp_path, *ARGS)
    assert obj["spec"]["labels"] == from_file  # the same labels the features file gets
    assert obj["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": NODE}
    assert [(ref["kind"], ref["uid"]) for ref in obj["metadata"]["ownerReferences"]] == [
        ("DaemonSet", "ds-uid"),
        ("Pod", "pod-uid"),
    ]
    assert sent(apiserver).get("create") == 1


async def test_oneshot_with_the_api_away_exits_one_with_one_line(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    env = chart_env(apiserver, tmp_path)
    await apiserver.down()
    code, err = await run_gfd("--oneshot", *ARGS, env=env)
    assert code == 1
    [line] = [line for line in err.splitlines() if "ERROR" in line]
    assert "NodeFeature" in line
    assert "cannot connect to the API server" in line
