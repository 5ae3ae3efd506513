"""`--use-node-feature-api`: the labeller publishes a NodeFeature object through the API.

`serve` in-process, with the same Kubernetes-backed sinks `main` wires in,
talks to kmock's emulated API server over HTTP, as it would in a cluster with
NFD installed (tests/e2e/labels runs the real `gpu-feature-discovery` process).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kube.client import ApiAccess
from labels.cli import serve
from labels.node_sink import USER_AGENT, KubeSinks
from labels.waiting import Wake
from tests.unit.kube.apiserver import (
    ApiServer,
    api_requests,
    kubeconfig,
    request_counts,
    running_apiserver,
)
from tests.unit.labels.helpers import ScriptedWaiter

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


def in_process(
    apiserver: ApiServer, waiter: ScriptedWaiter, *, sync_timeout: float = 5.0
) -> tuple[int, KubeSinks]:
    """`serve` with the sinks `main` uses, the API access pointed at the emulator."""
    access = ApiAccess.for_host(apiserver.url)
    sinks = KubeSinks(access=lambda options: access, sync_timeout=sync_timeout)
    env = {"NODE_NAME": NODE, "NAMESPACE": NAMESPACE, "GFD_USE_NODE_FEATURE_API": "true"}
    try:
        code = serve(
            list(ARGS),
            env,
            waiter,
            node_feature=sinks.node_feature,
            node_labels=sinks.node_labels,
            configure_logging=False,
        )
    finally:
        sinks.close()
    return code, sinks


async def test_steady_passes_write_nothing_and_nothing_is_deleted(apiserver: ApiServer) -> None:
    waiter = ScriptedWaiter([Wake.TIMER] * 5)  # six passes, then a stop
    code, _ = await asyncio.to_thread(in_process, apiserver, waiter)
    assert code == 0
    counts = sent(apiserver)
    assert counts.get("create") == 1
    assert not {"get", "update", "patch", "delete"} & set(counts), counts
    status, _ = await apiserver.get(OBJECT)
    assert status == 200  # a stop leaves the object for garbage collection
    assert waiter.timeouts == [60.0] * 6


async def test_a_reload_keeps_the_watch(apiserver: ApiServer) -> None:
    waiter = ScriptedWaiter([Wake.RELOAD, Wake.TIMER, Wake.RELOAD])
    code, _ = await asyncio.to_thread(in_process, apiserver, waiter)
    assert code == 0
    counts = sent(apiserver)
    assert counts.get("list") == 1  # one watch for the whole process
    assert counts.get("create") == 1


async def test_an_api_outage_is_retried_with_backoff_not_an_exit(
    apiserver: ApiServer, logs: list[tuple[str, str]]
) -> None:
    loop = asyncio.get_running_loop()
    await apiserver.down()

    def on_wait(index: int) -> None:
        if index == 1:  # back before the third pass: two passes failed
            asyncio.run_coroutine_threadsafe(apiserver.up(), loop).result(10)

    waiter = ScriptedWaiter([Wake.TIMER] * 4, on_wait)
    code, _ = await asyncio.to_thread(in_process, apiserver, waiter, sync_timeout=0.2)
    assert code == 0
    first, second, *rest = waiter.timeouts
    assert 0 < first <= 1.0
    assert 0 < second <= 2.0
    assert rest == [60.0] * len(rest)
    status, _ = await apiserver.get(OBJECT)
    assert status == 200
    failures = [text for level, text in logs if level == "WARNING" and "labelling again" in text]
    assert len(failures) == 2
    assert all("\n" not in text and "cannot connect" in text for text in failures)


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        pytest.param("NODE_NAME", "required flag node-name not set", id="no-node-name"),
        pytest.param("KUBECONFIG", "needs Kubernetes API access", id="no-api-access"),
    ],
)
def test_what_the_mode_needs_is_checked_at_start(
    apiserver: ApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    missing: str,
    message: str,
) -> None:
    for variable in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(variable, raising=False)  # the test's own environment gives no access
    env = chart_env(apiserver, tmp_path)
    del env[missing]
    sinks = KubeSinks()
    try:
        code = serve(
            ["--oneshot", *ARGS],
            env,
            ScriptedWaiter(),
            node_feature=sinks.node_feature,
            configure_logging=False,
        )
    finally:
        sinks.close()
    assert code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpu-feature-discovery: ")
    assert "--use-node-feature-api" in lines[0]
    assert message in lines[0]
    assert sent(apiserver) == {}
