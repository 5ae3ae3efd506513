"""``mps-control-daemon`` follows the node's config label through the Kubernetes API.

The daemon runs as a real process with ``NODE_NAME`` and a ``KUBECONFIG``
pointing at the emulated API server (kmock, watch streams included), and the
chart's ``CONFIG_DIRECTORY``. A label change selects another config; the
daemons restart only when that config changes them, and an unknown value
keeps what runs.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mps.node_config import USER_AGENT
from tests.unit.kube.apiserver import (
    ApiServer,
    api_requests,
    kubeconfig,
    request_counts,
    running_apiserver,
)
from tests.unit.mps.helpers import daemon_pid, write_config
from tests.unit.mps.process import DaemonProcess, commands, fast, probe
from tests.waiting import eventually

NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server


def configs(directory: Path) -> Path:
    directory.mkdir()
    write_config(directory / "two", replicas=2)
    write_config(directory / "four", replicas=4)
    # The same daemons as "two": only a setting the plugin alone reads differs.
    (directory / "two-by-index").write_text(
        "flags:\n  plugin:\n    deviceIDStrategy: index\n" + (directory / "two").read_text()
    )
    return directory


def environment(workdir: Path, apiserver: ApiServer) -> dict[str, str]:
    return {
        "CONFIG_DIRECTORY": str(configs(workdir / "available-configs")),
        "DEFAULT_CONFIG": "four",
        "NODE_LABEL": LABEL,
        "NODE_NAME": NODE,
        "KUBECONFIG": str(kubeconfig(workdir / "kubeconfig", apiserver.url)),
        "MOCK_NVML": "t4x4",
        "MPS_SET_COMPUTE_MODE": "false",
    }


def thread_percentages(daemon: DaemonProcess) -> list[str]:
    prefix = "set_default_active_thread_percentage "
    return [c.removeprefix(prefix) for c in commands(daemon.layout) if c.startswith(prefix)]


async def test_label_change_restarts_only_for_other_daemons(
    daemon: DaemonProcess, workdir: Path, apiserver: ApiServer
) -> None:
    await apiserver.add_node(NODE, {LABEL: "two"})
    daemon.start(*fast(), env=environment(workdir, apiserver))
    layout = daemon.layout
    await eventually(layout.ready.exists, what=".ready", timeout=15)
    await probe(layout)
    # The label was read before the first start: no detour through the default.
    assert thread_percentages(daemon) == ["50"], daemon.log
    assert f"watching label {LABEL} of node {NODE}" in daemon.log
    first = daemon_pid(layout)

    await apiserver.set_labels(NODE, {LABEL: "two-by-index"})
    await eventually(
        lambda: "needs the same MPS daemons" in daemon.log, what="the re-selection", timeout=15
    )
    assert daemon_pid(layout) == first
    assert "quit" not in commands(layout)

    await apiserver.set_labels(NODE, {LABEL: "four"})
    await eventually(
        lambda: thread_percentages(daemon) == ["50", "25"], what="the new daemon", timeout=15
    )
    await eventually(layout.ready.exists, what=".ready after the restart", timeout=15)
    await probe(layout)
    assert daemon_pid(layout) not in (None, first)
    sent = commands(layout)
    assert sent.index("quit") < sent.index("set_default_active_thread_percentage 25")
    assert "config four changes the MPS daemons; restarting them" in daemon.log

    # An unknown value keeps the running config and its daemons.
    second = daemon_pid(layout)
    await apiserver.set_labels(NODE, {LABEL: "nope"})
    await eventually(
        lambda: "specified config nope does not exist; keeping four" in daemon.log,
        what="kept",
        timeout=15,
    )
    assert daemon_pid(layout) == second
    assert thread_percentages(daemon) == ["50", "25"]

    daemon.signal(signal.SIGTERM)
    assert await asyncio.to_thread(daemon.wait) == 0, daemon.log
    # One list, then one watch that is still open: no polling.
    assert request_counts(api_requests(apiserver.handler, USER_AGENT)) == {"list": 1, "watch": 1}


async def test_label_unset_uses_the_default_and_api_outage_keeps_running(
    daemon: DaemonProcess, workdir: Path, apiserver: ApiServer
) -> None:
    await apiserver.add_node(NODE)
    daemon.start(*fast(), env=environment(workdir, apiserver))
    layout = daemon.layout
    await eventually(layout.ready.exists, what=".ready", timeout=15)
    assert thread_percentages(daemon) == ["25"]
    assert "config selection: node label unset; using default config four" in daemon.log

    await apiserver.down()
    await eventually(lambda: "node label watch:" in daemon.log, what="the watch error", timeout=15)
    await probe(layout)  # the daemons do not depend on the API server
    await apiserver.up()
    await apiserver.set_labels(NODE, {LABEL: "two"})
    await eventually(
        lambda: thread_percentages(daemon) == ["25", "50"],
        what="the label after the outage",
        timeout=40,
    )
    daemon.signal(signal.SIGTERM)
    assert await asyncio.to_thread(daemon.wait) == 0, daemon.log


async def test_api_down_at_start_starts_the_default_then_follows_the_label(
    daemon: DaemonProcess, workdir: Path, apiserver: ApiServer
) -> None:
    """No API server at start-up: the default's daemons after `--label-wait`, then the label."""
    await apiserver.add_node(NODE, {LABEL: "two"})
    await apiserver.down()
    daemon.start(*fast("--label-wait", "0.5"), env=environment(workdir, apiserver))
    layout = daemon.layout
    await eventually(layout.ready.exists, what=".ready", timeout=15)
    assert "no answer from the Kubernetes API within 0.5s" in daemon.log
    assert "config selection: node label unset; using default config four" in daemon.log
    assert thread_percentages(daemon) == ["25"]
    await probe(layout)

    await apiserver.up()
    await eventually(
        lambda: thread_percentages(daemon) == ["25", "50"],
        what="the label once the API answers",
        timeout=15,
    )
    await eventually(layout.ready.exists, what=".ready after the restart", timeout=15)
    await probe(layout)
    assert "config two changes the MPS daemons; restarting them" in daemon.log
    daemon.signal(signal.SIGTERM)
    assert await asyncio.to_thread(daemon.wait) == 0, daemon.log
