"""The per-device health machine: every error class, recovery, fan-out and monitoring.

Time is the `now` argument, never a clock, and probes go to the simulated
backend's fault table (`DeviceFaults`), the same object the events file drives
in a running plugin.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.health import EventKind, HealthEvent
from devices.library import ProbeResult
from devices.model import Gpu, Inventory, MigDevice
from devices.simulated_events import DeviceFaults
from devices.xids import xid_policy
from resources.model import Health, PluginDevice
from states.health import (
    MOVES,
    DeviceHealth,
    ErrorClass,
    HealthBook,
    HealthChange,
    HealthPolicy,
    Monitoring,
    Step,
    health_of,
    with_health,
)

GPU_A = "GPU-aaaaaaaa-0000-4000-8000-000000000000"
GPU_B = "GPU-bbbbbbbb-0000-4000-8000-000000000000"
MIG_1_0 = "MIG-b1000000-0000-4000-8000-000000000000"
MIG_2_0 = "MIG-b2000000-0000-4000-8000-000000000000"
MIG_2_1 = "MIG-b2100000-0000-4000-8000-000000000000"
MIGS = (MIG_1_0, MIG_2_0, MIG_2_1)
QUIET = 60.0
EVERY = 10.0

H, U, R = DeviceHealth.HEALTHY, DeviceHealth.UNHEALTHY, DeviceHealth.RECOVERING


def _mig(uuid: str, slot: int, gi: int, ci: int) -> MigDevice:
    return MigDevice(
        uuid=uuid, parent_index=1, slot=slot, gi=gi, ci=ci, profile="1g.5gb", memory_mib=4864
    )


def _gpu(index: int, uuid: str, migs: tuple[MigDevice, ...] = ()) -> Gpu:
    return Gpu(
        index=index,
        minor=index,
        uuid=uuid,
        name="NVIDIA A100-SXM4-40GB",
        memory_mib=40960,
        pci_bus_id=f"00000000:0{index}:00.0",
        numa_node=0,
        compute_capability="8.0",
        mig_capable=bool(migs),
        mig_enabled=bool(migs),
        mig_devices=migs,
    )


INVENTORY = Inventory(
    driver_version="550.54.15",
    cuda_driver_version="12.4",
    gpus=(
        _gpu(0, GPU_A),
        _gpu(1, GPU_B, (_mig(MIG_1_0, 0, 1, 0), _mig(MIG_2_0, 1, 2, 0), _mig(MIG_2_1, 2, 2, 1))),
    ),
)


def xid(uuid: str, number: int, *, gi: int | None = None, ci: int | None = None) -> HealthEvent:
    return HealthEvent(EventKind.XID, uuid, xid=number, gi=gi, ci=ci, detail="test", at=0.0)


def event(kind: EventKind, uuid: str = "", detail: str = "") -> HealthEvent:
    return HealthEvent(kind, uuid, detail=detail, at=0.0)


@pytest.fixture
def faults() -> DeviceFaults:
    table = DeviceFaults()
    table.bind(INVENTORY)
    return table


@pytest.fixture
def book() -> HealthBook:
    return HealthBook(INVENTORY, HealthPolicy(quiet_period=QUIET, probe_interval=EVERY))


def state(book: HealthBook, uuid: str) -> DeviceHealth:
    status = book.status(uuid)
    assert status is not None
    return status.health


def moves(changes: list[HealthChange]) -> list[tuple[str, DeviceHealth, DeviceHealth, str]]:
    return [(c.uuid, c.source, c.dest, c.reason) for c in changes]


# -- the table ---------------------------------------------------------------------

EXPECTED_MOVES = {
    (H, Step.ERROR): U,
    (R, Step.ERROR): U,
    (U, Step.CLEARED): R,
    (R, Step.PROBE_PASSED): H,
}


@pytest.mark.parametrize("source", list(DeviceHealth))
@pytest.mark.parametrize("step", list(Step))
def test_table_has_exactly_the_documented_moves(source: DeviceHealth, step: Step) -> None:
    assert MOVES.get((source, step)) == EXPECTED_MOVES.get((source, step))


def test_everything_starts_healthy(book: HealthBook) -> None:
    statuses = book.statuses()
    assert set(statuses) == {GPU_A, GPU_B, *MIGS}
    assert {s.health for s in statuses.values()} == {H}
    assert all(s.reason is None and s.history == () for s in statuses.values())
    assert book.next_due(0.0) is None
    assert book.monitoring.state is Monitoring.ACTIVE


# -- transient ----------------------------------------------------------------------


def test_transient_error_recovers_after_quiet_period_and_probe(
    book: HealthBook, faults: DeviceFaults
) -> None:
    changes = book.apply(xid(GPU_A, 94), now=100.0)
    assert moves(changes) == [(GPU_A, H, U, "xid 94")]
    assert changes[0].kubelet_changed
    status = book.status(GPU_A)
    assert status is not None
    assert (status.reason, status.errors, status.detail) == ("xid 94", 1, "test")
    assert book.kubelet_health(GPU_A) is Health.UNHEALTHY
    assert book.next_due(100.0) == 100.0 + QUIET

    assert book.tick(100.0 + QUIET - 0.001, faults.probe) == []
    assert state(book, GPU_A) is U

    changes = book.tick(100.0 + QUIET, faults.probe)
    assert moves(changes) == [
        (GPU_A, U, R, "quiet period over"),
        (GPU_A, R, H, "probe passed"),
    ]
    status = book.status(GPU_A)
    assert status is not None
    assert (status.health, status.reason, status.errors) == (H, None, 0)
    assert [(t.source, t.dest) for t in status.history] == [(H, U), (U, R), (R, H)]
    assert [t.monotonic for t in status.history] == [100.0, 160.0, 160.0]
    assert book.next_due(200.0) is None


def test_each_new_error_restarts_the_quiet_period(book: HealthBook, faults: DeviceFaults) -> None:
    book.apply(xid(GPU_A, 94), now=0.0)
    assert book.apply(xid(GPU_A, 94), now=50.0) == []  # already unhealthy: no new transition
    assert book.tick(QUIET, faults.probe) == []
    assert book.next_due(QUIET) == 50.0 + QUIET
    assert [c.dest for c in book.tick(50.0 + QUIET, faults.probe)] == [R, H]
    status = book.status(GPU_A)
    assert status is not None
    assert len(status.history) == 3


def test_failed_probe_keeps_device_recovering_until_it_answers(
    book: HealthBook, faults: DeviceFaults
) -> None:
    book.apply(xid(GPU_A, 94), now=0.0)
    faults.set_lost(GPU_A, True)
    assert moves(book.tick(QUIET, faults.probe)) == [(GPU_A, U, R, "quiet period over")]
    status = book.status(GPU_A)
    assert status is not None
    assert status.detail == f"probe failed: {GPU_A} is lost"
    assert status.reason == "xid 94"
    assert book.kubelet_health(GPU_A) is Health.UNHEALTHY
    assert book.next_due(QUIET) == QUIET + EVERY
    assert book.tick(QUIET + EVERY, faults.probe) == []  # still lost: probed again later
    faults.set_lost(GPU_A, False)
    assert moves(book.tick(QUIET + 2 * EVERY, faults.probe)) == [(GPU_A, R, H, "probe passed")]


def test_error_while_recovering_goes_back_to_unhealthy(
    book: HealthBook, faults: DeviceFaults
) -> None:
    book.apply(xid(GPU_A, 94), now=0.0)
    faults.set_lost(GPU_A, True)
    book.tick(QUIET, faults.probe)
    assert moves(book.apply(xid(GPU_A, 31 + 1), now=QUIET + 1)) == [(GPU_A, R, U, "xid 32")]
    assert book.next_due(QUIET + 1) == 2 * QUIET + 1


# -- sticky ---------------------------------------------------------------------------


def test_sticky_error_waits_for_a_reset(book: HealthBook, faults: DeviceFaults) -> None:
    assert moves(book.apply(xid(GPU_A, 79), now=0.0)) == [(GPU_A, H, U, "xid 79")]
    assert book.next_due(0.0) == 0.0  # take the baseline generation right away
    assert book.tick(0.0, faults.probe) == []
    assert book.next_due(0.0) == QUIET
    assert book.tick(QUIET, faults.probe) == []
    status = book.status(GPU_A)
    assert status is not None
    assert (status.health, status.detail) == (U, "waiting for a reset")
    assert book.tick(QUIET + 10 * EVERY, faults.probe) == []  # no reset, no recovery, ever
    faults.reset(GPU_A)
    assert book.apply(event(EventKind.RESET, GPU_A), now=QUIET + 10 * EVERY + 1) == []
    assert book.next_due(0.0) == QUIET + 10 * EVERY + 1  # the reset asks for a look now
    assert moves(book.tick(QUIET + 10 * EVERY + 1, faults.probe)) == [
        (GPU_A, U, R, "reset detected"),
        (GPU_A, R, H, "probe passed"),
    ]


def test_reset_during_quiet_period_recovers_when_it_ends(
    book: HealthBook, faults: DeviceFaults
) -> None:
    book.apply(xid(GPU_A, 79), now=0.0)
    book.tick(0.0, faults.probe)
    faults.reset(GPU_A)
    assert book.tick(QUIET / 2, faults.probe) == []
    assert [c.dest for c in book.tick(QUIET, faults.probe)] == [R, H]


def test_reset_before_the_error_does_not_count(book: HealthBook, faults: DeviceFaults) -> None:
    faults.reset(GPU_A)
    book.apply(xid(GPU_A, 79), now=0.0)
    book.tick(0.0, faults.probe)
    assert book.tick(QUIET, faults.probe) == []
    assert state(book, GPU_A) is U


def test_sticky_error_after_a_reset_needs_another_reset(
    book: HealthBook, faults: DeviceFaults
) -> None:
    book.apply(xid(GPU_A, 79), now=0.0)
    book.tick(0.0, faults.probe)
    faults.reset(GPU_A)
    book.apply(xid(GPU_A, 48), now=5.0)  # a second sticky error, after the reset
    assert book.next_due(5.0) == 5.0
    book.tick(5.0, faults.probe)
    assert book.tick(5.0 + QUIET, faults.probe) == []
    status = book.status(GPU_A)
    assert status is not None
    assert status.reason == "xid 48"
    faults.reset(GPU_A)
    assert [c.dest for c in book.tick(5.0 + QUIET + EVERY, faults.probe)] == [R, H]


def test_sticky_device_that_stays_lost_after_reset_is_not_healthy(
    book: HealthBook, faults: DeviceFaults
) -> None:
    book.apply(xid(GPU_A, 79), now=0.0)
    faults.set_lost(GPU_A, True)
    book.tick(0.0, faults.probe)
    faults.reset(GPU_A)
    assert book.tick(QUIET, faults.probe) == []
    status = book.status(GPU_A)
    assert status is not None
    assert status.detail == f"probe failed: {GPU_A} is lost"
    faults.set_lost(GPU_A, False)
    assert [c.dest for c in book.tick(QUIET + EVERY, faults.probe)] == [R, H]


# -- classes and escalation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "number", "expected"),
    [
        pytest.param(HealthPolicy(), 13, None, id="application-xid-ignored"),
        pytest.param(HealthPolicy(), 109, None, id="application-xid-109-ignored"),
        pytest.param(HealthPolicy(ignored_xids=frozenset({92})), 92, None, id="configured-ignore"),
        pytest.param(HealthPolicy(xids=xid_policy(enable="all")), 13, "quiet", id="enable-all"),
        pytest.param(HealthPolicy(xids=xid_policy(disable="79")), 79, None, id="env-disable"),
        pytest.param(HealthPolicy(), 94, "quiet", id="94-transient"),
        pytest.param(HealthPolicy(), 8, "quiet", id="unlisted-transient"),
        pytest.param(HealthPolicy(other_xids=ErrorClass.STICKY), 8, "reset", id="unlisted-sticky"),
        pytest.param(HealthPolicy(), 79, "reset", id="79-sticky"),
        pytest.param(HealthPolicy(), 48, "reset", id="48-sticky"),
        pytest.param(
            HealthPolicy(transient_xids=frozenset({79}), sticky_xids=frozenset()),
            79,
            "quiet",
            id="79-made-transient",
        ),
    ],
)
def test_error_classes(
    policy: HealthPolicy, number: int, expected: str | None, faults: DeviceFaults
) -> None:
    book = HealthBook(INVENTORY, policy)
    changes = book.apply(xid(GPU_A, number), now=0.0)
    if expected is None:
        assert changes == []
        assert book.next_due(0.0) is None
        return
    assert moves(changes) == [(GPU_A, H, U, f"xid {number}")]
    book.tick(0.0, faults.probe)
    recovered = [c.dest for c in book.tick(policy.quiet_period, faults.probe)]
    assert recovered == ([R, H] if expected == "quiet" else [])


@pytest.mark.parametrize(
    ("ecc_class", "unhealthy_after_quiet"),
    [
        pytest.param(ErrorClass.STICKY, True, id="sticky-default"),
        pytest.param(ErrorClass.TRANSIENT, False, id="transient"),
    ],
)
def test_double_bit_ecc(
    ecc_class: ErrorClass, unhealthy_after_quiet: bool, faults: DeviceFaults
) -> None:
    book = HealthBook(INVENTORY, HealthPolicy(double_bit_ecc=ecc_class))
    assert moves(book.apply(event(EventKind.ECC, GPU_A), now=0.0)) == [
        (GPU_A, H, U, "double-bit ECC error")
    ]
    book.tick(0.0, faults.probe)
    book.tick(QUIET, faults.probe)
    assert (state(book, GPU_A) is U) is unhealthy_after_quiet


def test_ignored_double_bit_ecc() -> None:
    book = HealthBook(INVENTORY, HealthPolicy(double_bit_ecc=ErrorClass.IGNORED))
    assert book.apply(event(EventKind.ECC, GPU_A), now=0.0) == []


def test_sticky_error_raises_a_transient_one(book: HealthBook, faults: DeviceFaults) -> None:
    book.apply(xid(GPU_A, 94), now=0.0)
    book.apply(xid(GPU_A, 79), now=1.0)
    book.tick(1.0, faults.probe)
    assert book.tick(1.0 + QUIET, faults.probe) == []
    status = book.status(GPU_A)
    assert status is not None
    assert (status.reason, status.errors) == ("xid 79", 2)


def test_transient_error_does_not_lower_a_sticky_one(
    book: HealthBook, faults: DeviceFaults
) -> None:
    book.apply(xid(GPU_A, 79), now=0.0)
    book.tick(0.0, faults.probe)
    book.apply(xid(GPU_A, 94), now=1.0)
    assert book.tick(1.0 + QUIET, faults.probe) == []
    status = book.status(GPU_A)
    assert status is not None
    assert status.reason == "xid 79"


# -- lost devices ---------------------------------------------------------------------


def test_lost_device_recovers_once_it_answers(book: HealthBook, faults: DeviceFaults) -> None:
    faults.set_lost(GPU_A, True)
    assert moves(book.apply(event(EventKind.LOST, GPU_A, "gone"), now=0.0)) == [
        (GPU_A, H, U, "lost")
    ]
    assert state(book, GPU_B) is H  # one lost GPU is one unhealthy GPU
    assert book.tick(QUIET, faults.probe) == []
    status = book.status(GPU_A)
    assert status is not None
    assert status.detail == f"probe failed: {GPU_A} is lost"
    faults.set_lost(GPU_A, False)
    book.apply(event(EventKind.FOUND, GPU_A), now=QUIET + 1)
    assert book.next_due(QUIET + 1) == QUIET + 1
    assert moves(book.tick(QUIET + 1, faults.probe)) == [
        (GPU_A, U, R, "device answers again"),
        (GPU_A, R, H, "probe passed"),
    ]


def test_found_and_reset_on_a_healthy_device_change_nothing(book: HealthBook) -> None:
    assert book.apply(event(EventKind.FOUND, GPU_A), now=0.0) == []
    assert book.apply(event(EventKind.RESET, GPU_A), now=0.0) == []
    assert book.next_due(0.0) is None


def test_probe_that_raises_counts_as_failed(book: HealthBook) -> None:
    def broken(uuid: str) -> ProbeResult:
        raise RuntimeError("driver exploded")

    book.apply(xid(GPU_A, 94), now=0.0)
    assert [c.dest for c in book.tick(QUIET, broken)] == [R]
    status = book.status(GPU_A)
    assert status is not None
    assert status.detail == "probe failed: probe raised RuntimeError: driver exploded"


# -- fan-out ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "marked"),
    [
        pytest.param(xid(GPU_B, 94), {GPU_B, *MIGS}, id="gpu-wide"),
        pytest.param(xid(GPU_B, 94, gi=2, ci=1), {GPU_B, MIG_2_1}, id="one-instance"),
        pytest.param(xid(GPU_B, 94, gi=2, ci=0), {GPU_B, MIG_2_0}, id="same-gi-other-ci"),
        pytest.param(xid(GPU_B, 94, gi=2, ci=None), {GPU_B, *MIGS}, id="ci-unknown-means-all"),
        pytest.param(xid(GPU_B, 94, gi=None, ci=0), {GPU_B, *MIGS}, id="gi-unknown-means-all"),
        pytest.param(xid(GPU_B, 94, gi=9, ci=0), {GPU_B}, id="unknown-instance-no-mig"),
        pytest.param(xid(MIG_1_0, 94), {MIG_1_0}, id="mig-uuid"),
        pytest.param(xid(GPU_A, 94), {GPU_A}, id="other-gpu"),
        pytest.param(xid("GPU-ffffffff-0000-4000-8000-000000000000", 94), set(), id="unknown"),
        pytest.param(event(EventKind.LOST, GPU_B), {GPU_B, *MIGS}, id="lost-gpu"),
        pytest.param(event(EventKind.LOST, MIG_2_0), {MIG_2_0}, id="lost-mig"),
    ],
)
def test_fan_out(book: HealthBook, sent: HealthEvent, marked: set[str]) -> None:
    changes = book.apply(sent, now=0.0)
    assert {c.uuid for c in changes} == marked
    unhealthy = {uuid for uuid, s in book.statuses().items() if s.health is not H}
    assert unhealthy == marked


def test_gpu_reset_recovers_its_mig_devices(book: HealthBook, faults: DeviceFaults) -> None:
    book.apply(xid(GPU_B, 79), now=0.0)
    book.tick(0.0, faults.probe)
    faults.reset(GPU_B)
    recovered = {c.uuid for c in book.tick(QUIET, faults.probe) if c.dest is H}
    assert recovered == {GPU_B, *MIGS}


def plugin_device(device_id: str, uuid: str, gpu_uuid: str, index: str) -> PluginDevice:
    return PluginDevice(id=device_id, uuid=uuid, gpu_uuid=gpu_uuid, index=index, paths=())


def test_replicas_follow_their_gpu_and_mig_devices_their_own_record(book: HealthBook) -> None:
    replicas = [plugin_device(f"{GPU_A}::{n}", GPU_A, GPU_A, "0") for n in range(4)]
    mig_devices = [
        plugin_device(f"{uuid}::{n}", uuid, GPU_B, f"1:{slot}")
        for slot, uuid in enumerate(MIGS)
        for n in range(2)
    ]
    book.apply(xid(GPU_A, 94), now=0.0)
    book.apply(xid(GPU_B, 94, gi=1, ci=0), now=0.0)
    published = with_health([*replicas, *mig_devices], book)
    health = {d.id: d.health for d in published}
    assert {health[d.id] for d in replicas} == {Health.UNHEALTHY}
    assert {d.id for d in mig_devices if health[d.id] is Health.UNHEALTHY} == {
        f"{MIG_1_0}::0",
        f"{MIG_1_0}::1",
    }
    outsider = plugin_device("GPU-x", "GPU-x", "GPU-x", "9")
    assert health_of(outsider, book) is Health.HEALTHY


# -- monitoring, inventory, bookkeeping ---------------------------------------------------


def test_monitoring_loss_is_its_own_condition(book: HealthBook) -> None:
    assert book.apply(event(EventKind.DEGRADED, detail="wait failed: Unknown Error"), 0.0) == []
    assert book.monitoring.state is Monitoring.DEGRADED
    assert book.monitoring.reason == "wait failed: Unknown Error"
    assert {s.health for s in book.statuses().values()} == {H}
    book.apply(event(EventKind.RESTORED, detail="fine"), 1.0)
    assert (book.monitoring.state, book.monitoring.reason) == (Monitoring.ACTIVE, None)
    book.apply(event(EventKind.DISABLED, detail="disabled by DP_DISABLE_HEALTHCHECKS"), 2.0)
    assert book.monitoring.state is Monitoring.DISABLED
    assert book.to_json()["monitoring"] == {
        "state": "disabled",
        "reason": "disabled by DP_DISABLE_HEALTHCHECKS",
        "since": book.monitoring.since,
    }


def test_new_inventory_keeps_what_remains(book: HealthBook) -> None:
    book.apply(xid(GPU_B, 94), now=0.0)
    gpu_b = INVENTORY.gpus[1]
    regrouped = _gpu(1, GPU_B, (gpu_b.mig_devices[0], _mig(MIG_2_0, 1, 3, 0)))
    book.update_inventory(Inventory("550.54.15", "12.4", gpus=(regrouped,)))
    assert set(book.statuses()) == {GPU_B, MIG_1_0, MIG_2_0}
    assert state(book, GPU_B) is U
    assert state(book, MIG_1_0) is U
    assert state(book, MIG_2_0) is H  # same UUID, different instance: a new device


def test_transition_counts_and_json(book: HealthBook, faults: DeviceFaults) -> None:
    book.apply(xid(GPU_A, 94), now=0.0)
    book.apply(xid(MIG_1_0, 79), now=0.0)
    book.tick(QUIET, faults.probe)
    assert book.transitions == {
        ("healthy", "unhealthy", "xid 94"): 1,
        ("healthy", "unhealthy", "xid 79"): 1,
        ("unhealthy", "recovering", "quiet period over"): 1,
        ("recovering", "healthy", "probe passed"): 1,
    }
    devices = book.to_json()["devices"]
    assert isinstance(devices, dict)
    assert devices[MIG_1_0]["health"] == "unhealthy"
    assert devices[MIG_1_0]["reason"] == "xid 79"
    assert devices[MIG_1_0]["history"][0]["reason"] == "xid 79"
    assert [t["to"] for t in devices[GPU_A]["history"]] == ["unhealthy", "recovering", "healthy"]


def test_history_is_bounded(faults: DeviceFaults) -> None:
    book = HealthBook(INVENTORY, HealthPolicy(quiet_period=1.0, history_limit=4))
    for n in range(10):
        book.apply(xid(GPU_A, 94), now=float(n * 2))
        book.tick(float(n * 2 + 1), faults.probe)
    status = book.status(GPU_A)
    assert status is not None
    assert len(status.history) == 4
    assert book.transitions[("healthy", "unhealthy", "xid 94")] == 10


# -- a property: once the hardware is fine again, every device comes back --------------

_uuids = st.sampled_from([GPU_A, GPU_B, *MIGS])
_events = st.one_of(
    st.builds(
        lambda u, n, gi, ci: xid(u, n, gi=gi, ci=ci),
        _uuids,
        st.sampled_from([13, 48, 79, 94, 8]),
        st.none() | st.integers(0, 3),
        st.none() | st.integers(0, 2),
    ),
    st.builds(lambda u: event(EventKind.LOST, u), _uuids),
    st.builds(lambda u: event(EventKind.FOUND, u), _uuids),
    st.builds(lambda u: event(EventKind.RESET, u), _uuids),
    st.builds(lambda: event(EventKind.DEGRADED, detail="x")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_events, st.floats(0, 30)), max_size=25))
def test_every_device_recovers_once_faults_are_gone(
    script: list[tuple[HealthEvent, float]],
) -> None:
    faults = DeviceFaults()
    faults.bind(INVENTORY)
    book = HealthBook(INVENTORY, HealthPolicy(quiet_period=QUIET, probe_interval=EVERY))
    now = 0.0
    for sent, gap in script:
        now += gap
        if sent.kind is EventKind.LOST:
            faults.set_lost(sent.uuid, True)
        for change in book.apply(sent, now):
            assert MOVES[(change.source, Step.ERROR)] is change.dest
        for change in book.tick(now, faults.probe):
            assert change.dest is not U
        for uuid, status in book.statuses().items():
            assert book.kubelet_health(uuid) is status.kubelet_health
            assert (status.reason is None) is (status.health is H)
    for uuid in [GPU_A, GPU_B, *MIGS]:
        faults.set_lost(uuid, False)
        faults.reset(uuid)
    book.tick(now + QUIET, faults.probe)
    assert {s.health for s in book.statuses().values()} == {H}
    assert book.next_due(now + QUIET) is None
