"""`KUBELET_API=dra make demo`: the same simulated node, served through DRA instead.

The plugin runs with `--kubelet-api dra` against an emulated Kubernetes API
server (the one the test suite uses, built on kmock, a development dependency:
`make demo` installs the development packages in this mode) and a simulated
kubelet that watches its plugins_registry directory. The demo waits for the
DRA driver's registration and the node's ResourceSlices, shows them, then
plays the scheduler and the kubelet for one pod: it creates a ResourceClaim
allocated to two of the node's devices, prepares it (the CDI device IDs and
the claim's CDI spec) and unprepares it again.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from demo import PROFILE, run, say, unless_exited

from kubelet_sim.engine import KubeletSimulator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the suite's emulated API server

from kube.resource_claims import AllocatedDevice  # noqa: E402
from kubelet.dra.types import ClaimRef  # noqa: E402
from tests.unit.kube.apiserver import ApiServer, kubeconfig, running_apiserver  # noqa: E402

NODE = "demo-node"
DRIVER = os.environ.get("DRA_DRIVER_NAME", "gpu.nvidia.com")
SECONDS = 60.0  # the plugin loads the Kubernetes client once it is in DRA mode


def read_state(address: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{address}/state", timeout=2) as response:
        body: dict[str, Any] = json.load(response)
        return body


async def slices_published(address: str) -> dict[str, Any]:
    """The `dra.slices` part of /state once the node's slices are all written."""
    while True:
        try:
            state = await asyncio.to_thread(read_state, address)
        except OSError:
            state = {}
        slices = (state.get("dra") or {}).get("slices") or {}
        if slices.get("converged") and slices.get("devices"):
            return dict(slices)
        await asyncio.sleep(0.2)


def describe(device: dict[str, Any]) -> str:
    attributes = device.get("attributes", {})
    memory = device.get("capacity", {}).get("memory", {}).get("value", "?")
    kind = attributes.get("type", {}).get("string", "?")
    product = attributes.get("productName", {}).get("string", "?")
    return f"{device['name']}  {kind}  {product}  memory {memory}"


async def show(
    api: ApiServer, sim: KubeletSimulator, plugin: asyncio.subprocess.Process, address: str,
    cdi_dir: Path,
) -> None:  # fmt: skip
    await unless_exited(plugin, sim.wait_dra_registered(DRIVER, timeout=SECONDS))
    say(f"DRA driver {DRIVER} registered with the kubelet")
    summary = await unless_exited(
        plugin, asyncio.wait_for(slices_published(address), timeout=SECONDS)
    )
    slices = await api.slices()
    say(
        f"{summary['devices']} devices in {len(slices)} ResourceSlice(s) for node {NODE}, "
        f"pool generation {summary['generation']}:"
    )
    devices = sorted(
        (d for s in slices.values() for d in s["spec"]["devices"]), key=lambda d: d["name"]
    )
    for device in devices:
        say(f"  {describe(device)}")
    chosen = [d["name"] for d in devices[:2]]
    created = await api.create_claim(
        "default", "demo-claim", [AllocatedDevice("gpu", DRIVER, NODE, name) for name in chosen]
    )
    claim = ClaimRef("default", created["metadata"]["uid"], "demo-claim")
    say(f"ResourceClaim default/demo-claim allocated to {chosen} (uid {claim.uid})")
    answer = (await sim.prepare(DRIVER, [claim])).claims[claim.uid]
    if answer.error:
        say(f"NodePrepareResources -> error: {answer.error}")
        return
    ids = [i for device in answer.devices for i in device.cdi_device_ids]
    say(f"NodePrepareResources -> CDI devices {ids}")
    for spec in sorted(cdi_dir.glob("*claim*")):
        say(f"  CDI spec {spec}")
    unprepared = (await sim.unprepare(DRIVER, [claim])).claims[claim.uid]
    left = sorted(p.name for p in cdi_dir.glob("*claim*"))
    say(f"NodeUnprepareResources -> {unprepared.error or 'ok'}; claim specs left: {left}")
    say(f"plugin state: http://{address}/state")


async def main(address: str) -> int:
    with tempfile.TemporaryDirectory(prefix="dp-demo-", dir="/tmp") as tmp:
        root = Path(tmp)
        registry, cdi_dir = root / "plugins_registry", root / "cdi"
        async with (
            running_apiserver() as api,
            KubeletSimulator(root, registry_dir=registry) as sim,
        ):
            await api.add_node(NODE)
            say(f"emulated Kubernetes API at {api.url}, node {NODE}")
            say(f"kubelet simulator watching {registry}")
            config = kubeconfig(root / "kubeconfig", api.url)
            command = [
                "--mock-nvml", PROFILE, "--kubelet-api", "dra", "--node-name", NODE,
                "--kubelet-socket", str(root / "kubelet.sock"),
                "--kubelet-registrar-directory-path", str(registry),
                "--kubelet-plugins-directory-path", str(root / "plugins"),
                "--cdi-spec-dir", str(cdi_dir), "--state-address", address,
            ]  # fmt: skip
            return await run(
                command,
                lambda plugin: show(api, sim, plugin, address, cdi_dir),
                env={**os.environ, "KUBECONFIG": str(config)},
            )
