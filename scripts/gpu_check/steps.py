"""The in-process steps of the GPU check: discovery, comparison, health events, GFD.

Every step reads and never writes: no NVML call here changes a GPU setting,
nvidia-smi is only queried, the health watcher only registers for events,
and gpu-feature-discovery writes its labels to a temporary file. Each step
prints through `emit` and returns a `StepResult`, so one failing step never
hides the others and tests can run a step on its own.

`Backend` is the one switch between the real NVML backend and a simulated
node profile; in simulated mode every step uses the mock backend, so the
dry run walks the same code paths with no GPU present.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from devices.backends import open_health_source, open_library
from devices.errors import DiscoveryError, NvmlUnavailable, ProfileError
from devices.health import MONITORING_KINDS, EventKind, HealthEvent
from devices.library import DeviceLibrary
from devices.model import Inventory
from devices.simulated import SimulatedLibrary
from devices.xids import xid_policy

from .compare import compare, render
from .smi import SmiError, SmiTable, query_nvidia_smi, read_saved, simulated_table

Emit = Callable[[str], None]
INJECTED_XID = 79  # "GPU has fallen off the bus": not an application XID, so never filtered


@dataclass(frozen=True)
class StepResult:
    name: str
    ok: bool
    summary: str  # one line for the summary table


@dataclass(frozen=True)
class Backend:
    """The real backend (`mock` None) or a simulated node profile."""

    mock: str | None = None

    @property
    def simulated(self) -> bool:
        return self.mock is not None

    def open(self) -> DeviceLibrary:
        return open_library(self.mock)

    def describe(self) -> str:
        if self.mock is None:
            return "nvml (the real GPU backend)"
        return f"simulated:{self.mock} (mock backend everywhere; no GPU is touched)"

    def profile_path(self) -> Path:
        """The node profile file of a simulated backend."""
        assert self.mock is not None
        return SimulatedLibrary.from_argument(self.mock).path

    def plugin_args(self) -> list[str]:
        """Flags that point a plugin or GFD process at the same backend."""
        return [] if self.mock is None else ["--mock-nvml", self.mock]


def describe_inventory(inventory: Inventory) -> list[str]:
    lines = [
        f"driver {inventory.driver_version}, CUDA driver API {inventory.cuda_driver_version}, "
        f"{len(inventory.gpus)} GPU(s)"
    ]
    for gpu in inventory.gpus:
        mig = "MIG enabled" if gpu.mig_enabled else ("MIG off" if gpu.mig_capable else "no MIG")
        numa = "-" if gpu.numa_node is None else str(gpu.numa_node)
        lines.append(
            f"  GPU {gpu.index} {gpu.uuid}  {gpu.name}  {gpu.memory_mib} MiB  "
            f"bus {gpu.pci_bus_id}  cc {gpu.compute_capability}  {mig}  NUMA {numa}  "
            f"{gpu.device_path}"
        )
        lines.extend(
            f"    MIG {mig_dev.index} {mig_dev.uuid}  {mig_dev.profile}  {mig_dev.memory_mib} MiB"
            for mig_dev in gpu.mig_devices
        )
    return lines


def discovery_step(backend: Backend, emit: Emit) -> tuple[StepResult, Inventory | None]:
    """`open_library` -> init -> inventory -> shutdown, printing what was found."""
    library = backend.open()
    emit(f"library: {library.name}")
    try:
        library.init()
    except (NvmlUnavailable, ProfileError) as exc:
        emit(f"init failed: {exc}")
        return StepResult("discovery", False, f"init failed: {exc}"), None
    try:
        inventory = library.inventory()
    except (DiscoveryError, NvmlUnavailable, ProfileError) as exc:
        emit(f"inventory failed: {exc}")
        return StepResult("discovery", False, f"inventory failed: {exc}"), None
    finally:
        library.shutdown()
    for line in describe_inventory(inventory):
        emit(line)
    if not inventory.gpus:
        return StepResult("discovery", False, "no GPUs found"), inventory
    return StepResult("discovery", True, f"{len(inventory.gpus)} GPU(s)"), inventory


def reference_table(backend: Backend, smi_csv: Path | None) -> SmiTable:
    """Where the comparison's other side comes from (see `smi`)."""
    if smi_csv is not None:
        return read_saved(smi_csv)
    if backend.simulated:
        return simulated_table(backend.profile_path())
    return query_nvidia_smi()


def compare_step(
    backend: Backend, inventory: Inventory | None, emit: Emit, *, smi_csv: Path | None = None
) -> StepResult:
    """Our discovery next to nvidia-smi's, field by field."""
    try:
        table = reference_table(backend, smi_csv)
    except SmiError as exc:
        emit(f"reference: unavailable: {exc}")
        return StepResult("compare", False, str(exc))
    emit(f"reference: {table.source}")
    if inventory is None:
        emit("nothing to compare: discovery failed")
        return StepResult("compare", False, "discovery failed")
    checks = compare(inventory, table.rows)
    for line in render(checks):
        emit(line)
    fields = sum(len(c.fields) for c in checks)
    diffs = sum(c.diffs for c in checks)
    where = " (simulated reference)" if table.simulated else ""
    summary = f"{fields} fields, {diffs} DIFF, {len(checks)} GPU(s){where}"
    return StepResult("compare", diffs == 0 and bool(checks), summary)


