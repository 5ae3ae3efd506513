"""The plugin-side readiness probe against the stand-in control program."""

from __future__ import annotations

import os
import signal

import pytest

from mps.control import send_command, start_control_daemon
from mps.errors import MpsNotReady
from mps.layout import MpsLayout
from mps.probe import probe_daemon
from tests.unit.mps.helpers import GPU, alive, daemon_pid, set_faults, state
from tests.waiting import eventually_sync


async def start_fake(layout: MpsLayout, resource: str = GPU) -> int:
    layout.pipe_dir(resource).mkdir(parents=True, exist_ok=True)
    layout.log_dir(resource).mkdir(parents=True, exist_ok=True)
    await start_control_daemon(environment=layout.environment(resource), timeout=5)
    pid = daemon_pid(layout, resource)
    assert pid is not None
    return pid


async def probe(layout: MpsLayout, resource: str = GPU, timeout: float = 5) -> None:
    await probe_daemon(mps_root_ctr=layout.root, resource=resource, timeout=timeout)


@pytest.mark.usefixtures("fakes_on_path")
async def test_probe_succeeds_while_the_daemon_answers(layout: MpsLayout) -> None:
    await start_fake(layout)
    await probe(layout)
    assert state(layout)["commands"] == ["get_default_active_thread_percentage"]


@pytest.mark.usefixtures("fakes_on_path")
async def test_probe_uses_the_full_resource_name_in_paths(layout: MpsLayout) -> None:
    await start_fake(layout, "nvidia.com/gpu.shared")
    assert (layout.root / "nvidia.com" / "gpu.shared" / "pipe" / "control").exists()
    await probe(layout, "nvidia.com/gpu.shared")
    with pytest.raises(MpsNotReady, match=r"pipe directory .*nvidia\.com/gpu/pipe does not exist"):
        await probe(layout, GPU)


@pytest.mark.usefixtures("fakes_on_path")
async def test_no_daemon_running(layout: MpsLayout) -> None:
    layout.pipe_dir(GPU).mkdir(parents=True)
    with pytest.raises(MpsNotReady) as caught:
        await probe(layout)
    assert str(caught.value) == (
        "MPS control daemon for nvidia.com/gpu is not ready: daemon not answering: "
        "nvidia-cuda-mps-control exited with status 1: Cannot find MPS control daemon process"
    )


@pytest.mark.usefixtures("fakes_on_path")
async def test_killed_daemon_fails_the_probe(layout: MpsLayout) -> None:
    pid = await start_fake(layout)
    await probe(layout)
    os.kill(pid, signal.SIGKILL)
    eventually_sync(lambda: not alive(pid), timeout=5, what="the daemon to die")
    with pytest.raises(MpsNotReady, match=r"not answering: .*Cannot find MPS control daemon"):
        await probe(layout)


@pytest.mark.usefixtures("fakes_on_path")
async def test_daemon_that_quit_fails_the_probe(layout: MpsLayout) -> None:
    await start_fake(layout)
    await send_command("quit", environment=layout.environment(GPU), timeout=5)
    with pytest.raises(MpsNotReady, match="daemon not answering"):
        await probe(layout)


@pytest.mark.usefixtures("fakes_on_path")
async def test_hung_client_is_killed_after_the_timeout(layout: MpsLayout) -> None:
    await start_fake(layout)
    set_faults(layout, {"client": "hang"})
    with pytest.raises(MpsNotReady) as caught:
        await probe(layout, timeout=0.5)
    # The client it started is gone too (the suite fails a test that leaks one).
    assert str(caught.value) == (
        "MPS control daemon for nvidia.com/gpu is not ready: "
        "daemon not answering: timed out after 0.5s"
    )


@pytest.mark.usefixtures("fakes_on_path")
async def test_permission_denied_reaching_the_daemon(layout: MpsLayout) -> None:
    await start_fake(layout)
    set_faults(layout, {"client": "denied"})
    with pytest.raises(MpsNotReady, match=r"not ready: permission denied: .*Permission denied"):
        await probe(layout)


@pytest.mark.skipif(os.geteuid() == 0, reason="root is never denied access")
@pytest.mark.usefixtures("fakes_on_path")
async def test_permission_denied_on_the_pipe_directory(layout: MpsLayout) -> None:
    pipe = layout.pipe_dir(GPU)
    pipe.mkdir(parents=True)
    pipe.chmod(0)
    try:
        with pytest.raises(MpsNotReady, match="not ready: permission denied on "):
            await probe(layout)
    finally:
        pipe.chmod(0o755)


