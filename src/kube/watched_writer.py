"""What a writer of one watched object keeps between passes: its watch, a client, its pacing.

The labeller writes two objects each pass, its Node's labels
(`node_labels`) and its NodeFeature (`node_features`). Both compare what they
want with a copy an `ObjectWatch` keeps, send a request only for a
difference, read afresh after a conflict and pause with jitter before trying
again. This is the part they share: the watch (started and stopped here, or
borrowed from another reader of the same object), one API client opened on
the first write and closed with the writer, and the conflict pause, which
`close()` cuts short.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from foundation.backoff import Backoff
from kube import raw
from kube.client import ApiAccess, close_client
from kube.object_watch import ObjectWatch
from kube.official import ApiClient
from kube.pacing import DEFAULT_WATCH_TIMEOUTS, REAL_TIME, Clock, WatchTimeouts, jittered

__all__ = ["CONFLICT_BACKOFF", "WatchedWriter"]

# Between attempts after a conflict: long enough for the other writer to finish.
CONFLICT_BACKOFF = Backoff(initial=0.2, cap=2.0)


class WatchedWriter:
    """Base of a writer whose `apply` is called from one thread; the watch runs in its own."""

    def __init__(
        self,
        api: ApiAccess,
        *,
        collection: raw.Collection,
        name: str,
        thread_name: str,
        sync_timeout: float,
        on_error: Callable[[str], None] | None,
        watch_timeouts: WatchTimeouts = DEFAULT_WATCH_TIMEOUTS,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
        watch: ObjectWatch | None = None,
    ) -> None:
        self._api = api
        self._sync_timeout = sync_timeout
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._client: ApiClient | None = None
        self._closed = threading.Event()
        self._owns_watch = watch is None
        self._watch = watch or ObjectWatch(
            api=api,
            collection=collection,
            name=name,
            on_error=on_error,
            watch_timeouts=watch_timeouts,
            clock=clock,
            rng=self._rng,
            thread_name=thread_name,
        )

    @property
    def watch(self) -> ObjectWatch:
        return self._watch

    def start(self) -> None:
        if self._owns_watch:
            self._watch.start()

    def close(self) -> None:
        self._closed.set()
        if self._owns_watch:
            self._watch.stop()
        if self._client is not None:
            close_client(self._client)
            self._client = None

    def _connected(self) -> ApiClient:
        if self._client is None:
            self._client = self._api.new_client()
        return self._client

    def _synced(self) -> bool:
        """Whether the watched copy can be trusted (the first call waits up to `sync_timeout`)."""
        return self._watch.synced or self._watch.wait_synced(self._sync_timeout)

    def _pause(self, attempt: int) -> None:
        """Wait before attempt `attempt + 1` after a conflict."""
        self._clock.wait(self._closed, jittered(CONFLICT_BACKOFF, attempt - 1, self._rng))
