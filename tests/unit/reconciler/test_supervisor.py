"""The supervisor: declared order, reverse stop, bounded stops, failures shown, never raising.

Each test drives a `Supervisor` with small runnables that note what was done
to them, or with the adapters (`Service`, `Pool`, `Task`) around a real
thread, executor or task. Grace periods are a few hundredths of a second,
and `CUT_SECONDS` is shortened to match, so an overrun costs no more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from loguru import logger

from inspection.server import ProbeEndpoint
from reconciler.app.serve import StartupError, _listener
from reconciler.app.supervisor import (
    RUNNING,
    Condition,
    Pool,
    RunnableStatus,
    RunState,
    Service,
    StatusCell,
    Supervisor,
    Task,
    manager,
)
from tests.waiting import eventually

GRACE = 0.05


class Noted:
    """A runnable that notes its start and stop in a shared list; may fail or hang either."""

    def __init__(
        self,
        name: str,
        notes: list[str],
        *,
        fail_start: bool = False,
        fail_stop: bool = False,
        hang_stop: bool = False,
    ) -> None:
        self._name = name
        self.notes = notes
        self.fail_start, self.fail_stop, self.hang_stop = fail_start, fail_stop, hang_stop
        self.cell = StatusCell(name)

    @property
    def name(self) -> str:
        return self._name

    async def start(self) -> None:
        self.notes.append(f"start {self._name}")
        if self.fail_start:
            raise RuntimeError(f"{self._name} cannot start\nsecond line")
        self.cell.set(RunState.RUNNING)

    async def stop(self, grace: float) -> None:
        self.notes.append(f"stop {self._name}")
        if self.fail_stop:
            raise OSError(f"{self._name} cannot stop")
        if self.hang_stop:
            await asyncio.Event().wait()
        self.cell.set(RunState.STOPPED)

    def status(self) -> RunnableStatus:
        return self.cell.value


@pytest.fixture
def logs() -> Iterator[list[tuple[str, str]]]:
    records: list[tuple[str, str]] = []
    handler = logger.add(
        lambda m: records.append((m.record["level"].name, m.record["message"])), level="INFO"
    )
    try:
        yield records
    finally:
        logger.remove(handler)


@pytest.fixture(autouse=True)
def _short_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager, "CUT_SECONDS", GRACE)


def states(supervisor: Supervisor) -> dict[str, tuple[str, str | None]]:
    return {s.name: (str(s.state), s.reason) for s in supervisor.status()}


def supervised(notes: list[str], *runnables: Noted) -> Supervisor:
    supervisor = Supervisor()
    for runnable in runnables:
        supervisor.add(runnable, grace=GRACE)
    return supervisor


async def test_starts_in_the_declared_order_and_stops_in_reverse() -> None:
    notes: list[str] = []
    supervisor = supervised(notes, *(Noted(name, notes) for name in "abc"))
    assert [s.state for s in supervisor.status()] == [RunState.PENDING] * 3
    await supervisor.start()
    assert states(supervisor) == {name: ("running", None) for name in "abc"}
    await supervisor.stop()
    assert notes == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]
    assert states(supervisor) == {name: ("stopped", None) for name in "abc"}


async def test_start_in_stages_and_stop_only_what_was_started() -> None:
    notes: list[str] = []
    supervisor = supervised(notes, *(Noted(name, notes) for name in "abcd"))
    await supervisor.start(through="b")
    assert notes == ["start a", "start b"]
    await supervisor.start(through="c")
    assert notes[2:] == ["start c"]
    await supervisor.stop()
    assert notes[3:] == ["stop c", "stop b", "stop a"]
    assert states(supervisor)["d"] == ("pending", None)
    with pytest.raises(ValueError, match="no runnable named 'e'"):
        await supervisor.start(through="e")


async def test_names_are_unique() -> None:
    supervisor = supervised([], Noted("a", []))
    with pytest.raises(ValueError, match="added already"):
        supervisor.watch("a", lambda: RUNNING)


async def test_a_failing_start_is_reported_raised_and_stopped_like_the_others() -> None:
    notes: list[str] = []
    broken = Noted("b", notes, fail_start=True)
    supervisor = supervised(notes, Noted("a", notes), broken, Noted("c", notes))
    with pytest.raises(RuntimeError, match="b cannot start"):
        await supervisor.start()
    # What comes after is not started; what started, the failed one included, is stopped.
    await supervisor.stop()
    assert notes == ["start a", "start b", "stop b", "stop a"]
    assert states(supervisor) == {
        "a": ("stopped", None),
        "b": ("failed", "start failed: RuntimeError: b cannot start"),  # one line
        "c": ("pending", None),
    }


async def test_a_stop_that_overruns_its_grace_is_logged_once_and_the_next_one_stops(
    logs: list[tuple[str, str]],
) -> None:
    notes: list[str] = []
    supervisor = supervised(notes, Noted("a", notes), Noted("b", notes, hang_stop=True))
    await supervisor.start()
    await supervisor.stop()
    assert notes[2:] == ["stop b", "stop a"]
    assert states(supervisor) == {
        "a": ("stopped", None),
        "b": ("failed", f"did not stop within {GRACE:g}s"),
    }
    assert [message for level, message in logs if level == "WARNING"] == [
        f"b did not stop within {GRACE:g}s: going on"
    ]


async def test_stop_never_raises_a_runnables_error(logs: list[tuple[str, str]]) -> None:
    notes: list[str] = []
    supervisor = supervised(notes, Noted("a", notes), Noted("b", notes, fail_stop=True))
    await supervisor.start()
    await supervisor.stop()  # does not raise
    assert notes[2:] == ["stop b", "stop a"]
    assert states(supervisor)["b"] == ("failed", "stop failed: OSError: b cannot stop")
    assert ("ERROR", "b failed to stop: OSError: b cannot stop") in logs


async def test_a_cancelled_stop_still_stops_the_others_then_passes_the_cancellation_on() -> None:
    notes: list[str] = []
    supervisor = Supervisor()
    supervisor.add(Noted("a", notes), grace=GRACE)
    supervisor.add(Noted("b", notes, hang_stop=True), grace=10.0)
    await supervisor.start()
    stopping = asyncio.create_task(supervisor.stop())
    await eventually(lambda: notes[-1] == "stop b", what="b's stop to begin")
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert notes[2:] == ["stop b", "stop a"]
    assert states(supervisor)["b"] == ("failed", "its stop was interrupted")


async def test_status_is_frozen_values_stamped_when_they_change() -> None:
    ticks = (f"t{n}" for n in itertools.count())
    condition = RUNNING
    supervisor = Supervisor(clock=lambda: next(ticks))
    supervisor.watch("w", lambda: condition)
    (first,) = supervisor.status()
    assert first == RunnableStatus("w", RunState.RUNNING, first.since)
    assert supervisor.status() == (first,), "nothing moved: the same since"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.state = RunState.FAILED  # type: ignore[misc]
    condition = Condition(RunState.FAILED, "gone")
    (second,) = supervisor.status()
    assert (second.state, second.reason) == (RunState.FAILED, "gone")
    assert second.since != first.since
    assert second.to_json() == {
        "name": "w",
        "state": "failed",
        "since": second.since,
        "reason": "gone",
    }


async def test_a_watched_part_is_neither_started_nor_stopped_and_a_broken_look_is_shown() -> None:
    def broken() -> Condition:
        raise KeyError("parts")

    supervisor = Supervisor()
    supervisor.watch("w", broken)
    supervisor.watch("owned", lambda: Condition(RunState.PENDING, "made on first use"))
    await supervisor.start()
    assert states(supervisor) == {
        "w": ("failed", "no status: KeyError: 'parts'"),
        "owned": ("pending", "made on first use"),  # not started: its owner starts it
    }
    await supervisor.stop()
    assert states(supervisor)["owned"] == ("pending", "made on first use"), "its owner stops it"


# -- the adapters ----------------------------------------------------------------


async def test_a_task_that_fails_is_logged_once_and_shown(logs: list[tuple[str, str]]) -> None:
    supervisor = Supervisor()
    told: list[str] = []
    supervisor.on_change = lambda: told.append(str(supervisor.status()[0].state))

    async def main(*, stop: asyncio.Event) -> None:
        raise ValueError("bad input")

    supervisor.add(Task("t", main, on_end=supervisor.changed), grace=GRACE)
    await supervisor.start()
    # The task's end republishes the status: whoever shows it hears of the failure.
    await eventually(lambda: told[-1] == "failed", what="the failure told", detail=told.copy)
    assert states(supervisor) == {"t": ("failed", "ValueError: bad input")}
    assert [m for level, m in logs if level == "ERROR"] == ["t failed: ValueError: bad input"]
    await supervisor.stop()
    assert states(supervisor) == {"t": ("failed", "ValueError: bad input")}


async def test_a_task_stops_on_its_event_or_is_cut_short_after_its_grace() -> None:
    async def honours(*, stop: asyncio.Event) -> None:
        await stop.wait()

    async def ignores(*, stop: asyncio.Event) -> None:
        await asyncio.Event().wait()

    supervisor = Supervisor()
    supervisor.add(Task("honours", honours), grace=10.0)
    supervisor.add(Task("ignores", ignores), grace=GRACE)
    await supervisor.start()
    assert states(supervisor) == {"honours": ("running", None), "ignores": ("running", None)}
    await supervisor.stop()
    assert states(supervisor) == {"honours": ("stopped", None), "ignores": ("stopped", "cut short")}


async def test_a_waited_task_hands_its_error_to_the_waiter_not_the_log(
    logs: list[tuple[str, str]],
) -> None:
    asked: list[str] = []

    async def first() -> None:
        asked.append("first")

    async def main(*, stop: asyncio.Event) -> None:
        raise ValueError("loop broke")

    loop = Task("loop", main, first=first, ask=lambda: asked.append("ask"), waited=True)
    supervisor = Supervisor()
    supervisor.add(loop, grace=GRACE)
    await supervisor.start()
    with pytest.raises(ValueError, match="loop broke"):
        await loop.wait()
    assert asked == ["first"]
    assert states(supervisor) == {"loop": ("failed", "ValueError: loop broke")}
    assert not [m for level, m in logs if level == "ERROR"]
    await supervisor.stop()


async def test_a_task_whose_first_step_fails_never_runs() -> None:
    async def first() -> None:
        raise RuntimeError("no driver")

    async def main(*, stop: asyncio.Event) -> None:
        raise AssertionError("never run")

    supervisor = Supervisor()
    supervisor.add(Task("loop", main, first=first), grace=GRACE)
    with pytest.raises(RuntimeError, match="no driver"):
        await supervisor.start()
    await supervisor.stop()
    assert states(supervisor) == {"loop": ("failed", "start failed: RuntimeError: no driver")}


class Worker:
    """A thread owner: `start()`, `stop(timeout) -> bool`, `running`; `hold` keeps it alive."""

    def __init__(self, *, hold: bool = False) -> None:
        self.stopping = threading.Event()
        self.hold = threading.Event() if hold else None
        self.thread = threading.Thread(target=self._run, name="worker", daemon=True)

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float | None = 5.0) -> bool:
        self.stopping.set()
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _run(self) -> None:
        self.stopping.wait()
        if self.hold is not None:
            self.hold.wait()


async def test_a_thread_owner_runs_stops_and_is_failed_when_its_thread_ends_unasked() -> None:
    calm, stuck, dead = Worker(), Worker(hold=True), Worker()
    supervisor = Supervisor()
    for name, owner in (("calm", calm), ("stuck", stuck), ("dead", dead)):
        supervisor.add(Service.thread(name, owner), grace=GRACE)
    await supervisor.start()
    assert {s.state for s in supervisor.status()} == {RunState.RUNNING}
    dead.stopping.set()  # its thread ends without being asked to
    await asyncio.to_thread(dead.thread.join, 10)
    assert states(supervisor)["dead"] == ("failed", "its thread ended")
    await supervisor.stop()
    assert states(supervisor) == {
        "calm": ("stopped", None),
        "stuck": ("failed", f"did not stop within {GRACE:g}s"),
        "dead": ("failed", "its thread ended"),
    }
    assert stuck.hold is not None
    stuck.hold.set()


class Refuses(Worker):
    """A thread owner whose stop raises."""

    def stop(self, timeout: float | None = 5.0) -> bool:
        super().stop(timeout)
        raise OSError("cannot flush")


class Hangs(Worker):
    """A thread owner whose stop ignores its timeout until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def stop(self, timeout: float | None = 5.0) -> bool:
        super().stop(timeout)
        self.release.wait(10)
        return True


