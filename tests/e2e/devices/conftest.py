"""The fake NVIDIA driver of the device tests (tests/unit/devices/fake_nvml_driver.py)."""

from tests.unit.devices.fake_nvml_driver import fake_driver, fake_nvml_library

__all__ = ["fake_driver", "fake_nvml_library"]
