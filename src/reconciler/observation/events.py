"""What the plugin sees, as Kubernetes Events on its Node.

Operators look at `kubectl describe node` first. This module turns the
plugin's own records into events there:

| what happened                               | type    | reason              |
|---------------------------------------------|---------|---------------------|
| a GPU or MIG device became unhealthy        | Warning | `GPUUnhealthy`      |
| it is healthy again                         | Normal  | `GPURecovered`      |
| the node's annotation cordoned it           | Warning | `GPUCordoned`       |
| the annotation no longer names it           | Normal  | `GPUUncordoned`     |
| a new config was rejected (old one serves)  | Warning | `ConfigRejected`    |
| a new config could not be applied           | Warning | `ReconfigureFailed` |
| the plugin is blocked (not serving)         | Warning | `PluginBlocked`     |
| it serves again after being blocked         | Normal  | `PluginUnblocked`   |
| a reconfiguration changed what is served    | Normal  | `Reconfigured`      |
| the plan served has a new warning (node-wide sharing on a DRA node) | Warning | `ConfigWarning` |
| an MPS daemon stopped answering             | Warning | `MPSDaemonLost`     |
| it answers again                            | Normal  | `MPSDaemonReady`    |
| the DRA claim checkpoint was set aside or cannot be written | Warning | `ClaimCheckpointProblem` |

The inputs are the lifecycle's `TransitionRecord`s (a listener) and the
health book's `HealthChange`s (the health monitor's callback), both called on
the loop's thread. Handling one only formats a line and hands it to the
recorder's queue (`kube.events`), which never blocks; a mistake here is
logged and never reaches the loop.

Notes are kept stable so that repeats deduplicate into one Event's series:
the retry delay that a blocked reason ends with is left out, and a device is
named by index and UUID, never with a time. A reconfiguration's detail is
read as a loose mapping (started, stopped, restarted, updated resources
today) and rendered generically, so new keys show up without a change here.

An error on a GPU also moves its MIG devices (all of them, or those of the
instance it names). The health book reports those moves together, one batch
per drain; the batch is turned into events once it is complete (`defer`: the
app passes the event loop's `call_soon`), and MIG moves that match their
GPU's are folded into its event ("so are its 7 MIG devices") instead of
making one event each.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loguru import logger

from devices.model import Inventory
from kube.configured import api_configured
from kube.event_series import EventType, NodeEvent
from kube.events import NodeEventRecorder
from reconciler import on_demand
from settings import EffectiveConfig
from states.cordon import CORDON_ANNOTATION
from states.health import DeviceHealth, HealthChange
from states.history import TransitionRecord
from states.names import State, Trigger

if TYPE_CHECKING:
    from kube.client import ApiAccess

__all__ = ["NodeEvents", "open_node_events"]

HEALTH = "HealthCheck"
RECONFIGURE = "Reconfigure"
SERVE = "Serve"
PREPARE = "PrepareClaims"

# Detail keys that are bookkeeping for /state, not news for an operator (or news of their own).
_BOOKKEEPING = frozenset({"changed", "digest", "from", "to", "unchanged", "warnings"})
_APPLIED = (Trigger.INITIALIZED, Trigger.RECONFIGURED)
_RETRY_SUFFIX = re.compile(r"\s*\(retrying in [^()]*\)\s*$")


class NodeEvents:
    """Turns lifecycle records and health changes into `NodeEvent`s for `post`."""

    def __init__(
        self,
        post: Callable[[NodeEvent], object],
        *,
        inventory: Callable[[], Inventory | None] = lambda: None,
        defer: Callable[[Callable[[], None]], object] = lambda flush: flush(),
    ) -> None:
        self._post = post
        self._inventory = inventory
        self._defer = defer
        self._blocked = False
        self._mps_lost = False
        self._unhealthy_because: dict[str, str] = {}
        self._changes: list[HealthChange] = []

    # -- lifecycle -----------------------------------------------------------------

    def transition(self, record: TransitionRecord) -> None:
        """A lifecycle listener; never raises."""
        try:
            for event in self._from_record(record):
                self._post(event)
        except Exception as exc:
            logger.warning("no node event for {trigger}: {exc!r}", trigger=record.trigger, exc=exc)

    def _from_record(self, record: TransitionRecord) -> list[NodeEvent]:
        trigger, dest = record.trigger, record.dest
        reason = _steady(record.reason or "")
        events: list[NodeEvent] = []
        if trigger == Trigger.FAILED:
            if dest == State.BLOCKED_ON_ERROR:
                self._blocked = True
                note = reason or "blocked by an error"
                events.append(NodeEvent(EventType.WARNING, "PluginBlocked", SERVE, note))
            elif dest == State.SERVING:
                name = "ConfigRejected" if record.detail.get("permanent") else "ReconfigureFailed"
                note = reason or "the new config was not applied"
                events.append(NodeEvent(EventType.WARNING, name, RECONFIGURE, note))
            return events
        warnings = record.detail.get("warnings") if trigger in _APPLIED else None
        for warning in warnings if isinstance(warnings, list) else ():
            events.append(NodeEvent(EventType.WARNING, "ConfigWarning", RECONFIGURE, str(warning)))
        if self._blocked and dest in (State.SERVING, State.MPS_STARTING):
            self._blocked = False
            served = _render(record.detail.get("resources"))
            note = f"serving again: {served}" if served else "serving again"
            events.append(NodeEvent(EventType.NORMAL, "PluginUnblocked", SERVE, note))
        if trigger == Trigger.RECONFIGURED:
            # Said changed: news even with nothing to list; said unchanged, or
            # nothing at all to show: a pass that changed nothing.
            changed = record.detail.get("changed")
            note = _render_changes(record.detail)
            if changed is True and not note:
                note = "applied a new configuration"
            if note and changed is not False:
                events.append(NodeEvent(EventType.NORMAL, "Reconfigured", RECONFIGURE, note))
        elif trigger == Trigger.MPS_LOST:
            self._mps_lost = True
            note = reason or "the MPS control daemon stopped answering"
            events.append(NodeEvent(EventType.WARNING, "MPSDaemonLost", SERVE, note))
        elif trigger == Trigger.MPS_READY and self._mps_lost:
            self._mps_lost = False
            shared = _render(record.detail.get("resources"))
            note = f"MPS daemon answers again: {shared}" if shared else "MPS daemon answers again"
            events.append(NodeEvent(EventType.NORMAL, "MPSDaemonReady", SERVE, note))
        return events

    def claim_checkpoint(self, problem: str) -> None:
        """DRA mode's claim checkpoint was set aside (unreadable) or cannot be written."""
        self._post(NodeEvent(EventType.WARNING, "ClaimCheckpointProblem", PREPARE, problem))

    # -- device health -------------------------------------------------------------

    def health(self, change: HealthChange) -> None:
        """A health monitor callback; never raises.

        Changes are gathered and turned into events once the current batch is
        over (`defer`), so a GPU and its MIG devices make one event.
        """
        try:
            first = not self._changes
            self._changes.append(change)
            if first:
                self._defer(self._flush_health)
        except Exception as exc:
            logger.warning("no node event for {uuid}: {exc!r}", uuid=change.uuid, exc=exc)

    def _flush_health(self) -> None:
        changes, self._changes = self._changes, []
        try:
            for event in self._from_changes(changes):
                self._post(event)
        except Exception as exc:
            logger.warning("no node event for a health change: {exc!r}", exc=exc)

    def _from_changes(self, changes: list[HealthChange]) -> list[NodeEvent]:
        # Recovering is still unhealthy for the kubelet; the recovery itself is news.
        moves = [c for c in changes if c.dest is not DeviceHealth.RECOVERING]
        named = {c.uuid: self._describe(c.uuid) for c in moves}
        gpu_moves = {(c.uuid, c.dest, c.reason) for c in moves if named[c.uuid].gpu is None}
        folded: dict[str, list[str]] = {}
        for change in moves:
            device = named[change.uuid]
            if device.gpu is not None and (device.gpu, change.dest, change.reason) in gpu_moves:
                folded.setdefault(device.gpu, []).append(device.index)
        events = []
        for change in moves:
            device = named[change.uuid]
            was = self._remember(change)
            if device.index in folded.get(device.gpu or "", ()):
                continue
            events.append(self._health_event(change, device.name, folded.get(change.uuid, []), was))
        return events

    @staticmethod
    def _health_event(
        change: HealthChange, name: str, migs: list[str], was: str | None
    ) -> NodeEvent:
        also = ""
        if len(migs) > 3:
            also = f"; so are its {len(migs)} MIG devices"
        elif len(migs) > 1:
            also = f"; so are its MIG devices {', '.join(migs)}"
        elif migs:
            also = f"; so is its MIG device {migs[0]}"
        if change.cordon is not None:
            return _cordon_event(change, name, also, was)
        if change.dest is DeviceHealth.UNHEALTHY:
            note = f"{name} is unhealthy: {change.reason}{also}"
            return NodeEvent(EventType.WARNING, "GPUUnhealthy", HEALTH, note)
        after = f" after {was}" if was else ""
        held = "; it stays cordoned" if change.held else ""
        note = f"{name} is healthy again{after}{also}{held}"
        return NodeEvent(EventType.NORMAL, "GPURecovered", HEALTH, note)

    def _remember(self, change: HealthChange) -> str | None:
        """Track why each device is unhealthy; returns what it was, on recovery.

        A cordon is no error of the device: its moves leave the record alone,
        and a release reads it, to say the device stays unhealthy and why.
        """
        if change.cordon is not None:
            return self._unhealthy_because.get(change.uuid)
        if change.dest is DeviceHealth.UNHEALTHY:
            self._unhealthy_because[change.uuid] = change.reason
            return None
        return self._unhealthy_because.pop(change.uuid, None)

    def _describe(self, uuid: str) -> _Device:
        inventory = self._inventory()
        for gpu in inventory.gpus if inventory is not None else ():
            if gpu.uuid == uuid:
                return _Device(f"GPU {gpu.index} ({uuid})")
            for mig in gpu.mig_devices:
                if mig.uuid == uuid:
                    name = f"MIG device {mig.index} ({uuid}) of GPU {gpu.index}"
                    return _Device(name, gpu=gpu.uuid, index=mig.index)
        return _Device(f"device {uuid}")