async def test_a_thread_owners_stop_that_raises_in_its_thread_is_shown_as_a_failed_stop(
    logs: list[tuple[str, str]],
) -> None:
    supervisor = Supervisor()
    supervisor.add(Service.thread("refuses", Refuses()), grace=GRACE)
    await supervisor.start()
    await supervisor.stop()
    assert states(supervisor) == {"refuses": ("failed", "stop failed: OSError: cannot flush")}
    assert ("ERROR", "refuses failed to stop: OSError: cannot flush") in logs


async def test_a_thread_owners_hung_stop_is_cut_short_and_its_late_join_ends_quietly() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        hangs = Hangs()
        supervisor = Supervisor()
        supervisor.add(Service.thread("hangs", hangs), grace=GRACE)
        await supervisor.start()
        before = set(threading.enumerate())
        await supervisor.stop()  # returns although the owner's stop has not
        assert states(supervisor) == {"hangs": ("failed", f"did not stop within {GRACE:g}s")}
        (joining,) = [t for t in threading.enumerate() if t.name == "stopping" and t not in before]
        hangs.release.set()
        await asyncio.to_thread(joining.join, 10)
        assert not joining.is_alive()
        # Its last act queued the late answer on the loop: a fence queued after it.
        fence = loop.create_future()
        loop.call_soon(fence.set_result, None)
        await fence
        assert errors == [], "a late answer to a wait given up must be dropped"
    finally:
        loop.set_exception_handler(None)


