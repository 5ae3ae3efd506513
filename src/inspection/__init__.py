"""Read-only HTTP endpoint: /healthz, /readyz, /state and /metrics.

It serves snapshots the reconcile loop publishes and never calls NVML, gRPC or
the Kubernetes API itself, so a probe can never block the plugin or be
blocked by it.
"""

# The Prometheus text format, served at /metrics (here, so that naming it does
# not load prometheus-client).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
