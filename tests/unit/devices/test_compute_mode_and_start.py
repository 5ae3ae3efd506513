"""The device layer's one write (the compute mode), and what it says when it cannot start.

- The NVML backend sets and reads the compute mode with the real `pynvml`
  error type and constants, against a stand-in for the driver's functions.
- The simulated backend records the mode per GPU (surviving a re-read of the
  profile) and refuses changes when the profile says the driver would.
- Node profiles accept a bus id copied from ``lspci -D``.
- NVML failing to start comes with guidance, once; a discovery strategy with
  no backend here fails with a permanent error that does not mention NVML
  failing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import yaml
from loguru import logger

from devices import nvmlload
from devices.backends import UnsupportedDiscovery, open_library
from devices.compute_mode import ComputeMode, ComputeModeControl, ComputeModeError
from devices.nvml_compute_mode import get_compute_mode, set_compute_mode
from devices.profile_schema import load_profile, nvml_bus_id
from devices.simulated import PROFILES_DIR, SimulatedLibrary
from foundation.errors import PermanentError

GPU = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"  # dgx-a100, index 0


class Driver:
    """The four NVML functions involved, over a table of modes, with pynvml's errors."""

    def __init__(self, *, refuse: int | None = None) -> None:
        self.modes = {GPU: pynvml.NVML_COMPUTEMODE_DEFAULT}
        self.refuse = refuse

    def module(self) -> Any:
        def handle(uuid: str) -> str:
            if uuid not in self.modes:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            return uuid

        def set_mode(found: str, code: int) -> None:
            if self.refuse is not None:
                raise pynvml.NVMLError(self.refuse)
            self.modes[found] = code

        return SimpleNamespace(
            NVMLError=pynvml.NVMLError,
            NVML_COMPUTEMODE_DEFAULT=pynvml.NVML_COMPUTEMODE_DEFAULT,
            NVML_COMPUTEMODE_PROHIBITED=pynvml.NVML_COMPUTEMODE_PROHIBITED,
            NVML_COMPUTEMODE_EXCLUSIVE_PROCESS=pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
            nvmlDeviceGetHandleByUUID=handle,
            nvmlDeviceGetComputeMode=lambda found: self.modes[found],
            nvmlDeviceSetComputeMode=set_mode,
        )


def test_nvml_sets_and_reads_the_compute_mode() -> None:
    driver = Driver()
    nvml = driver.module()
    assert get_compute_mode(nvml, GPU) is ComputeMode.DEFAULT
    set_compute_mode(nvml, GPU, ComputeMode.EXCLUSIVE_PROCESS)
    assert driver.modes[GPU] == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert get_compute_mode(nvml, GPU) is ComputeMode.EXCLUSIVE_PROCESS


def test_nvml_refusals_name_the_gpu_and_the_call() -> None:
    nvml = Driver(refuse=pynvml.NVML_ERROR_NO_PERMISSION).module()
    with pytest.raises(ComputeModeError) as caught:
        set_compute_mode(nvml, GPU, ComputeMode.EXCLUSIVE_PROCESS)
    assert str(caught.value) == (
        f"{GPU}: cannot set compute mode EXCLUSIVE_PROCESS: nvmlDeviceSetComputeMode failed: "
        "Insufficient Permissions"
    )
    assert not caught.value.permanent
    with pytest.raises(ComputeModeError, match="GPU-nope: nvmlDeviceGetHandleByUUID failed"):
        get_compute_mode(nvml, "GPU-nope")


@pytest.fixture
def gpus() -> Iterator[SimulatedLibrary]:
    library = SimulatedLibrary.from_argument("dgx-a100")
    library.init()
    yield library
    library.shutdown()