async def test_a_listener_that_cannot_bind_fails_its_start_in_one_line_and_stops_at_once() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        probes = ProbeEndpoint(host="127.0.0.1", port=port, routes={})
        supervisor = Supervisor()
        supervisor.add(_listener("probes", probes, f"the probes on :{port}"), grace=10.0)
        with pytest.raises(StartupError) as raised:
            await supervisor.start()
    assert str(raised.value) == f"cannot serve the probes on :{port}: Address already in use"
    assert states(supervisor) == {
        "probes": ("failed", f"start failed: StartupError: {raised.value}"),
    }
    async with asyncio.timeout(5):  # its thread ended with the failed start: no grace to wait
        await supervisor.stop()
    assert not probes.running


async def test_a_pool_drops_its_queue_and_waits_for_its_work_within_the_grace() -> None:
    release = threading.Event()
    started = threading.Event()

    def busy() -> None:
        started.set()
        release.wait(10)

    quick, slow = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    supervisor = Supervisor()
    supervisor.add(Pool("quick", quick), grace=10.0)
    supervisor.add(Pool("slow", slow), grace=GRACE)
    await supervisor.start()
    assert quick.submit(lambda: 42).result(10) == 42
    slow.submit(busy)
    queued = slow.submit(busy)
    await asyncio.to_thread(started.wait, 10)
    await supervisor.stop()
    assert queued.cancelled()
    assert states(supervisor) == {
        "quick": ("stopped", None),
        "slow": ("failed", f"work still ran after {GRACE:g}s"),
    }
    release.set()
    with pytest.raises(RuntimeError):
        quick.submit(lambda: 0)


