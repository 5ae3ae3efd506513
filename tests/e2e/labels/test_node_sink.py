"""`--write-node-labels`: the labeller sets its labels on its own Node through the API.

The real `gpu-feature-discovery` process talks to kmock's API server (real
HTTP) through a KUBECONFIG, as it would to a cluster without NFD.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.harness import REPO
from tests.unit.kube.apiserver import ApiServer, kubeconfig, running_apiserver

NODE = "gpu-node-1"


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
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


async def test_labels_reach_the_node_and_stale_ones_go(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    await apiserver.add_node(
        NODE,
        {
            "nvidia.com/device-plugin.config": "a100",  # owned by the operator: kept
            "nvidia.com/gpu.product": "stale",  # ours: replaced
            "nvidia.com/mig.strategy": "mixed",  # ours: replaced
            "kubernetes.io/hostname": NODE,  # not ours at all
        },
    )
    env = {
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", apiserver.url)),
        "NODE_NAME": NODE,
        "GFD_WRITE_NODE_LABELS": "true",
    }
    code, err = await run_gfd(
        "--oneshot",
        "--mock-nvml",
        "dgx-a100",
        "--output-file",
        str(tmp_path / "gfd"),
        "--no-timestamp",
        env=env,
    )
    assert code == 0, err
    labels = await apiserver.labels(NODE)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/device-plugin.config"] == "a100"
    assert labels["kubernetes.io/hostname"] == NODE
    written = dict(
        line.split("=", 1) for line in (tmp_path / "gfd").read_text().splitlines() if line
    )
    ours = {k: v for k, v in labels.items() if k in written}
    assert ours == written
    # A label of ours that this pass did not produce is removed, not left stale.
    assert labels.get("nvidia.com/mig.strategy") == written.get("nvidia.com/mig.strategy")


async def test_without_api_access_it_is_one_line_and_exit_one(tmp_path: Path) -> None:
    code, err = await run_gfd(
        "--oneshot",
        "--mock-nvml",
        "dgx-a100",
        "--output-file",
        str(tmp_path / "gfd"),
        env={"NODE_NAME": NODE, "GFD_WRITE_NODE_LABELS": "true"},
    )
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "writing node labels needs Kubernetes API access" in lines[0]
