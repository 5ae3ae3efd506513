"""The inspection endpoint under many clients: probes always answer, the rest is capped.

A real server on an ephemeral port and real HTTP over TCP. The slow route
used to fill the slots waits on an event the test sets, so "every slot is
taken" is a state the test holds, not a timing guess.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import socket
from collections.abc import AsyncIterator

import pytest

from inspection.server import (
    PROBES,
    InspectionServer,
    ProbeEndpoint,
    Response,
    Route,
    ThreadedEndpoint,
)
from tests.waiting import eventually

WAIT = 10.0


async def get(port: int, path: str, *, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


class Gate:
    """A route that holds every request until `open` is set, counting those it holds."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.held = 0
        self.all_held = asyncio.Event()
        self.expect = 0

    async def __call__(self) -> Response:
        self.held += 1
        if self.held >= self.expect:
            self.all_held.set()
        await self.open.wait()
        return 200, "application/json", b'{"big": true}\n'


@pytest.fixture
async def gated() -> AsyncIterator[tuple[InspectionServer, Gate]]:
    gate = Gate()
    routes = {
        "/healthz": lambda: (200, "text/plain", b"ok\n"),
        "/readyz": lambda: (503, "text/plain", b"not ready\n"),
        "/state": gate,
    }
    server = InspectionServer(host="127.0.0.1", port=0, routes=routes, max_active=4, admit_wait=0.2)
    await server.start()
    try:
        yield server, gate
    finally:
        gate.open.set()
        await server.stop()


async def test_probes_answer_while_every_slot_is_taken(
    gated: tuple[InspectionServer, Gate],
) -> None:
    server, gate = gated
    gate.expect = 4
    slow = [asyncio.ensure_future(get(server.port, "/state")) for _ in range(4)]
    await asyncio.wait_for(gate.all_held.wait(), WAIT)
    assert {"/healthz", "/readyz"} == PROBES
    status, _, body = await get(server.port, "/healthz")
    assert (status, body) == (200, b"ok\n")
    status, _, _ = await get(server.port, "/readyz")
    assert status == 503  # the route's own answer, not a refusal
    gate.open.set()
    for reply in await asyncio.gather(*slow):
        assert reply[0] == 200


async def test_a_request_beyond_the_cap_is_told_to_come_back(
    gated: tuple[InspectionServer, Gate],
) -> None:
    server, gate = gated
    gate.expect = 4
    slow = [asyncio.ensure_future(get(server.port, "/state")) for _ in range(4)]
    await asyncio.wait_for(gate.all_held.wait(), WAIT)
    status, headers, body = await get(server.port, "/state")
    assert status == 503
    assert headers["Retry-After"] == "1"
    assert body == b"busy, try again\n"
    assert server.refused == 1
    gate.open.set()
    await asyncio.gather(*slow)
    # The slots were given back: the next request is served.
    gate.expect = 0
    status, _, body = await get(server.port, "/state")
    assert (status, body) == (200, b'{"big": true}\n')


async def test_a_request_that_waits_briefly_gets_a_freed_slot(
    gated: tuple[InspectionServer, Gate],
) -> None:
    server, gate = gated
    gate.expect = 4
    slow = [asyncio.ensure_future(get(server.port, "/state")) for _ in range(4)]
    await asyncio.wait_for(gate.all_held.wait(), WAIT)
    waiting = asyncio.ensure_future(get(server.port, "/state"))
    # The server keeps a count, not an event, of the requests queued for a slot.
    await eventually(lambda: server.waiting > 0, what="a request queued for a slot", timeout=WAIT)
    gate.open.set()
    assert (await waiting)[0] == 200
    await asyncio.gather(*slow)
    assert server.refused == 0


async def test_unknown_paths_methods_and_garbage() -> None:
    server = InspectionServer(
        host="127.0.0.1", port=0, routes={"/healthz": lambda: (200, "text/plain", b"ok\n")}
    )
    await server.start()
    try:
        assert (await get(server.port, "/nope"))[0] == 404
        assert (await get(server.port, "/healthz", method="POST"))[0] == 405
        status, headers, body = await get(server.port, "/healthz", method="HEAD")
        assert (status, headers["Content-Length"], body) == (200, "3", b"")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"nonsense\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.read(), WAIT)).startswith(b"HTTP/1.1 400")
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop()


def blocking_get(port: int, path: str) -> bytes:
    """A GET that needs no event loop: the caller's loop may be held meanwhile."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as connection:
        connection.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_probe_endpoint_serves_the_probes_alone_on_its_own_thread() -> None:
    calls: list[str] = []

    def route(path: str) -> Response:
        calls.append(path)
        return 200, "text/plain", f"{path}\n".encode()

    routes = {path: functools.partial(route, path) for path in ("/healthz", "/readyz", "/state")}
    probes = ProbeEndpoint(host="127.0.0.1", port=0, routes=routes)
    await probes.start()
    try:
        assert (await get(probes.port, "/healthz"))[2] == b"/healthz\n"
        assert (await get(probes.port, "/readyz"))[2] == b"/readyz\n"
        assert (await get(probes.port, "/state"))[0] == 404
        assert (await get(probes.port, "/metrics"))[0] == 404
        # Answered while this loop is held in a blocking call: the listener
        # does not take turns with the loop that serves the kubelet.
        assert blocking_get(probes.port, "/healthz").endswith(b"\r\n\r\n/healthz\n")
        assert calls == ["/healthz", "/readyz", "/healthz"]
    finally:
        await probes.stop()
    # Stopped means nothing listens there any more (connections in TIME_WAIT
    # remain, as after any server closes, hence SO_REUSEADDR).
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", probes.port))


async def test_probe_endpoint_on_a_taken_port_raises() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        probes = ProbeEndpoint(host="127.0.0.1", port=taken.getsockname()[1], routes={})
        with pytest.raises(OSError, match="in use"):
            await probes.start()
        await probes.stop()



async def test_out_of_descriptors_for_a_handoff_is_a_busy_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes: dict[str, Route] = {
        "/healthz": lambda: (200, "text/plain", b"ok\n"),
        "/state": lambda: (200, "application/json", b"{}\n"),
    }
    endpoint = ThreadedEndpoint(InspectionServer(host="127.0.0.1", port=0, routes=routes))
    await endpoint.start()
    try:
        assert (await get(endpoint.port, "/state"))[0] == 200

        def no_descriptors(self: object) -> socket.socket:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

        monkeypatch.setattr(asyncio.trsock.TransportSocket, "dup", no_descriptors)
        status, headers, _ = await get(endpoint.port, "/state")
        assert (status, headers["Retry-After"]) == (503, "1")
        assert endpoint.server.refused == 1
        assert (await get(endpoint.port, "/healthz"))[0] == 200  # probes need no handoff
        monkeypatch.undo()
        assert (await get(endpoint.port, "/state"))[0] == 200
    finally:
        await endpoint.stop()
