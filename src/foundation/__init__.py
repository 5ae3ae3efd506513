"""Bottom layer: small, dependency-free helpers every other package may use.

Nothing here knows about GPUs, Kubernetes or gRPC; it only offers the shapes the
rest of the plugin is built from (latest-value broadcast, error classes,
backoff arithmetic).
"""