class _Collector:
    """Health events posted from the watcher's thread, and a wake-up for the one awaited."""

    def __init__(self, wanted: Callable[[HealthEvent], bool]) -> None:
        self._lock = threading.Lock()
        self._wanted = wanted
        self.events: list[HealthEvent] = []
        self.arrived = threading.Event()

    def post(self, event: HealthEvent) -> None:
        with self._lock:
            self.events.append(event)
        if self._wanted(event):
            self.arrived.set()


def health_step(backend: Backend, emit: Emit, *, seconds: float) -> StepResult:
    """Register for health events, watch for a while, stop; any watcher error fails the step.

    The XID policy is the built-in default, not the environment's, so health
    checks switched off on this machine cannot turn the check into a no-op.
    With a simulated backend the watcher follows a temporary events file and
    one injected XID must come through (the wait ends when it does).
    """
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            events_file = Path(tmp) / "events.jsonl" if backend.simulated else None
            return _watch(backend, emit, seconds, events_file, warnings)
    finally:
        logger.remove(sink)


def _watch(
    backend: Backend, emit: Emit, seconds: float, events_file: Path | None, warnings: list[str]
) -> StepResult:
    library = backend.open()
    try:
        library.init()
        inventory = library.inventory()
    except (DiscoveryError, NvmlUnavailable, ProfileError) as exc:
        library.shutdown()
        emit(f"cannot start: {exc}")
        return StepResult("health", False, str(exc))
    target = inventory.gpus[0].uuid if inventory.gpus and events_file is not None else None
    collector = _Collector(lambda e: e.kind is EventKind.XID and e.uuid == target)
    if events_file is not None:
        events_file.touch()
    source = open_health_source(
        library,
        inventory,
        events_file=None if events_file is None else str(events_file),
        policy=xid_policy(),
    )
    emit(f"source: {source.name}, watching {len(inventory.gpus)} GPU(s) for {seconds:g}s")
    try:
        source.start(collector.post)
        if events_file is not None and target is not None:
            with events_file.open("a") as file:
                file.write(json.dumps({"uuid": target, "xid": INJECTED_XID}) + "\n")
            emit(f"injected: xid {INJECTED_XID} on {target} (simulated events file)")
        # On a real GPU nothing is awaited: the wait is the few seconds of watching.
        collector.arrived.wait(seconds)
    finally:
        stopped = source.stop()
        library.shutdown()
    return _judge_health(
        collector, warnings, stopped=stopped, expect_injected=target is not None, emit=emit
    )


def _judge_health(
    collector: _Collector,
    warnings: list[str],
    *,
    stopped: bool,
    expect_injected: bool,
    emit: Emit,
) -> StepResult:
    for event in collector.events:
        emit(f"event: {event.describe()}")
    for warning in warnings:
        emit(f"warning: {warning}")
    emit(f"stopped: {'yes' if stopped else 'NO (thread still running)'}")
    problems = [
        e.describe()
        for e in collector.events
        if e.kind in MONITORING_KINDS or e.kind is EventKind.LOST
    ]
    if not stopped:
        problems.append("the watcher thread did not stop")
    if expect_injected and not collector.arrived.is_set():
        problems.append(f"the injected xid {INJECTED_XID} never arrived")
    if problems:
        return StepResult("health", False, "; ".join(problems))
    return StepResult(
        "health", True, f"registered, {len(collector.events)} event(s), stopped cleanly"
    )


def _gfd_command(backend: Backend, output: Path) -> list[str]:
    # The same interpreter and code as this check, whether or not the console script is on PATH.
    launcher = "import sys; from labels.cli import main; sys.exit(main())"
    args = ["--oneshot", "--output-file", str(output), *backend.plugin_args()]
    return [sys.executable, "-c", launcher, *args]


def read_labels(text: str) -> dict[str, str]:
    """`key=value` lines of the features file."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key: value for key, value in pairs}


def gfd_step(
    backend: Backend, inventory: Inventory | None, emit: Emit, *, timeout: float
) -> StepResult:
    """`gpu-feature-discovery --oneshot` into a temporary file; print its labels."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        output = Path(tmp) / "gfd"
        command = _gfd_command(backend, output)
        emit(f"running: gpu-feature-discovery {' '.join(command[3:])}")
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
            )
        except subprocess.TimeoutExpired:
            return StepResult("gfd", False, f"did not finish within {timeout:.0f}s")
        text = output.read_text() if output.is_file() else ""
    if done.returncode != 0:
        for line in done.stderr.strip().splitlines()[-20:]:
            emit(f"stderr: {line}")
        return StepResult("gfd", False, f"exited with status {done.returncode}")
    labels = read_labels(text)
    for key in sorted(labels):
        emit(f"{key}={labels[key]}")
    if not labels:
        return StepResult("gfd", False, "wrote no labels")
    count = labels.get("nvidia.com/gpu.count")
    if inventory is not None and count != str(len(inventory.gpus)):
        emit(f"nvidia.com/gpu.count is {count}, discovery found {len(inventory.gpus)}: DIFF")
        return StepResult("gfd", False, f"gpu.count {count} != {len(inventory.gpus)} GPU(s)")
    return StepResult("gfd", True, f"{len(labels)} labels, gpu.count={count}")
