"""The device library is initialised once per opening and shut down to match."""

from __future__ import annotations

import pytest

from devices.errors import NvmlUnavailable
from devices.library import ProbeResult
from devices.model import Inventory
from reconciler.node import NodeDevices
from settings import EffectiveConfig, load_config


class CountingLibrary:
    name = "counting"

    def __init__(self, failures: int = 0) -> None:
        self.inits = self.shutdowns = 0
        self._failures = failures

    def init(self) -> None:
        if self._failures:
            self._failures -= 1
            raise NvmlUnavailable("driver not loaded")
        self.inits += 1

    def shutdown(self) -> None:
        self.shutdowns += 1

    def inventory(self) -> Inventory:
        return Inventory(driver_version="1", cuda_driver_version="12.4")

    def probe(self, uuid: str) -> ProbeResult:
        return ProbeResult(ok=True)


def config(*argv: str) -> EffectiveConfig:
    return load_config(list(argv), {})


def test_repeated_reconciles_initialise_once_and_shut_down_once() -> None:
    library = CountingLibrary()
    node = NodeDevices(lambda _: library)
    for _ in range(5):
        node.inventory(config("--mock-nvml", "dgx-a100"))
    assert library.inits == 1
    node.shutdown()
    node.shutdown()
    assert library.shutdowns == 1


def test_a_failed_init_is_tried_again_and_not_matched_by_a_shutdown() -> None:
    library = CountingLibrary(failures=1)
    node = NodeDevices(lambda _: library)
    with pytest.raises(NvmlUnavailable):
        node.inventory(config())
    node.inventory(config())
    assert library.inits == 1
    node.shutdown()
    assert library.shutdowns == 1


def test_a_new_backend_closes_the_old_one() -> None:
    opened: list[CountingLibrary] = []

    def open_library(_: EffectiveConfig) -> CountingLibrary:
        opened.append(CountingLibrary())
        return opened[-1]

    node = NodeDevices(open_library)
    node.inventory(config("--mock-nvml", "dgx-a100"))
    node.inventory(config("--mock-nvml", "t4x4"))
    assert [(lib.inits, lib.shutdowns) for lib in opened] == [(1, 1), (1, 0)]
