"""`/state`'s `runnables`: every thread and long-lived task of a serving plugin, by name.

The supervisor (`reconciler.app.supervisor`) starts them in one declared order
and shows each one's state; docs/threads.md lists what each owns. A plugin
with every optional part that needs no API server (probes on their own port,
a config file, a simulated events file, JSON logs) shows them all, in that
order, each running, or, for a part made on demand, why not yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, free_port, plugin_args

GPU = "nvidia.com/gpu"

# The declared order; `node-events` needs a node name and API access, so it is absent here.
ORDER = [
    "log-sink",
    "inspection",
    "probes",
    "preferred-allocation",
    "actuators",
    "nvml-worker",
    "health-source",
    "mps-probes",
    "dra-slice-watch",
    "node-watch",
    "reconcile-loop",
    "kubelet-dir-watch",
    "dra-dir-watch",
    "config-dir-watch",
    "node-watch-late",
]
RUNNING = {
    "log-sink",
    "inspection",
    "probes",
    "preferred-allocation",
    "actuators",
    "nvml-worker",
    "health-source",
    "reconcile-loop",
    "kubelet-dir-watch",
    "dra-dir-watch",
    "config-dir-watch",
}


def by_name(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in state["runnables"]}


async def test_state_lists_every_runnable_in_order_each_running_or_saying_why_not(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    events = tmp_path / "events.jsonl"
    events.touch()
    extra = [
        "--config-file", str(config),
        "--mock-nvml-events", str(events),
        "--probe-address", f"127.0.0.1:{free_port()}",
        "--log-format", "json",
    ]  # fmt: skip
    async with PluginProcess(plugin_args(sim.directory, "t4x4", *extra)) as plugin:
        await sim.wait_registered(GPU, timeout=20)
        # Once serving, and the node watch's late start (a no-op without a
        # node name) has said why the node is not watched.
        state = await plugin.wait_state(
            lambda s: (
                s["state"] == "serving" and by_name(s)["node-watch-late"]["state"] == "stopped"
            ),
            timeout=20,
        )
        assert [entry["name"] for entry in state["runnables"]] == ORDER
        runnables = by_name(state)
        assert {name for name, entry in runnables.items() if entry["state"] == "running"} == RUNNING
        for name in RUNNING:
            assert runnables[name]["reason"] is None, runnables[name]
            assert runnables[name]["since"].endswith("Z")
        # Made on demand: said why not (yet), never shown as failed.
        assert runnables["mps-probes"]["state"] == "pending"
        assert runnables["dra-slice-watch"]["state"] == "pending"
        assert runnables["node-watch"] == {
            **runnables["node-watch"],
            "state": "stopped",
            "reason": "no --node-name (NODE_NAME) given",
        }
        assert runnables["node-watch-late"]["reason"] is None
        assert await plugin.terminate(timeout=15) == 0
    assert '"msg": "stopped"' in plugin.stderr
