"""The health stream's list, pure: every device of the pool, named as the slices name them."""

from __future__ import annotations

import pytest

from resources.dra_health import (
    MESSAGE_LIMIT,
    NOT_TRACKED,
    DeviceHealthReport,
    StreamHealth,
    cut,
    health_report,
)


def test_every_device_is_listed_in_order_and_one_not_known_is_unknown() -> None:
    devices = [("gpu-0", "GPU-0"), ("gpu-1", "GPU-1"), ("gpu-1-mig-1g5gb-19-0", "MIG-1")]
    known = {
        "GPU-0": (StreamHealth.UNHEALTHY, "xid 79"),
        "MIG-1": (StreamHealth.HEALTHY, ""),
    }
    assert health_report("node-a", devices, known) == (
        DeviceHealthReport("node-a", "gpu-0", StreamHealth.UNHEALTHY, "xid 79"),
        DeviceHealthReport("node-a", "gpu-1", StreamHealth.UNKNOWN, NOT_TRACKED),
        DeviceHealthReport("node-a", "gpu-1-mig-1g5gb-19-0", StreamHealth.HEALTHY, ""),
    )


def test_a_pool_without_devices_is_an_empty_list() -> None:
    assert health_report("node-a", [], {}) == ()


@pytest.mark.parametrize("length", [0, 1, MESSAGE_LIMIT - 1, MESSAGE_LIMIT])
def test_a_message_within_the_limit_is_kept_whole(length: int) -> None:
    assert cut("m" * length) == "m" * length


@pytest.mark.parametrize("length", [MESSAGE_LIMIT + 1, 10 * MESSAGE_LIMIT])
def test_a_longer_message_keeps_its_start_and_ends_in_an_ellipsis(length: int) -> None:
    message = "".join(chr(ord("a") + i % 26) for i in range(length))
    kept = cut(message)
    assert len(kept) == MESSAGE_LIMIT
    assert kept == message[: MESSAGE_LIMIT - 3] + "..."


def test_a_tiny_limit_is_still_respected() -> None:
    assert cut("abcdef", limit=2) == ".."
