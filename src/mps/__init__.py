"""MPS sharing: the control-daemon manager and the plugin-side readiness probe.

For the plugin's reconcile loop:

- `needs_mps(config.sharing)`: whether the config shares GPUs through MPS;
- `await probe_daemon(mps_root_ctr=..., resource=..., timeout=...)`: raises
  `MpsNotReady` (transient, one line) until the resource's control daemon
  answers;
- `MpsLayout`: the pipe/log/marker paths under an MPS root.

The ``mps-control-daemon`` command (`mps.cli`) runs the daemons themselves
(`mps.daemon`, `mps.supervisor`) with the limits of `mps.limits`, and mounts the
shared tmpfs (`mps.shm`).
"""

from __future__ import annotations

from mps.errors import (
    MIG_NOT_SUPPORTED,
    REPLICAS_EXCEEDED,
    CommandFailure,
    MpsCommandError,
    MpsConfigError,
    MpsNotReady,
    MpsStartError,
)
from mps.layout import CONTAINER_ROOT, MpsLayout
from mps.limits import DaemonSpec, client_cap, daemon_specs
from mps.plan import mps_resource_options, needs_mps, plan_daemons
from mps.probe import PROBE_COMMAND, probe_daemon

__all__ = [
    "CONTAINER_ROOT",
    "MIG_NOT_SUPPORTED",
    "PROBE_COMMAND",
    "REPLICAS_EXCEEDED",
    "CommandFailure",
    "DaemonSpec",
    "MpsCommandError",
    "MpsConfigError",
    "MpsLayout",
    "MpsNotReady",
    "MpsStartError",
    "client_cap",
    "daemon_specs",
    "mps_resource_options",
    "needs_mps",
    "plan_daemons",
    "probe_daemon",
]
