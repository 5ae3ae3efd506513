"""`kubelet-sim prepare` / `unprepare` / `list` for DRA drivers, run as real subprocesses.

The DRA plugin (DraPluginServer with a scripted preparer) and the simulator run in
the test's event loop; the one-shot commands run as separate processes and find
the driver's endpoint through the snapshot file, as a user's shell would. The last
test runs `kubelet-sim serve` itself and registers a plugin with it.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from kubelet.dra.types import PrepareResult
from kubelet_sim import KubeletSimulator
from resources.dra_health import DeviceHealthReport, StreamHealth
from tests.e2e.kubelet_sim.test_simulator_cli import CLI, _read_until, run_cli
from tests.unit.kube.apiserver import kubeconfig, resource_claims, running_apiserver
from tests.unit.kubelet.conftest import DraFactory
from tests.unit.kubelet.dra_support import DRIVER, ScriptedPreparer, device


def _dir(sim: KubeletSimulator) -> str:
    return str(sim.directory)


async def test_prepare_prints_each_claims_devices_as_json(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    preparer = ScriptedPreparer()
    preparer.results["u2"] = PrepareResult(devices=(device("gpu-1", "a/b=c", "a/b=d"),))
    await serve_dra(preparer)
    await dra_simulator.wait_dra_registered(DRIVER)
    code, out, err = await run_cli(
        "prepare", "--dir", _dir(dra_simulator), "--driver", DRIVER,
        "--claim", "ns/one/u1", "--claim", "ns/two/u2",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "claims": {
            "u1": {
                "devices": [
                    {
                        "request_names": ["gpu"],
                        "pool_name": "node-a",
                        "device_name": "dev-one",
                        "cdi_device_ids": ["k8s.gpu.example.com/claim=dev-one"],
                    }
                ]
            },
            "u2": {
                "devices": [
                    {
                        "request_names": ["gpu"],
                        "pool_name": "node-a",
                        "device_name": "gpu-1",
                        "cdi_device_ids": ["a/b=c", "a/b=d"],
                    }
                ]
            },
        }
    }
    assert [[c.uid for c in call] for call in preparer.prepared] == [["u1", "u2"]]


async def test_a_failed_claim_is_printed_then_named_on_stderr_with_exit_status_1(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    preparer = ScriptedPreparer()
    preparer.results["bad"] = PrepareResult(error="device gpu-7 is unhealthy")
    await serve_dra(preparer)
    await dra_simulator.wait_dra_registered(DRIVER)
    code, out, err = await run_cli(
        "prepare", "--dir", _dir(dra_simulator), "--driver", DRIVER,
        "--claim", "ns/good/ok", "--claim", "ns/broken/bad",
    )  # fmt: skip
    assert code == 1
    assert json.loads(out)["claims"]["bad"] == {"error": "device gpu-7 is unhealthy"}
    assert err.splitlines() == [
        "kubelet-sim: NodePrepareResources: claim bad: device gpu-7 is unhealthy"
    ]


async def test_unprepare_reaches_the_preparer_and_prints_the_answer(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory
) -> None:
    preparer = ScriptedPreparer()
    await serve_dra(preparer)
    await dra_simulator.wait_dra_registered(DRIVER)
    code, out, err = await run_cli(
        "unprepare", "--dir", _dir(dra_simulator), "--driver", DRIVER, "--claim", "ns/one/u1"
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == {"claims": {"u1": {}}}
    assert [[c.uid for c in call] for call in preparer.unprepared] == [["u1"]]


async def test_an_unregistered_driver_exits_1_in_one_line(
    dra_simulator: KubeletSimulator,
) -> None:
    code, out, err = await run_cli(
        "prepare", "--dir", _dir(dra_simulator), "--driver", "none.example.com",
        "--claim", "ns/a/u",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert err == (
        f"kubelet-sim: DRA driver none.example.com is not registered with the simulator in "
        f"{dra_simulator.directory}\n"
    )


async def test_a_claim_not_written_namespace_name_uid_is_a_usage_error(
    dra_simulator: KubeletSimulator,
) -> None:
    code, _, err = await run_cli(
        "prepare", "--dir", _dir(dra_simulator), "--driver", DRIVER, "--claim", "ns/only-name"
    )
    assert code == 2
    assert "'ns/only-name' is not NAMESPACE/NAME/UID" in err


async def test_prepare_create_makes_an_allocated_claim_in_the_api_then_prepares_it(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory, tmp_path: Path
) -> None:
    preparer = ScriptedPreparer()
    await serve_dra(preparer)
    await dra_simulator.wait_dra_registered(DRIVER)
    async with running_apiserver() as api:
        config = kubeconfig(tmp_path / "kubeconfig", api.url)
        code, out, err = await run_cli(
            "prepare", "--dir", _dir(dra_simulator), "--driver", DRIVER,
            "--create", "team-a/train", "--pool", "node-a", "--device", "gpu-0",
            "--device", "gpu-3", "--config", '{"kind": "GpuConfig"}',
            "--kubeconfig", str(config),
        )  # fmt: skip
        assert (code, err) == (0, "")
        status, claim = await api.get(f"{resource_claims('team-a')}/train")
    assert status == 200
    uid = claim["metadata"]["uid"]
    assert [[(c.namespace, c.name, c.uid) for c in call] for call in preparer.prepared] == [
        [("team-a", "train", uid)]
    ]
    assert list(json.loads(out)["claims"]) == [uid]
    allocation = claim["status"]["allocation"]["devices"]
    assert [(r["pool"], r["device"]) for r in allocation["results"]] == [
        ("node-a", "gpu-0"),
        ("node-a", "gpu-3"),
    ]
    assert allocation["config"][0]["opaque"] == {
        "driver": DRIVER,
        "parameters": {"kind": "GpuConfig"},
    }


async def test_prepare_create_without_an_api_or_a_device_says_why_in_one_line(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory, tmp_path: Path
) -> None:
    await serve_dra(ScriptedPreparer())
    await dra_simulator.wait_dra_registered(DRIVER)
    base = ("prepare", "--dir", _dir(dra_simulator), "--driver", DRIVER, "--create", "ns/c")
    code, out, err = await run_cli(*base, "--pool", "node-a")
    assert (code, out, err) == (
        1,
        "",
        "kubelet-sim: --create needs --pool and at least one --device\n",
    )
    missing = tmp_path / "absent-kubeconfig"
    code, out, err = await run_cli(
        *base, "--pool", "node-a", "--device", "gpu-0", "--kubeconfig", str(missing)
    )
    assert (code, out) == (1, "")
    assert err.startswith(f"kubelet-sim: cannot load kubeconfig {missing}")
    assert err.count("\n") == 1
    code, _, err = await run_cli("prepare", "--dir", _dir(dra_simulator), "--driver", DRIVER)
    assert (code, err) == (
        1, "kubelet-sim: no claim given: --claim NAMESPACE/NAME/UID or --create NAMESPACE/NAME\n"
    )  # fmt: skip


async def test_list_shows_the_registered_dra_driver_and_its_devices_health(
    dra_simulator: KubeletSimulator, serve_dra: DraFactory, short_dir: Path
) -> None:
    server = await serve_dra()
    await server.health.publish(
        (
            DeviceHealthReport("node-a", "gpu-0", StreamHealth.UNHEALTHY, "xid 79"),
            DeviceHealthReport("node-a", "gpu-1", StreamHealth.UNKNOWN, "unmonitored: no"),
        )
    )
    await dra_simulator.wait_dra_registered(DRIVER)
    await dra_simulator.wait_dra_health(DRIVER, "gpu-0", "Unhealthy")
    code, out, err = await run_cli("list", "--dir", _dir(dra_simulator))
    assert (code, err) == (0, "")
    assert out.splitlines()[-5:] == [
        f"DRA plugins registry {short_dir / 'registry'}",
        f"{DRIVER}  endpoint={server.plugin_socket}  registered  service=v1.DRAPlugin"
        "  versions=v1.DRAPlugin,v1beta1.DRAPlugin,v1beta1.DRAResourceHealth,"
        "v1alpha1.DRAResourceHealth  registrations=1",
        "  health  service=v1beta1.DRAResourceHealth  lists=1",
        "  node-a/gpu-0  Unhealthy  xid 79",
        "  node-a/gpu-1  Unknown    unmonitored: no",
    ]
    code, out, _ = await run_cli("list", "--dir", _dir(dra_simulator), "--json")
    listed = json.loads(out)["dra_drivers"][DRIVER]
    assert listed["registered"] is True
    assert [(d["device"], d["health"], d["message"]) for d in listed["health"]] == [
        ("gpu-0", "Unhealthy", "xid 79"),
        ("gpu-1", "Unknown", "unmonitored: no"),
    ]


async def test_serve_registers_a_dra_plugin_and_prepare_goes_through(
    short_dir: Path, serve_dra: DraFactory
) -> None:
    directory = short_dir / "device-plugins"
    proc = await asyncio.create_subprocess_exec(
        *CLI, "serve", "--dir", str(directory), "--registry-dir", str(short_dir / "registry"),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        await _read_until(proc.stdout, "serving", seen)
        server = await serve_dra()
        assert DRIVER in await _read_until(proc.stdout, "dra_registered", seen)
        assert server.status.registered is True

        code, out, _ = await run_cli(
            "prepare", "--dir", str(directory), "--driver", DRIVER, "--claim", "ns/c/u"
        )
        assert code == 0
        assert json.loads(out)["claims"]["u"]["devices"][0]["device_name"] == "dev-c"

        proc.send_signal(signal.SIGHUP)  # a kubelet restart dials the plugin again
        await _read_until(proc.stdout, "restarted", seen)
        await _read_until(proc.stdout, "dra_registered", seen)
        assert server.status.notifications == 2

        proc.send_signal(signal.SIGTERM)
        await _read_until(proc.stdout, "stopped", seen)
        async with asyncio.timeout(10):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
