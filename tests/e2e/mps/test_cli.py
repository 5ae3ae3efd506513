"""``mps-control-daemon`` as a real process, with the stand-in control program.

Each test starts the command on a simulated node (``--mock-nvml``), drives it
with files and signals the way a node would, and observes the stand-in
daemon's recorded state, the markers, the readiness probe, and the compute
modes the simulated GPUs report having been set to.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from mps.errors import MpsNotReady
from tests.unit.mps.helpers import (
    GPU,
    alive,
    clear_faults,
    daemon_pid,
    set_faults,
    state,
    write_config,
)
from tests.unit.mps.process import DaemonProcess, commands, fast, probe
from tests.waiting import eventually_sync

DGX_A100_GPUS = 8
PROFILES = Path(__file__).resolve().parents[3] / "config" / "nodes"


async def test_start_restart_after_crash_and_stop(daemon: DaemonProcess, workdir: Path) -> None:
    layout = daemon.layout
    config = write_config(workdir / "config.yaml", replicas=10)
    daemon.start("--config-file", str(config), "--mock-nvml", "dgx-a100", *fast())
    eventually_sync(layout.ready.exists, what=".ready")

    assert layout.started(GPU).exists()
    assert layout.log_dir(GPU).is_dir()
    limits = [f"set_default_device_pinned_mem_limit {i} 4096M" for i in range(DGX_A100_GPUS)]
    assert commands(layout)[: DGX_A100_GPUS + 1] == [
        *limits,
        "set_default_active_thread_percentage 10",
    ]
    exclusive = daemon.mode_changes()
    assert len(exclusive) == DGX_A100_GPUS
    assert all(mode == "EXCLUSIVE_PROCESS" for _, mode in exclusive)
    await probe(layout)
    eventually_sync(lambda: "control.log: " in daemon.log, what="control.log lines in the log")

    # The control daemon dies: the probe fails, the supervisor starts a new one.
    first = daemon_pid(layout)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    eventually_sync(lambda: not alive(first), what="the killed daemon to be gone")
    with pytest.raises(MpsNotReady, match="daemon not answering"):
        await probe(layout)
    eventually_sync(lambda: daemon_pid(layout) not in (None, first), what="a new daemon")
    eventually_sync(layout.ready.exists, what=".ready again")
    await probe(layout)
    assert "restarting in 1s (attempt 1)" in daemon.log
    assert commands(layout).count("set_default_active_thread_percentage 10") == 2

    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log
    assert commands(layout)[-1] == "quit"
    assert not layout.ready.exists()
    assert not layout.started(GPU).exists()
    assert not layout.log_dir(GPU).exists()
    assert not (layout.pipe_dir(GPU) / "control").exists()
    assert [mode for _, mode in daemon.mode_changes()[-DGX_A100_GPUS:]] == [
        "DEFAULT"
    ] * DGX_A100_GPUS
    with pytest.raises(MpsNotReady):
        await probe(layout)


async def test_failed_starts_back_off_then_recover(daemon: DaemonProcess, workdir: Path) -> None:
    layout = daemon.layout
    set_faults(layout, {"start": "fail"})
    config = write_config(workdir / "config.yaml", replicas=4)
    daemon.start("--config-file", str(config), "--mock-nvml", "t4x4", *fast(backoff="0.05"))
    eventually_sync(lambda: len(state(layout).get("starts", [])) >= 3, what="three start attempts")
    assert not layout.ready.exists()
    assert not layout.started(GPU).exists()
    # The third start fails in the stand-in before the daemon logs its retry.
    eventually_sync(lambda: "(attempt 3)" in daemon.log, what="the third retry logged")
    log = daemon.log
    for attempt, delay in ((1, "0.05"), (2, "0.1"), (3, "0.2")):
        assert f"retrying in {delay}s (attempt {attempt})" in log
    assert "Failed to start MPS control daemon (fault injected)" in log

    clear_faults(layout)
    eventually_sync(layout.ready.exists, what=".ready after the fault is gone")
    await probe(layout)
    assert "set_default_active_thread_percentage 25" in commands(layout)
    assert "set_default_device_pinned_mem_limit 3 3840M" in commands(layout)
    daemon.signal(signal.SIGINT)
    assert daemon.wait() == 0, daemon.log


def test_stop_while_restarting_is_clean(daemon: DaemonProcess, workdir: Path) -> None:
    layout = daemon.layout
    set_faults(layout, {"start": "fail"})
    config = write_config(workdir / "config.yaml", replicas=2)
    daemon.start("--config-file", str(config), "--mock-nvml", "t4x4", *fast(backoff="5"))
    eventually_sync(lambda: "retrying in 5s (attempt 1)" in daemon.log, what="a failed start")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log
    assert [mode for _, mode in daemon.mode_changes()[-4:]] == ["DEFAULT"] * 4


async def test_devices_unavailable_are_retried(daemon: DaemonProcess, workdir: Path) -> None:
    """NVML failing at start is transient: retried with backoff until the node is fixed."""
    layout = daemon.layout
    profile = workdir / "node.yaml"
    profile.write_text((PROFILES / "nvml-broken.yaml").read_text())
    config = write_config(workdir / "config.yaml", replicas=4)
    daemon.start("--config-file", str(config), "--mock-nvml", str(profile), *fast(backoff="0.05"))
    eventually_sync(lambda: "(attempt 2)" in daemon.log, what="two failed discoveries")
    assert "NVML could not start: RM has detected an NVML/RM version mismatch." in daemon.log
    assert not layout.ready.exists()
    profile.write_text((PROFILES / "t4x4.yaml").read_text())
    eventually_sync(layout.ready.exists, what=".ready once NVML works")
    await probe(layout)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log


async def test_sighup_rereads_the_config(daemon: DaemonProcess, workdir: Path) -> None:
    layout = daemon.layout
    config = write_config(workdir / "config.yaml", replicas=10)
    daemon.start("--config-file", str(config), "--mock-nvml", "t4x4", *fast())
    eventually_sync(layout.ready.exists, what=".ready")
    write_config(config, replicas=2)
    daemon.signal(signal.SIGHUP)
    eventually_sync(
        lambda: "set_default_active_thread_percentage 50" in commands(layout),
        what="the new limits",
    )
    eventually_sync(layout.ready.exists, what=".ready after the restart")
    sent = commands(layout)
    assert sent.index("quit") < sent.index("set_default_device_pinned_mem_limit 0 7680M")
    await probe(layout)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log


async def test_chart_environment_and_json_logs(daemon: DaemonProcess, workdir: Path) -> None:
    """The variables the Helm chart sets are accepted; LOG_FORMAT=json gives JSON lines."""
    layout = daemon.layout
    config = write_config(workdir / "config.yaml", replicas=2, extra="    renameByDefault: true\n")
    daemon.start(
        *fast(),
        env={
            "CONFIG_FILE": str(config),
            "MIG_STRATEGY": "none",
            "NODE_NAME": "node-a",
            "LOG_FORMAT": "json",
            "NVIDIA_MIG_MONITOR_DEVICES": "all",
            "MOCK_NVML": "t4x4",
            "MPS_SET_COMPUTE_MODE": "false",
        },
    )
    shared = "nvidia.com/gpu.shared"
    eventually_sync(layout.ready.exists, what=".ready")
    assert layout.started(shared).exists()
    await probe(layout, shared)
    assert daemon.mode_changes() == []
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log
    records = [json.loads(line) for line in daemon.log.splitlines()]
    assert all({"ts", "level", "msg", "logger"} <= set(r) for r in records)
    assert any(r.get("resource") == shared for r in records)


async def test_no_mps_sharing_is_ready_without_daemons(
    daemon: DaemonProcess, workdir: Path
) -> None:
    config = write_config(workdir / "config.yaml", section="timeSlicing")
    daemon.start("--config-file", str(config), "--mock-nvml", "dgx-a100", *fast())
    eventually_sync(daemon.layout.ready.exists, what=".ready")
    assert not (daemon.layout.root / "nvidia.com").exists()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log
    assert not daemon.layout.ready.exists()


@pytest.mark.parametrize(
    ("replicas", "args", "message"),
    [
        pytest.param(
            49,
            ("--mock-nvml", "dgx-a100"),
            "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 49 > 48",
            id="over-the-client-cap",
        ),
        pytest.param(
            2,
            ("--mock-nvml", "a100-mig-single", "--mig-strategy", "single"),
            "sharing using MPS is not supported for MIG devices",
            id="mig",
        ),
        pytest.param(
            2,
            ("--mock-nvml", "dgx-a100", "--mig-strategy", "mixed"),
            "using --mig-strategy=mixed is not supported with MPS",
            id="mixed-strategy",
        ),
        pytest.param(
            2,
            ("--mock-nvml", "dgx-a100", "--health-interval", "0"),
            "--health-interval: invalid value '0' (expected a number of seconds > 0)",
            id="bad-own-flag",
        ),
        pytest.param(
            2,
            ("--mock-nvml", "dgx-a100", "--bogus"),
            "flag provided but not defined",
            id="bad-flag",
        ),
    ],
)
def test_configuration_errors_exit_1(
    daemon: DaemonProcess, workdir: Path, replicas: int, args: tuple[str, ...], message: str
) -> None:
    config = write_config(workdir / "config.yaml", replicas=replicas)
    daemon.start("--config-file", str(config), *args)
    assert daemon.wait() == 1
    assert message in daemon.log
    assert not daemon.layout.ready.exists()
    assert daemon_pid(daemon.layout) is None


def test_help_lists_the_daemon_and_plugin_flags(daemon: DaemonProcess) -> None:
    daemon.start("--help")
    assert daemon.wait() == 0
    assert "--mps-container-root" in daemon.log
    assert "--mock-nvml" in daemon.log
    assert "--set-compute-mode" in daemon.log
    assert "env: $MPS_SET_COMPUTE_MODE" in daemon.log


def test_unwritable_ready_marker_exits_1(daemon: DaemonProcess, workdir: Path) -> None:
    """Supervising fails (readiness cannot be signalled): stop cleanly, exit 1, say why."""
    # The marker's place holds a link into a directory that does not exist.
    daemon.layout.ready.symlink_to(workdir / "absent" / "ready")
    config = write_config(workdir / "config.yaml", section="timeSlicing")
    daemon.start("--config-file", str(config), "--mock-nvml", "t4x4", *fast())
    assert daemon.wait() == 1, daemon.log
    assert ".ready" in daemon.log
    assert "Traceback" not in daemon.log
