"""`make demo` as a person runs it: registration, a preferred allocation and an allocation."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tests.integration.harness import REPO, free_port

pytestmark = pytest.mark.integration


async def test_demo_shows_registration_and_allocation() -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
        "PYTHONPATH": str(REPO / "src"),
        "DEMO_ONCE": "1",
        "STATE_ADDRESS": f"127.0.0.1:{port}",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "scripts" / "demo.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(60):
        out, _ = await proc.communicate()
    text = out.decode()
    assert proc.returncode == 0, text
    assert "registered nvidia.com/gpu (nvidia-gpu.sock) with 8 devices, 8 healthy" in text
    assert text.count("  GPU-") == 8
    assert "GetPreferredAllocation(size=2) -> ['GPU-" in text
    assert '"NVIDIA_VISIBLE_DEVICES": "GPU-' in text
    assert f"http://127.0.0.1:{port}/state" in text
    assert "plugin exited with code 0" in text
