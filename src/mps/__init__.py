"""MPS sharing: the control-daemon manager and the plugin-side readiness probe.

For the plugin's reconcile loop:

- `await mps.probe.daemon_ready(root, resource, devices, timeout=...)`: None
  once the resource's control daemon answers with the limits the resource
  is served with, else why not (`mps.errors.MpsNotReady`, transient, one
  line; `mps.errors.OtherLimits` for a daemon on another config's);
- beneath it, `mps.probe.probe_daemon` (the daemon answers at all) and
  `mps.layout.MpsLayout` (the pipe/log/marker paths under an MPS root).

The package imports none of its modules: the plugin loads the probe through
`reconciler.on_demand`, only on a node that shares GPUs through MPS.

The ``mps-control-daemon`` command (`mps.cli`) runs the daemons themselves
(`mps.daemon`, `mps.supervisor`) when the config shares GPUs through MPS
(`mps.plan.needs_mps`), with the limits of `mps.limits`, and mounts the
shared tmpfs (`mps.shm`).
"""
