"""The reconcile loop in-process: every step that can fail, failing and then landing.

Real actuators against a real kubelet simulator and real files (see `rig`):
a step that fails is never reported applied, the reason names what is
pending, the retry is recorded as `retry` (never as an input change), and
the edit lands by itself once the fault is gone. CDI names returned by
Allocate are defined on disk at every moment, health events included.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

import pytest

from devices.library import ProbeResult
from foundation.backoff import Backoff
from foundation.outcome import Key, Kind
from reconciler.actuators import mps_gate
from reconciler.core.mailbox import Hint
from states.names import State, Trigger
from tests.unit.reconciler.rig import Rig, running_plugin

GPU = "nvidia.com/gpu"
GPU0 = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"
VENDOR = "k8s.device-plugin.nvidia.com/gpu"

TS2 = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""
TS4_INDEX = """version: v1
flags:
  plugin:
    deviceIDStrategy: index
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
MPS2 = """version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def served(rig: Rig, resource: str = GPU) -> int:
    view = rig.sim.snapshot().resource(resource)
    return 0 if view is None else len(view.devices)


def registrations(rig: Rig, resource: str = GPU) -> int:
    view = rig.sim.snapshot().resource(resource)
    return 0 if view is None else view.counters.registrations


async def allocated_cdi_names(rig: Rig, device_id: str) -> set[str]:
    response = await rig.sim.allocate(GPU, [[device_id]])
    (container,) = response.container_responses
    return {name for value in container.annotations.values() for name in value.split(",")}


def break_directory(path: Path) -> None:
    """A regular file where a directory should be: mkdir and writes below it fail, even as root."""
    shutil.rmtree(path, ignore_errors=True)
    path.write_text("not a directory\n")


def repair_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


async def test_failed_cdi_write_is_not_applied_and_lands_by_itself(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(
        tmp_path, sock_dir, "--device-list-strategy", "cdi-annotations", config=TS2
    ) as rig:
        await rig.until(lambda: rig.state is State.SERVING)
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 16)
        mark = len(rig.history)
        break_directory(rig.cdi_dir)
        rig.write_config(TS4_INDEX)
        await rig.until(lambda: Trigger.FAILED in rig.triggers(mark))
        reason = rig.reconciler.lifecycle.reason or ""
        assert rig.state is State.SERVING
        assert "not yet applied" in reason
        assert "cdi" in reason
        assert Trigger.RECONFIGURED not in rig.triggers(mark)

        # A health event while the write keeps failing publishes the old list:
        # every name an answer can contain is still defined on disk.
        rig.inject(uuid=GPU0, xid=79)
        await rig.sim.wait_devices(
            GPU, lambda devices: any(d.health == "Unhealthy" for d in devices)
        )
        view = rig.sim.snapshot().resource(GPU)
        assert view is not None
        assert len(view.devices) == 16
        assert registrations(rig) == 1
        healthy = next(d.id for d in view.devices if d.health == "Healthy")
        names = await allocated_cdi_names(rig, healthy)
        assert names
        assert all(name.startswith(f"{VENDOR}=GPU-") for name in names)
        assert {f"{VENDOR}={GPU0}"} <= rig.spec_names() or not rig.cdi_dir.is_dir()

        # The directory comes back: the edit lands through `retry`, on its own.
        repair_directory(rig.cdi_dir)
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 32, timeout=10)
        await rig.until(lambda: Trigger.RECONFIGURED in rig.triggers(mark))
        after = rig.triggers(mark)
        assert Trigger.RETRY in after
        assert after.count(Trigger.CONFIG_CHANGED) == 1  # the timer never poses as an input
        assert rig.reconciler.lifecycle.reason is None
        on_disk = rig.spec_names()
        assert f"{VENDOR}=0" in on_disk
        assert not any(name.startswith(f"{VENDOR}=GPU-") for name in on_disk)  # pruned
        device = rig.sim.snapshot().resource(GPU).devices[0].id  # type: ignore[union-attr]
        assert await allocated_cdi_names(rig, device) <= on_disk


async def test_replica_change_is_a_list_update_without_reregistration(
    tmp_path: Path, sock_dir: Path
) -> None:
    four = TS2.replace("replicas: 2", "replicas: 4")
    async with running_plugin(tmp_path, sock_dir, config=TS2) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 16)
        mark = len(rig.history)
        rig.write_config(four)
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 32)
        await rig.until(lambda: Trigger.RECONFIGURED in rig.triggers(mark))
        detail = rig.history[-1].detail
        assert detail["updated"] == [GPU]
        assert detail["restarted"] == []
        assert detail["started"] == []
        view = rig.sim.snapshot().resource(GPU)
        assert view is not None
        assert view.counters.registrations == 1
        assert view.counters.streams_opened == 1


async def test_registration_failure_while_serving_is_retried_until_it_lands(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        await rig.sim.wait_devices(GPU)
        mark = len(rig.history)
        await rig.sim.stop()
        rig.write_config(TS2)  # a real change, while nobody listens on kubelet.sock
        await rig.until(lambda: Trigger.FAILED in rig.triggers(mark))
        assert "resource:nvidia.com/gpu" in (rig.reconciler.lifecycle.reason or "")
        assert rig.state is State.SERVING
        await rig.sim.start()
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 16, timeout=10)
        await rig.until(lambda: rig.reconciler.lifecycle.reason is None)
        assert Trigger.RETRY in rig.triggers(mark)


async def test_deleted_plugin_socket_is_served_and_registered_again(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        await rig.sim.wait_devices(GPU)
        (sock_dir / "nvidia-gpu.sock").unlink()
        rig.mailbox.post(Hint.KUBELET)  # what the directory watch posts
        await rig.sim.wait_registered(GPU, min_registrations=2)
        assert (sock_dir / "nvidia-gpu.sock").exists()
        # not a kubelet restart: nothing recorded as one
        assert Trigger.KUBELET_RESTARTED not in rig.triggers()


async def test_kubelet_hint_with_nothing_to_repair_leaves_no_trace(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        await rig.sim.wait_devices(GPU)
        mark = len(rig.history)
        await rig.settle(Hint.KUBELET)
        await rig.settle(Hint.CONFIG)  # a touch that changes nothing
        assert rig.triggers(mark) == []
        assert registrations(rig) == 1


async def test_invalid_edit_is_rejected_once_and_a_revert_clears_it(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir, config=TS2) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 16)
        mark = len(rig.history)
        rig.write_config("version: v1\nflags: {migStrategy: sideways}\n")
        await rig.until(lambda: Trigger.FAILED in rig.triggers(mark))
        assert "new config rejected" in (rig.reconciler.lifecycle.reason or "")
        rejected = len(rig.history)
        await rig.settle(Hint.CONFIG)  # the same bad content, touched again
        assert len(rig.history) == rejected
        assert served(rig) == 16  # still serving the last good config
        rig.write_config(TS2)
        await rig.until(lambda: rig.reconciler.lifecycle.reason is None)
        assert rig.history[-1].trigger == Trigger.RECONFIGURED
        assert registrations(rig) == 1


async def test_transient_start_up_failure_blocks_then_recovers(
    tmp_path: Path, sock_dir: Path
) -> None:
    cdi = tmp_path / "cdi"
    cdi.write_text("in the way\n")
    async with running_plugin(
        tmp_path, sock_dir, "--device-list-strategy", "cdi-cri", "--fail-on-init-error=false"
    ) as rig:
        assert rig.state is State.BLOCKED_ON_ERROR
        assert "cdi" in (rig.reconciler.lifecycle.reason or "")
        assert served(rig) == 0
        repair_directory(cdi)
        await rig.until(lambda: rig.state is State.SERVING)
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 8)
        assert rig.triggers()[-2:] == [Trigger.RETRY, Trigger.INITIALIZED]


async def test_stop_does_not_wait_behind_a_slow_reconcile(
    tmp_path: Path, sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        await rig.sim.wait_devices(GPU)
        release = asyncio.Event()
        actuators = rig.reconciler.actuators
        original = actuators.converge

        async def stuck(desired: object) -> list[object]:
            await release.wait()
            return await original(desired)  # type: ignore[arg-type]

        monkeypatch.setattr(actuators, "converge", stuck)
        rig.write_config(TS2)
        await rig.until(lambda: rig.state is State.RECONFIGURING)
        rig.mailbox.post(Hint.SHUTDOWN)
        assert rig.task is not None
        async with asyncio.timeout(5):
            await rig.task  # the stuck reconcile was cut short
        assert rig.state is State.STOPPED
        assert not (sock_dir / "nvidia-gpu.sock").exists()


async def test_a_spec_file_deleted_underneath_is_repaired_without_calling_it_a_change(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with running_plugin(tmp_path, sock_dir, "--device-list-strategy", "cdi-cri") as rig:
        await rig.sim.wait_devices(GPU)
        (spec,) = rig.cdi_dir.glob("*.json")
        spec.unlink()
        mark = len(rig.history)
        await rig.settle(Hint.CONFIG)  # a touch of the config: the plan is the same
        assert spec.exists()
        assert f"{VENDOR}={GPU0}" in rig.spec_names()
        assert rig.triggers(mark) == []


async def test_unknown_config_keys_are_listed_on_state(tmp_path: Path, sock_dir: Path) -> None:
    from reconciler.observation.snapshot import take

    config = "version: v1\nflags:\n  migStrategi: mixed\n"
    async with running_plugin(tmp_path, sock_dir, config=config) as rig:
        await rig.sim.wait_devices(GPU)
        state = take(rig.reconciler.status()).state
        plan = state["plan"]
        assert isinstance(plan, dict)
        assert plan["warnings"] == [f"{rig.config_file}: flags.migStrategi: unknown key, ignored"]


async def test_an_edit_that_serves_the_same_still_updates_the_warnings(
    tmp_path: Path, sock_dir: Path
) -> None:
    from reconciler.observation.snapshot import take

    config = "version: v1\nflags:\n  migStrategi: mixed\n"
    async with running_plugin(tmp_path, sock_dir, config=config) as rig:
        await rig.sim.wait_devices(GPU)
        rig.config_file.write_text("version: v1\nflags:\n  deviceListStrategi: envvar\n")
        mark = len(rig.history)
        await rig.settle(Hint.CONFIG)
        state = take(rig.reconciler.status()).state
        plan = state["plan"]
        assert isinstance(plan, dict)
        assert plan["warnings"] == [
            f"{rig.config_file}: flags.deviceListStrategi: unknown key, ignored"
        ]
        # A reconfiguration that changed nothing served (no Reconfigured Event).
        assert rig.triggers(mark) == ["config_changed", "reconfigured"]
        assert rig.history[-1].detail.get("changed") is False


async def test_state_gives_every_replica_its_gpus_reason_and_reuses_unchanged_sections(
    tmp_path: Path, sock_dir: Path
) -> None:
    from reconciler.observation.snapshot import take

    async with running_plugin(tmp_path, sock_dir, config=TS4_INDEX) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 32)
        rig.inject(uuid=GPU0, xid=79)
        await rig.sim.wait_devices(
            GPU, lambda devices: sum(d.health == "Unhealthy" for d in devices) == 4
        )
        first = take(rig.reconciler.status())
        await rig.settle(Hint.CONFIG)  # a touch that changes nothing
        again = take(rig.reconciler.status(), first)
    (resource,) = first.state["resources"]
    sick = [d for d in resource["devices"] if d["uuid"] == GPU0]
    assert len(sick) == 4
    assert all(d["reason"] == "xid 79" and d["since"] for d in sick)  # every replica says why
    # Nothing moved: the per-device sections are the very same objects, not rebuilt.
    assert again.state["resources"] is first.state["resources"]
    assert again.state["health"] is first.state["health"]
    assert again.state["config"] is first.state["config"]


async def test_a_stuck_probe_never_writes_health_late(
    tmp_path: Path, sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An XID reaches the kubelet while a probe hangs; the late probe changes nothing.

    With a quiet period of 0 the first pass after XID 79 probes GPU0 twice
    (its reset baseline, then whether it was reset). The probe hangs past the
    read deadline: the pass gives up on it but still publishes the XID, and
    when the probe finally returns, its result is dropped rather than written
    into the health book from the NVML worker under `/state`'s feet.
    """
    from reconciler.observation.snapshot import take

    flags = ("--health-quiet-period", "0")
    async with running_plugin(tmp_path, sock_dir, *flags, read_deadline=0.3) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 8)
        health = rig.reconciler.inputs.health
        assert health is not None
        assert health.book is not None
        library = health._library
        assert library is not None
        entered, release = threading.Event(), threading.Event()
        real = library.probe

        def stuck(uuid: str) -> ProbeResult:
            entered.set()
            release.wait(10)
            return real(uuid)

        monkeypatch.setattr(library, "probe", stuck)
        rig.inject(uuid=GPU0, xid=79)
        await rig.sim.wait_devices(
            GPU, lambda devices: [d.id for d in devices if d.health == "Unhealthy"] == [GPU0]
        )
        # Published once the pass gave up on the probe, which is still hanging.
        assert entered.is_set()
        assert not release.is_set()
        state = take(rig.reconciler.status()).state  # the book is readable while the probe hangs
        assert state["health"]["devices"][GPU0]["health"] == "Unhealthy"
        before = health.book.status(GPU0)
        release.set()
        busy = rig.reconciler.intake.nvml.busy
        assert busy is not None
        await asyncio.wrap_future(busy)
        assert health.book.status(GPU0) == before  # the late result was not written
        assert before is not None
        assert before.detail == "injected"
        monkeypatch.setattr(library, "probe", real)
        await rig.settle(Hint.HEALTH)
        after = health.book.status(GPU0)
        assert after is not None
        assert after.detail == "waiting for a reset"


