"""The side programs' endpoint over real HTTP: on the caller's loop, and from a thread."""

from __future__ import annotations

import http.client
import socket
import threading

import pytest

from inspection.side import SideEndpoint, ThreadedEndpoint
from inspection.telemetry import SideMetrics
from tests.e2e.harness import http_get


def get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


async def test_probes_follow_their_callables_and_metrics_render() -> None:
    state = {"healthy": True, "ready": False}
    metrics = SideMetrics("side_")
    metrics.reading("answer", "the answer", lambda: 42)
    endpoint = SideEndpoint(
        "127.0.0.1:0",
        metrics,
        healthy=lambda: state["healthy"],
        ready=lambda: state["ready"],
    )
    await endpoint.start()
    try:
        assert (await http_get(endpoint.port, "/healthz")).status == 200
        assert (await http_get(endpoint.port, "/readyz")).status == 503
        state["ready"], state["healthy"] = True, False
        assert (await http_get(endpoint.port, "/readyz")).status == 200
        assert (await http_get(endpoint.port, "/healthz")).status == 503
        body = (await http_get(endpoint.port, "/metrics")).body.decode()
        assert "side_answer 42.0" in body
        assert "side_build_info{" in body
        assert "process_resident_memory_bytes" in body
        assert (await http_get(endpoint.port, "/state")).status == 404
        assert (await http_get(endpoint.port, "/metrics", method="POST")).status == 405
    finally:
        await endpoint.stop()


def test_bad_address_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        SideEndpoint("localhost", SideMetrics("a_"), healthy=lambda: True, ready=lambda: True)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        SideEndpoint("h:99999", SideMetrics("b_"), healthy=lambda: True, ready=lambda: True)


def test_threaded_endpoint_serves_a_program_without_a_loop() -> None:
    before = threading.active_count()
    ready = threading.Event()
    endpoint = ThreadedEndpoint(
        SideEndpoint("127.0.0.1:0", SideMetrics("t_"), healthy=lambda: True, ready=ready.is_set)
    )
    endpoint.start()
    try:
        assert get(endpoint.port, "/healthz") == (200, b"ok\n")
        assert get(endpoint.port, "/readyz") == (503, b"not ready\n")
        ready.set()
        assert get(endpoint.port, "/readyz") == (200, b"ready\n")
    finally:
        endpoint.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", endpoint.port), 1).close()
    assert threading.active_count() == before
    endpoint.stop()  # a second stop is harmless


def test_threaded_endpoint_reports_a_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        before = threading.active_count()
        endpoint = ThreadedEndpoint(
            SideEndpoint(
                f"127.0.0.1:{port}", SideMetrics("u_"), healthy=lambda: True, ready=lambda: True
            )
        )
        with pytest.raises(OSError, match="Address already in use"):
            endpoint.start()
        assert threading.active_count() == before
