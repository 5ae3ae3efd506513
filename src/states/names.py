"""Names of lifecycle states and triggers (triggers are past-tense facts)."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    INIT = "init"
    BLOCKED_ON_ERROR = "blocked_on_error"
    MPS_STARTING = "mps_starting"
    SERVING = "serving"
    RECONFIGURING = "reconfiguring"
    STOPPED = "stopped"


class Trigger(StrEnum):
    INITIALIZED = "initialized"
    FAILED = "failed"
    RETRY = "retry"
    KUBELET_RESTARTED = "kubelet_restarted"
    CONFIG_CHANGED = "config_changed"
    NODE_LABEL_CHANGED = "node_label_changed"
    DEVICE_HEALTH_CHANGED = "device_health_changed"
    MPS_READY = "mps_ready"
    MPS_LOST = "mps_lost"
    RELOAD_REQUESTED = "reload_requested"
    RECONFIGURED = "reconfigured"
    SHUTDOWN = "shutdown"
