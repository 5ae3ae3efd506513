"""The processes a benchmark drives: the real plugin, the floor plugin, a simulated kubelet.

The plugin runs exactly as a node runs it (`python -m reconciler`, its own
process, its own event loop), against a `KubeletSimulator` in the benchmark's
loop, so every figure includes the real unix-socket gRPC hop. Its stderr goes
to a file rather than a pipe, so a chatty plugin can never stall on a full
pipe while it is being timed. CPU time and resident memory are read from
/proc, which is what `top` and the kubelet's cAdvisor read too.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kubelet_sim import KubeletSimulator
from kubelet_sim.model import DeviceInfo
from tests.e2e.harness import free_port, http_get

REPO = Path(__file__).resolve().parents[1]
GPU = "nvidia.com/gpu"
FLOOR_SCRIPT = Path(__file__).with_name("floor_plugin.py")
_TICKS = os.sysconf("SC_CLK_TCK")


def short_dir(prefix: str = "dpb-") -> Path:
    """A directory under /tmp: AF_UNIX paths must stay under 107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@asynccontextmanager
async def simulator(
    *, registry: str | None = None, **options: Any
) -> AsyncIterator[KubeletSimulator]:
    """A kubelet simulator in a fresh short directory, removed afterwards.

    With `registry`, a subdirectory of that name is its plugins_registry (the DRA side).
    """
    directory = short_dir()
    if registry is not None:
        options["registry_dir"] = directory / registry
    try:
        async with KubeletSimulator(directory, write_snapshot_file=False, **options) as sim:
            yield sim
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def count_is(n: int) -> Callable[[tuple[DeviceInfo, ...]], bool]:
    """A device-list predicate: exactly `n` devices."""
    return lambda devices: len(devices) == n


def plugin_args(kubelet_dir: Path, profile: str, *extra: str) -> list[str]:
    return ["--mock-nvml", profile, "--kubelet-socket", str(kubelet_dir / "kubelet.sock"), *extra]


def base_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {k: v for k, v in os.environ.items() if k in keep} | {"PYTHONPATH": str(REPO / "src")}


class Process:
    """A child process with its stderr in a temporary file and /proc readings."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.env = base_env() | dict(env or {})
        self.proc: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()

    async def start(self) -> float:
        """Exec the process; returns the monotonic time taken just before the exec."""
        self.started_at = time.monotonic()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=self._log,
        )
        return self.started_at

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def stderr(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def cpu_seconds(self) -> float:
        """User plus system CPU time of every thread of the process so far."""
        raw = Path(f"/proc/{self.pid}/stat").read_text()
        # The command name may hold spaces; the fields after it are fixed.
        fields = raw.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS

    def cpu_ns(self) -> int:
        """CPU time of the live threads in nanoseconds (scheduler statistics).

        Finer than `cpu_seconds`, which counts in clock ticks, but blind to
        threads that have already exited: use it for short intervals only.
        """
        total = 0
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # the thread exited while we looked
        return total

    def memory_kib(self, key: str = "VmRSS") -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise LookupError(f"{key} not in /proc/{self.pid}/status")

    async def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    def close(self) -> None:
        self._log.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.stop()
        finally:
            self.close()

    def failure(self, what: str) -> RuntimeError:
        return RuntimeError(f"{what}; stderr tail:\n{self.stderr[-3000:]}")


class Plugin(Process):
    """The real `nvidia-device-plugin`, with its inspection endpoint and its
    probes' listener on free ports, as the chart deploys it."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        self.port, self.probe_port = free_port(), free_port()
        argv = [sys.executable, "-m", "reconciler", *args]
        addresses = ["--state-address", f"127.0.0.1:{self.port}"]
        addresses += ["--probe-address", f"127.0.0.1:{self.probe_port}"]
        super().__init__([*argv, *addresses], env=env)

    async def get(self, path: str) -> tuple[int, bytes]:
        reply = await http_get(self.port, path)
        return reply.status, reply.body

    async def wait_state(
        self, predicate: Callable[[dict[str, Any]], bool], *, timeout: float = 20.0
    ) -> dict[str, Any]:
        """Poll `/state` until `predicate` holds (the plugin has no push channel for it)."""
        last: Any = None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if not self.alive():
                        raise self.failure("plugin exited")
                    try:
                        status, body = await self.get("/state")
                        if status == 200:
                            last = json.loads(body)
                            if predicate(last):
                                return dict(last)
                    except OSError:
                        pass
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise self.failure(f"/state never matched; last: {json.dumps(last)[:1500]}") from None


async def pause(rng: random.Random) -> None:
    """50 to 150 ms: spaces repetitions so a polling plugin is met at every phase."""
    await asyncio.sleep(0.05 + rng.uniform(0, 0.1))


def floor_argv(*args: str) -> list[str]:
    return [sys.executable, str(FLOOR_SCRIPT), *args]


async def wait_socket(path: Path, process: Process, timeout: float = 20.0) -> None:
    """Wait for a unix socket to accept connections (the floor prints nothing)."""
    async with asyncio.timeout(timeout):
        while True:
            if not process.alive():
                raise process.failure(f"{process.argv[1]} exited")
            try:
                _, writer = await asyncio.open_unix_connection(str(path))
            except OSError:
                await asyncio.sleep(0.005)
                continue
            writer.close()
            await writer.wait_closed()
            return
