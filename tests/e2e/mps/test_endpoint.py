"""`mps-control-daemon --metrics-address`: probes and metrics, against the real process."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from tests.e2e.harness import free_port
from tests.unit.inspection.test_side import get
from tests.unit.mps.helpers import write_config
from tests.unit.mps.process import DaemonProcess, fast
from tests.waiting import eventually_sync


def answers(port: int, path: str, status: int) -> bool:
    try:
        return get(port, path)[0] == status
    except OSError:
        return False


def sample(port: int, name: str) -> str | None:
    for line in get(port, "/metrics")[1].decode().splitlines():
        if line.startswith(name + " "):
            return line.split(" ", 1)[1]
    return None


def test_ready_follows_the_daemons(daemon: DaemonProcess, workdir: Path) -> None:
    port = free_port()
    config = write_config(workdir / "config.yaml", replicas=4)
    daemon.start(
        "--config-file", str(config), "--mock-nvml", "t4x4", "--metrics-address",
        f"127.0.0.1:{port}", *fast(),
    )  # fmt: skip
    eventually_sync(lambda: answers(port, "/healthz", 200), what="/healthz")
    eventually_sync(daemon.layout.ready.exists, what=".ready")
    eventually_sync(lambda: answers(port, "/readyz", 200), what="/readyz")
    assert sample(port, "mps_control_daemon_daemons") == "1.0"
    assert sample(port, "mps_control_daemon_ready") == "1.0"
    assert sample(port, "mps_control_daemon_load_failures_total") == "0.0"
    assert "mps_control_daemon_build_info{" in get(port, "/metrics")[1].decode()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log
    assert not answers(port, "/healthz", 200)


def test_load_failures_are_counted(daemon: DaemonProcess, workdir: Path) -> None:
    port = free_port()
    profile = workdir / "node.yaml"
    profile.write_text(
        (Path(__file__).resolve().parents[3] / "config" / "nodes" / "nvml-broken.yaml").read_text()
    )
    config = write_config(workdir / "config.yaml", replicas=4)
    daemon.start(
        "--config-file", str(config), "--mock-nvml", str(profile), "--metrics-address",
        f"127.0.0.1:{port}", *fast(backoff="0.2"),
    )  # fmt: skip
    eventually_sync(lambda: answers(port, "/healthz", 200), what="/healthz")
    eventually_sync(
        lambda: float(sample(port, "mps_control_daemon_load_failures_total") or 0) >= 2,
        what="two failed loads",
    )
    assert get(port, "/readyz")[0] == 503
    assert sample(port, "mps_control_daemon_ready") is None  # nothing supervised yet
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log


def test_port_in_use_exits_one_naming_the_flag(daemon: DaemonProcess, workdir: Path) -> None:
    config = write_config(workdir / "config.yaml", replicas=4)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        daemon.start(
            "--config-file", str(config), "--mock-nvml", "t4x4", "--metrics-address",
            f"127.0.0.1:{port}",
        )  # fmt: skip
        assert daemon.wait() == 1
    assert f"--metrics-address 127.0.0.1:{port}: [Errno 98] Address already in use" in daemon.log
    assert "Traceback" not in daemon.log
