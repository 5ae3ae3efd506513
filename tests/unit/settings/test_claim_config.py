"""The opaque per-claim `GpuConfig`: decoded strictly, every problem one line."""

from __future__ import annotations

from typing import Any

import pytest

from settings.claim_config import (
    ClaimConfigError,
    ClaimSharing,
    SharingMode,
    TimeSlice,
    parse_gpu_config,
    quantity_bytes,
)

HEAD = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}


def config(**sharing: Any) -> dict[str, Any]:
    return {**HEAD, "sharing": sharing}


def test_no_sharing_is_the_default() -> None:
    assert parse_gpu_config(HEAD) == ClaimSharing()


def test_mps_settings_are_read_with_quantities_in_bytes() -> None:
    sharing = parse_gpu_config(
        config(
            strategy="MPS",
            mpsConfig={
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"GPU-a": "512Mi"},
            },
        )
    )
    assert sharing == ClaimSharing(
        mode=SharingMode.MPS,
        thread_percentage=50,
        pinned_limit=10 * 2**30,
        per_device_limits={"GPU-a": 512 * 2**20},
    )


def test_time_slicing_interval_is_read() -> None:
    long = config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"})
    sharing = parse_gpu_config(long)
    assert (sharing.mode, sharing.interval) == (SharingMode.TIME_SLICING, TimeSlice.LONG)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        pytest.param(config(strategy="Sideways"),
                     "sharing.strategy: expected one of 'TimeSlicing' or 'MPS' (found 'Sideways')",
                     id="unknown-strategy"),
        pytest.param({**HEAD, "apiVersion": "resource.nvidia.com/v1"},
                     "apiVersion: expected 'resource.nvidia.com/v1beta1' "
                     "(found 'resource.nvidia.com/v1')", id="other-version"),
        pytest.param({"kind": "GpuConfig"}, "apiVersion: required", id="no-version"),
        pytest.param({**HEAD, "shareing": {}}, "shareing: unknown field", id="typo"),
        pytest.param(config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 150}),
                     "sharing.mpsConfig.defaultActiveThreadPercentage: must not be greater "
                     "than 100 (found 150)", id="percentage-too-high"),
        pytest.param(config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": "50"}),
                     "sharing.mpsConfig.defaultActiveThreadPercentage: expected an integer "
                     "(found '50')", id="percentage-as-text"),
        pytest.param(config(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": "1Ki"}),
                     "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: limit set too low: 1Ki "
                     "(at least 1Mi)", id="limit-too-low"),
        pytest.param(config(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": "lots"}),
                     "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: not a quantity: 'lots'",
                     id="limit-not-a-quantity"),
        pytest.param(config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Forever"}),
                     "sharing.timeSlicingConfig.interval: expected one of 'Default', 'Short', "
                     "'Medium' or 'Long' (found 'Forever')", id="unknown-interval"),
        pytest.param(config(strategy="TimeSlicing", mpsConfig={}),
                     "sharing.mpsConfig: cannot be used with the TimeSlicing strategy",
                     id="mps-settings-with-time-slicing"),
        pytest.param(config(strategy="MPS", timeSlicingConfig={}),
                     "sharing.timeSlicingConfig: cannot be used with the MPS strategy",
                     id="time-slicing-settings-with-mps"),
        pytest.param("text", "expected a GpuConfig object, found str", id="not-an-object"),
    ],
)  # fmt: skip
def test_bad_configs_are_one_line(parameters: Any, message: str) -> None:
    with pytest.raises(ClaimConfigError) as caught:
        parse_gpu_config(parameters)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1Gi", 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("1048576", 2**20), (2048, 2048),
     ("1.5Gi", 3 * 2**29)],
)  # fmt: skip
def test_quantities(text: object, expected: int) -> None:
    assert quantity_bytes(text) == expected
