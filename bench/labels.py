"""Node-label change to new device list, through a real (emulated) Kubernetes API.

The plugin runs with `--node-name`, `--config-directory` (two named configs:
time-slicing with 2 and with 4 replicas on `dgx-a100`) and a KUBECONFIG that
points at kmock's emulated API server, a real HTTP server with watch streams.
Each round patches the node's `nvidia.com/device-plugin.config` label to the
other config and times until the simulated kubelet holds the new list (16 or
32 devices): API server to watch stream to config switch to ListAndWatch.

kmock ships with the development extras; without it the row is skipped.
"""

from __future__ import annotations

import random
import time
from typing import Any

from bench.lifecycle import sliced
from bench.proc import GPU, Plugin, count_is, pause, plugin_args, simulator
from bench.report import Outcome, Row

SEED = 20240601
NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"
NODES = "/api/v1/nodes"


def _quick_shutdown_server() -> type[Any]:
    """aiohttp's test server, dropping open watch streams at once when it stops.

    aiohttp would otherwise wait up to a minute for them to end.
    """
    import aiohttp.test_utils

    class QuickShutdown(aiohttp.test_utils.RawTestServer):
        async def _make_runner(self, debug: bool = True, **kwargs: Any) -> Any:
            runner = await super()._make_runner(debug=debug, **kwargs)
            runner._shutdown_timeout = 0.05
            return runner

    return QuickShutdown


async def run(*, quick: bool) -> Outcome:
    try:
        import kmock
    except ImportError:
        return Outcome(skipped="kmock is not installed (pip install -e '.[dev]')")
    from tests.unit.kube.apiserver import kubeconfig

    reps = 6 if quick else 20
    rng = random.Random(SEED)
    samples: list[float] = []
    async with kmock.KubernetesEmulator() as api:
        api.resources["v1/nodes"] = kmock.ResourceInfo(namespaced=False, kind="Node")
        server = kmock.Server(api, server_cls=_quick_shutdown_server())
        await server.__aenter__()
        try:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE, "labels": {LABEL: "two"}},
            }
            response = await api.post(NODES, json=body)
            assert response.status == 200, await response.text()
            async with simulator() as sim:
                configs = sim.directory / "configs"
                configs.mkdir()
                (configs / "two").write_text(sliced(2))
                (configs / "four").write_text(sliced(4))
                args = plugin_args(
                    sim.directory,
                    "dgx-a100",
                    "--config-directory",
                    str(configs),
                    "--default-config",
                    "two",
                    "--node-name",
                    NODE,
                )
                env = {
                    "KUBECONFIG": str(
                        kubeconfig(sim.directory / "kubeconfig", f"http://127.0.0.1:{server.port}")
                    )
                }
                async with Plugin(args, env=env) as plugin:
                    try:
                        await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=60)
                        await plugin.wait_state(
                            lambda s: (s.get("selection") or {}).get("outcome") == "label"
                        )
                    except TimeoutError:
                        raise plugin.failure("never served the labelled config") from None
                    replicas = 2
                    for _ in range(reps):
                        await pause(rng)
                        replicas = 6 - replicas
                        value = {2: "two", 4: "four"}[replicas]
                        started = time.monotonic()
                        patched = await api.patch(
                            f"{NODES}/{NODE}", json={"metadata": {"labels": {LABEL: value}}}
                        )
                        assert patched.status == 200, await patched.text()
                        want = 8 * replicas
                        try:
                            await sim.wait_devices(GPU, count_is(want), timeout=10)
                        except TimeoutError:
                            raise plugin.failure(f"label {value}: never listed {want}") from None
                        samples.append((time.monotonic() - started) * 1000)
        finally:
            await server.__aexit__(None, None, None)
    row = Row.of(
        "label",
        "node_label",
        "ms",
        samples,
        note="patch node label (2<->4 replicas) to new list at the kubelet",
    )
    return Outcome(rows=[row], details={"ms": samples})
