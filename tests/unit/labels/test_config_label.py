"""gpu-feature-discovery's node-label follower, in-process.

Without a node name or API access the label counts as unset and the log says
so once; the first wait for the label gives up on its timeout or on a pending
signal. tests/e2e/labels/test_config_label.py runs the real command.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kube.label_follower import NodeLabelFollower
from labels.config_label import USER_AGENT, follow_config_label, wait_first_label
from labels.flags import parse_arguments
from tests.unit.kube.apiserver import (
    ApiServer,
    running_apiserver,
)

NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        pytest.param({}, "no --node-name (NODE_NAME) given", id="no-node-name"),
        pytest.param({"NODE_NAME": NODE, "KUBECONFIG": "/nonexistent"},
                     "cannot load kubeconfig /nonexistent", id="broken-kubeconfig"),
    ],
)  # fmt: skip
def test_follower_is_off_and_says_why(
    tmp_path: Path, logs: list[tuple[str, str]], env: dict[str, str], reason: str
) -> None:
    values = parse_arguments([], {"CONFIG_DIRECTORY": str(tmp_path), **env})
    assert follow_config_label(values, env) is None
    said = [message for _, message in logs if "per-node config selection is off" in message]
    assert len(said) == 1
    assert reason in said[0]


def test_no_directory_no_follower(logs: list[tuple[str, str]]) -> None:
    env = {"NODE_NAME": NODE, "KUBECONFIG": "/nonexistent"}
    assert follow_config_label(parse_arguments([], env), env) is None
    assert logs == []


@pytest.fixture
async def unanswered(apiserver: ApiServer) -> AsyncIterator[NodeLabelFollower]:
    """A follower of an API server that is down: it never gets a first read."""
    await apiserver.down()
    follower = NodeLabelFollower(api=apiserver.access(USER_AGENT), node_name=NODE, label=LABEL)
    follower.start()
    try:
        yield follower
    finally:
        await asyncio.to_thread(follower.stop)


async def test_first_label_wait_gives_up_with_a_warning(
    unanswered: NodeLabelFollower, logs: list[tuple[str, str]]
) -> None:
    assert not await asyncio.to_thread(wait_first_label, unanswered, 0.3)
    assert ("WARNING", "no answer from the Kubernetes API within 0.3s; starting without the "
            "node label") in logs  # fmt: skip


async def test_first_label_wait_ends_on_a_pending_signal(
    unanswered: NodeLabelFollower, logs: list[tuple[str, str]]
) -> None:
    """A signal sent while waiting (blocked, as in the command) ends the wait, not its timeout."""

    def waiting() -> tuple[bool, object]:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
            result = wait_first_label(unanswered, 30.0)
            # Still pending, for the waiter to collect; taken here so it is never delivered.
            return result, signal.sigtimedwait({signal.SIGHUP}, 0)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})

    result, pending = await asyncio.to_thread(waiting)
    assert result is False
    assert pending is not None
    # Only a wait that ran out says so: this one ended on the signal.
    assert not [message for _, message in logs if "no answer from the Kubernetes API" in message]
