"""The NVML backend's use of the C API itself: start-up, versioned records, probes.

Each test goes through pynvml's ctypes calls into the fake
`libnvidia-ml.so.1`, which checks struct versions and answers with NVML's
return codes, so what is exercised is what a driver would see.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from devices.errors import NvmlUnavailable
from devices.library import ProbeResult
from devices.nvml import NvmlLibrary

from .fake_nvml_driver import FakeDriver
from .nvml_c_profiles import CLIQUE, fabric_node

Install = Callable[[str | Path], FakeDriver]


def library_for(driver: FakeDriver) -> NvmlLibrary:
    return NvmlLibrary(
        driver_root=str(driver.root), sysfs_root=driver.sysfs, mig_minors_path=driver.mig_minors
    )


def test_without_a_loaded_driver_nvml_is_unavailable(
    fake_driver: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = fake_driver("dgx-a100")
    monkeypatch.delenv("FAKE_NVML_NODE")
    with pytest.raises(NvmlUnavailable, match=r"^NVML could not start: Driver Not Loaded$"):
        library_for(driver).init()


def test_init_is_counted_and_nvml_stops_with_the_last_shutdown(fake_driver: Install) -> None:
    library = library_for(fake_driver("t4x4"))
    library.init()
    library.init()
    library.shutdown()
    assert pynvml.nvmlDeviceGetCount() == 4  # one user is left
    library.shutdown()
    with pytest.raises(pynvml.NVMLError) as error:
        pynvml.nvmlDeviceGetCount()
    assert error.value.value == pynvml.NVML_ERROR_UNINITIALIZED


def test_versioned_records_are_checked_like_the_driver_does(fake_driver: Install) -> None:
    library = library_for(fake_driver("a100-mig-single"))
    library.init()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert v1.total == v2.total == 40960 << 20
        with pytest.raises(pynvml.NVMLError) as error:
            pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2 + 1)
        assert error.value.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        old = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 2, version=1)
        new = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 2)
        assert (old.id, old.sliceCount) == (new.id, new.sliceCount) == (9, 3)
    finally:
        library.shutdown()


def test_fabric_is_read_with_the_original_query_when_the_driver_lacks_the_record_version(
    fake_driver: Install, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class FutureFabricInfo(pynvml.c_nvmlGpuFabricInfo_v3_t):  # type: ignore[misc]
        """A newer record than this driver knows (pynvml ahead of the driver)."""

        def __init__(self) -> None:
            super().__init__()
            self.version = 0x04000030

    monkeypatch.setattr(pynvml, "c_nvmlGpuFabricInfoV_t", FutureFabricInfo)
    library = library_for(fake_driver(fabric_node(tmp_path / "fabric.yaml")))
    library.init()
    try:
        gpus = library.inventory().gpus
    finally:
        library.shutdown()
    assert {gpu.fabric.clique_id for gpu in gpus if gpu.fabric is not None} == {CLIQUE}
    assert all(gpu.fabric is not None for gpu in gpus)


@pytest.mark.parametrize(
    ("profile", "checks"),
    [
        ("dgx-a100", "checked handle, memory, row remapping"),
        ("t4x4", "checked handle, memory, retired pages"),
    ],
)
def test_probes_see_lost_gpus_pending_repairs_and_resets(
    fake_driver: Install, profile: str, checks: str
) -> None:
    driver = fake_driver(profile)
    gpu = driver.inventory.gpus[1].uuid
    library = library_for(driver)
    library.init()
    try:
        assert library.probe(gpu) == ProbeResult(ok=True, detail=checks, generation=0)
        driver.pending(gpu)
        assert library.probe(gpu).ok is False
        driver.reset(gpu)
        assert library.probe(gpu) == ProbeResult(ok=True, detail=checks, generation=1)
        driver.lost(gpu)
        lost = library.probe(gpu)
        assert lost.ok is False
        assert lost.detail == "nvmlDeviceGetHandleByUUID failed: GPU is lost"
        driver.reset(gpu)
        assert library.probe(gpu) == ProbeResult(ok=True, detail=checks, generation=2)
        assert library.probe("GPU-00000000-0000-4000-8000-00000000dead").ok is False
    finally:
        library.shutdown()


def test_a_mig_device_is_probed_through_its_own_handle_and_its_parent(
    fake_driver: Install,
) -> None:
    driver = fake_driver("a100-mig-mixed")
    parent = driver.inventory.gpus[2]
    mig = parent.mig_devices[1].uuid
    library = library_for(driver)
    library.init()
    try:
        assert library.probe(mig).ok is True
        driver.pending(parent.uuid)
        assert library.probe(mig).detail == "row remapping pending (a reset is required)"
        driver.reset(parent.uuid)
        assert library.probe(mig) == ProbeResult(
            ok=True, detail="checked handle, memory, row remapping", generation=1
        )
    finally:
        library.shutdown()
