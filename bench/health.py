"""Health event to kubelet: from an injected XID to the Unhealthy device list.

The plugin runs on the simulated `dgx-a100` with an events file and a short
quiet period (0.2 s). Each round appends one transient XID 94 line for the
next GPU in turn and times until the simulated kubelet's latest list shows
that GPU Unhealthy. XID 94 clears by itself after the quiet period, so by the
time a GPU's turn comes round again it is healthy (the round waits for that
before injecting, so every sample is a healthy -> unhealthy change).

Rounds are spaced by a random 50-150 ms pause: the plugin follows the file
by polling, and injecting right after the previous change would always hit
the same phase of the poll.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.proc import GPU, Plugin, pause, plugin_args, simulator
from bench.report import Goal, Outcome, Row, Stat
from kubelet_sim.model import DeviceInfo

SEED = 20240601
QUIET_PERIOD = "0.2"
GOAL = Goal(Stat.P99, 100.0)


def inject(events: Path, **event: object) -> None:
    with events.open("a") as out:
        out.write(json.dumps(event) + "\n")


def unhealthy(devices: tuple[DeviceInfo, ...]) -> set[str]:
    return {d.id for d in devices if d.health != "Healthy"}


def healthy(device_id: str) -> Callable[[tuple[DeviceInfo, ...]], bool]:
    return lambda devices: device_id not in unhealthy(devices)


def not_healthy(device_id: str) -> Callable[[tuple[DeviceInfo, ...]], bool]:
    return lambda devices: device_id in unhealthy(devices)


def monitoring(state: dict[str, Any]) -> str | None:
    """The state of health monitoring in a `/state` document."""
    value = ((state.get("health") or {}).get("monitoring") or {}).get("state")
    return None if value is None else str(value)


def health_args(directory: Path, events: Path) -> list[str]:
    return plugin_args(
        directory,
        "dgx-a100",
        "--mock-nvml-events",
        str(events),
        "--health-quiet-period",
        QUIET_PERIOD,
    )


async def run(*, quick: bool) -> Outcome:
    rounds = 24 if quick else 200
    rng = random.Random(SEED)
    samples: list[float] = []
    appended: list[tuple[str, float]] = []
    async with simulator() as sim:
        events = sim.directory / "events.jsonl"
        events.touch()
        async with Plugin(health_args(sim.directory, events)) as plugin:
            try:
                view = await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
                # Injected lines count only once the follower is watching the file.
                await plugin.wait_state(lambda s: monitoring(s) == "active")
            except TimeoutError:
                raise plugin.failure("never listed its devices") from None
            gpus = [d.id for d in view.devices]
            for n in range(rounds):
                gpu = gpus[n % len(gpus)]
                try:
                    await sim.wait_devices(GPU, healthy(gpu), timeout=10)
                except TimeoutError:
                    raise plugin.failure(f"{gpu} never recovered from XID 94") from None
                await pause(rng)
                started = time.monotonic()
                appended.append((gpu, time.time()))
                inject(events, uuid=gpu, xid=94)
                try:
                    await sim.wait_devices(GPU, not_healthy(gpu), timeout=10)
                except TimeoutError:
                    raise plugin.failure(f"XID 94 on {gpu} never reached the kubelet") from None
                samples.append((time.monotonic() - started) * 1000)
            marked = transitions(plugin.stderr)
    rows = [
        Row.of(
            "health",
            "health_event",
            "ms",
            samples,
            goal=GOAL,
            note="append XID 94 line to Unhealthy in the kubelet's list (8 GPUs in turn)",
        )
    ]
    detect = split(appended, marked)
    if detect is not None:
        publish = [total - part for total, part in zip(samples, detect, strict=True)]
        rows += [
            Row.of(
                "health",
                "health_event.detect",
                "ms",
                detect,
                note="of which: append to the plugin's log of healthy -> unhealthy",
            ),
            Row.of(
                "health",
                "health_event.publish",
                "ms",
                publish,
                note="of which: that log line to the kubelet's list",
            ),
        ]
    return Outcome(rows=rows, details={"ms": samples, "detect_ms": detect})


_TRANSITION = re.compile(r"^(\S+)\s+\S+\s+health (\S+): healthy -> unhealthy")


def transitions(log: str) -> dict[str, list[float]]:
    """Wall-clock times of each device's healthy -> unhealthy lines in a text log."""
    seen: dict[str, list[float]] = {}
    for line in log.splitlines():
        match = _TRANSITION.match(line)
        if match is None:
            continue
        try:
            at = datetime.fromisoformat(match[1]).timestamp()
        except ValueError:
            continue  # another log format: the split rows are left out, not guessed
        seen.setdefault(match[2], []).append(at)
    return seen


def split(appended: list[tuple[str, float]], marked: dict[str, list[float]]) -> list[float] | None:
    """Milliseconds from each append to its transition in the log; None if they don't pair up.

    The k-th injection on a GPU is its k-th healthy -> unhealthy move, since
    each round waits for the GPU to be healthy first. The log has millisecond
    timestamps, which is fine-grained enough beside a 100 ms poll.
    """
    queues = {gpu: list(times) for gpu, times in marked.items()}
    parts: list[float] = []
    for gpu, wall in appended:
        if not queues.get(gpu):
            return None
        parts.append(max(0.0, (queues[gpu].pop(0) - wall) * 1000))
    return parts
