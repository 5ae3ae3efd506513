"""The device library is initialised once per opening and shut down to match.

Discovery runs on the NVML worker and only returns the library to use; the
loop installs it and shuts the one it replaces down, and a library opened by
a read that came too late is shut down, never installed.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from devices.errors import NvmlUnavailable
from devices.library import ProbeResult
from devices.model import Inventory
from reconciler.plan.inputs import ConfigInputs
from reconciler.plan.intake import Intake
from reconciler.plan.node import DiscoveryFailed, discover
from reconciler.plan.reading import ReadTimeout
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


def test_repeated_discoveries_initialise_once_and_shut_down_once() -> None:
    library = CountingLibrary()
    node = None
    for _ in range(5):
        node, _inventory = discover(node, config("--mock-nvml", "dgx-a100"), lambda _: library)
    assert node is not None
    assert library.inits == 1
    node.shutdown()
    assert library.shutdowns == 1


def test_a_failed_init_is_tried_again_and_not_matched_by_a_shutdown() -> None:
    library = CountingLibrary(failures=1)
    with pytest.raises(DiscoveryFailed) as failed:
        discover(None, config(), lambda _: library)
    assert isinstance(failed.value.error, NvmlUnavailable)
    failed.value.node.shutdown()
    assert library.shutdowns == 0  # never initialised: nothing to match
    node, _inventory = discover(failed.value.node, config(), lambda _: library)
    assert library.inits == 1
    node.shutdown()
    assert library.shutdowns == 1


def test_another_backend_is_a_new_library_and_the_held_one_is_left_to_the_loop() -> None:
    opened: list[CountingLibrary] = []

    def open_library(_: EffectiveConfig) -> CountingLibrary:
        opened.append(CountingLibrary())
        return opened[-1]

    first, _ = discover(None, config("--mock-nvml", "dgx-a100"), open_library)
    second, _ = discover(first, config("--mock-nvml", "t4x4"), open_library)
    assert second.library is opened[1]
    # Discovery runs on the worker and swaps nothing: closing the old one is the loop's.
    assert [(lib.inits, lib.shutdowns) for lib in opened] == [(1, 0), (1, 0)]


async def test_the_loop_closes_a_replaced_library_and_one_read_too_late() -> None:
    opened: list[CountingLibrary] = []
    gate = threading.Event()

    def open_library(config: EffectiveConfig) -> CountingLibrary:
        if config.flags.mock_nvml == "t4x4":
            gate.wait(10)  # the second read overruns its deadline
        opened.append(CountingLibrary())
        return opened[-1]

    env = {"MOCK_NVML": "dgx-a100"}
    intake = Intake(
        config=ConfigInputs([], env),
        open_library=open_library,
        deadline=0.2,
    )
    try:
        assert intake.apply(await intake.read()) is None
        assert intake.library is opened[0]
        env["MOCK_NVML"] = "t4x4"
        late = await intake.read()
        assert isinstance(late.error, ReadTimeout)
        gate.set()
        busy = intake.nvml.busy
        assert busy is not None
        await asyncio.wrap_future(busy)  # the late answer is handed back on the loop first
        # The worker runs in order: this comes after the shutdown the late answer queued.
        await asyncio.wrap_future(intake.nvml.submit(lambda: None))
        assert intake.library is opened[0]  # the late library was never installed
        assert [(lib.inits, lib.shutdowns) for lib in opened] == [(1, 0), (1, 1)]
    finally:
        await intake.close()
    assert opened[0].shutdowns == 1