async def test_a_failing_key_is_tried_again_only_once_due_or_wanted_otherwise(
    tmp_path: Path, sock_dir: Path
) -> None:
    """Key A never backs off at key B's pace: other passes leave a failing key alone."""
    cdi = Key(Kind.CDI)
    slow = Backoff(initial=60.0, cap=60.0)  # nothing becomes due during the test
    async with running_plugin(
        tmp_path, sock_dir, "--device-list-strategy", "cdi-annotations", config=TS2, backoff=slow
    ) as rig:
        await rig.sim.wait_devices(GPU, lambda devices: len(devices) == 16)
        retries = rig.reconciler.retries
        break_directory(rig.cdi_dir)
        rig.write_config(TS4_INDEX)
        await rig.until(lambda: retries.attempts(cdi) == 1)
        # Another key's pass (its socket deleted underneath) repairs that key only.
        (sock_dir / "nvidia-gpu.sock").unlink()
        await rig.settle(Hint.KUBELET)
        await rig.sim.wait_registered(GPU, min_registrations=2)
        # A health pass publishes a new list, still without touching CDI.
        rig.inject(uuid=GPU0, xid=79)
        await rig.sim.wait_devices(
            GPU, lambda devices: any(d.health == "Unhealthy" for d in devices)
        )
        assert retries.attempts(cdi) == 1
        # An edit that wants other specs is attempted at once, due or not.
        rig.write_config(TS2.replace("replicas: 2", "replicas: 3"))
        await rig.until(lambda: retries.attempts(cdi) == 2)
        assert "cdi" in (rig.reconciler.lifecycle.reason or "")


