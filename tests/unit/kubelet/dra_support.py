"""Test doubles for the DRA kubelet plugin: a scripted preparer, raw clients, directories.

The preparer answers from a script (per-claim results, or an exception) and
records every call, so the servicer's translation is asserted from the inputs.
`read_only_directory` makes a directory no process can write in, root included
(a read-only tmpfs where mounting is allowed, else permissions), and gives it
back writable, so a test can show the failure and then the retry. `FakeRegistration`
says whatever a test wants in GetInfo, to show what the simulated kubelet refuses.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc import aio

from kubelet.api.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet.api.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from kubelet.dra.types import ClaimRef, PreparedDevice, PrepareResult

DRIVER = "gpu.example.com"
MS_RDONLY = 1
MNT_DETACH = 2


def device(name: str, *cdi: str, requests: tuple[str, ...] = ("gpu",)) -> PreparedDevice:
    return PreparedDevice(
        request_names=requests,
        pool_name="node-a",
        device_name=name,
        cdi_device_ids=cdi or (f"k8s.{DRIVER}/claim={name}",),
    )


@dataclass
class ScriptedPreparer:
    """Answers `results[uid]` (default: one device named after the claim), or raises."""

    results: dict[str, PrepareResult] = field(default_factory=dict)
    unprepare_errors: dict[str, str] = field(default_factory=dict)
    raises: Exception | None = None
    omit: set[str] = field(default_factory=set)
    prepared: list[list[ClaimRef]] = field(default_factory=list)
    unprepared: list[list[ClaimRef]] = field(default_factory=list)

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        self.prepared.append(list(claims))
        if self.raises is not None:
            raise self.raises
        return {
            c.uid: self.results.get(c.uid, PrepareResult(devices=(device(f"dev-{c.name}"),)))
            for c in claims
            if c.uid not in self.omit
        }

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        self.unprepared.append(list(claims))
        if self.raises is not None:
            raise self.raises
        return {
            c.uid: self.unprepare_errors.get(c.uid, "") for c in claims if c.uid not in self.omit
        }


@contextlib.contextmanager
def read_only_directory(parent: Path) -> Iterator[tuple[Path, Callable[[], None]]]:
    """A directory nobody can create files in; the second item makes it writable again."""
    target = parent / "ro"
    target.mkdir()
    if os.geteuid() != 0:
        target.chmod(0o555)
        try:
            yield target, lambda: target.chmod(0o755)
        finally:
            target.chmod(0o755)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    path = os.fsencode(target)
    if libc.mount(b"tmpfs", path, b"tmpfs", MS_RDONLY, b"size=64k") != 0:
        pytest.skip(f"cannot mount a read-only tmpfs: {os.strerror(ctypes.get_errno())}")
    mounted = [True]

    def writable() -> None:
        if mounted[0]:
            libc.umount2(path, MNT_DETACH)
            mounted[0] = False

    try:
        yield target, writable
    finally:
        writable()


class FakeRegistration(registration_grpc.RegistrationServicer):
    """A registration socket answering GetInfo with whatever a test says; records statuses."""

    def __init__(self, socket_path: Path, info: registration_pb2.PluginInfo) -> None:
        self.socket_path = socket_path
        self.info = info
        self.statuses: list[tuple[bool, str]] = []
        self._server: aio.Server | None = None

    async def GetInfo(self, request, context):
        return self.info

    async def NotifyRegistrationStatus(self, request, context):
        self.statuses.append((request.plugin_registered, request.error))
        return registration_pb2.RegistrationStatusResponse()

    async def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        server = aio.server()
        registration_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0)


async def serve_only(
    socket_path: Path, handlers: Sequence[grpc.GenericRpcHandler]
) -> aio.Server:
    """A plain gRPC server with just `handlers` on `socket_path` (the caller stops it)."""
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    server = aio.server()
    server.add_generic_rpc_handlers(tuple(handlers))
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    return server
