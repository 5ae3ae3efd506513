"""Fixtures of the fault suites: a kubelet simulator in a short socket directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubelet.simulator import KubeletSimulator


@pytest.fixture
async def sim(sock_dir: Path) -> AsyncIterator[KubeletSimulator]:
    async with KubeletSimulator(sock_dir, write_snapshot_file=False) as simulator:
        yield simulator
