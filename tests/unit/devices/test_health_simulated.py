"""Fault injection: the events file a running plugin follows, and what probes see afterwards.

The follower runs its real thread against a real file; tests wait on a queue
with a timeout, never sleep.
"""

from __future__ import annotations

import json
import os
import queue
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devices.backends import open_health_source
from devices.health import EventKind, HealthEvent, NullSource
from devices.library import ProbeResult
from devices.model import Inventory
from devices.simulated import SimulatedLibrary
from devices.simulated_events import DeviceFaults, SimulatedEventSource, parse_line
from devices.xids import xid_policy
from tests.waiting import eventually_sync

GPU0 = "GPU-b5f4b8e1-9a1b-4c59-8d0e-2a4e5f6a7b80"
WAIT = 5.0


@pytest.fixture
def library() -> Iterator[SimulatedLibrary]:
    lib = SimulatedLibrary.from_argument("a100-mig-mixed")
    lib.init()
    yield lib
    lib.shutdown()


@pytest.fixture
def inventory(library: SimulatedLibrary) -> Inventory:
    return library.inventory()


def _gpu_with_migs(inventory: Inventory) -> tuple[str, tuple[str, ...]]:
    gpu = next(g for g in inventory.gpus if g.mig_devices)
    return gpu.uuid, tuple(m.uuid for m in gpu.mig_devices)


class Follower:
    """A started `SimulatedEventSource` and the queue its events land in."""

    def __init__(self, source: SimulatedEventSource, path: Path) -> None:
        self.source = source
        self.path = path
        self.events: queue.Queue[HealthEvent] = queue.Queue()

    def append(self, *lines: str | dict[str, Any]) -> None:
        with self.path.open("a") as file:
            for line in lines:
                file.write((line if isinstance(line, str) else json.dumps(line)) + "\n")

    def next(self) -> HealthEvent:
        return self.events.get(timeout=WAIT)

    def nothing_more(self, marker_uuid: str) -> None:
        """Prove nothing else was posted: a marker line written last must come out next."""
        self.append({"uuid": marker_uuid, "reset": True})
        got = self.next()
        assert (got.kind, got.uuid) == (EventKind.RESET, marker_uuid)


@pytest.fixture
def follow(tmp_path: Path, library: SimulatedLibrary, inventory: Inventory) -> Iterator[Follower]:
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"uuid": inventory.gpus[0].uuid, "xid": 79}) + "\n")  # history
    source = open_health_source(library, inventory, events_file=str(path), policy=xid_policy())
    assert isinstance(source, SimulatedEventSource)
    follower = Follower(source, path)
    source.start(follower.events.put)
    yield follower
    assert source.stop(timeout=WAIT)
    assert not source.running


def test_appended_xid_becomes_an_event_and_history_is_not_replayed(
    follow: Follower, inventory: Inventory
) -> None:
    gpu = inventory.gpus[1].uuid
    follow.append({"uuid": gpu, "xid": 94})
    got = follow.next()
    assert (got.kind, got.uuid, got.xid, got.gi, got.ci) == (EventKind.XID, gpu, 94, None, None)
    assert got.reason == "xid 94"
    follow.nothing_more(gpu)


def test_instance_ids_and_mig_uuids_are_passed_on(follow: Follower, inventory: Inventory) -> None:
    gpu, migs = _gpu_with_migs(inventory)
    follow.append({"uuid": gpu, "xid": 94, "gi": 2, "ci": 0}, {"uuid": migs[0], "xid": 95})
    first, second = follow.next(), follow.next()
    assert (first.kind, first.uuid, first.xid, first.gi, first.ci) == (EventKind.XID, gpu, 94, 2, 0)
    assert (second.kind, second.uuid, second.xid, second.gi) == (EventKind.XID, migs[0], 95, None)


def test_disabled_xids_and_bad_lines_are_skipped(follow: Follower, inventory: Inventory) -> None:
    gpu = inventory.gpus[0].uuid
    follow.append(
        {"uuid": gpu, "xid": 13},  # application error: skipped, as in the reference
        "not json at all",
        {"uuid": gpu},
        {"uuid": "GPU-nope", "xid": 79},
        "",
        {"uuid": gpu, "ecc": True},
    )
    got = follow.next()
    assert (got.kind, got.uuid, got.reason) == (EventKind.ECC, gpu, "double-bit ECC error")
    follow.nothing_more(gpu)


