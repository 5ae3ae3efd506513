"""Run the real `nvidia-device-plugin` process and talk to it like a kubelet and a probe would.

The plugin runs as a subprocess (`python -m reconciler`) against a kubelet
simulator living in the test's event loop; its inspection endpoint is read over
real HTTP. Waits are on conditions: the simulator's own condition variable, or
the plugin's `/state` until a predicate holds, each bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port *below* the ephemeral range.

    A port the kernel hands out with bind(0) comes from the range it also
    uses for outgoing connections; the many short HTTP connections of these
    tests could take it before the plugin binds it.
    """
    high = _ephemeral_low() - 1
    while True:
        port = random.randint(max(1024, high - 20000), high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


@dataclass
class HttpReply:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def http_get(port: int, path: str, *, method: str = "GET") -> HttpReply:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return HttpReply(status=status, body=body)


class PluginProcess:
    """One `nvidia-device-plugin` process with its own state port."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.port = port or free_port()
        # A command that ends by exec'ing its arguments (e.g. `unshare` setting up mounts).
        self.wrapper = list(wrapper)
        self.args = [*args, "--state-address", f"127.0.0.1:{self.port}"]
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        self.env = {**base, "PYTHONPATH": str(REPO / "src"), **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        # A file, not a pipe: a chatty plugin must never block on a full pipe.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in __aexit__
        self._final_log = ""

    async def start(self) -> PluginProcess:
        self.proc = await asyncio.create_subprocess_exec(
            *self.wrapper,
            sys.executable,
            "-m",
            "reconciler",
            *self.args,
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=self._log,
        )
        return self

    @property
    def stderr(self) -> str:
        if self._log.closed:
            return self._final_log
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    async def wait_exit(self, timeout: float = 10.0) -> int:
        assert self.proc is not None
        async with asyncio.timeout(timeout):
            await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode

    async def terminate(self, timeout: float = 5.0) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await self.wait_exit(timeout)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    async def get(self, path: str) -> HttpReply:
        return await http_get(self.port, path)

    async def state(self) -> dict[str, Any]:
        reply = await self.get("/state")
        assert reply.status == 200
        data: dict[str, Any] = reply.json()
        return data

    async def wait_state(
        self, predicate: Callable[[dict[str, Any]], bool], *, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Read `/state` until `predicate` holds; fail with the last state seen."""
        last: list[dict[str, Any]] = []

        async def matching() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.returncode is not None:
                raise AssertionError(f"plugin exited: {self.stderr[-2000:]}")
            state = await self.state()
            last[:] = [state]
            return state if predicate(state) else None

        return await eventually(
            matching,
            what="the plugin's /state to match",
            timeout=timeout,
            ignoring=(ConnectionError, OSError),
            detail=lambda: json.dumps(last[0])[:3000] if last else "no answer",
        )

    async def __aenter__(self) -> PluginProcess:
        # A process started before the `async with` is the one it stops.
        if self.proc is None:
            await self.start()
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            # Shown by pytest with the failure: what the plugin said meanwhile.
            print(f"--- plugin stderr (last 4000 characters) ---\n{self.stderr[-4000:]}")
        if self.proc is not None and self.proc.returncode is None:
            try:
                await self.terminate()
            except TimeoutError:
                await self.kill()
        self._final_log = self.stderr
        self._log.close()


def plugin_args(sock_dir: Path, profile: str = "dgx-a100", *extra: str) -> list[str]:
    return ["--mock-nvml", profile, "--kubelet-socket", str(sock_dir / "kubelet.sock"), *extra]


def write_atomically(path: Path, text: str) -> None:
    """Replace a config file as editors and ConfigMap updates do: a new file renamed over it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
