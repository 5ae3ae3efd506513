"""An in-process plugin for loop tests: the real Reconciler, real actuators, a real kubelet.

The reconcile loop runs as a task in the test's event loop with the simulated
backend, a real `KubeletSimulator` on unix sockets, a real CDI directory and
a real events file for health injection. Faults are real too: a regular file
where the CDI directory should be, a stopped kubelet, a deleted socket. Waits
are on conditions: `until()` wakes on every change the loop publishes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from devices.backends import open_library
from foundation.backoff import Backoff
from kubelet_sim import KubeletSimulator
from reconciler.actuators.fleet import PluginFleet
from reconciler.actuators.health import HealthMonitor
from reconciler.core.loop import Inputs, Reconciler
from reconciler.core.mailbox import Hint, Mailbox
from reconciler.plan.inputs import ConfigInputs
from reconciler.plan.reading import READ_DEADLINE_SECONDS
from states.history import TransitionRecord
from states.machine import Lifecycle
from states.names import State

FAST = Backoff(initial=0.05, cap=0.2)


@dataclass
class Rig:
    reconciler: Reconciler
    sim: KubeletSimulator
    mailbox: Mailbox
    config_file: Path
    cdi_dir: Path
    events_file: Path
    changed: asyncio.Condition
    task: asyncio.Task[None] | None = None
    handled: int = 0  # hints the loop has finished with

    async def settle(self, hint: Hint) -> None:
        """Post `hint` and wait until the loop has finished handling it."""
        before = self.handled
        self.mailbox.post(hint)
        await self.until(lambda: self.handled > before)

    @property
    def state(self) -> State:
        return self.reconciler.lifecycle.state

    @property
    def history(self) -> list[TransitionRecord]:
        return list(self.reconciler.lifecycle.history.snapshot())

    def triggers(self, since: int = 0) -> list[str]:
        return [record.trigger for record in self.history[since:]]

    async def until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(predicate)

    def write_config(self, text: str) -> None:
        self.config_file.write_text(text)
        self.mailbox.post(Hint.CONFIG)

    def inject(self, **event: object) -> None:
        with self.events_file.open("a") as handle:
            handle.write(json.dumps(event) + "\n")

    def spec_names(self) -> set[str]:
        """Qualified CDI names defined by the spec files on disk now."""
        names: set[str] = set()
        if not self.cdi_dir.is_dir():
            return names
        for path in self.cdi_dir.glob("*.json"):
            spec = json.loads(path.read_text())
            names |= {f"{spec['kind']}={device['name']}" for device in spec["devices"]}
        return names


@asynccontextmanager
async def running_plugin(
    tmp_path: Path,
    sock_dir: Path,
    *flags: str,
    config: str = "version: v1\n",
    read_deadline: float = READ_DEADLINE_SECONDS,
    backoff: Backoff = FAST,
    cordon: str | None = None,
) -> AsyncIterator[Rig]:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config)
    cdi_dir = tmp_path / "cdi"
    events_file = tmp_path / "events.jsonl"
    events_file.touch()
    async with KubeletSimulator(sock_dir, write_snapshot_file=False) as sim:
        argv = [
            "--mock-nvml", "dgx-a100",
            "--mock-nvml-events", str(events_file),
            "--kubelet-socket", str(sim.socket_path),
            "--config-file", str(config_file),
            "--cdi-spec-dir", str(cdi_dir),
            *flags,
        ]  # fmt: skip
        mailbox = Mailbox()
        lifecycle = Lifecycle()
        changed = asyncio.Condition()

        health = HealthMonitor(notify=lambda: mailbox.post_threadsafe(Hint.HEALTH))
        reconciler = Reconciler(
            inputs=Inputs(
                config=ConfigInputs(argv, {}),
                open_library=lambda c: open_library(c.flags.mock_nvml or None),
                fleet=PluginFleet(kubelet_socket=sim.socket_path, timeout=2.0),
                health=health,
            ),
            mailbox=mailbox,
            lifecycle=lifecycle,
            backoff=backoff,
            fail_on_init_error=False,
            read_deadline=read_deadline,
        )

        def handled(_: object) -> None:
            rig.handled += 1
            notify(None)

        def notify(_: object) -> None:
            async def wake() -> None:
                async with changed:
                    changed.notify_all()

            asyncio.get_running_loop().create_task(wake())

        reconciler.on_change = handled
        lifecycle.listeners.append(notify)  # also mid-reconcile, on every transition
        rig = Rig(reconciler, sim, mailbox, config_file, cdi_dir, events_file, changed)
        health.want_cordon(cordon)  # what the node watch's first list said, as at start-up
        await reconciler.start()
        task = rig.task = asyncio.create_task(reconciler.run())
        try:
            yield rig
        finally:
            mailbox.post(Hint.SHUTDOWN)
            async with asyncio.timeout(10):
                await task
