"""The plugin process against the kubelet simulator: registration, /state, one Allocate.

The plugin runs as its own process (`python -m reconciler`), exactly as it
would on a node, pointed at a kubelet simulator serving a temporary
device-plugin directory and at a temporary CDI spec directory, so nothing
outside those directories is written. The step waits for the first resource
to register with at least one device, prints the plugin's `/state`, asks for
one device the way the kubelet does for a pod, prints the answer, and stops
the plugin with SIGTERM, expecting a clean exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

from google.protobuf import json_format

from kubelet_sim.engine import KubeletSimulator
from kubelet_sim.model import Snapshot

from .steps import Backend, Emit, StepResult

STOP_SECONDS = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: gpu-check\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def _state(port: int, timeout: float) -> dict[str, Any]:
    """`/state` once the first pass is over (registration is part of it, so the
    kubelet can see the devices a moment before `/state` says `serving`)."""
    async with asyncio.timeout(timeout):
        while True:
            with contextlib.suppress(ConnectionError, OSError, IndexError, ValueError):
                status, body = await http_get(port, "/state")
                data: dict[str, Any] = json.loads(body) if status == 200 else {}
                if data.get("state", "init") != "init":
                    return data
            await asyncio.sleep(0.1)


def _first_resource(snap: Snapshot) -> bool:
    return any(view.registered and view.devices for view in snap.resources)


class PluginExited(Exception):
    """The plugin process ended before registering."""


async def _registered(
    sim: KubeletSimulator, plugin: asyncio.subprocess.Process, timeout: float
) -> Snapshot:
    """The first snapshot with a registered resource, unless the plugin exits first."""
    registered = asyncio.create_task(sim.wait_for(_first_resource, timeout=timeout))
    exited = asyncio.create_task(plugin.wait())
    try:
        await asyncio.wait({registered, exited}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (registered, exited):
            task.cancel()
        await asyncio.gather(registered, exited, return_exceptions=True)
    if registered.done() and not registered.cancelled() and registered.exception() is None:
        return registered.result()
    if plugin.returncode is not None:
        raise PluginExited(f"the plugin exited with code {plugin.returncode} before registering")
    raise TimeoutError


async def _exercise(
    sim: KubeletSimulator,
    plugin: asyncio.subprocess.Process,
    port: int,
    emit: Emit,
    timeout: float,
) -> tuple[bool, str]:
    snap = await _registered(sim, plugin, timeout)
    view = sorted((v for v in snap.resources if v.registered and v.devices), key=lambda v: v.name)[
        0
    ]
    emit(
        f"registered {view.name} ({view.endpoint}) with {len(view.devices)} device(s), "
        f"{len(view.healthy_ids)} healthy"
    )
    for device in view.devices:
        numa = ",".join(map(str, device.numa_nodes)) or "-"
        emit(f"  {device.id}  {device.health}  NUMA {numa}")
    state = await _state(port, timeout)
    emit("/state:")
    for line in json.dumps(state, indent=2, sort_keys=True).splitlines():
        emit(f"  {line}")
    if not view.healthy_ids:
        return False, f"{view.name}: no healthy device to allocate"
    chosen = sorted(view.healthy_ids)[0]
    response = await sim.allocate(view.name, [[chosen]])
    emit(f"Allocate({view.name}, [{chosen}]) ->")
    for line in json_format.MessageToJson(response, indent=2).splitlines():
        emit(f"  {line}")
    if len(response.container_responses) != 1:
        return False, f"Allocate answered {len(response.container_responses)} containers"
    return True, f"{view.name}: {len(view.devices)} device(s) registered, Allocate answered"


def _plugin_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


async def _run(backend: Backend, emit: Emit, timeout: float, log: IO[bytes]) -> StepResult:
    with tempfile.TemporaryDirectory(prefix="gpuck-", dir="/tmp") as tmp:
        plugin_dir = Path(tmp) / "dp"
        cdi_dir = Path(tmp) / "cdi"
        port = free_port()
        args = [
            *backend.plugin_args(),
            "--kubelet-socket",
            str(plugin_dir / "kubelet.sock"),
            "--state-address",
            f"127.0.0.1:{port}",
            "--cdi-spec-dir",
            str(cdi_dir),
        ]
        async with KubeletSimulator(plugin_dir, write_snapshot_file=False) as sim:
            emit(f"kubelet simulator on {sim.socket_path}")
            emit(f"running: nvidia-device-plugin {' '.join(args)}")
            plugin = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "reconciler",
                *args,
                env=_plugin_env(),
                stdout=log,
                stderr=log,
            )
            try:
                ok, summary = await _exercise(sim, plugin, port, emit, timeout)
            except PluginExited as exc:
                ok, summary = False, str(exc)
            except TimeoutError:
                ok, summary = False, f"no resource registered with devices within {timeout:.0f}s"
            except Exception as exc:
                ok, summary = False, f"{type(exc).__name__}: {exc}"
            finally:
                ended = await _stop(plugin)
        emit(f"plugin exited with code {ended}")
        if ok and ended != "0 after SIGTERM":
            ok, summary = False, f"plugin exited with code {ended}"
        return StepResult("plugin", ok, summary)


async def _stop(plugin: asyncio.subprocess.Process) -> str:
    """Stop the plugin if it still runs; says how it ended (`0 after SIGTERM` is clean)."""
    if plugin.returncode is not None:
        return f"{plugin.returncode} on its own"
    plugin.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(STOP_SECONDS):
            await plugin.wait()
    except TimeoutError:
        plugin.kill()
        await plugin.wait()
        return f"{plugin.returncode} (killed: SIGTERM was not honoured in {STOP_SECONDS:.0f}s)"
    return f"{plugin.returncode} after SIGTERM"


def plugin_step(backend: Backend, emit: Emit, *, timeout: float) -> StepResult:
    """Run the whole plugin exchange; on failure the plugin's last log lines are printed."""
    with tempfile.TemporaryFile() as log:
        result = asyncio.run(_run(backend, emit, timeout, log))
        if not result.ok:
            log.seek(0)
            for line in log.read().decode(errors="replace").splitlines()[-40:]:
                emit(f"plugin log: {line}")
    return result
