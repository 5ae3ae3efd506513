"""The requests node events need, on the official client, with plain JSON bodies.

Kept apart from the recorder so that the Kubernetes client, which takes a
second or more of CPU to import, is loaded by the recorder's own thread when
the first event needs it, never by the reconcile loop at start-up.

- The create body is handed over as a plain mapping. The client (v31+)
  validates it into its model and serialises it back, re-formatting the
  times with `datetime.isoformat()`, which leaves out a zero fraction; the
  API server then rejects the MicroTime. `micro_time` therefore never makes
  a time on a whole second.
- A series update is a JSON merge patch of `series` alone: the identifying
  fields of an Event cannot change once it exists.
- Every request has a `(connect, read)` timeout (see `kube.raw`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from kube import raw
from kube.client import ApiAccess, close_client
from kube.errors import KubeError
from kube.event_series import micro_time
from kube.official import ApiException, EventsV1Api

__all__ = ["EventApi"]

_NOT_FOUND = 404
_JSON = "application/json"


class EventApi:
    """Events in one namespace through one client (one connection pool, one thread)."""

    def __init__(self, access: ApiAccess, *, namespace: str, timeout: raw.Timeout) -> None:
        self.source = access.source
        self._client = access.new_client()
        self._events = EventsV1Api(self._client)
        self._namespace = namespace
        self._timeout = timeout

    def node_uid(self, node_name: str) -> str | None:
        """The Node's UID, or None when it cannot be read (missing, forbidden, unreachable)."""
        try:
            node = raw.read_node(self._client, node_name, timeout=self._timeout)
        except Exception:
            return None
        metadata = node.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        return uid if isinstance(uid, str) and uid else None

    def create(self, body: dict[str, Any]) -> None:
        """Create an Event; raises `KubeError` (with the HTTP status when there was one)."""
        try:
            response = self._events.create_namespaced_event(
                self._namespace,
                cast(Any, body),
                _content_type=_JSON,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            _finish(cast(raw.RawResponse, response))
        except Exception as exc:
            raise KubeError.wrap(f"posting node event {body.get('reason')}", exc) from exc

    def update_series(self, name: str, reason: str, count: int, last: datetime) -> bool:
        """Patch an Event's series; False when the object no longer exists.

        Raises:
            KubeError: any other failure.
        """
        patch = {"series": {"count": count, "lastObservedTime": micro_time(last)}}
        try:
            response = self._events.patch_namespaced_event(
                name,
                self._namespace,
                patch,
                _content_type=raw.MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            _finish(cast(raw.RawResponse, response))
        except ApiException as exc:
            if exc.status == _NOT_FOUND:
                return False
            raise KubeError.wrap(f"updating node event {reason}", exc) from exc
        except Exception as exc:
            raise KubeError.wrap(f"updating node event {reason}", exc) from exc
        return True

    def close(self) -> None:
        close_client(self._client)


def _finish(response: raw.RawResponse) -> None:
    """Read the answer to the end so the connection can be reused."""
    try:
        _ = response.data
    except BaseException:
        raw.close_quietly(response)
        raise
    response.release_conn()