def test_simulated_gpus_record_the_mode(gpus: SimulatedLibrary) -> None:
    assert isinstance(gpus, ComputeModeControl)
    assert set(gpus.compute_modes.values()) == {ComputeMode.DEFAULT}
    lines: list[str] = []
    handle = logger.add(lambda message: lines.append(message.record["message"]))
    try:
        gpus.set_compute_mode(GPU, ComputeMode.EXCLUSIVE_PROCESS)
        gpus.set_compute_mode(GPU, ComputeMode.EXCLUSIVE_PROCESS)  # no change, no line
    finally:
        logger.remove(handle)
    assert lines == [f"simulated GPU {GPU}: compute mode DEFAULT -> EXCLUSIVE_PROCESS"]
    gpus.inventory()  # the profile is re-read: the mode stays, as on a real GPU
    assert gpus.compute_mode(GPU) is ComputeMode.EXCLUSIVE_PROCESS
    with pytest.raises(ComputeModeError, match="GPU-nope: no such GPU"):
        gpus.set_compute_mode("GPU-nope", ComputeMode.DEFAULT)


def test_a_simulated_gpu_can_refuse(tmp_path: Path) -> None:
    profile = yaml.safe_load((PROFILES_DIR / "dgx-a100.yaml").read_text())
    profile["gpus"][0]["computeMode"] = "PROHIBITED"
    profile["gpus"][0]["computeModeError"] = "Insufficient Permissions"
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(profile))
    library = SimulatedLibrary(path)
    library.init()
    assert library.compute_mode(GPU) is ComputeMode.PROHIBITED
    with pytest.raises(ComputeModeError) as caught:
        library.set_compute_mode(GPU, ComputeMode.EXCLUSIVE_PROCESS)
    assert str(caught.value) == (
        f"{GPU}: cannot set compute mode EXCLUSIVE_PROCESS: Insufficient Permissions"
    )
    assert library.compute_mode(GPU) is ComputeMode.PROHIBITED


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("00000000:3B:00.0", "00000000:3B:00.0"),
        ("0000:3b:00.0", "00000000:3B:00.0"),
        ("0001:af:1f.7", "00000001:AF:1F.7"),
        ("00000000:3b:00.0", "00000000:3B:00.0"),
    ],
)
def test_bus_ids_in_nvml_or_lspci_form(written: str, stored: str, tmp_path: Path) -> None:
    assert nvml_bus_id(written) == stored
    profile = yaml.safe_load((PROFILES_DIR / "t4x4.yaml").read_text())
    profile["gpus"][0]["pciBusID"] = written
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(profile))
    assert load_profile(path).gpus[0].pci_bus_id == stored


@pytest.mark.parametrize("written", ["3b:00.0", "0000:3b:00.8", "000:3b:00.0", "0000:3b:0.0"])
def test_bus_ids_that_are_neither_form(written: str) -> None:
    assert nvml_bus_id(written) is None


def test_nvml_start_guidance_by_error() -> None:
    missing = nvmlload.start_failure_guidance(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    for needed in ("NVIDIA Container Toolkit", "runtimeClassName: nvidia", "node selector"):
        assert needed in missing
    assert "reboot" in nvmlload.start_failure_guidance(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    assert "not loaded" in nvmlload.start_failure_guidance(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    assert "node selector" in nvmlload.start_failure_guidance(None)


def test_nvml_start_guidance_is_logged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvmlload, "_explained", type(nvmlload._explained)())
    lines: list[tuple[str, str]] = []
    handle = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"])))
    try:
        for _ in range(3):
            nvmlload.explain_start_failure(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    finally:
        logger.remove(handle)
    (line,) = lines
    assert line[0] == "WARNING"
    assert line[1].startswith("NVML could not start (NVML Shared Library Not Found). ")


@pytest.mark.parametrize("strategy", ["tegra", "vfio"])
def test_a_strategy_without_a_backend(strategy: str) -> None:
    library = open_library(None, strategy=strategy)
    with pytest.raises(UnsupportedDiscovery) as caught:
        library.init()
    assert isinstance(caught.value, PermanentError)
    assert str(caught.value).startswith(f"--device-discovery-strategy={strategy} is not supported")
    assert "auto or nvml" in str(caught.value)
    assert not library.probe(GPU).ok
    library.shutdown()


def test_the_simulator_ignores_the_strategy() -> None:
    assert open_library("dgx-a100", strategy="tegra").name == "simulated:dgx-a100"
