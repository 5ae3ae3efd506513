"""The gpu-feature-discovery command serves its telemetry endpoint, and refuses a port in use."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import free_port
from tests.e2e.labels.test_process import COMMAND, ENV, TIMEOUT
from tests.unit.inspection.test_side import get
from tests.waiting import eventually_sync


@pytest.fixture
def command(tmp_path: Path) -> Callable[..., subprocess.Popen[str]]:
    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*COMMAND, *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    return start


def test_the_command_serves_its_endpoint(
    tmp_path: Path, command: Callable[..., subprocess.Popen[str]]
) -> None:
    port = free_port()
    out = tmp_path / "gfd"
    process = command(
        "--mock-nvml", "dgx-a100", "--output-file", str(out), "--metrics-address",
        f"127.0.0.1:{port}",
    )  # fmt: skip
    try:
        eventually_sync(out.exists, what="the features file", timeout=TIMEOUT)

        def answers_ready() -> bool:
            try:
                return get(port, "/readyz")[0] == 200
            except OSError:
                return False

        eventually_sync(answers_ready, what="/readyz", timeout=TIMEOUT)
        assert get(port, "/healthz")[0] == 200
        status, body = get(port, "/metrics")
        assert status == 200
        assert b"gpu_feature_discovery_labelling_passes_total 1.0" in body
        assert b"gpu_feature_discovery_build_info{" in body
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
    with pytest.raises(ConnectionRefusedError):  # the endpoint went with the process
        http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/healthz")


def test_the_command_refuses_a_port_in_use(command: Callable[..., subprocess.Popen[str]]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = command("--oneshot", "--metrics-address", f"127.0.0.1:{port}")
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 1
    assert stderr.splitlines() == [
        f"gpu-feature-discovery: command line: --metrics-address: cannot listen on "
        f"127.0.0.1:{port}: Address already in use"
    ]
