"""`make demo` as a person runs it: registration, allocation, a free port, an early exit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sys
from collections.abc import Iterator

from tests.e2e.harness import REPO, free_port


async def run_demo(**env: str) -> tuple[int, str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "scripts" / "demo.py"),
        env={**base, "PYTHONPATH": str(REPO / "src"), "DEMO_ONCE": "1", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(60):
        out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_demo_shows_registration_and_allocation() -> None:
    port = free_port()
    code, text = await run_demo(STATE_ADDRESS=f"127.0.0.1:{port}")
    assert code == 0, text
    assert "registered nvidia.com/gpu (nvidia-gpu.sock) with 8 devices, 8 healthy" in text
    assert text.count("  GPU-") == 8
    assert "GetPreferredAllocation(size=2) -> ['GPU-" in text
    assert '"NVIDIA_VISIBLE_DEVICES": "GPU-' in text
    assert f"http://127.0.0.1:{port}/state" in text
    assert "plugin | " in text  # the plugin's own log lines are shown
    assert "plugin exited with code 0" in text


async def test_the_dra_demo_shows_slices_and_prepares_then_unprepares_a_claim() -> None:
    port = free_port()
    code, text = await run_demo(KUBELET_API="dra", STATE_ADDRESS=f"127.0.0.1:{port}")
    assert code == 0, text
    assert "DRA driver gpu.nvidia.com registered with the kubelet" in text
    assert "8 devices in 1 ResourceSlice(s) for node demo-node" in text
    assert text.count("  gpu  NVIDIA A100-SXM4-40GB  memory 40Gi") == 8
    prepared = re.search(r"NodePrepareResources -> CDI devices (\[.*\])", text)
    assert prepared is not None, text
    assert prepared.group(1).count("k8s.gpu.nvidia.com/claim=") == 2
    assert "NodeUnprepareResources -> ok; claim specs left: []" in text
    assert "plugin exited with code 0" in text


@contextlib.contextmanager
def holding(port: int) -> Iterator[bool]:
    """Hold `port` on 127.0.0.1 if it is free; says whether it could."""
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", port))
        except OSError:
            yield False  # someone else holds it: just as good for the test
            return
        taken.listen()
        yield True


async def test_demo_takes_another_port_when_9040_is_busy() -> None:
    with holding(9040):
        code, text = await run_demo()
    assert code == 0, text
    found = re.search(r"plugin state: http://127\.0\.0\.1:(\d+)/state", text)
    assert found, text
    assert int(found.group(1)) != 9040


async def test_demo_notices_the_plugin_exiting_at_once() -> None:
    code, text = await run_demo(MOCK_NVML="nvml-broken", STATE_ADDRESS=f"127.0.0.1:{free_port()}")
    assert code == 1, text
    # Noticed as an exit, not as a registration that timed out 30 s later.
    assert "the plugin exited with code 1 before it served" in text
    # What the plugin said is on the screen, before the demo's verdict.
    said = text.index("plugin | ")
    assert "NVML could not start" in text[said:]
    assert said < text.index("before it served")
