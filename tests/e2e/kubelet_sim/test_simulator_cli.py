"""The `kubelet-sim` command line, run as a real subprocess.

The simulator (or `kubelet-sim serve` itself) and the fake plugin run in the test's
event loop; the one-shot commands run as separate processes and find everything
through the snapshot file, exactly as a user's shell would.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from kubelet.api import api_pb2
from kubelet_sim import KubeletSimulator

RESOURCE = "example.com/gpu"
CLI = [sys.executable, "-m", "kubelet_sim"]


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(20):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def served(simulator: KubeletSimulator, make_plugin) -> KubeletSimulator:
    plugin = await make_plugin(
        devices=[
            api_pb2.Device(ID="gpu-0", health="Healthy", topology={"nodes": [{"ID": 0}]}),
            api_pb2.Device(ID="gpu-1", health="Unhealthy"),
            api_pb2.Device(ID="gpu-2", health="Healthy"),
        ]
    )
    await plugin.register(simulator.socket_path)
    await simulator.wait_devices(RESOURCE, lambda devs: len(devs) == 3)
    return simulator


async def test_list_human_readable(served: KubeletSimulator) -> None:
    code, out, err = await run_cli("list", "--dir", str(served.directory))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"kubelet simulator in {served.directory}: serving, restarts=0"
    assert lines[1].startswith(f"{RESOURCE}  endpoint=fake-gpu.sock  registered streaming")
    assert "registrations=1" in lines[1]
    assert [line.split() for line in lines[2:]] == [
        ["gpu-0", "Healthy", "numa=0"],
        ["gpu-1", "Unhealthy", "numa=-"],
        ["gpu-2", "Healthy", "numa=-"],
    ]


async def test_list_json(served: KubeletSimulator) -> None:
    code, out, _ = await run_cli("list", "--dir", str(served.directory), "--json")
    assert code == 0
    body = json.loads(out)
    resource = body["resources"][RESOURCE]
    assert resource["endpoint"] == "fake-gpu.sock"
    assert resource["counters"]["registrations"] == 1
    assert resource["devices"][0] == {
        "ID": "gpu-0",
        "health": "Healthy",
        "topology": {"nodes": [{"ID": 0}]},
    }


async def test_allocate_prints_the_response(served: KubeletSimulator) -> None:
    code, out, err = await run_cli(
        "allocate", "--dir", str(served.directory), "--resource", RESOURCE, "gpu-0", "gpu-2"
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "container_responses": [{"envs": {"FAKE_VISIBLE_DEVICES": "gpu-0,gpu-2"}}]
    }


async def test_allocate_rpc_error_exits_1_with_status(served: KubeletSimulator) -> None:
    code, out, err = await run_cli(
        "allocate", "--dir", str(served.directory), "--resource", RESOURCE, "bogus"
    )
    assert code == 1
    assert out == ""
    assert err == "kubelet-sim: Allocate failed: INVALID_ARGUMENT: unknown device: bogus\n"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param([], ["gpu-0", "gpu-2"], id="defaults-to-healthy-devices"),
        pytest.param(
            ["--available", "gpu-0", "gpu-1", "gpu-2", "--must-include", "gpu-2"],
            ["gpu-2", "gpu-0"],
            id="explicit",
        ),
    ],
)
async def test_preferred(served: KubeletSimulator, extra: list[str], expected: list[str]) -> None:
    code, out, err = await run_cli(
        "preferred", "--dir", str(served.directory), "--resource", RESOURCE, "--size", "2", *extra
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == {"container_responses": [{"deviceIDs": expected}]}


async def test_unregistered_resource_exits_1(served: KubeletSimulator) -> None:
    code, _, err = await run_cli(
        "options", "--dir", str(served.directory), "--resource", "example.com/none"
    )
    assert code == 1
    assert "example.com/none is not registered" in err


async def test_no_simulator_exits_1(short_dir: Path) -> None:
    code, _, err = await run_cli("list", "--dir", str(short_dir))
    assert code == 1
    assert err.startswith("kubelet-sim: no simulator snapshot at")
    assert len(err.splitlines()) == 1


async def _read_until(stream: asyncio.StreamReader, kind: str, seen: list[str]) -> str:
    async with asyncio.timeout(10):
        while True:
            raw = await stream.readline()
            assert raw, f"serve exited early; output so far: {seen}"
            line = raw.decode().rstrip("\n")
            seen.append(line)
            if line.split()[1] == kind:
                return line


async def test_serve_registers_restarts_and_exits_cleanly(short_dir: Path, make_plugin) -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "serve", "--dir", str(short_dir), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    seen: list[str] = []
    kubelet_sock = short_dir / "kubelet.sock"
    try:
        await _read_until(proc.stdout, "serving", seen)
        plugin = await make_plugin()
        await plugin.register(kubelet_sock)
        assert RESOURCE in await _read_until(proc.stdout, "registered", seen)
        line = await _read_until(proc.stdout, "list_received", seen)
        assert "devices=2" in line

        code, out, _ = await run_cli("list", "--dir", str(short_dir))
        assert code == 0
        assert "dev-0" in out

        proc.send_signal(signal.SIGHUP)
        await _read_until(proc.stdout, "restarted", seen)
        await _read_until(proc.stdout, "serving", seen)
        assert not plugin.socket_path.exists()
        assert kubelet_sock.is_socket()

        proc.send_signal(signal.SIGTERM)
        await _read_until(proc.stdout, "stopped", seen)
        async with asyncio.timeout(10):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not kubelet_sock.exists()
    assert not (short_dir / "kubelet-sim.json").exists()
