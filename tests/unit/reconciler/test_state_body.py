"""`/state` is rendered once per change, off the event loop, and shared by concurrent readers."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import ClassVar

import pytest

from reconciler.observation.snapshot import Snapshot, StateBody


class RecordingSnapshot(Snapshot):
    """A snapshot that notes which thread renders it."""

    threads: ClassVar[list[str]] = []

    def state_json(self) -> bytes:
        RecordingSnapshot.threads.append(threading.current_thread().name)
        return super().state_json()


def snapshot(devices: int, state: str = "serving") -> Snapshot:
    return RecordingSnapshot(
        state={"state": state, "resources": [{"id": f"GPU-{i}"} for i in range(devices)]},
        ready=True,
    )


async def test_concurrent_readers_share_one_rendering_off_the_loop() -> None:
    RecordingSnapshot.threads = []
    body = StateBody()
    body.update(snapshot(4096))
    bodies = await asyncio.gather(*(body.body() for _ in range(300)))
    assert body.renders == 1
    assert all(b is bodies[0] for b in bodies)
    assert json.loads(bodies[0])["resources"][4095] == {"id": "GPU-4095"}
    assert RecordingSnapshot.threads
    assert threading.current_thread().name not in RecordingSnapshot.threads


async def test_an_equal_snapshot_keeps_the_version_and_the_bytes() -> None:
    body = StateBody()
    body.update(snapshot(8))
    first = await body.body()
    version = body.version
    body.update(snapshot(8))  # a new object with the same content
    assert body.version == version
    assert await body.body() is first
    assert body.renders == 1


async def test_a_change_is_rendered_once_more() -> None:
    body = StateBody()
    body.update(snapshot(8))
    await body.body()
    body.update(snapshot(8, state="reconfiguring"))
    assert json.loads(await body.body())["state"] == "reconfiguring"
    assert json.loads(await body.body())["state"] == "reconfiguring"
    assert body.renders == 2
    assert body.version == 2


async def test_a_reader_that_goes_away_does_not_cancel_the_others() -> None:
    body = StateBody()
    body.update(snapshot(2000))
    impatient = asyncio.ensure_future(body.body())
    patient = asyncio.ensure_future(body.body())
    await asyncio.sleep(0)  # one turn of the loop: both readers now wait on the one rendering
    impatient.cancel()
    assert json.loads(await patient)["state"] == "serving"
    with pytest.raises(asyncio.CancelledError):
        await impatient
    assert body.renders == 1  # the rendering the impatient one started, not a second


async def test_nothing_to_render_before_the_first_snapshot() -> None:
    with pytest.raises(LookupError):
        await StateBody().body()