async def test_a_status_publisher_that_fails_stops_neither_the_start_nor_the_stop(
    logs: list[tuple[str, str]],
) -> None:
    notes: list[str] = []
    supervisor = supervised(notes, Noted("a", notes), Noted("b", notes))

    def broken() -> None:
        raise RuntimeError("snapshot")

    supervisor.on_change = broken
    await supervisor.start()
    await supervisor.stop()
    assert notes == ["start a", "start b", "stop b", "stop a"]
    assert ("ERROR", "publishing the runnables' status failed") in logs


async def test_a_service_shows_what_its_look_says_while_it_runs() -> None:
    said = Condition(RunState.STOPPED, "no --node-name given")
    stopped: list[float] = []

    async def start() -> None:
        pass

    async def stop(grace: float) -> None:
        stopped.append(grace)

    async def refuse() -> None:
        raise OSError("address in use")

    supervisor = Supervisor()
    supervisor.add(Service("off", start=start, stop=stop, look=lambda: said), grace=GRACE)
    supervisor.add(Service("bind", start=refuse, stop=stop), grace=GRACE)
    with pytest.raises(OSError, match="address in use"):
        await supervisor.start()
    assert states(supervisor) == {
        "off": ("stopped", "no --node-name given"),
        "bind": ("failed", "start failed: OSError: address in use"),
    }
    said = RUNNING  # opened later
    assert states(supervisor)["off"] == ("running", None)
    await supervisor.stop()
    assert stopped == [GRACE, GRACE]  # the one that failed to start is stopped too
    assert states(supervisor) == {
        "off": ("stopped", None),
        "bind": ("failed", "start failed: OSError: address in use"),
    }
