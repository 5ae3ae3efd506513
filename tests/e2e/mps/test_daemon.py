"""One control daemon's start and stop sequence, with the stand-in control program.

The GPUs' compute mode is set through a simulated device library, which
records it (and refuses it when its profile says so).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devices.compute_mode import ComputeMode, ComputeModeError
from devices.simulated import PROFILES_DIR, SimulatedLibrary
from mps.daemon import SELINUX_LABEL, ControlDaemon, DaemonTools
from mps.errors import MpsStartError
from mps.layout import MpsLayout
from mps.limits import DaemonSpec
from mps.probe import probe_daemon
from tests.unit.mps.helpers import DGX_A100_UUIDS, GPU, set_faults, state

SPEC = DaemonSpec(
    resource=GPU,
    gpu_uuids=DGX_A100_UUIDS[:2],
    memory_limits=(("0", 4096), ("1", 4096)),
    thread_percentage=10,
)


EXCLUSIVE = ComputeMode.EXCLUSIVE_PROCESS


def open_gpus(profile: Path = PROFILES_DIR / "dgx-a100.yaml") -> SimulatedLibrary:
    library = SimulatedLibrary(profile)
    library.init()
    return library


@pytest.fixture
def gpus() -> Iterator[SimulatedLibrary]:
    library = open_gpus()
    yield library
    library.shutdown()


def modes(library: SimulatedLibrary) -> list[ComputeMode]:
    return [library.compute_modes[uuid] for uuid in SPEC.gpu_uuids]


def daemon(
    layout: MpsLayout, workdir: Path, gpus: SimulatedLibrary | None = None, **tools: object
) -> ControlDaemon:
    options = {
        "selinux_dir": workdir / "no-selinux",
        "command_timeout": 5.0,
        "compute_modes": gpus,
        **tools,
    }
    return ControlDaemon(SPEC, layout=layout, tools=DaemonTools(**options))  # type: ignore[arg-type]


async def test_start_applies_limits_then_marks_started(
    layout: MpsLayout, workdir: Path, fakes_on_path: None, gpus: SimulatedLibrary
) -> None:
    assert modes(gpus) == [ComputeMode.DEFAULT] * 2
    control = daemon(layout, workdir, gpus)
    try:
        await control.start()
        assert layout.pipe_dir(GPU).is_dir()
        assert layout.log_dir(GPU).is_dir()
        assert layout.pipe_dir(GPU).stat().st_mode & 0o777 == 0o755
        assert layout.started(GPU).exists()
        recorded = state(layout)
        assert recorded["commands"] == [
            "set_default_device_pinned_mem_limit 0 4096M",
            "set_default_device_pinned_mem_limit 1 4096M",
            "set_default_active_thread_percentage 10",
        ]
        assert recorded["pinned_mem_limits"] == {"0": "4096M", "1": "4096M"}
        assert modes(gpus) == [EXCLUSIVE] * 2
        assert gpus.compute_modes[DGX_A100_UUIDS[2]] is ComputeMode.DEFAULT  # not this resource's
        await probe_daemon(mps_root_ctr=layout.root, resource=GPU, timeout=5)
    finally:
        problems = await control.stop()
    assert problems == ()
    assert state(layout)["commands"][-1] == "quit"
    assert not layout.started(GPU).exists()
    assert not layout.log_dir(GPU).exists()
    assert not (layout.pipe_dir(GPU) / "control").exists()
    assert modes(gpus) == [ComputeMode.DEFAULT] * 2


async def test_compute_mode_step_can_be_skipped(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    control = daemon(layout, workdir, None)
    await control.start()
    assert await control.stop() == ()


class StuckOnReset:
    """The simulated GPUs, except that the first refuses to go back to DEFAULT."""

    def __init__(self, library: SimulatedLibrary) -> None:
        self.library = library

    def compute_mode(self, uuid: str) -> ComputeMode:
        return self.library.compute_mode(uuid)

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> None:
        if uuid == SPEC.gpu_uuids[0] and mode is ComputeMode.DEFAULT:
            raise ComputeModeError(f"{uuid}: cannot set compute mode DEFAULT: GPU is busy")
        self.library.set_compute_mode(uuid, mode)


async def test_stop_resets_every_gpu_it_can_and_reports_the_one_it_cannot(
    layout: MpsLayout, workdir: Path, fakes_on_path: None, gpus: SimulatedLibrary
) -> None:
    control = daemon(layout, workdir, StuckOnReset(gpus))  # type: ignore[arg-type]
    await control.start()
    assert modes(gpus) == [EXCLUSIVE] * 2
    problems = await control.stop()
    assert problems == (
        f"error setting compute mode DEFAULT: {SPEC.gpu_uuids[0]}: cannot set compute mode "
        "DEFAULT: GPU is busy",
    )
    assert modes(gpus) == [EXCLUSIVE, ComputeMode.DEFAULT]  # the second one is not left behind
    assert not layout.started(GPU).exists()
    assert state(layout)["commands"][-1] == "quit"


async def test_a_marker_that_cannot_be_written_fails_the_start_and_leaves_nothing(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    marker = layout.started(GPU)
    (marker / "in-the-way").mkdir(parents=True)  # a directory where the marker goes
    control = daemon(layout, workdir, None)
    try:
        with pytest.raises(MpsStartError) as caught:
            await control.start()
        assert str(caught.value).startswith(f"error creating {marker}: ")
        assert not marker.with_name(".started.tmp").exists()
    finally:
        problems = await control.stop(running=False)
    # Stopping goes through every step and says what it could not undo.
    assert problems == (f"error removing {marker}: Is a directory",)


async def test_control_log_repeats_are_quiet(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    """Each health check is a line of control.log; only the first is news."""
    from loguru import logger

    probes: list[str] = []
    three = asyncio.Event()

    def sink(message: Any) -> None:
        if "get_default_active_thread_percentage" in message.record["message"]:
            probes.append(message.record["level"].name)
            if len(probes) == 3:
                three.set()

    handle = logger.add(sink, level="DEBUG")
    control = daemon(layout, workdir, None, log_poll_interval=0.05)
    try:
        await control.start()
        for _ in range(3):
            await control.check()
        async with asyncio.timeout(5):  # the follower polls the file
            await three.wait()
    finally:
        await control.stop()
        logger.remove(handle)
    assert probes == ["INFO", "DEBUG", "DEBUG"]


async def test_control_daemon_failing_to_start(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    set_faults(layout, {"start": "fail"})
    with pytest.raises(MpsStartError) as caught:
        await daemon(layout, workdir).start()
    assert str(caught.value) == (
        "error starting the MPS control daemon for nvidia.com/gpu: nvidia-cuda-mps-control -d "
        "exited with status 1: Failed to start MPS control daemon (fault injected)"
    )
    assert not layout.started(GPU).exists()


async def test_second_start_is_refused_while_one_runs(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    first = daemon(layout, workdir)
    await first.start()
    try:
        with pytest.raises(MpsStartError, match="An instance of this daemon is already running"):
            await daemon(layout, workdir).start()
    finally:
        assert await first.stop() == ()


async def test_stop_reports_a_daemon_that_is_gone(
    layout: MpsLayout, workdir: Path, fakes_on_path: None, gpus: SimulatedLibrary
) -> None:
    control = daemon(layout, workdir, gpus)
    await control.start()
    await control.command("quit")
    problems = await control.stop()
    assert problems == (
        "error sending quit: nvidia-cuda-mps-control exited with status 1: "
        "Cannot find MPS control daemon process",
    )
    # Every other step still ran.
    assert not layout.started(GPU).exists()
    assert modes(gpus) == [ComputeMode.DEFAULT] * 2
    # A daemon not known to run (being restarted) is expected to refuse quit.
    assert await control.stop(running=False) == ()


async def test_pipe_directory_is_labelled_when_selinux_is_on(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    selinux = workdir / "selinux"
    selinux.mkdir()
    labelled: list[Path] = []
    control = daemon(layout, workdir, selinux_dir=selinux, label=labelled.append)
    await control.start()
    assert await control.stop() == ()
    assert labelled == [layout.pipe_dir(GPU)]
    assert SELINUX_LABEL == "system_u:object_r:container_file_t:s0"