def _cordon_event(change: HealthChange, name: str, also: str, error: str | None) -> NodeEvent:
    """`GPUCordoned` or `GPUUncordoned`; a release that leaves the device unhealthy says why."""
    if change.cordon:
        note = f"{name} is cordoned by the node annotation {CORDON_ANNOTATION}{also}"
        return NodeEvent(EventType.WARNING, "GPUCordoned", HEALTH, note)
    stays = ""
    if change.dest is not DeviceHealth.HEALTHY:
        stays = f"; it stays unhealthy: {error}" if error else "; it stays unhealthy"
    note = f"{name} is no longer cordoned{also}{stays}"
    return NodeEvent(EventType.NORMAL, "GPUUncordoned", HEALTH, note)


@dataclass(frozen=True)
class _Device:
    name: str  # how a note names it
    gpu: str | None = None  # the GPU's UUID, for a MIG device
    index: str = ""  # the MIG device's index, "<gpu>:<slot>"


def _steady(reason: str) -> str:
    """The reason without its changing retry delay, so repeats are one series."""
    return _RETRY_SUFFIX.sub("", reason).strip()


def _render(value: object) -> str:
    match value:
        case None | bool():
            return ""
        case str() | int() | float():
            return str(value)
        case Mapping():
            return ", ".join(f"{k}={v}" for k, v in value.items() if v not in (None, "", [], ()))
        case list() | tuple() | set() | frozenset():
            return ", ".join(str(item) for item in value)
        case _:
            return str(value)


