"""A DaemonSet rolling update across nodes where some drivers are broken.

A blanket deployment runs the plugin with ``failOnInitError=false`` on every
node, GPU or not, working or not. A rolling update (``maxUnavailable: 1``)
moves to the next node only once the pod on the current one is ready; if
readiness meant "serving", the first node with a broken driver would hold the
update back forever. The simulation starts one real plugin process per node,
in order, each with its own simulated kubelet, and waits for its ``/readyz``
like the DaemonSet controller does:

- ``--readiness running``: every node becomes ready (the broken ones are
  ready and say ``blocked_on_error`` on ``/state`` and in the metrics), and
  the rollout completes;
- ``--readiness serving``: the first broken node never becomes ready within
  the progress deadline, and the rollout stalls there.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.reliability.observe import metric
from tests.waiting import TimedOut, eventually

NODES = ("t4x4", "nvml-broken", "t4x4")  # the middle node's driver cannot start
# How long the simulated controller waits for a pod that exists and answers but
# is not ready before it calls the rollout stalled (a short progress deadline:
# long enough for the broken node's first retry, 1 s after its first attempt).
PROGRESS_DEADLINE = 1.5


async def ready(plugin: PluginProcess) -> bool:
    try:
        return (await plugin.get("/readyz")).status == 200
    except OSError:
        return False  # not listening yet


async def ready_within(plugin: PluginProcess, seconds: float) -> bool:
    """Whether the pod turns ready before a rollout's progress deadline of `seconds`."""
    try:
        await eventually(lambda: ready(plugin), what="/readyz to answer 200", timeout=seconds)
    except TimedOut:
        return False
    return True


async def roll_out(
    stack: contextlib.AsyncExitStack, root: Path, readiness: str
) -> tuple[list[str], list[str]]:
    """Update node after node: the nodes whose new pod became ready, and the blocked reasons."""
    done: list[str] = []
    blocked: list[str] = []
    for number, profile in enumerate(NODES):
        sock_dir = root / f"n{number}"
        sock_dir.mkdir()
        await stack.enter_async_context(KubeletSimulator(sock_dir, write_snapshot_file=False))
        args = plugin_args(
            sock_dir, profile, "--fail-on-init-error=false", "--readiness", readiness
        )
        plugin = await stack.enter_async_context(PluginProcess(args))
        # The first start-up attempt ends one way or the other...
        state = await plugin.wait_state(lambda s: bool(s["history"]), timeout=30)
        if state["state"] == "blocked_on_error":
            blocked.append(state["reason"])
            text = (await plugin.get("/metrics")).body.decode()
            assert metric(text, "nvidia_device_plugin_lifecycle_state", state="blocked_on_error")
            # ...and a pod that stays unready past the deadline stops the update.
            if not await ready_within(plugin, PROGRESS_DEADLINE):
                text = (await plugin.get("/metrics")).body.decode()
                assert metric(text, "nvidia_device_plugin_ready", readiness=readiness) == 0
                return done, blocked
        else:
            await plugin.wait_state(lambda s: s["ready"], timeout=30)
        assert await ready(plugin)
        done.append(f"{number}:{profile}")
    return done, blocked


@pytest.mark.parametrize(
    ("readiness", "expected"),
    [
        pytest.param("running", ["0:t4x4", "1:nvml-broken", "2:t4x4"], id="running-completes"),
        pytest.param("serving", ["0:t4x4"], id="serving-stalls-at-the-broken-node"),
    ],
)
async def test_rolling_update(sock_dir: Path, readiness: str, expected: list[str]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        done, blocked = await roll_out(stack, sock_dir, readiness)
    assert done == expected
    # Whatever the mode, the broken node says why it cannot serve.
    assert len(blocked) == 1
    assert "NVML/RM version mismatch" in blocked[0]
