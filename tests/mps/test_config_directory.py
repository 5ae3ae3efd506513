"""``mps-control-daemon`` with the chart's ConfigMap: a directory of named configs.

The chart mounts its ConfigMap at ``/available-configs`` and sets
``CONFIG_DIRECTORY`` (plus ``DEFAULT_CONFIG``/``FALLBACK_STRATEGIES``) instead
of ``CONFIG_FILE``. Without a node name or API access the daemon picks the
file the way the plugin does with the label unset: the default, else the
fallbacks.
"""

from __future__ import annotations

import signal
from pathlib import Path

from mps.layout import MpsLayout

from .helpers import GPU, wait_until, write_config
from .process import DaemonProcess, commands, fast, probe


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
    wait_until(layout.ready.exists, what=".ready")
    assert layout.started(GPU).exists(), daemon.log
    await probe(layout)
    assert "set_default_active_thread_percentage 25" in commands(layout)
    assert "sharing strategy is none" not in daemon.log
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log
