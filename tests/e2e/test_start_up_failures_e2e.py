"""Start-up failures, against the real process: exit 1, or block and recover by itself.

The same two scenarios hold whatever made start-up fail (a driver NVML cannot
start, an invalid config file), so they are written once and parametrized by
the cause, and for blocking also by what brings the node back:

- ``failOnInitError=true`` (the default): exit status 1, exactly one line on
  stderr naming the cause, no traceback.
- ``failOnInitError=false`` (flag, or only the broken file itself saying so):
  the process stays up in ``blocked_on_error`` with the reason on ``/state``
  and in the metrics, stays ready (the ``running`` readiness that ``auto``
  picks, so a rolling update is not held back), keeps failing through kubelet
  restarts without serving anything, and serves once the cause is fixed
  (backoff timer, config watch or SIGHUP) with no restart of the process.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import REPO, PluginProcess, plugin_args
from tests.reliability.observe import metric

GPU = "nvidia.com/gpu"
DRIVER_NOT_LOADED = "NVML_ERROR_DRIVER_NOT_LOADED: NVIDIA driver is not loaded"
GOOD_CONFIG = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 2\n"
)


def node_file(profile: str, *, broken: bool) -> str:
    node = yaml.safe_load((REPO / "config" / "nodes" / f"{profile}.yaml").read_text())
    if broken:
        node["initError"] = DRIVER_NOT_LOADED
    return yaml.safe_dump(node)


# --- failOnInitError=true: exit 1 with one line --------------------------------------


@dataclass(frozen=True)
class Fatal:
    id: str
    setup: Callable[[Path], list[str]]  # tmp dir -> extra arguments
    line: Callable[[Path], str]  # tmp dir -> the line expected (a substring)


FATAL = [
    Fatal(
        "driver",
        lambda tmp: [],
        lambda tmp: (
            "start-up failed: NVML could not start: RM has detected an NVML/RM version mismatch."
        ),
    ),
    Fatal(
        "config-file",
        lambda tmp: ["--config-file", _write(tmp / "c.yaml", GOOD_CONFIG.replace("2", "1"))],
        lambda tmp: (
            f"nvidia-device-plugin: {tmp / 'c.yaml'}: sharing.timeSlicing.resources[0]."
            "replicas: number of replicas must be >= 2; found 1"
        ),
    ),
]


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FATAL])
async def test_fail_on_init_error_exits_one_with_one_line(
    case: Fatal, sock_dir: Path, tmp_path: Path
) -> None:
    profile = "nvml-broken" if case.id == "driver" else "t4x4"
    plugin = PluginProcess(plugin_args(sock_dir, profile, *case.setup(tmp_path)))
    await plugin.start()
    assert await plugin.wait_exit(timeout=20) == 1
    lines = [line for line in plugin.stderr.splitlines() if line.strip()]
    if lines and lines[0].endswith(" starting"):  # the version, once logging is set up
        lines = lines[1:]
    assert len(lines) == 1, plugin.stderr
    assert case.line(tmp_path) in lines[0]
    assert "Traceback" not in plugin.stderr
    assert not (sock_dir / "nvidia-gpu.sock").exists()


# --- failOnInitError=false: blocked, still ready, then serving -----------------------


@dataclass(frozen=True)
class Blocked:
    id: str
    profile: str  # node profile whose file copy is broken (driver cases)
    cause: str  # "driver" or "config"
    says_false: str  # where failOnInitError=false comes from: "flag" or "file"
    recovery: str  # "retry" (the backoff timer), "config_changed" or "reload_requested"
    reason: tuple[str, ...]  # substrings of the blocked reason
    devices: int  # advertised once serving
    kubelet_restarts: int = 0
    permanent: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "permanent", self.cause == "config")


BLOCKED = [
    Blocked("driver-arrives", "t4x4", "driver", "flag", "retry",
            ("NVML_ERROR_DRIVER_NOT_LOADED", "retrying in"), devices=4),
    Blocked("driver-through-kubelet-restarts", "dgx-a100", "driver", "flag",
            "reload_requested", ("NVML_ERROR_DRIVER_NOT_LOADED",), devices=8,
            kubelet_restarts=3),
    Blocked("config-fixed", "t4x4", "config", "flag", "config_changed",
            ("replicas", "waiting for a config change"), devices=8),
    Blocked("config-fixed-only-the-file-says-false", "t4x4", "config", "file",
            "config_changed", ("replicas", "waiting for a config change"), devices=8),
]  # fmt: skip


def _failures(state: dict[str, object]) -> int:
    history = state["history"]
    assert isinstance(history, list)
    return sum(record["trigger"] == "failed" for record in history)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in BLOCKED])
async def test_blocked_then_recovers(case: Blocked, sim: KubeletSimulator, tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text(node_file(case.profile, broken=case.cause == "driver"))
    config = tmp_path / "config.yaml"
    broken_config = GOOD_CONFIG.replace("replicas: 2", 'replicas: "ten"')
    if case.says_false == "file":
        broken_config = broken_config.replace(
            "version: v1\n", "version: v1\nflags:\n  failOnInitError: false\n"
        )
    extra: list[str] = []
    if case.cause == "config":
        # (Its directory is watched: the driver cases have none, so their
        # node file's repair is seen by the retry timer or SIGHUP alone.)
        config.write_text(broken_config)
        extra += ["--config-file", str(config)]
    if case.says_false == "flag":
        extra.append("--fail-on-init-error=false")
    async with PluginProcess(plugin_args(sim.directory, str(node), *extra)) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "blocked_on_error", timeout=20)
        assert all(part in state["reason"] for part in case.reason), state["reason"]
        assert state["history"][-1]["trigger"] == "failed"
        assert state["history"][-1]["detail"]["permanent"] is case.permanent
        assert (state["ready"], state["readiness"]) == (True, "running")
        assert (await plugin.get("/readyz")).status == 200
        assert (await plugin.get("/healthz")).status == 200
        text = (await plugin.get("/metrics")).body.decode()
        assert metric(text, "nvidia_device_plugin_lifecycle_state", state="blocked_on_error") == 1
        assert metric(text, "nvidia_device_plugin_ready", readiness="running") == 1

        for round_ in range(case.kubelet_restarts):
            # Every input change makes it try again and fail again, serving nothing.
            failures = _failures(state)
            await sim.restart()
            state = await plugin.wait_state(lambda s, n=failures: _failures(s) > n)
            assert state["state"] == "blocked_on_error", round_
            assert all(part in state["reason"] for part in case.reason)
            assert state["resources"] == []
            assert not (sim.directory / "nvidia-gpu.sock").exists()
        assert sim.snapshot().resources == ()

        if case.cause == "driver":
            node.write_text(node_file(case.profile, broken=False))
        else:
            config.write_text(GOOD_CONFIG)
        if case.recovery == "reload_requested":
            # Now, rather than at the end of a backoff grown by every failure.
            plugin.signal(signal.SIGHUP)
        await sim.wait_devices(GPU, lambda d: len(d) == case.devices, timeout=15)
        state = await plugin.wait_state(lambda s: s["state"] == "serving" and s["ready"])
        assert state["reason"] is None
        triggers = [record["trigger"] for record in state["history"]]
        assert triggers[-2:] == [case.recovery, "initialized"]
        assert (await plugin.get("/readyz")).status == 200
        view = sim.snapshot().resource(GPU)
        assert view is not None
        assert view.counters.registrations == 1