def _render_changes(detail: Mapping[str, object]) -> str:
    parts = []
    for key, value in detail.items():
        if key in _BOOKKEEPING:
            continue
        text = _render(value)
        if text:
            parts.append(f"{key}: {text}")
    return "; ".join(parts)


def open_node_events(
    config: EffectiveConfig,
    env: Mapping[str, str],
    *,
    on_drop: Callable[[str], None] | None = None,
    start: bool = True,
) -> NodeEventRecorder | None:
    """A recorder for this node's events (started unless `start` is false), or None when off.

    The plugin passes `start=False`: its supervisor starts the recorder's
    thread in its declared order (`reconciler.app.serve`).

    On when `--events` is true (the default), the node's name is known and the
    plugin has API access: the same conditions as the node-label watch. The
    recorder loads the API access (and the Kubernetes client) in its own
    thread at the first event, so start-up never waits for either; a
    kubeconfig that cannot be used is reported then. `on_drop` is called from
    any thread with why an event was dropped (`queue_full`, `backlog_full`,
    `api_error`), for a metric.
    """
    flags = config.flags
    if not flags.events:
        return None
    # On by default, so a missing prerequisite is news only to whoever asked
    # for events explicitly; everyone else is told at debug level.
    asked = config.sources.get("events", "default") != "default"
    say = logger.info if asked else logger.debug
    if not flags.node_name:
        say("node events are off: no --node-name (NODE_NAME) given")
        return None
    # Checked without the client, so a node without any API access starts no thread.
    if not api_configured(env):
        say("node events are off: no Kubernetes API access (not in a cluster and no KUBECONFIG)")
        return None

    def connect() -> ApiAccess | None:
        return on_demand.api_access(env)

    recorder = NodeEventRecorder(
        connect=connect,
        node_name=flags.node_name,
        # The pod's name when the DaemonSet passes it down; the node's otherwise.
        reporting_instance=env.get("POD_NAME", ""),
        on_error=lambda message: logger.warning("node events: {message}", message=message),
        on_info=lambda message: logger.info("node events: {message}", message=message),
        on_drop=on_drop,
    )
    if start:
        recorder.start()
    return recorder
