"""What a serving plugin costs a node while nothing happens: CPU and resident memory.

The plugin runs on the simulated `dgx-a100` with health monitoring on (an
events file is configured, so the follower thread is running), exactly as a
quiet production node would leave it. Measuring starts one second after the
device list reached the kubelet and monitoring reported active, and lasts 60 s
(10 s with --quick). CPU is sampled once a second as the sum of the
scheduler's run time of every thread (/proc/<pid>/task/*/schedstat, in
nanoseconds: /proc/<pid>/stat counts in 10 ms ticks, too coarse for one
second of an idle process); the note gives the mean over the whole window
from /proc/<pid>/stat, which also counts threads that came and went. RSS is
VmRSS from /proc/<pid>/status, sampled with it.
"""

from __future__ import annotations

import asyncio
import time

from bench.health import health_args, monitoring
from bench.proc import GPU, Plugin, simulator
from bench.report import Outcome, Row

SETTLE = 1.0


async def run(*, quick: bool) -> Outcome:
    window = 10 if quick else 60
    cpu: list[float] = []
    rss: list[float] = []
    async with simulator() as sim:
        events = sim.directory / "events.jsonl"
        events.touch()
        async with Plugin(health_args(sim.directory, events)) as plugin:
            try:
                await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
                await plugin.wait_state(lambda s: monitoring(s) == "active")
            except TimeoutError:
                raise plugin.failure("never served") from None
            await asyncio.sleep(SETTLE)
            first_cpu, last_ns = plugin.cpu_seconds(), plugin.cpu_ns()
            first = last = time.monotonic()
            for tick in range(1, window + 1):
                await asyncio.sleep(max(0.0, first + tick - time.monotonic()))
                now, used = time.monotonic(), plugin.cpu_ns()
                cpu.append((used - last_ns) / 1e9 / (now - last) * 100)
                rss.append(plugin.memory_kib("VmRSS") / 1024)
                last, last_ns = now, used
            mean = (plugin.cpu_seconds() - first_cpu) / (time.monotonic() - first) * 100
            peak = plugin.memory_kib("VmHWM") / 1024
    return Outcome(
        rows=[
            Row.of(
                "idle",
                "idle_cpu",
                "%",
                cpu,
                note=f"% of one core, 1 s samples; /proc/stat mean {mean:.2f}% over {window} s",
            ),
            Row.of(
                "idle",
                "idle_rss",
                "MiB",
                rss,
                note=f"VmRSS while idle; peak (VmHWM) {peak:.1f} MiB",
            ),
        ],
        details={
            "cpu_percent": cpu,
            "rss_mib": rss,
            "mean_cpu_percent": mean,
            "peak_rss_mib": peak,
            "window_s": window,
        },
    )
