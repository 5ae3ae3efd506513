"""One control daemon's start and stop sequence, with the stand-in programs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mps import MpsStartError, probe_daemon
from mps.daemon import SELINUX_LABEL, ControlDaemon, DaemonTools
from mps.layout import MpsLayout
from mps.limits import DaemonSpec

from .helpers import DGX_A100_UUIDS, GPU, set_faults, state

SPEC = DaemonSpec(
    resource=GPU,
    gpu_uuids=DGX_A100_UUIDS[:2],
    memory_limits=(("0", 4096), ("1", 4096)),
    thread_percentage=10,
)


def smi_calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def daemon(layout: MpsLayout, workdir: Path, **tools: object) -> ControlDaemon:
    options = {"selinux_dir": workdir / "no-selinux", "command_timeout": 5.0, **tools}
    return ControlDaemon(SPEC, layout=layout, tools=DaemonTools(**options))  # type: ignore[arg-type]


async def test_start_applies_limits_then_marks_started(
    layout: MpsLayout, workdir: Path, fakes_on_path: Path
) -> None:
    control = daemon(layout, workdir)
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
        assert smi_calls(fakes_on_path) == [
            ["-i", uuid, "-c", "EXCLUSIVE_PROCESS"] for uuid in SPEC.gpu_uuids
        ]
        await probe_daemon(mps_root_ctr=layout.root, resource=GPU, timeout=5)
    finally:
        problems = await control.stop()
    assert problems == ()
    assert state(layout)["commands"][-1] == "quit"
    assert not layout.started(GPU).exists()
    assert not layout.log_dir(GPU).exists()
    assert not (layout.pipe_dir(GPU) / "control").exists()
    assert smi_calls(fakes_on_path)[-2:] == [
        ["-i", uuid, "-c", "DEFAULT"] for uuid in SPEC.gpu_uuids
    ]


async def test_compute_mode_step_can_be_skipped(
    layout: MpsLayout, workdir: Path, fakes_on_path: Path
) -> None:
    control = daemon(layout, workdir, nvidia_smi=None)
    await control.start()
    assert await control.stop() == ()
    assert smi_calls(fakes_on_path) == []


async def test_compute_mode_failure_stops_the_start(
    layout: MpsLayout, workdir: Path, fakes_on_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "EXCLUSIVE_PROCESS")
    with pytest.raises(MpsStartError) as caught:
        await daemon(layout, workdir).start()
    assert str(caught.value) == (
        "error setting compute mode EXCLUSIVE_PROCESS: nvidia-smi -i "
        f"{DGX_A100_UUIDS[0]} -c EXCLUSIVE_PROCESS exited with status 4: Unable to set the "
        f"compute mode for GPU {DGX_A100_UUIDS[0]}: Insufficient Permissions"
    )
    assert not layout.pipe_dir(GPU).exists()
    assert state(layout) == {}


async def test_control_daemon_failing_to_start(
    layout: MpsLayout, workdir: Path, fakes_on_path: Path
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
    layout: MpsLayout, workdir: Path, fakes_on_path: Path
) -> None:
    first = daemon(layout, workdir)
    await first.start()
    try:
        with pytest.raises(MpsStartError, match="An instance of this daemon is already running"):
            await daemon(layout, workdir).start()
    finally:
        assert await first.stop() == ()


async def test_stop_reports_a_daemon_that_is_gone(
    layout: MpsLayout, workdir: Path, fakes_on_path: Path
) -> None:
    control = daemon(layout, workdir)
    await control.start()
    await control.command("quit")
    problems = await control.stop()
    assert problems == (
        "error sending quit: nvidia-cuda-mps-control exited with status 1: "
        "Cannot find MPS control daemon process",
    )
    # Every other step still ran.
    assert not layout.started(GPU).exists()
    assert smi_calls(fakes_on_path)[-1] == ["-i", SPEC.gpu_uuids[1], "-c", "DEFAULT"]
    # A daemon not known to run (being restarted) is expected to refuse quit.
    assert await control.stop(running=False) == ()


async def test_pipe_directory_is_labelled_when_selinux_is_on(
    layout: MpsLayout, workdir: Path, fakes_on_path: Path
) -> None:
    selinux = workdir / "selinux"
    selinux.mkdir()
    labelled: list[Path] = []
    control = daemon(layout, workdir, selinux_dir=selinux, label=labelled.append)
    await control.start()
    assert await control.stop() == ()
    assert labelled == [layout.pipe_dir(GPU)]
    assert SELINUX_LABEL == "system_u:object_r:container_file_t:s0"


async def test_labelling_failure_stops_the_start(
    layout: MpsLayout, workdir: Path, fakes_on_path: Path
) -> None:
    selinux = workdir / "selinux"
    selinux.mkdir()

    def refuse(path: Path) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    with pytest.raises(MpsStartError, match=f"error labelling .* with {SELINUX_LABEL}"):
        await daemon(layout, workdir, selinux_dir=selinux, label=refuse).start()
