"""The real gpu-feature-discovery command selects its config by the node label, like the plugin.

The command runs with the chart's ``CONFIG_DIRECTORY``, ``NODE_NAME`` and a
``KUBECONFIG`` pointing at the emulated API server (kmock, watch streams
included). The labels follow the label's config; without API access the label
counts as unset and the log says so once.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from labels.config_label import USER_AGENT
from labels.output import parse_labels
from tests.e2e.labels.test_process import COMMAND, ENV
from tests.unit.kube.apiserver import (
    ApiServer,
    api_requests,
    kubeconfig,
    request_counts,
    running_apiserver,
)
from tests.waiting import eventually

NODE = "gpu-node-1"


LABEL = "nvidia.com/device-plugin.config"


REPLICAS = "nvidia.com/gpu.replicas"


MPS_CAPABLE = "nvidia.com/mps.capable"


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [*COMMAND, *args],
            env={**ENV, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def labels_in(path: Path) -> dict[str, str]:
    try:
        return parse_labels(path.read_text())
    except FileNotFoundError:
        return {}


def configs(directory: Path) -> Path:
    directory.mkdir()
    (directory / "sliced").write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 2}\n"
    )
    (directory / "mps").write_text(
        "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"
    )
    return directory


def chart_env(tmp_path: Path, apiserver: ApiServer | None) -> dict[str, str]:
    env = {
        "CONFIG_DIRECTORY": str(configs(tmp_path / "available-configs")),
        "DEFAULT_CONFIG": "sliced",
        "FALLBACK_STRATEGIES": "named,single",
        "NODE_LABEL": LABEL,
        "NODE_NAME": NODE,
        "GFD_USE_NODE_FEATURE_API": "false",
    }
    if apiserver is not None:
        env["KUBECONFIG"] = str(kubeconfig(tmp_path / "kubeconfig", apiserver.url))
    return env


async def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.to_thread(process.communicate, timeout=30)
    assert process.returncode == 0, stderr
    return stderr


async def test_labels_follow_the_node_label(
    tmp_path: Path, apiserver: ApiServer, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    await apiserver.add_node(NODE, {LABEL: "mps"})
    out = tmp_path / "gfd"
    process = spawn(
        "--mock-nvml", "t4x4", "-o", str(out), "--sleep-interval=infinite",
        env=chart_env(tmp_path, apiserver),
    )  # fmt: skip
    # The label was read before the first pass: MPS from the start, never the default.
    await eventually(
        lambda: labels_in(out).get(REPLICAS) == "4", what="the labelled config", timeout=20
    )
    assert labels_in(out)[MPS_CAPABLE] == "true"

    await apiserver.set_labels(NODE, {LABEL: "sliced"})
    await eventually(lambda: labels_in(out).get(REPLICAS) == "2", what="the relabel", timeout=20)
    assert labels_in(out)[MPS_CAPABLE] == "false"
    assert labels_in(out)["nvidia.com/gpu.sharing-strategy"] == "time-slicing"

    # An unknown value keeps the config in use; removing the label means the default.
    await apiserver.set_labels(NODE, {LABEL: "nope"})
    await apiserver.set_labels(NODE, {LABEL: "mps"})
    await eventually(lambda: labels_in(out).get(REPLICAS) == "4", what="back to mps", timeout=20)
    await apiserver.set_labels(NODE, {LABEL: None})
    await eventually(
        lambda: labels_in(out).get(REPLICAS) == "2", what="the default config", timeout=20
    )
    stderr = await stop(process)
    assert f"watching label {LABEL} of node {NODE}" in stderr
    assert "config selection: node label unset; using default config sliced" in stderr
    assert "no answer from the Kubernetes API" not in stderr
    # One list, then one watch that is still open: no polling.
    assert request_counts(api_requests(apiserver.handler, USER_AGENT)) == {"list": 1, "watch": 1}


async def test_node_labels_share_the_config_label_watch(
    tmp_path: Path, apiserver: ApiServer, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    """With --write-node-labels the node's own copy comes from the same watch."""
    await apiserver.add_node(NODE, {LABEL: "mps"})
    env = {**chart_env(tmp_path, apiserver), "GFD_WRITE_NODE_LABELS": "true"}
    process = spawn("--mock-nvml", "t4x4", "-o", "", "--sleep-interval=infinite", env=env)

    async def node_label(key: str) -> str | None:
        return (await apiserver.labels(NODE)).get(key)

    async def capable_is(value: str) -> bool:
        return await node_label(MPS_CAPABLE) == value

    await eventually(lambda: capable_is("true"), what="the node labels", timeout=20)
    await apiserver.set_labels(NODE, {LABEL: "sliced"})
    await eventually(lambda: capable_is("false"), what="the node relabelled", timeout=20)
    await stop(process)
    counts = request_counts(api_requests(apiserver.handler, USER_AGENT))
    assert counts.pop("list") == 1
    assert counts.pop("watch") == 1
    assert set(counts) <= {"patch"}


async def test_without_api_access_the_default_labels(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    out = tmp_path / "gfd"
    process = spawn("--mock-nvml", "t4x4", "-o", str(out), env=chart_env(tmp_path, None))
    await eventually(
        lambda: labels_in(out).get(REPLICAS) == "2", what="the default config", timeout=20
    )
    stderr = await stop(process)
    said = [line for line in stderr.splitlines() if "per-node config selection is off" in line]
    assert len(said) == 1
    assert said[0].endswith("no Kubernetes API access (not in a cluster and no KUBECONFIG)")
