"""A tiny GET-only HTTP/1.1 server on asyncio streams.

No web framework: a few fixed routes, bounded request size, a read timeout and
`Connection: close`. Handlers return (status, content type, body) from data
already in memory, directly or as a coroutine (the `/state` body is rendered
in a thread once per change and awaited).

The plugin runs it on a thread of its own (`ThreadedEndpoint`), away from the
event loop that serves the kubelet, and it bounds what many clients at once
can cost:

* Probe routes (`PROBES`: `/healthz`, `/readyz`) answer a few bytes from
  memory and are never held back: a kubelet probe must not fail because a
  dashboard is polling `/state`. They can also have a port of their own
  (`ProbeEndpoint`), where no reader's connection queues ahead of them.
* Every other route takes one of `MAX_ACTIVE` slots for as long as its
  response is being written. A request that finds them all taken waits up
  to `ADMIT_WAIT_SECONDS` for one, then gets `503 Service Unavailable` with
  `Retry-After: 1`. Waiting briefly absorbs bursts; refusing after that keeps
  a flood from queueing without bound (each waiting response would hold a
  copy of a body that can be a megabyte).
* Writing a response has a deadline (`WRITE_TIMEOUT_SECONDS`), so a client
  that stops reading cannot hold a slot for ever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from http import HTTPStatus
from typing import Any

Response = tuple[int, str, bytes]
Route = Callable[[], Response | Awaitable[Response]]

MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_SECONDS = 5.0
WRITE_TIMEOUT_SECONDS = 10.0
CLOSE_TIMEOUT_SECONDS = 1.0
# Responses of non-probe routes being written at once, and how long a request
# waits for a turn before it is told to come back later. Few: a `/state` body
# can be a megabyte, and every one in flight is work for the loop that also
# answers the probes (measured with 300 clients: 8 halves the probes' tail
# compared with 64, and answers the same number of requests).
MAX_ACTIVE = 8
ADMIT_WAIT_SECONDS = 0.5
PROBES = frozenset({"/healthz", "/readyz"})
# Connections the kernel queues before they are accepted. asyncio's default
# of 100 overflows under a burst of clients, and a probe whose connection is
# dropped there waits a second for its retransmission.
BACKLOG = 1024

_TEXT = "text/plain; charset=utf-8"


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9040`` for IPv6, ``:9040`` for every local address).

    Raises:
        ValueError: not HOST:PORT with a port from 0 to 65535 (one line).
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"invalid address {address!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def _render(
    status: int,
    content_type: str,
    body: bytes,
    *,
    head: bool = False,
    extra: str = "",
) -> list[bytes]:
    """The response as separate header and body buffers (the body is not copied)."""
    reason = HTTPStatus(status).phrase
    header = (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{extra}"
        "Connection: close\r\n\r\n"
    ).encode()
    return [header] if head else [header, body]


_BUSY = _render(503, _TEXT, b"busy, try again\n", extra="Retry-After: 1\r\n")


class InspectionServer:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        routes: Mapping[str, Route],
        max_active: int = MAX_ACTIVE,
        admit_wait: float = ADMIT_WAIT_SECONDS,
    ) -> None:
        self.host, self.port = host, port
        self._routes = dict(routes)
        self._server: asyncio.Server | None = None
        self._slots = asyncio.Semaphore(max_active)
        self._admit_wait = admit_wait
        self.refused = 0  # requests turned away with 503 because every slot was taken
        # Where requests other than the probes go once their head is read: a
        # function given the connection (a duplicate the receiver owns), the
        # method and the path. None: answered on this server's own loop.
        self.handoff: Callable[[socket.socket, str, str], object] | None = None
        self.waiting = 0  # requests waiting for a slot now

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_REQUEST_BYTES, backlog=BACKLOG
        )
        sockets = self._server.sockets
        if sockets and self.port == 0:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _respond(self, method: str, path: str) -> list[bytes]:
        if method not in ("GET", "HEAD"):
            return _render(405, _TEXT, b"only GET is supported\n")
        route = self._routes.get(path)
        if route is None:
            return _render(404, _TEXT, b"not found\n")
        result = route()
        if inspect.isawaitable(result):
            result = await result
        status, content_type, body = result
        return _render(status, content_type, body, head=method == "HEAD")

    async def _admit(self) -> bool:
        self.waiting += 1
        try:
            async with asyncio.timeout(self._admit_wait):
                await self._slots.acquire()
        except TimeoutError:
            return False
        finally:
            self.waiting -= 1
        return True

    async def _write(self, writer: asyncio.StreamWriter, parts: list[bytes]) -> None:
        # One write per part: `writelines` would first join them, copying the
        # (shared, cached) body for every response.
        for part in parts:
            writer.write(part)
        async with asyncio.timeout(WRITE_TIMEOUT_SECONDS):
            await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                head = await reader.readuntil(b"\r\n\r\n")
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) != 3:
                await self._write(writer, _render(400, _TEXT, b"bad request\n"))
                return
            method, path = parts[0], parts[1].split("?", 1)[0]
            if path in PROBES:
                await self._write(writer, await self._respond(method, path))
                return
            connection = writer.get_extra_info("socket")
            if self.handoff is not None and connection is not None:
                # Answered on the worker's loop; this one stays free for probes.
                try:
                    duplicate = connection.dup()
                except OSError:  # out of descriptors under a flood: like a full house
                    self.refused += 1
                    await self._write(writer, _BUSY)
                    return
                self.handoff(duplicate, method, path)
                return
            await self._answer(writer, method, path)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ConnectionError:
            pass
        finally:
            await _close(writer)

    async def _answer(self, writer: asyncio.StreamWriter, method: str, path: str) -> None:
        if not await self._admit():
            self.refused += 1
            await self._write(writer, _BUSY)
            return
        try:
            await self._write(writer, await self._respond(method, path))
        finally:
            self._slots.release()

    async def answer_detached(self, connection: socket.socket, method: str, path: str) -> None:
        """Answer a request whose head another loop read (see `handoff`)."""
        try:
            _, writer = await asyncio.open_connection(sock=connection)
        except OSError:
            connection.close()
            return
        try:
            await self._answer(writer, method, path)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            await _close(writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
            await writer.wait_closed()
    except TimeoutError:
        writer.transport.abort()  # unsent data of a client that stopped reading
    except ConnectionError:
        pass


class ThreadedEndpoint:
    """An `InspectionServer` on threads and event loops of its own.

    The plugin's event loop serves the kubelet; a dashboard that polls
    `/state` on a node with thousands of devices, or 300 clients at once, must
    not take turns with Allocate on it. Here one thread accepts connections,
    reads each request's head and answers the probes at once, and a second
    thread writes every other response (megabytes of `/state` to many clients
    at a time), so neither the kubelet's calls nor the probes wait behind a
    flood of readers. The three share only the interpreter lock. Routes read
    published, immutable values only, so they are safe to call from here.

    The threads keep the process's CPU priority. Lowering theirs (nice +10)
    helped Allocate under a flood of readers when the plugin had the CPUs to
    itself, but on a node whose CPUs are saturated by workloads a niced
    thread holding the interpreter lock waits for a CPU while the kubelet's
    call waits for the lock: measured there, Allocate's p99 went from 17 ms
    to 33 ms.
    """

    def __init__(self, server: InspectionServer) -> None:
        self.server = server
        self._front = _LoopThread("inspection")
        self._worker = _LoopThread("inspection-worker")

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        """Listen; returns once the socket is bound.

        Raises:
            OSError: the address could not be bound (in use, not local).
        """
        await self._worker.start()
        worker = self._worker

        def handoff(connection: socket.socket, method: str, path: str) -> None:
            if not worker.submit(self.server.answer_detached(connection, method, path)):
                connection.close()

        self.server.handoff = handoff
        await self._front.start(self.server.start, self.server.stop)

    @property
    def running(self) -> bool:
        """Whether both its threads run."""
        return self._front.running and self._worker.running

    async def stop(self, grace: float = 5.0) -> bool:
        """Stop listening and end both threads; False when one did not end within `grace`."""
        front = await self._front.stop(grace)
        return await self._worker.stop(grace) and front


class ProbeEndpoint:
    """`/healthz` and `/readyz` alone, on a listener and a thread of their own.

    A kernel accept queue is first come, first served: on the shared
    endpoint a probe's connection waits behind every `/state` or `/metrics`
    client that connected before it (measured: 300 clients polling `/state`
    on a 4096-device node put the probe's p99 at 90 ms). Here nothing else
    connects, so a probe waits only for its own turn at the interpreter.
    Any other path answers 404.
    """

    def __init__(self, *, host: str, port: int, routes: Mapping[str, Route]) -> None:
        probes = {path: route for path, route in routes.items() if path in PROBES}
        self.server = InspectionServer(host=host, port=port, routes=probes)
        self._thread = _LoopThread("probes")

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        """Listen; returns once the socket is bound.

        Raises:
            OSError: the address could not be bound (in use, not local).
        """
        await self._thread.start(self.server.start, self.server.stop)

    @property
    def running(self) -> bool:
        return self._thread.running

    async def stop(self, grace: float = 5.0) -> bool:
        """Stop listening and end the thread; False when it did not end within `grace`."""
        return await self._thread.stop(grace)


class _LoopThread:
    """A thread running an event loop until told to stop.

    Its fields are written by the thread that starts and stops it: the new
    thread hands its loop and stop event back through a future, rather than
    setting them itself.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def start(
        self,
        setup: Callable[[], Awaitable[None]] | None = None,
        teardown: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run the loop; returns once `setup` (on that loop) has finished, or raises its error."""
        started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = (
            concurrent.futures.Future()
        )

        async def main() -> None:
            stopped = asyncio.Event()
            try:
                if setup is not None:
                    await setup()
            except BaseException as err:
                started.set_exception(err)
                return
            started.set_result((asyncio.get_running_loop(), stopped))
            await stopped.wait()
            if teardown is not None:
                await teardown()

        self._thread = threading.Thread(
            target=asyncio.run, args=(main(),), name=self._name, daemon=True
        )
        self._thread.start()
        loop, stopped = await asyncio.wrap_future(started)
        self._loop, self._stopped = loop, stopped

    def submit(self, work: Coroutine[Any, Any, None]) -> bool:
        """Schedule `work` on this loop from any thread; False (and `work` closed) if it ended."""
        loop = self._loop
        if loop is None or loop.is_closed():
            work.close()
            return False
        try:
            asyncio.run_coroutine_threadsafe(work, loop)
        except RuntimeError:  # closed meanwhile
            work.close()
            return False
        return True

    async def stop(self, grace: float = 5.0) -> bool:
        """Ask the loop to end and join the thread; False when it did not end within `grace`."""
        loop, stopped, thread = self._loop, self._stopped, self._thread
        if loop is not None and stopped is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop already ended
                loop.call_soon_threadsafe(stopped.set)
        if thread is None:
            return True
        await asyncio.to_thread(thread.join, grace)
        return not thread.is_alive()
