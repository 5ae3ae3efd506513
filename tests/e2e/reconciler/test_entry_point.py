"""`nvidia-device-plugin` as a process: its log lines, and how it fails to start.

Every line the plugin prints in JSON mode must parse, in a normal run and
when gRPC's C core writes its own diagnostics (a plugin socket that cannot
be bound); failures are WARNING/ERROR and said once; each failure to start
(port in use, no driver, an unsupported discovery strategy, a kubelet socket
nobody listens on) is one line that says what to do, without a traceback.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, free_port, plugin_args
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
BASE = {"ts", "level", "msg", "logger"}


def records(text: str) -> list[dict[str, Any]]:
    """Every line as a JSON object (a line that does not parse fails the test)."""
    parsed = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(record, dict), line
        assert set(record) >= BASE, line
        assert not [v for v in record.values() if isinstance(v, (dict, list))], line  # flat
        parsed.append(record)
    return parsed


def messages(found: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    return [record for record in found if text in record["msg"]]


async def test_every_line_is_flat_json(sim: KubeletSimulator) -> None:
    async with PluginProcess(plugin_args(sim.directory, "dgx-a100", "--log-format", "json")) as p:
        await sim.wait_registered(GPU, timeout=20)
        await p.wait_state(lambda s: s["state"] == "serving")
        # Health monitoring starts, and says how, once start-up is through.
        await eventually(lambda: "health monitoring" in p.stderr, what="the health line")
        assert await p.terminate() == 0
    found = records(p.stderr)
    first = found[0]
    assert first["msg"].startswith("nvidia-device-plugin ")
    assert first["msg"].endswith(" starting")
    assert (first["level"], first["logger"]) == ("info", "nvidia-device-plugin")
    assert first["ts"][10] == "T"
    assert first["ts"][-6] in "+-"  # RFC 3339 with the offset
    (registered,) = messages(found, "registered nvidia.com/gpu")
    assert registered["resource"] == GPU  # a bound field, at the top level
    (config,) = messages(found, "effective config")
    assert len(json.dumps(config)) < 1000  # digest and non-defaults, not the whole config
    assert '"mock_nvml": "dgx-a100"' in config["msg"]
    assert '"device_id_strategy"' not in config["msg"]  # a default
    # Said once: the simulated node has no health events.
    assert len([r for r in found if "health" in r["msg"] and "off" in r["msg"]]) <= 1
    assert len(messages(found, "health monitoring")) == 1
    assert max(len(json.dumps(record)) for record in found) < 1000


async def test_native_grpc_lines_are_json_too(sock_dir: Path) -> None:
    """A plugin socket that cannot be bound: gRPC's C core logs, through the JSON pipeline."""
    kubelet = sock_dir / "missing-dir" / "kubelet.sock"
    args = ["--mock-nvml", "dgx-a100", "--kubelet-socket", str(kubelet), "--log-format", "json"]
    async with PluginProcess(args) as plugin:
        state = await plugin.wait_state(
            lambda s: s["state"] == "blocked_on_error", timeout=20
        )
        assert await plugin.terminate() == 0
    found = records(plugin.stderr)
    native = [record for record in found if record["logger"] == "grpc"]
    assert native, "gRPC said nothing about the failed bind"
    assert all(record["level"] in ("error", "warning", "info", "debug") for record in native)
    assert any("add_port" in record.get("source", "") for record in native)
    failed = messages(found, "init -> blocked_on_error")
    assert [record["level"] for record in failed][:1] == ["warning"]
    assert "missing-dir" in state["reason"]


@pytest.mark.parametrize("flag", ["state-address", "probe-address"])
async def test_port_in_use_is_one_line(sock_dir: Path, flag: str) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        if flag == "state-address":
            plugin = PluginProcess(plugin_args(sock_dir), port=port)
        else:
            args = plugin_args(sock_dir, "dgx-a100", "--probe-address", f"127.0.0.1:{port}")
            plugin = PluginProcess(args)
        async with plugin:
            assert await plugin.wait_exit(30) == 1
        text = plugin.stderr
    assert "Traceback" not in text
    (error,) = [line for line in text.splitlines() if "ERROR" in line]
    assert f"--{flag} / {flag.upper().replace('-', '_')}" in error
    assert f"127.0.0.1:{port}" in error
    assert error.endswith(": Address already in use")


async def test_no_driver_says_what_to_do(sock_dir: Path) -> None:
    """No NVML on this machine (the tests' normal case): the guidance comes with the error."""
    args = ["--kubelet-socket", str(sock_dir / "kubelet.sock"), "--driver-root-ctr-path", "/nope"]
    async with PluginProcess(args) as plugin:
        code = await plugin.wait_exit(30)
    text = plugin.stderr
    if code == 0 or "NVML could not start" not in text:
        pytest.skip("NVML starts on this machine")
    assert code == 1
    assert "Traceback" not in text
    (guidance,) = [line for line in text.splitlines() if "WARNING" in line and "NVML" in line]
    for needed in ("NVIDIA Container Toolkit", "runtimeClassName: nvidia", "node selector"):
        assert needed in guidance
    assert "ERROR   start-up failed: NVML could not start: " in text


async def test_tegra_is_not_an_nvml_error(sock_dir: Path) -> None:
    args = ["--kubelet-socket", str(sock_dir / "kubelet.sock")]
    async with PluginProcess(args, env={"DEVICE_DISCOVERY_STRATEGY": "tegra"}) as plugin:
        assert await plugin.wait_exit(30) == 1
    text = plugin.stderr
    assert "NVML could not start" not in text
    (error,) = [line for line in text.splitlines() if "ERROR" in line]
    assert "--device-discovery-strategy=tegra is not supported" in error
    assert "auto or nvml" in error


@pytest.mark.parametrize("kind", ["regular-file", "stale-socket"])
async def test_nothing_listening_on_the_kubelet_socket(sock_dir: Path, kind: str) -> None:
    kubelet = sock_dir / "kubelet.sock"
    if kind == "regular-file":
        kubelet.write_text("")
    else:
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(str(kubelet))  # bound, never listening: what a dead kubelet leaves
    async with PluginProcess(plugin_args(sock_dir)) as plugin:
        state = await plugin.wait_state(
            lambda s: "nothing is listening" in (s["reason"] or ""), timeout=20
        )
    assert str(kubelet) in state["reason"]
    assert "DEADLINE_EXCEEDED" not in plugin.stderr
