"""Soak: allocations, health flaps and reconfigurations for SOAK_SECONDS (default 600).

A node that runs for weeks must not grow. For the whole run the kubelet
simulator keeps asking for allocations and preferred allocations, GPUs fail
and recover (transient XIDs, lost and found), and the config flips between
two time-slicing layouts. Resident memory is read at a quiet moment after a
warm-up and again at the end; it may grow by less than 5 MB. Descriptors and
threads must be back where they were.

Run it shorter by hand: `SOAK_SECONDS=120 .venv/bin/pytest -m reliability -k soak -s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from pathlib import Path

import grpc
import pytest

from kubelet_sim import KubeletSimulator, PluginCallError, ResourceNotRegistered
from tests.e2e.harness import PluginProcess, plugin_args
from tests.reliability.observe import Usage, settled_usage, wait_usage

pytestmark = pytest.mark.long

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
WARM_UP_SECONDS = min(60.0, SOAK_SECONDS / 5)
RSS_GROWTH_KIB = 5 * 1024
FD_SLACK = 2  # as in test_restart_storm: one kubelet connection may be mid-replacement
THREAD_SLACK = 1
GPU = "nvidia.com/gpu"
REFUSALS = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INVALID_ARGUMENT)
# From a config edit to the restarted resource being dialled again: the watch's
# 0.4 s debounce, the restart itself, and up to ~1 s of gRPC reconnect backoff
# in the simulator (its channels share gRPC's global subchannel pool).
RESTART_WINDOW = 2.5


def time_sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {GPU}\n      replicas: {replicas}\n"
    )


class Soak:
    def __init__(self, sim: KubeletSimulator, plugin: PluginProcess, tmp: Path) -> None:
        self.sim = sim
        self.plugin = plugin
        self.config = tmp / "config.yaml"
        self.events = tmp / "events.jsonl"
        self.gpus: list[str] = []
        self.replicas = 2
        self.random = random.Random(1)
        self.refusals: list[tuple[float, str]] = []
        self.edits: list[float] = []
        self.counts = {
            "allocate": 0,
            "preferred": 0,
            "refused": 0,
            "flaps": 0,
            "reconfigurations": 0,
        }

    async def allocations(self, until: float) -> None:
        while time.monotonic() < until:
            view = self.sim.snapshot().resource(GPU)
            healthy = list(view.healthy_ids) if view is not None and view.registered else []
            if len(healthy) < 2:
                # Flaps and restarts: wait for the kubelet to see two healthy devices.
                left = until - time.monotonic()
                if left > 0:
                    with contextlib.suppress(TimeoutError):
                        await self.sim.wait_devices(
                            GPU, lambda d: sum(x.health == "Healthy" for x in d) >= 2, timeout=left
                        )
                continue
            size = self.random.randint(1, min(4, len(healthy)))
            try:
                chosen = await self.sim.preferred(GPU, healthy, [], size)
                self.counts["preferred"] += 1
                ids = list(chosen.container_responses[0].deviceIDs)
                assert len(ids) == size
                await self.sim.allocate(GPU, [ids])
                self.counts["allocate"] += 1
            except (PluginCallError, ResourceNotRegistered) as err:
                # A reconfiguration restarts the resource's server: calls made
                # while it is away, or with IDs from the list before, are refused.
                code = getattr(err, "code", None)
                if code not in (None, *REFUSALS):
                    raise
                self.counts["refused"] += 1
                self.refusals.append((time.monotonic(), str(err)))
            await asyncio.sleep(0.01)

    async def flaps(self, until: float) -> None:
        while time.monotonic() < until:
            gpu = self.random.choice(self.gpus)
            if self.random.random() < 0.5:
                self._inject({"uuid": gpu, "xid": 94})  # transient: recovers by itself
            else:
                self._inject({"uuid": gpu, "lost": True})
                await asyncio.sleep(0.4)
                self._inject({"uuid": gpu, "lost": False})
            self.counts["flaps"] += 1
            await asyncio.sleep(1.0)

    async def reconfigurations(self, until: float) -> None:
        while time.monotonic() < until:
            await asyncio.sleep(4.0)
            self.replicas = 5 - self.replicas  # 2 <-> 3
            scratch = self.config.with_suffix(".tmp")
            scratch.write_text(time_sliced(self.replicas))
            os.replace(scratch, self.config)
            self.edits.append(time.monotonic())
            want = 8 * self.replicas
            await self.sim.wait_devices(GPU, lambda d, n=want: len(d) == n, timeout=10)
            self.counts["reconfigurations"] += 1

    def unexplained_refusals(self) -> list[str]:
        """Refusals that no reconfiguration explains (one restarts the resource's server)."""
        return [
            why
            for at, why in self.refusals
            if not any(edit <= at <= edit + RESTART_WINDOW for edit in self.edits)
        ]

    def _inject(self, event: dict[str, object]) -> None:
        with self.events.open("a") as out:
            out.write(json.dumps(event) + "\n")

    async def run_for(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        async with asyncio.TaskGroup() as group:
            group.create_task(self.allocations(until))
            group.create_task(self.flaps(until))
            group.create_task(self.reconfigurations(until))

    async def quiet_reading(self) -> Usage:
        """Usage once every flap has healed and nothing is pending."""
        await self.sim.wait_devices(
            GPU, lambda d: all(x.health == "Healthy" for x in d), timeout=15
        )
        await self.plugin.wait_state(lambda s: s["mailbox_depth"] == 0 and s["reason"] is None)
        assert self.plugin.proc is not None
        # The last replies and streams finish closing: read once the process
        # stops changing (the same descriptors and threads for 10 readings).
        return await settled_usage(self.plugin.proc.pid)


@pytest.mark.timeout(int(SOAK_SECONDS) + 300)
async def test_soak(sim: KubeletSimulator, tmp_path: Path) -> None:
    soak_dir = tmp_path
    (soak_dir / "config.yaml").write_text(time_sliced(2))
    (soak_dir / "events.jsonl").touch()
    args = plugin_args(
        sim.directory,
        "dgx-a100",
        "--config-file",
        str(soak_dir / "config.yaml"),
        "--mock-nvml-events",
        str(soak_dir / "events.jsonl"),
        "--health-quiet-period",
        "0.3",
    )
    async with PluginProcess(args) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=30)
        soak = Soak(sim, plugin, soak_dir)
        soak.gpus = sorted({d.id.split("::")[0] for d in view.devices})
        await plugin.wait_state(lambda s: s["health"] is not None)

        await soak.run_for(WARM_UP_SECONDS)
        baseline = await soak.quiet_reading()
        started = time.monotonic()
        await soak.run_for(SOAK_SECONDS - WARM_UP_SECONDS)
        final = await soak.quiet_reading()
        assert plugin.proc is not None
        settled = await wait_usage(
            plugin.proc.pid,
            lambda now: (
                now.fds <= baseline.fds + FD_SLACK
                and now.threads <= baseline.threads + THREAD_SLACK
            ),
            timeout=10,
            baseline=baseline,
        )
        growth = final.rss_kib - baseline.rss_kib
        print(
            f"soak: {SOAK_SECONDS:.0f}s ({WARM_UP_SECONDS:.0f}s warm-up, "
            f"{time.monotonic() - started:.0f}s measured); {soak.counts}; "
            f"RSS {baseline.rss_kib} -> {final.rss_kib} KiB ({growth:+d} KiB); "
            f"fds {baseline.fds} -> {settled.fds}; threads {baseline.threads} -> {settled.threads}"
        )
        assert growth < RSS_GROWTH_KIB
        assert soak.unexplained_refusals() == []
        state = await plugin.state()
        assert state["state"] == "serving"
        assert "Traceback" not in plugin.stderr