def test_a_line_counts_once_its_newline_is_written(follow: Follower, inventory: Inventory) -> None:
    gpu = inventory.gpus[0].uuid
    with follow.path.open("a") as file:
        file.write(json.dumps({"uuid": gpu, "xid": 48})[:10])
        file.flush()
        size = follow.path.stat().st_size
        eventually_sync(
            lambda: follow.source._cursor._offset == size,
            what="the source to read the partial line",
            timeout=WAIT,
        )
        assert follow.events.empty()  # read, and not counted without its newline
        file.write(json.dumps({"uuid": gpu, "xid": 48})[10:] + "\n")
    assert follow.next().xid == 48


def test_truncated_rewritten_or_replaced_file_is_read_from_the_start(
    follow: Follower, inventory: Inventory
) -> None:
    gpu = inventory.gpus[0].uuid
    follow.path.write_text(json.dumps({"uuid": gpu, "xid": 74}) + "\n")  # same length as before
    assert follow.next().xid == 74
    follow.path.write_text("")
    follow.path.write_text(json.dumps({"uuid": gpu, "xid": 64}) + "\n")
    assert follow.next().xid == 64
    longer = {"uuid": gpu, "xid": 119, "gi": None}
    follow.path.write_text(json.dumps(longer) + "\n" + json.dumps({"uuid": gpu, "xid": 120}) + "\n")
    assert [follow.next().xid, follow.next().xid] == [119, 120]
    replacement = follow.path.with_suffix(".new")
    replacement.write_text(json.dumps({"uuid": gpu, "xid": 95}) + "\n")
    os.replace(replacement, follow.path)
    assert follow.next().xid == 95


def test_lost_and_reset_change_what_probes_see(
    follow: Follower, library: SimulatedLibrary, inventory: Inventory
) -> None:
    gpu, migs = _gpu_with_migs(inventory)
    assert library.probe(migs[0]) == ProbeResult(True, "simulated device answers", 0)

    follow.append({"uuid": gpu, "lost": True})
    got = follow.next()
    assert (got.kind, got.uuid) == (EventKind.LOST, gpu)
    assert library.probe(gpu) == ProbeResult(False, f"{gpu} is lost", 0)
    assert library.probe(migs[0]) == ProbeResult(False, f"{gpu} is lost", 0)  # with its GPU

    follow.append({"uuid": gpu, "lost": False}, {"uuid": gpu, "reset": True})
    assert [e.kind for e in (follow.next(), follow.next())] == [EventKind.FOUND, EventKind.RESET]
    assert library.probe(gpu) == ProbeResult(True, "simulated device answers", 1)
    assert library.probe(migs[0]).generation == 1


def test_file_created_after_start_is_read_whole(
    tmp_path: Path, library: SimulatedLibrary, inventory: Inventory
) -> None:
    path = tmp_path / "later.jsonl"
    source = SimulatedEventSource(
        path, faults=library.faults, inventory=inventory, policy=xid_policy()
    )
    events: queue.Queue[HealthEvent] = queue.Queue()
    source.start(events.put)
    try:
        path.write_text(json.dumps({"uuid": inventory.gpus[0].uuid, "xid": 79}) + "\n")
        assert events.get(timeout=WAIT).xid == 79
    finally:
        assert source.stop(timeout=WAIT)


def test_source_starts_once(follow: Follower) -> None:
    with pytest.raises(RuntimeError, match="already started"):
        follow.source.start(follow.events.put)


# -- choosing a source -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events_file", "disable", "reason"),
    [
        pytest.param(None, None, "simulated devices and no --mock-nvml-events file", id="no-file"),
        pytest.param("x.jsonl", "all", "disabled by DP_DISABLE_HEALTHCHECKS", id="disabled"),
    ],
)
def test_nothing_to_watch_is_said_once(
    library: SimulatedLibrary,
    inventory: Inventory,
    events_file: str | None,
    disable: str | None,
    reason: str,
) -> None:
    source = open_health_source(
        library, inventory, events_file=events_file, policy=xid_policy(disable=disable)
    )
    assert isinstance(source, NullSource)
    posted: list[HealthEvent] = []
    source.start(posted.append)
    assert [(e.kind, e.detail) for e in posted] == [(EventKind.DISABLED, reason)]
    assert source.stop()


# -- the line format --------------------------------------------------------------------

