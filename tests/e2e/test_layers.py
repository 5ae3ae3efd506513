"""The e2e layer may start processes, and the suite sees each one it leaves running."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.layers import GUARD, running_children


def test_this_file_is_marked_e2e(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("e2e") is not None
    assert request.node.get_closest_marker("unit") is None


def test_a_started_process_is_seen_until_it_ends() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process.pid in GUARD.pids
        assert running_children([process.pid]) == {process.pid}
    finally:
        process.kill()
        process.wait(timeout=10)
    assert running_children([process.pid]) == set()
