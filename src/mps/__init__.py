"""MPS sharing: the control-daemon manager and the plugin-side readiness probe.

For the plugin's reconcile loop:

- `mps.plan.needs_mps(config.sharing)`: whether the config shares GPUs through MPS;
- `await mps.probe.probe_daemon(mps_root_ctr=..., resource=..., timeout=...)`:
  raises `mps.errors.MpsNotReady` (transient, one line) until the resource's
  control daemon answers;
- `await mps.probe.daemon_ready(root, resource, devices, timeout=...)`: None
  once that daemon answers with the limits the resource is served with,
  else why not (`mps.errors.OtherLimits` for a daemon on another config's);
- `mps.layout.MpsLayout`: the pipe/log/marker paths under an MPS root.

The package imports none of its modules: the plugin loads the probe through
`reconciler.on_demand`, only on a node that shares GPUs through MPS.

The ``mps-control-daemon`` command (`mps.cli`) runs the daemons themselves
(`mps.daemon`, `mps.supervisor`) with the limits of `mps.limits`, and mounts the
shared tmpfs (`mps.shm`).
"""