KNOWN = {GPU0: None, "MIG-1": None}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(f'{{"uuid": "{GPU0}", "xid": 79}}', (GPU0, "xid", 79, None, None), id="xid"),
        pytest.param(
            f'{{"uuid": "{GPU0}", "xid": 94, "gi": 1, "ci": 0}}',
            (GPU0, "xid", 94, 1, 0),
            id="xid-instance",
        ),
        pytest.param('{"uuid": "MIG-1", "xid": 94}', ("MIG-1", "xid", 94, None, None), id="mig"),
        pytest.param('{"uuid": "MIG-1", "lost": false}', ("MIG-1", "lost", False, None, None)),
        pytest.param('{"uuid": "MIG-1", "reset": true}', ("MIG-1", "reset", True, None, None)),
        pytest.param('{"uuid": "MIG-1", "ecc": true}', ("MIG-1", "ecc", True, None, None)),
    ],
)
def test_valid_lines(line: str, expected: tuple[object, ...]) -> None:
    got = parse_line(line, KNOWN)
    assert (got.uuid, got.action, got.value, got.gi, got.ci) == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param("{", "not JSON: Expecting property name enclosed in double quotes"),
        pytest.param("[1]", "must be a JSON object"),
        pytest.param('{"uuid": "MIG-1", "xid": 1, "when": 3}', "unknown key 'when'"),
        pytest.param('{"xid": 79}', "'uuid' (a GPU or MIG UUID) is required"),
        pytest.param('{"uuid": "GPU-x", "xid": 79}', "no device GPU-x on this node"),
        pytest.param('{"uuid": "MIG-1"}', "exactly one of xid, ecc, lost, reset is required"),
        pytest.param(
            '{"uuid": "MIG-1", "xid": 79, "lost": true}',
            "exactly one of xid, ecc, lost, reset is required",
        ),
        pytest.param('{"uuid": "MIG-1", "xid": -1}', "'xid' must be a whole number >= 0"),
        pytest.param('{"uuid": "MIG-1", "xid": true}', "'xid' must be a whole number >= 0"),
        pytest.param('{"uuid": "MIG-1", "xid": "79"}', "'xid' must be a whole number >= 0"),
        pytest.param('{"uuid": "MIG-1", "lost": 1}', "'lost' must be true or false"),
        pytest.param('{"uuid": "MIG-1", "reset": false}', "'reset' only takes true"),
        pytest.param(
            '{"uuid": "MIG-1", "xid": 9, "gi": 1}', "'gi' and 'ci' go with 'xid' on a GPU UUID"
        ),
        pytest.param(
            f'{{"uuid": "{GPU0}", "lost": true, "ci": 1}}',
            "'gi' and 'ci' go with 'xid' on a GPU UUID",
        ),
        pytest.param(f'{{"uuid": "{GPU0}", "xid": 9, "gi": 1.5}}', "'gi' must be a whole number"),
    ],
)
def test_invalid_lines(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        parse_line(line, KNOWN)


# -- the fault table ----------------------------------------------------------------------


def test_fault_table_knows_only_bound_devices(inventory: Inventory) -> None:
    faults = DeviceFaults()
    assert not faults.probe(GPU0).ok
    faults.bind(inventory)
    gpu, migs = _gpu_with_migs(inventory)
    faults.reset(migs[0])
    assert faults.probe(migs[0]).generation == 1
    assert faults.probe(gpu).generation == 0  # a MIG device's reset is its own
    faults.set_lost(migs[1], True)
    assert not faults.probe(migs[1]).ok
    assert faults.probe(gpu).ok


def test_probe_before_init_fails() -> None:
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    result = library.probe(GPU0)
    assert not result.ok
    assert "not initialised" in result.detail


def test_a_gpu_whose_profile_has_no_health_events_is_reported_unmonitored_once(
    tmp_path: Path,
) -> None:
    profile = tmp_path / "node.yaml"
    text = (SimulatedLibrary.from_argument("t4x4").path).read_text()
    # The third GPU of the profile cannot be registered for events.
    head, *gpus = text.split("\n  - uuid: ")
    gpus[2] = gpus[2].replace("    migCapable: false\n", "    migCapable: false\n"
                              "    healthEvents: false\n", 1)  # fmt: skip
    profile.write_text("\n  - uuid: ".join([head, *gpus]))
    library = SimulatedLibrary(profile)
    library.init()
    inventory = library.inventory()
    path = tmp_path / "events.jsonl"
    path.touch()
    source = open_health_source(library, inventory, events_file=str(path), policy=xid_policy())
    follower = Follower(source, path)  # type: ignore[arg-type]
    source.start(follower.events.put)
    try:
        event = follower.next()
        assert (event.kind, event.uuid) == (EventKind.UNMONITORED, inventory.gpus[2].uuid)
        assert event.detail == "nvmlDeviceRegisterEvents: Not Supported"
        follower.nothing_more(inventory.gpus[0].uuid)  # the other GPUs: nothing to say
        assert library.probe(inventory.gpus[2].uuid).ok  # and it answers: only unwatched
    finally:
        assert source.stop(timeout=WAIT)
        library.shutdown()
