"""`/healthz`, `/readyz` and `/metrics` for the side programs (GFD and the MPS daemon).

The plugin has its own richer endpoint (``/state`` as well); the labeller and
the MPS control-daemon manager get the three paths a kubelet probe and a
Prometheus scrape need, on the same small server. Both are off unless an
address is given (``--metrics-address``): neither program listened on a port
in the reference, and with ``hostNetwork`` a port nobody asked for could
collide with something else on the node.

The MPS daemon runs on asyncio and starts the endpoint on its own loop, so an
answer from ``/healthz`` also proves that loop is not stuck. The labeller is
synchronous (it waits in ``sigtimedwait``), so `ThreadedEndpoint` runs the
server on a loop in a daemon thread; its health then comes from the
labeller's own progress, reported through the callables given here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable

from inspection.server import InspectionServer, Response, Route, split_address
from inspection.telemetry import CONTENT_TYPE, SideMetrics

__all__ = ["SideEndpoint", "ThreadedEndpoint"]

_TEXT = "text/plain; charset=utf-8"
_START_SECONDS = 10.0


def _probe(check: Callable[[], bool], good: bytes, bad: bytes) -> Route:
    def route() -> Response:
        ok = check()
        return (200 if ok else 503), _TEXT, good if ok else bad

    return route


class SideEndpoint:
    """The three routes of a side program, served at ``address`` (HOST:PORT)."""

    def __init__(
        self,
        address: str,
        metrics: SideMetrics,
        *,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
    ) -> None:
        host, port = split_address(address)
        routes: dict[str, Route] = {
            "/healthz": _probe(healthy, b"ok\n", b"stale\n"),
            "/readyz": _probe(ready, b"ready\n", b"not ready\n"),
            "/metrics": lambda: (200, CONTENT_TYPE, metrics.render()),
        }
        self.server = InspectionServer(host=host, port=port, routes=routes)

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        """Raises OSError when the address cannot be bound (in use, not local)."""
        try:
            await self.server.start()
        except OSError as error:
            if not error.errno:
                raise
            # asyncio words it as a sentence about a tuple; the plain reason reads better.
            raise OSError(error.errno, os.strerror(error.errno)) from None

    async def stop(self) -> None:
        await self.server.stop()


class ThreadedEndpoint:
    """Runs a `SideEndpoint` on an event loop of its own, in a daemon thread.

    Start it after the program has blocked its signals: the thread inherits
    the mask, so signals keep reaching the program's own wait.
    """

    def __init__(self, endpoint: SideEndpoint) -> None:
        self.endpoint = endpoint
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> None:
        """Returns once the server listens. Raises OSError when it cannot."""
        bound = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                await self.endpoint.start()
            except BaseException as error:  # handed to the starting thread
                failure.append(error)
                bound.set()
                return
            bound.set()
            try:
                await self._stop.wait()
            finally:
                await self.endpoint.stop()

        def thread() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(main())
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=thread, name="metrics endpoint", daemon=True)
        self._thread.start()
        if not bound.wait(_START_SECONDS):
            raise OSError(f"the endpoint did not start within {_START_SECONDS:g}s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]

    @property
    def port(self) -> int:
        return self.endpoint.port

    def stop(self) -> None:
        thread, loop, stop = self._thread, self._loop, self._stop
        self._thread = None
        if thread is None or loop is None or stop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(stop.set)
        thread.join(_START_SECONDS)
