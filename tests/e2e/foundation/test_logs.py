"""Native stderr routed into the JSON log lines, and what the process shows when it dies.

Each test runs in a child process: routing replaces file descriptor 2,
which must not happen to the test runner itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={"PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_native_stderr_becomes_json() -> None:
    result = _child(
        """
        import os
        from foundation import logs
        from loguru import logger
        logs.configure("json", route_native_stderr=True)
        logger.info("before")
        os.write(2, b"E1201 12:00:00.000000   42 add_port.cc:83] Failed to add port\\n")
        os.write(2, b"something else\\n")
        logger.info("after")
        """
    )
    assert result.returncode == 0
    records = [json.loads(line) for line in result.stderr.splitlines()]
    by_msg = {record["msg"]: record for record in records}
    assert set(by_msg) == {"before", "Failed to add port", "something else", "after"}
    native = by_msg["Failed to add port"]
    assert (native["level"], native["logger"], native["source"]) == (
        "error",
        "grpc",
        "add_port.cc:83",
    )
    assert by_msg["something else"]["logger"] == "stderr"


def test_a_crash_still_shows_its_traceback() -> None:
    """Python's own writes bypass the pipe, so nothing is lost when the process dies."""
    result = _child(
        """
        from foundation import logs
        logs.configure("json", route_native_stderr=True)
        raise RuntimeError("fatal")
        """
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback")
    assert result.stderr.rstrip().endswith("RuntimeError: fatal")


def test_text_format_keeps_the_resource_at_the_end() -> None:
    result = _child(
        """
        from foundation import logs
        from loguru import logger
        logs.configure("text")
        logger.bind(resource="nvidia.com/gpu").info("served")
        """
    )
    assert result.stderr.rstrip().endswith("INFO    served resource=nvidia.com/gpu")