async def test_a_slow_mps_probe_holds_up_no_other_hint(
    tmp_path: Path, sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MPS probes run beside the loop: a health event is handled while a daemon never answers."""
    started, release = asyncio.Event(), asyncio.Event()

    async def hanging(root: Path, intent: object) -> None:
        started.set()
        await release.wait()

    monkeypatch.setattr(mps_gate, "probe", hanging)
    flags = ("--mps-root", "/run/nvidia/mps", "--mps-container-root", str(tmp_path / "mps"))
    async with running_plugin(tmp_path, sock_dir, *flags, config=MPS2) as rig:
        await rig.until(lambda: rig.state is State.MPS_STARTING)
        async with asyncio.timeout(5):
            await started.wait()
        rig.inject(uuid=GPU0, xid=79)
        health = rig.reconciler.inputs.health
        assert health is not None
        await rig.until(
            lambda: (view := health.status()) is not None
            and view.devices[GPU0].reason is not None
        )
        assert not release.is_set()  # the probe still hangs
        assert rig.reconciler.probes.running
        assert served(rig) == 0  # never admitted: not served
        release.set()


async def test_a_retry_never_clears_a_standing_rejection(tmp_path: Path, sock_dir: Path) -> None:
    async with running_plugin(tmp_path, sock_dir) as rig:
        await rig.sim.wait_devices(GPU)
        await rig.sim.stop()
        rig.write_config(TS2)  # a real change, while nobody listens: a key stays pending
        await rig.until(lambda: "not yet applied" in (rig.reconciler.lifecycle.reason or ""))
        rig.write_config("version: v1\nflags: {migStrategy: sideways}\n")
        await rig.until(lambda: "new config rejected" in (rig.reconciler.lifecycle.reason or ""))
        mark = len(rig.history)
        await rig.until(lambda: Trigger.RETRY in rig.triggers(mark))  # the pending key's timer
        await rig.until(lambda: rig.state is State.SERVING)
        assert Trigger.RECONFIGURED not in rig.triggers(mark)
        assert "new config rejected" in (rig.reconciler.lifecycle.reason or "")
