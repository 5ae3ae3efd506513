"""follow_node_label: whether the label can be followed, and its value kept current."""

from __future__ import annotations

import asyncio
import collections
import queue
from pathlib import Path

import pytest

from kube.label_follower import FollowOff, NodeLabelFollower, follow_node_label
from kube.pacing import LABELLER_WATCH_TIMEOUTS, Clock
from tests.unit.kube.apiserver import ApiServer, api_requests, kubeconfig, request_counts

NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"
AGENT = "follower-under-test"


@pytest.mark.parametrize(
    ("node", "env", "off"),
    [
        pytest.param("", {"KUBECONFIG": "/x"}, FollowOff("no --node-name (NODE_NAME) given"),
                     id="no-node-name"),
        pytest.param(NODE, {}, FollowOff("no Kubernetes API access (not in a cluster and no "
                                         "KUBECONFIG)"), id="no-access"),
        pytest.param(NODE, {"KUBERNETES_SERVICE_HOST": "10.0.0.1",
                            "KUBERNETES_SERVICE_PORT": "443"}, None, id="no-token"),
    ],
)  # fmt: skip
def test_off_with_the_reason(node: str, env: dict[str, str], off: FollowOff | None) -> None:
    found = follow_node_label(node_name=node, label=LABEL, env=env, user_agent=AGENT)
    assert isinstance(found, FollowOff)
    if off is not None:
        assert found == off
    else:  # configured but unusable: said as such
        assert found.unusable
        assert "in-cluster service account" in found.reason


async def test_value_follows_the_label(apiserver: ApiServer, tmp_path: Path) -> None:
    await apiserver.add_node(NODE, {LABEL: "a"})
    seen: queue.Queue[str | None] = queue.Queue()
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", apiserver.url))}
    follower = follow_node_label(
        node_name=NODE, label=LABEL, env=env, user_agent=AGENT, on_value=seen.put
    )
    assert isinstance(follower, NodeLabelFollower)
    assert f"kubeconfig {tmp_path / 'kubeconfig'}" in follower.source
    assert not follower.synced
    assert follower.value() is None
    follower.start()
    try:
        assert await asyncio.to_thread(follower.wait_first, 5.0)
        assert follower.value() == "a"
        assert await asyncio.to_thread(seen.get, True, 5.0) == "a"
        await apiserver.set_labels(NODE, {LABEL: "b"})
        assert await asyncio.to_thread(seen.get, True, 5.0) == "b"
        assert follower.value() == "b"
        await apiserver.set_labels(NODE, {LABEL: None})
        assert await asyncio.to_thread(seen.get, True, 5.0) is None
        assert follower.value() is None
    finally:
        assert await asyncio.to_thread(follower.stop)
    assert request_counts(api_requests(apiserver.handler, AGENT)) == {"list": 1, "watch": 1}


async def test_a_steady_follower_only_renews_long_watches(apiserver: ApiServer) -> None:
    """40 simulated minutes of a quiet node (status heartbeats only): 1 to 4 watches, nothing else.

    The same scaled clock as the plugin's budget test (`test_api_budget`).
    """
    scale = 1 / 600
    minute = 60 * scale
    apiserver.handler.time_scale = scale
    await apiserver.add_node(NODE, {LABEL: "a"})
    follower = NodeLabelFollower(
        api=apiserver.access(AGENT),
        node_name=NODE,
        label=LABEL,
        watch_timeouts=LABELLER_WATCH_TIMEOUTS,
        clock=Clock(scale),
    )
    follower.start()
    try:
        assert await asyncio.to_thread(follower.wait_first, 10.0)
        await asyncio.sleep(2 * minute)
        before = collections.Counter(apiserver.handler.tally)
        for beat in range(8):
            await asyncio.sleep(5 * minute)
            await apiserver.handler.patch(f"/api/v1/nodes/{NODE}", json={"status": {"beat": beat}})
        window = collections.Counter(apiserver.handler.tally) - before
    finally:
        await asyncio.to_thread(follower.stop)
    sent = {verb: n for (who, verb), n in window.items() if who == AGENT and n}
    assert set(sent) <= {"watch"}, sent
    assert 1 <= sent.get("watch", 0) <= 4, sent
    assert follower.value() == "a"
