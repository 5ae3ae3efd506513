"""Why a request failed, in one line an operator can act on."""

from __future__ import annotations

import json
import socket

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from foundation.errors import TransientError
from kube.errors import KubeError, describe, status_message


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _refused(retries: bool | int) -> BaseException:
    pool = urllib3.PoolManager(retries=retries)
    try:
        pool.request("GET", f"http://127.0.0.1:{_closed_port()}/api", timeout=2.0)
    except urllib3.exceptions.HTTPError as exc:
        return exc
    finally:
        pool.clear()
    raise AssertionError("the request unexpectedly succeeded")


@pytest.mark.parametrize(
    "retries", [pytest.param(False, id="bare"), pytest.param(1, id="after-retries")]
)
def test_refused_connection(retries: bool | int) -> None:
    assert describe(_refused(retries)) == "cannot connect to the API server: connection refused"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            json.dumps({"kind": "Status", "code": 403, "message": 'nodes "n1" is forbidden'}),
            'HTTP 403 Forbidden: nodes "n1" is forbidden',
            id="status-body",
        ),
        pytest.param(
            "upstream connect error", "HTTP 403 Forbidden: upstream connect error", id="text-body"
        ),
        pytest.param("", "HTTP 403 Forbidden", id="no-body"),
        pytest.param(
            json.dumps(["not", "a", "status"]), "HTTP 403 Forbidden", id="json-not-status"
        ),
    ],
)
def test_http_errors_quote_the_status_message(body: str, expected: str) -> None:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = body
    assert describe(exc) == expected


def test_an_error_event_status_object_is_quoted_too() -> None:
    """A watch's ERROR event carries the Status already decoded."""
    obj = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd is down"}
    assert status_message(500, "InternalError", obj) == "HTTP 500 InternalError: etcd is down"
    assert status_message(500, None, {"code": 500}) == "HTTP 500"


def test_messages_are_single_bounded_lines() -> None:
    text = describe(RuntimeError("first line\n  second line\tthird " + "x" * 500))
    assert "\n" not in text
    assert text.startswith("RuntimeError: first line second line third x")
    assert len(text) == 300
    assert text.endswith("…")


def test_wrap_names_the_action_and_keeps_the_status() -> None:
    exc = ApiException(status=500, reason="Internal Server Error")
    wrapped = KubeError.wrap("listing node n1", exc)
    assert str(wrapped) == "listing node n1: HTTP 500 Internal Server Error"
    assert wrapped.status == 500
    assert isinstance(wrapped, TransientError)
    assert KubeError.wrap("again", wrapped).status == 500
    assert KubeError.wrap("plain", ValueError("bad")).status is None
