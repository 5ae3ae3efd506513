"""ObjectWatch's copy when our own writes and the watch's events cross.

A publisher stores the object its write returned (`observe`) so the next pass
does not write again before the watch's event arrives. Events from before the
write can still be in flight, and the write's own event can arrive before the
HTTP answer: both orders must leave the copy at the newest state. The events
are fed to the watch's event handler directly, in the orders a real server can
produce, since over HTTP the interleaving cannot be forced.
"""

from __future__ import annotations

from typing import Any

from kube import raw
from kube.client import ApiAccess
from kube.object_watch import ObjectWatch

NAME = "gpu-node-1"


def node(version: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": NAME, "resourceVersion": str(version), "labels": labels}}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def watch() -> ObjectWatch:
    return ObjectWatch(
        api=ApiAccess.for_host("http://127.0.0.1:9"), collection=raw.NODES, name=NAME
    )


def deliver(target: ObjectWatch, *events: dict[str, Any]) -> None:
    version = ""
    for item in events:
        _, version = target._handle(item, version)


def test_events_from_before_our_write_do_not_undo_it() -> None:
    copy = watch()
    deliver(copy, event("MODIFIED", node(5)))
    copy.observe(node(7, ours="yes"))  # our patch's answer
    deliver(copy, event("MODIFIED", node(6)))  # a heartbeat from before the patch
    assert copy.current() == node(7, ours="yes")
    deliver(copy, event("MODIFIED", node(7, ours="yes")), event("MODIFIED", node(8, ours="no")))
    assert copy.current() == node(8, ours="no")  # later writers are followed again


def test_a_write_whose_event_came_first_is_not_applied_twice() -> None:
    copy = watch()
    deliver(copy, event("MODIFIED", node(7, ours="yes")), event("MODIFIED", node(8, other="x")))
    copy.observe(node(7, ours="yes"))  # the answer arrives after both events
    assert copy.current() == node(8, other="x")
    deliver(copy, event("MODIFIED", node(9, other="y")))
    assert copy.current() == node(9, other="y")  # not stuck waiting for version 7


def test_a_deletion_after_our_write_is_seen() -> None:
    copy = watch()
    copy.observe(node(3))
    deliver(copy, event("MODIFIED", node(3)), event("DELETED", node(4)))
    assert copy.current() is None
