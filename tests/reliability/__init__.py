"""Fault suites: kubelet restart storms, config and RPC fuzz, API, NVML and signal faults, soak."""
