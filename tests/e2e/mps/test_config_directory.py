"""``mps-control-daemon`` with the chart's ConfigMap: a directory of named configs.

The chart mounts its ConfigMap at ``/available-configs`` and sets
``CONFIG_DIRECTORY`` (plus ``DEFAULT_CONFIG``/``FALLBACK_STRATEGIES``) instead
of ``CONFIG_FILE``. Without a node name or API access the daemon picks the
file the way the plugin does with the label unset: the default, else the
fallbacks.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from mps.layout import MpsLayout
from tests.unit.deploy.chart import MPS_CONTAINER, container, mounts_of, render, resolved_env
from tests.unit.mps.helpers import GPU, write_config
from tests.unit.mps.process import DaemonProcess, commands, fast, probe
from tests.waiting import eventually_sync


def configs(directory: Path, **replicas: int) -> Path:
    """A ConfigMap-like directory: one MPS config per name, with its volume's bookkeeping."""
    directory.mkdir()
    (directory / "..data").mkdir()  # the volume's own entries are never configs
    for name, count in replicas.items():
        write_config(directory / name, replicas=count)
    return directory


async def test_chart_config_map_starts_the_daemons(daemon: DaemonProcess, workdir: Path) -> None:
    """Bug: CONFIG_DIRECTORY was ignored, so MPS configured through the chart never started."""
    layout: MpsLayout = daemon.layout
    directory = configs(workdir / "available-configs", mps=4)
    daemon.start(
        *fast(),
        env={
            "CONFIG_DIRECTORY": str(directory),
            "FALLBACK_STRATEGIES": "named,single",
            "NODE_LABEL": "nvidia.com/device-plugin.config",
            "MOCK_NVML": "t4x4",
            "MPS_SET_COMPUTE_MODE": "false",
        },
    )
    eventually_sync(layout.ready.exists, what=".ready")
    assert layout.started(GPU).exists(), daemon.log
    await probe(layout)
    assert "set_default_active_thread_percentage 25" in commands(layout)
    assert "sharing strategy is none" not in daemon.log
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log


async def test_daemon_runs_with_the_rendered_chart_container(
    daemon: DaemonProcess, workdir: Path
) -> None:
    """Exactly the environment the chart gives the daemon, with the ConfigMap's files."""
    mps = write_config(workdir / "mps.yaml", replicas=4).read_text()
    values = {"config": {"map": {"default": "version: v1\n", "mps": mps}, "default": "mps"}}
    ctr = container(render(values), MPS_CONTAINER)
    assert ctr["command"] == ["mps-control-daemon"]
    mounted = {m["mountPath"]: m["name"] for m in mounts_of(ctr).values()}
    assert mounted["/available-configs"] == "available-configs"
    configs = workdir / "available-configs"
    configs.mkdir()
    for name, text in values["config"]["map"].items():
        (configs / name).write_text(text)
    env = resolved_env(ctr, node_name="gpu-node-1")
    assert env["CONFIG_DIRECTORY"] == "/available-configs"
    env.update(CONFIG_DIRECTORY=str(configs), MOCK_NVML="t4x4", MPS_SET_COMPUTE_MODE="false")
    daemon.start(*fast(), env=env)
    layout = daemon.layout
    eventually_sync(layout.ready.exists, what=".ready")
    assert layout.started(GPU).exists(), daemon.log
    await probe(layout)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log
    records = [json.loads(line) for line in daemon.log.splitlines() if line.strip()]
    messages = [record["msg"] for record in records]
    # No API access in the test: the label counts as unset, said once, and the default serves.
    off = [m for m in messages if m.startswith("per-node config selection is off")]
    assert off == [
        "per-node config selection is off: no Kubernetes API access "
        "(not in a cluster and no KUBECONFIG)"
    ]
    assert "config selection: node label unset; using default config mps" in messages
