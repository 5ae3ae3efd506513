"""``mps-control-daemon`` as a real process, for the tests that drive the command."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from mps.layout import MpsLayout
from mps.probe import probe_daemon

from .helpers import GPU, path_with_fakes, state

MODE_CHANGE = re.compile(r"simulated GPU (GPU-[0-9a-f-]+): compute mode (\w+) -> (\w+)")


class DaemonProcess:
    """One ``mps-control-daemon`` run, its output in a file."""

    def __init__(self, workdir: Path, layout: MpsLayout) -> None:
        self.workdir = workdir
        self.layout = layout
        self.output = workdir / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *args: str, env: dict[str, str] | None = None) -> DaemonProcess:
        environment = {
            "PATH": path_with_fakes(),
            **(env or {}),
        }
        with self.output.open("ab") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mps", "--mps-container-root", str(self.layout.root), *args],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=environment,
            )
        return self

    @property
    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float = 15) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def mode_changes(self) -> list[tuple[str, str]]:
        """(GPU, new compute mode) for every change the simulated GPUs logged, in order."""
        return [(gpu, mode) for gpu, _, mode in MODE_CHANGE.findall(self.log)]

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def fast(*extra: str, backoff: str = "1") -> tuple[str, ...]:
    return ("--health-interval", "0.2", "--restart-backoff", backoff, "--command-timeout", "5",
            *extra)  # fmt: skip


async def probe(layout: MpsLayout, resource: str = GPU) -> None:
    await probe_daemon(mps_root_ctr=layout.root, resource=resource, timeout=5)


def commands(layout: MpsLayout) -> list[str]:
    return list(state(layout).get("commands", []))
