"""A tiny GET-only HTTP/1.1 server on asyncio streams.

No web framework: four fixed routes, bounded request size, a read timeout and
`Connection: close`. Handlers are callables returning (status, content type,
body) from data already in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from http import HTTPStatus

Response = tuple[int, str, bytes]
Route = Callable[[], Response]

MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_SECONDS = 5.0


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9040`` for IPv6, ``:9040`` for every local address).

    Raises:
        ValueError: not HOST:PORT with a port from 0 to 65535 (one line).
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"invalid address {address!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def _render(status: int, content_type: str, body: bytes, *, head: bool = False) -> bytes:
    reason = HTTPStatus(status).phrase
    header = (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return header if head else header + body


class InspectionServer:
    def __init__(self, *, host: str, port: int, routes: Mapping[str, Route]) -> None:
        self.host, self.port = host, port
        self._routes = dict(routes)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_REQUEST_BYTES
        )
        sockets = self._server.sockets
        if sockets and self.port == 0:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _respond(self, method: str, target: str) -> bytes:
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _render(405, "text/plain; charset=utf-8", b"only GET is supported\n")
        route = self._routes.get(path)
        if route is None:
            return _render(404, "text/plain; charset=utf-8", b"not found\n")
        status, content_type, body = route()
        return _render(status, content_type, body, head=method == "HEAD")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                head = await reader.readuntil(b"\r\n\r\n")
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) != 3:
                writer.write(_render(400, "text/plain; charset=utf-8", b"bad request\n"))
            else:
                writer.write(self._respond(parts[0], parts[1]))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
