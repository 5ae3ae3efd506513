"""The `loop` benchmark's load process, run against a real endpoint: it reports what it did."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from inspection.server import InspectionServer

REPO = Path(__file__).resolve().parents[2]


async def test_the_state_load_reports_its_calls() -> None:
    body = b"x" * 300_000
    server = InspectionServer(
        host="127.0.0.1", port=0, routes={"/state": lambda: (200, "application/json", body)}
    )
    await server.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.pressure", "state", "--port", str(server.port),
            "--clients", "20", "--seconds", "0.5", "--nice", "0",
            cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(30):
            out, err = await process.communicate()
    finally:
        await server.stop()
    assert process.returncode == 0, err.decode()[-2000:]
    result = json.loads(out)
    assert result["calls"] >= 20
    assert result["refused"] == 0
    assert len(result["ms"]) == result["calls"]


def test_the_preferred_load_refuses_a_missing_ids_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.pressure", "preferred", "--socket", str(tmp_path / "s"),
         "--ids-file", str(tmp_path / "absent"), "--seconds", "0.1", "--nice", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "absent" in done.stderr
