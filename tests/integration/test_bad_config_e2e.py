"""A broken config file at start-up: exit 1 with one line, or block and recover."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubelet.simulator import KubeletSimulator
from tests.integration.harness import PluginProcess, plugin_args

pytestmark = pytest.mark.integration

GOOD = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 2\n"
)


@pytest.fixture
async def sim(sock_dir: Path) -> AsyncIterator[KubeletSimulator]:
    async with KubeletSimulator(sock_dir, write_snapshot_file=False) as simulator:
        yield simulator


async def test_bad_file_exits_one_with_one_line(sock_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(GOOD.replace("replicas: 2", "replicas: 1"))
    plugin = PluginProcess(plugin_args(sock_dir, "t4x4", "--config-file", str(config)))
    await plugin.start()
    assert await plugin.wait_exit() == 1
    assert plugin.stderr.strip().splitlines() == [
        f"nvidia-device-plugin: {config}: sharing.timeSlicing.resources[0].replicas: "
        "number of replicas must be >= 2; found 1"
    ]


@pytest.mark.parametrize(
    "where",
    [
        pytest.param("flag", id="flag-says-false"),
        pytest.param("file", id="only-the-broken-file-says-false"),
    ],
)
async def test_fail_on_init_error_false_blocks_until_the_file_is_fixed(
    sim: KubeletSimulator, tmp_path: Path, where: str
) -> None:
    config = tmp_path / "config.yaml"
    broken = GOOD.replace("replicas: 2", 'replicas: "ten"')
    extra: list[str] = []
    if where == "flag":
        extra = ["--fail-on-init-error=false"]
    else:
        broken = broken.replace("version: v1\n", "version: v1\nflags:\n  failOnInitError: false\n")
    config.write_text(broken)
    args = plugin_args(sim.directory, "t4x4", "--config-file", str(config), *extra)
    async with PluginProcess(args) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "blocked_on_error", timeout=20)
        assert "replicas" in state["reason"]
        assert "waiting for a config change" in state["reason"]
        assert state["history"][-1]["detail"]["permanent"] is True
        config.write_text(GOOD)
        await sim.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8, timeout=10)
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert [h["trigger"] for h in state["history"]][-2:] == ["config_changed", "initialized"]
