"""The plugin-side readiness probe, where it fails before the control program runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mps.errors import MpsNotReady
from mps.layout import MpsLayout
from mps.probe import probe_daemon
from tests.unit.mps.helpers import GPU


async def probe(layout: MpsLayout, resource: str = GPU, timeout: float = 5) -> None:
    await probe_daemon(mps_root_ctr=layout.root, resource=resource, timeout=timeout)


@pytest.mark.usefixtures("fakes_on_path")
async def test_missing_pipe_directory(layout: MpsLayout) -> None:
    with pytest.raises(MpsNotReady) as caught:
        await probe(layout)
    message = str(caught.value)
    assert message.startswith("MPS control daemon for nvidia.com/gpu is not ready: pipe directory ")
    assert str(layout.pipe_dir(GPU)) in message
    assert "\n" not in message
    assert not caught.value.permanent


async def test_control_program_missing(
    layout: MpsLayout, monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    monkeypatch.setenv("PATH", str(workdir))
    layout.pipe_dir(GPU).mkdir(parents=True)
    with pytest.raises(MpsNotReady) as caught:
        await probe(layout)
    assert str(caught.value) == (
        "MPS control daemon for nvidia.com/gpu is not ready: control program missing: "
        "nvidia-cuda-mps-control not found on PATH"
    )
