"""The simulated backend's input files: a pipe never blocks, a huge input never fills memory.

`--mock-nvml-events` is followed by a thread; a named pipe at that path used
to block it in `open()` for good (and with it, the plugin's shutdown). A node
profile given to `--mock-nvml` is read whole, so it is capped.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from devices.errors import ProfileError
from devices.health import HealthEvent
from devices.model import Inventory
from devices.profile_schema import PROFILE_LIMIT, load_profile
from devices.simulated import SimulatedLibrary
from devices.simulated_events import MAX_LINE, SimulatedEventSource
from devices.xids import xid_policy

WAIT = 5.0


@pytest.fixture
def library() -> Iterator[SimulatedLibrary]:
    lib = SimulatedLibrary.from_argument("dgx-a100")
    lib.init()
    yield lib
    lib.shutdown()


@pytest.fixture
def warnings() -> Iterator[queue.Queue[str]]:
    found: queue.Queue[str] = queue.Queue()
    handler = logger.add(lambda message: found.put(message.record["message"]), level="WARNING")
    yield found
    logger.remove(handler)


def _source(path: Path, library: SimulatedLibrary, inventory: Inventory) -> SimulatedEventSource:
    return SimulatedEventSource(
        path, faults=library.faults, inventory=inventory, policy=xid_policy(), poll_seconds=0.01
    )


def _line(uuid: str, xid: int) -> str:
    return json.dumps({"uuid": uuid, "xid": xid}) + "\n"


def test_a_pipe_at_the_events_path_is_ignored_until_it_is_a_file(
    tmp_path: Path, library: SimulatedLibrary, warnings: queue.Queue[str]
) -> None:
    inventory = library.inventory()
    path = tmp_path / "events.jsonl"
    os.mkfifo(path)
    source = _source(path, library, inventory)
    events: queue.Queue[HealthEvent] = queue.Queue()
    starting = threading.Thread(target=source.start, args=(events.put,), daemon=True)
    starting.start()
    starting.join(WAIT)
    assert not starting.is_alive(), "start() blocked on the pipe"
    try:
        assert warnings.get(timeout=WAIT) == (
            f"{path} is a named pipe (FIFO), not a regular file; ignored until it is one"
        )
        path.unlink()
        path.write_text(_line(inventory.gpus[0].uuid, 79))
        assert events.get(timeout=WAIT).xid == 79
    finally:
        assert source.stop(timeout=WAIT), "the follower did not stop"


def test_a_line_longer_than_the_cap_is_skipped_and_the_next_one_read(
    tmp_path: Path, library: SimulatedLibrary, warnings: queue.Queue[str]
) -> None:
    inventory = library.inventory()
    path = tmp_path / "events.jsonl"
    path.write_text("")
    source = _source(path, library, inventory)
    events: queue.Queue[HealthEvent] = queue.Queue()
    source.start(events.put)
    try:
        gpu = inventory.gpus[1].uuid
        with path.open("a") as file:
            # Written in pieces, so the follower sees the long line grow
            # before its newline arrives.
            for _ in range(4):
                file.write("x" * (MAX_LINE // 2))
                file.flush()
            file.write("\n" + _line(gpu, 48))
        assert warnings.get(timeout=WAIT) == f"{path}: skipped a line longer than {MAX_LINE} bytes"
        got = events.get(timeout=WAIT)
        assert (got.uuid, got.xid) == (gpu, 48)
        assert warnings.empty()
    finally:
        assert source.stop(timeout=WAIT)


def test_a_node_profile_that_is_a_pipe_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    os.mkfifo(path)
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert str(caught.value) == (
        f"{path}: cannot read node profile: not a regular file (a named pipe (FIFO))"
    )


def test_a_node_profile_over_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    with path.open("wb") as file:
        file.truncate(PROFILE_LIMIT + 1)  # sparse: no need to write 32 MiB
    with pytest.raises(ProfileError, match="cannot read node profile: larger than the 32 MiB"):
        load_profile(path)


def test_a_node_profile_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_bytes(b"driverVersion: \xff\n")
    with pytest.raises(ProfileError, match="cannot read node profile: not UTF-8 text"):
        load_profile(path)
