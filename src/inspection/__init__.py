"""Read-only HTTP endpoint: /healthz, /readyz, /state and /metrics.

It serves snapshots the reconcile loop publishes and never calls NVML, gRPC or
the Kubernetes API itself, so a probe can never block the plugin or be
blocked by it.
"""
