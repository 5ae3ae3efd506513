"""One control daemon's start, stopped before the control program runs.

The GPUs' compute mode is set through a simulated device library, which
records it (and refuses it when its profile says so); tests/e2e/mps runs the
whole sequence with the stand-in control program.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devices.compute_mode import ComputeMode
from devices.simulated import PROFILES_DIR, SimulatedLibrary
from mps.daemon import SELINUX_LABEL, ControlDaemon, DaemonTools
from mps.errors import MpsStartError
from mps.layout import MpsLayout
from mps.limits import DaemonSpec
from tests.unit.mps.helpers import DGX_A100_UUIDS, GPU, state

SPEC = DaemonSpec(
    resource=GPU,
    gpu_uuids=DGX_A100_UUIDS[:2],
    memory_limits=(("0", 4096), ("1", 4096)),
    thread_percentage=10,
)


def open_gpus(profile: Path = PROFILES_DIR / "dgx-a100.yaml") -> SimulatedLibrary:
    library = SimulatedLibrary(profile)
    library.init()
    return library


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


async def test_compute_mode_failure_stops_the_start(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    profile = yaml.safe_load((PROFILES_DIR / "dgx-a100.yaml").read_text())
    profile["gpus"][0]["computeModeError"] = "Insufficient Permissions"
    refusing = workdir / "refusing.yaml"
    refusing.write_text(yaml.safe_dump(profile))
    library = open_gpus(refusing)
    with pytest.raises(MpsStartError) as caught:
        await daemon(layout, workdir, library).start()
    assert str(caught.value) == (
        f"error setting compute mode EXCLUSIVE_PROCESS: {DGX_A100_UUIDS[0]}: cannot set "
        "compute mode EXCLUSIVE_PROCESS: Insufficient Permissions"
    )
    assert modes(library) == [ComputeMode.DEFAULT] * 2
    assert not layout.pipe_dir(GPU).exists()
    assert state(layout) == {}


async def test_labelling_failure_stops_the_start(
    layout: MpsLayout, workdir: Path, fakes_on_path: None
) -> None:
    selinux = workdir / "selinux"
    selinux.mkdir()

    def refuse(path: Path) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    with pytest.raises(MpsStartError, match=f"error labelling .* with {SELINUX_LABEL}"):
        await daemon(layout, workdir, selinux_dir=selinux, label=refuse).start()
