"""Failures talking to the Kubernetes API, reduced to one readable line.

The official client surfaces three families of errors: `ApiException` for an
HTTP answer outside 2xx (its body is usually a Kubernetes `Status` with the
real explanation), urllib3 errors for connection trouble (refused, timed out,
dropped mid-stream), and plain decoding errors. Operators read these in the
plugin's log and on the inspection endpoint, so each becomes a single line
that names what was being done and why it failed, without tracebacks or
object reprs. Every such failure is transient for the reconcile loop: the API
server, the network or RBAC can all come right without the plugin changing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from urllib3 import exceptions as urllib3_errors

from foundation.errors import TransientError
from kube.official import ApiException

_MAX_LEN = 300
_NEW_CONNECTION = "Failed to establish a new connection: "


class KubeError(TransientError):
    """A Kubernetes API request failed; the message is one line for the log."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @classmethod
    def wrap(cls, action: str, exc: BaseException) -> KubeError:
        """`"<action>: <why>"`, keeping the HTTP status when there was one."""
        status = exc.status if isinstance(exc, ApiException) else None
        if isinstance(exc, KubeError):
            status = exc.status
        return cls(f"{action}: {describe(exc)}", status=status)


def describe(exc: BaseException) -> str:
    """One line saying why a request failed, for people rather than debuggers."""
    return _one_line(_describe(exc))


def status_message(status: object, reason: object, body: object) -> str:
    """`HTTP <code> <reason>: <Status.message>`, the message taken from a Status body."""
    text = f"HTTP {status} {reason or ''}".rstrip()
    message = _status_body_message(body)
    return f"{text}: {message}" if message else text


def _describe(exc: BaseException) -> str:
    match exc:
        case KubeError():
            return str(exc)
        case ApiException():
            return status_message(exc.status, exc.reason, exc.body)
        case urllib3_errors.MaxRetryError() if exc.reason is not None:
            return _describe(exc.reason)
        case urllib3_errors.NewConnectionError():
            detail = str(exc)
            if _NEW_CONNECTION in detail:
                detail = detail.split(_NEW_CONNECTION, 1)[1]
            return f"cannot connect to the API server: {_strip_errno(detail)}"
        case urllib3_errors.ConnectTimeoutError():
            return "connecting to the API server timed out"
        case urllib3_errors.ReadTimeoutError() | TimeoutError():
            return "the API server did not answer in time (read timed out)"
        case urllib3_errors.ProtocolError():
            cause = exc.args[1] if len(exc.args) > 1 else None
            why = _describe(cause) if isinstance(cause, BaseException) else str(exc)
            return f"the connection to the API server broke: {why}"
        case urllib3_errors.SSLError():
            return f"TLS with the API server failed: {exc}"
        case urllib3_errors.HTTPError():
            return f"HTTP transport error: {exc}"
        case ConnectionError():
            return f"the connection to the API server broke: {_strip_errno(str(exc))}"
        case json.JSONDecodeError():
            return f"the API server sent something that is not JSON ({exc.msg})"
        case _:
            text = str(exc)
            return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _status_body_message(body: object) -> str:
    """The message of a Status: an HTTP body (text), or an ERROR event's object (decoded)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, Mapping):
        data: object = body
    elif not isinstance(body, str) or not body.strip():
        return ""
    else:
        try:
            data = json.loads(body)
        except ValueError:
            return body.strip()
    if isinstance(data, Mapping) and isinstance(data.get("message"), str):
        return str(data["message"])
    return ""


def _strip_errno(text: str) -> str:
    # "[Errno 111] Connection refused" reads better as "connection refused".
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text.strip())
    return text[:1].lower() + text[1:]


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_LEN else text[: _MAX_LEN - 1] + "…"
