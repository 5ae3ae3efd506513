"""Unmonitored devices: marks beside the health machine, never a move of it.

A GPU the health source cannot register for events stays Healthy to the
kubelet; the book only remembers why no event reaches it (and its MIG
devices), shows it on `/state`, and forgets it once the GPU is watched.
"""

from __future__ import annotations

from devices.health import EventKind, HealthEvent
from devices.model import Gpu, Inventory, MigDevice
from resources.model import Health
from states.health import DeviceHealth, HealthBook
from states.health_status import HealthView

GPU_A = "GPU-aaaaaaaa-0000-4000-8000-000000000000"
GPU_B = "GPU-bbbbbbbb-0000-4000-8000-000000000000"
MIG_B0 = "MIG-b0000000-0000-4000-8000-000000000000"
MIG_B1 = "MIG-b1000000-0000-4000-8000-000000000000"
WHY = "nvmlDeviceRegisterEvents: Not Supported"


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


def _mig(uuid: str, slot: int, gi: int) -> MigDevice:
    return MigDevice(uuid, 1, slot, gi, 0, "3g.20gb", 19968)


INVENTORY = Inventory(
    driver_version="550.54.15",
    cuda_driver_version="12.4",
    gpus=(_gpu(0, GPU_A), _gpu(1, GPU_B, (_mig(MIG_B0, 0, 1), _mig(MIG_B1, 1, 2)))),
)


def unmonitored(book: HealthBook) -> dict[str, str]:
    return {u: s.unmonitored for u, s in book.statuses().items() if s.unmonitored is not None}


def test_an_unmonitored_gpu_and_its_mig_devices_stay_healthy_with_the_reason() -> None:
    book = HealthBook(INVENTORY)
    changes = book.apply(HealthEvent(EventKind.UNMONITORED, GPU_B, detail=WHY), 0.0)
    assert changes == []
    assert unmonitored(book) == {GPU_B: WHY, MIG_B0: WHY, MIG_B1: WHY}
    for uuid in (GPU_B, MIG_B0, MIG_B1):
        assert book.kubelet_health(uuid) is Health.HEALTHY
        status = book.status(uuid)
        assert status is not None
        assert (status.health, status.reason, status.errors, status.history) == (
            DeviceHealth.HEALTHY, None, 0, ()
        )  # fmt: skip
    assert book.next_due(0.0) is None  # nothing to probe: it is not unhealthy


def test_watched_clears_the_mark_and_errors_still_count_while_unmonitored() -> None:
    book = HealthBook(INVENTORY)
    book.apply(HealthEvent(EventKind.UNMONITORED, GPU_A, detail=WHY), 0.0)
    # An unmonitored GPU whose probes fail (lost) is unhealthy like any other.
    (change,) = book.apply(HealthEvent(EventKind.LOST, GPU_A, detail="GPU is lost"), 1.0)
    assert (change.uuid, change.dest) == (GPU_A, DeviceHealth.UNHEALTHY)
    assert unmonitored(book) == {GPU_A: WHY}
    assert book.apply(HealthEvent(EventKind.WATCHED, GPU_A), 2.0) == []
    assert unmonitored(book) == {}
    assert book.kubelet_health(GPU_A) is Health.UNHEALTHY  # watching again heals nothing


def test_an_unmonitored_event_without_a_reason_gets_one_and_unknown_devices_are_ignored() -> None:
    book = HealthBook(INVENTORY)
    book.apply(HealthEvent(EventKind.UNMONITORED, GPU_A), 0.0)
    book.apply(HealthEvent(EventKind.UNMONITORED, "GPU-not-here", detail=WHY), 0.0)
    book.apply(HealthEvent(EventKind.WATCHED, "GPU-not-here"), 0.0)
    assert unmonitored(book) == {GPU_A: "cannot be watched for health events"}


def test_a_new_inventory_forgets_the_marks_for_the_new_source_to_report() -> None:
    book = HealthBook(INVENTORY)
    book.apply(HealthEvent(EventKind.UNMONITORED, GPU_B, detail=WHY), 0.0)
    book.update_inventory(INVENTORY)
    assert unmonitored(book) == {}


def test_state_json_shows_the_mark_per_device_and_null_when_watched() -> None:
    book = HealthBook(INVENTORY)
    book.apply(HealthEvent(EventKind.UNMONITORED, GPU_B, detail=WHY), 0.0)
    view = HealthView(book.monitoring, book.statuses())
    devices = view.to_json()["devices"]
    assert isinstance(devices, dict)
    assert {uuid: d["unmonitored"] for uuid, d in devices.items()} == {
        GPU_A: None, GPU_B: WHY, MIG_B0: WHY, MIG_B1: WHY
    }  # fmt: skip
    assert {uuid: d["health"] for uuid, d in devices.items()} == dict.fromkeys(devices, "Healthy")
    assert view.unmonitored_of(MIG_B1) == WHY
    assert view.unmonitored_of(GPU_A) is None
    assert view.unmonitored_of("GPU-not-here") is None
    assert book.to_json()["devices"][GPU_B]["unmonitored"] == WHY  # type: ignore[index]
